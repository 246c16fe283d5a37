"""hyde_lc's ``HYDE_LC_*`` settings: read in one module, checked at once, parsed once.

`hyde_lc.core.settings.settings` reads every variable into a frozen `Settings`; the other
modules take its fields. Besides its behaviour (the cache, the checks, blank values), a
look over the package's source holds the rule: no other module reads the environment for
a ``HYDE_LC_*`` variable, and no module writes the environment when it is imported.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import re
from pathlib import Path
from types import SimpleNamespace
from typing import TypeGuard

import pytest

from hyde_lc.cli import EPILOG
from hyde_lc.core.settings import ENV_NAMES, Settings, settings
from hyde_lc.errors import InvalidSettingError, StoreError

PACKAGE = Path(__file__).resolve().parents[2] / "hyde_lc"
SETTINGS_MODULE = "core/settings.py"


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


# -- what settings() returns -------------------------------------------------------------------


def test_every_field_names_its_variable_and_every_variable_has_a_field() -> None:
    names = [f.metadata["env"] for f in dataclasses.fields(Settings)]
    assert len(names) == len(set(names)) == len(ENV_NAMES)
    assert all(name.startswith("HYDE_LC_") for name in names)
    named = {
        name
        for path in PACKAGE.rglob("*.py")
        for name in re.findall(r"HYDE_LC_[A-Z_]+", path.read_text(encoding="utf-8"))
    }
    assert named == set(ENV_NAMES)
    assert set(re.findall(r"HYDE_LC_[A-Z_]+", EPILOG)) == set(ENV_NAMES)


def test_unset_variables_give_the_defaults(clean_env: pytest.MonkeyPatch) -> None:
    assert settings() == Settings()
    assert (settings().n_ctx, settings().threads, settings().request_timeout) == (4096, 0, 60.0)
    assert (settings().refresh_interval, settings().audit_interval) == (1.0, 600.0)
    assert settings().chroma_timeout == 30.0 and settings().store is None
    assert settings().debug is False


def test_blank_values_mean_unset(clean_env: pytest.MonkeyPatch) -> None:
    for name in ENV_NAMES:
        clean_env.setenv(name, "  ")
    assert settings() == Settings()


def test_values_are_typed(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("HYDE_LC_STORE", "~/stores/a")
    clean_env.setenv("HYDE_LC_HYPOTHESIS_LLM", " local:smollm2-135m ")
    clean_env.setenv("HYDE_LC_N_CTX", " 8192 ")
    clean_env.setenv("HYDE_LC_AUDIT_INTERVAL", "0")
    clean_env.setenv("HYDE_LC_CHROMA_TIMEOUT", "2.5")
    clean_env.setenv("HYDE_LC_DEBUG", "1")
    got = settings()
    assert got.store == Path("~/stores/a")  # ~ is expanded where the folder is used
    assert got.hypothesis_llm == "local:smollm2-135m"
    assert (got.n_ctx, got.audit_interval, got.chroma_timeout, got.debug) == (8192, 0, 2.5, True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.n_ctx = 1  # type: ignore[misc]


# -- parsed once per environment -----------------------------------------------------------


def test_the_same_environment_gives_the_same_object(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("HYDE_LC_THREADS", "3")
    first = settings()
    assert settings() is first


def test_a_changed_value_is_read_at_the_next_call(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("HYDE_LC_THREADS", "3")
    first = settings()
    clean_env.setenv("HYDE_LC_THREADS", "5")
    assert settings().threads == 5 and settings() is not first
    clean_env.delenv("HYDE_LC_THREADS")
    assert settings().threads == 0
    clean_env.setenv("HYDE_LC_THREADS", "3")
    assert settings().threads == 3


def test_a_bad_value_is_not_kept(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("HYDE_LC_THREADS", "many")
    for _ in range(2):  # refused each time, not remembered as valid
        with pytest.raises(InvalidSettingError):
            settings()
    clean_env.setenv("HYDE_LC_THREADS", "2")
    assert settings().threads == 2


# -- a bad value is refused at the first call, naming the variable -------------------------


@pytest.mark.parametrize(
    ("name", "raw", "message"),
    [
        ("HYDE_LC_N_CTX", "lots", "HYDE_LC_N_CTX='lots' is not valid: give a whole number from "
         "256 to 131,072 (tokens of context window per request), e.g. HYDE_LC_N_CTX=8192; "
         "or unset it for the default"),
        ("HYDE_LC_THREADS", "2000", "HYDE_LC_THREADS='2000' is not valid: give a whole number "
         "from 0 to 256 (CPU threads; 0 for one per core), e.g. HYDE_LC_THREADS=2; or unset "
         "it for the default"),
        ("HYDE_LC_REFRESH_INTERVAL", "nan", "HYDE_LC_REFRESH_INTERVAL='nan' is not valid: give "
         "a number from 0 to 3600 (seconds: how old the collection's state a search may use; "
         "0 reads it for every search), e.g. HYDE_LC_REFRESH_INTERVAL=1; or unset it for the "
         "default"),
        ("HYDE_LC_AUDIT_INTERVAL", "-1", "HYDE_LC_AUDIT_INTERVAL='-1' is not valid: give a "
         "number from 0 to 604800 (seconds between background comparisons of the lexical "
         "index with its collection; 0 turns them off), e.g. HYDE_LC_AUDIT_INTERVAL=600; or "
         "unset it for the default"),
        ("HYDE_LC_REQUEST_TIMEOUT", "soon", "HYDE_LC_REQUEST_TIMEOUT='soon' is not a timeout: "
         "give a positive number of seconds, e.g. HYDE_LC_REQUEST_TIMEOUT=120"),
        ("HYDE_LC_CHROMA_TIMEOUT", "0", "HYDE_LC_CHROMA_TIMEOUT must be a positive number of "
         "seconds (how long a Chroma server may take to answer one request), got '0'; e.g. "
         "HYDE_LC_CHROMA_TIMEOUT=30"),
    ],
)  # fmt: skip
def test_a_bad_value_fails_the_first_call_naming_the_variable(
    clean_env: pytest.MonkeyPatch, name: str, raw: str, message: str
) -> None:
    clean_env.setenv(name, raw)
    with pytest.raises(InvalidSettingError) as refused:
        settings()
    assert str(refused.value) == message


def test_a_bad_chroma_timeout_is_a_store_error_too(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("HYDE_LC_CHROMA_TIMEOUT", "inf")
    with pytest.raises(StoreError, match="HYDE_LC_CHROMA_TIMEOUT must be a positive number"):
        settings()


@pytest.mark.parametrize(
    ("name", "field", "reader"),
    [
        ("HYDE_LC_REFRESH_INTERVAL", "refresh_interval", "refresh_interval"),
        ("HYDE_LC_AUDIT_INTERVAL", "audit_interval", "audit_interval"),
    ],
)
@pytest.mark.parametrize("raw", ["", "0", "2.5", "3600", "604800", "-1", "1e9", "nan", "soon"])
def test_the_collection_intervals_read_as_settings_reads_them(
    clean_env: pytest.MonkeyPatch, name: str, field: str, reader: str, raw: str
) -> None:
    """`hyde_lc.store.collection`'s own readers and `settings()` agree, message for message."""
    from hyde_lc.store import collection

    clean_env.setenv(name, raw)
    outcomes = []
    for read in (lambda: getattr(settings(), field), getattr(collection, reader)):
        try:
            outcomes.append(read())
        except InvalidSettingError as exc:
            outcomes.append(str(exc))
    assert outcomes[0] == outcomes[1]


# -- the package's source: one reader, no writes at import ---------------------------------


def _is_environ(node: ast.AST) -> TypeGuard[ast.Attribute | ast.Name]:
    """``os.environ`` (or ``environ`` imported from os)."""
    if isinstance(node, ast.Attribute):
        return node.attr == "environ" and isinstance(node.value, ast.Name) and node.value.id == "os"
    return isinstance(node, ast.Name) and node.id == "environ"


def _string_constants() -> dict[str, str]:
    """Module-level ``NAME = "..."`` of the whole package (names imported across modules)."""
    found: dict[str, str] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                found.update(
                    {t.id: node.value.value for t in node.targets if isinstance(t, ast.Name)}
                )
    return found


def environment_reads(tree: ast.AST, constants: dict[str, str]) -> list[tuple[int, str]]:
    """``(line, variable)`` for each use of the environment in ``tree``.

    The variable is ``?`` when the code does not name it with a string or a constant
    (``os.environ[name]``, ``dict(os.environ)``): it could be any variable.
    """

    def named(node: ast.AST | None) -> str:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name):
            return constants.get(node.id, "?")
        return "?"

    reads: list[tuple[int, str]] = []
    seen: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            first = node.args[0] if node.args else None
            if isinstance(func, ast.Attribute) and _is_environ(func.value):
                reads.append((node.lineno, named(first)))
                seen.add(id(func.value))
            elif (isinstance(func, ast.Attribute) and func.attr == "getenv") or (
                isinstance(func, ast.Name) and func.id == "getenv"
            ):
                reads.append((node.lineno, named(first)))
        elif isinstance(node, ast.Subscript) and _is_environ(node.value):
            reads.append((node.lineno, named(node.slice)))
            seen.add(id(node.value))
    for node in ast.walk(tree):
        if _is_environ(node) and id(node) not in seen:
            reads.append((node.lineno, "?"))  # the whole environment, passed on or copied
    return sorted(reads)


def hyde_lc_readers() -> dict[str, list[str]]:
    """Module (relative path) -> the ``HYDE_LC_*`` (or unknown) variables it reads itself."""
    constants = _string_constants()
    readers: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        read = {
            v for _, v in environment_reads(tree, constants) if v.startswith("HYDE_LC_") or v == "?"
        }
        if read and name != SETTINGS_MODULE:
            readers[name] = sorted(read)
    return readers


def test_the_scan_finds_every_way_of_reading_the_environment() -> None:
    source = """
import os
from os import environ, getenv
KEY = "HYDE_LC_A"
os.environ.get("HYDE_LC_B")
os.environ[KEY]
os.getenv("HYDE_LC_C", "x")
getenv("HYDE_LC_D")
environ.get("HYDE_LC_E")
os.environ.get(name)
dict(os.environ)
os.environ.get("OMP_NUM_THREADS")
"""
    reads = environment_reads(ast.parse(source), {"KEY": "HYDE_LC_A"})
    assert [v for _, v in reads] == [
        "HYDE_LC_B", "HYDE_LC_A", "HYDE_LC_C", "HYDE_LC_D", "HYDE_LC_E", "?", "?",
        "OMP_NUM_THREADS",
    ]  # fmt: skip


def test_only_the_settings_module_reads_hyde_lc_variables() -> None:
    readers = hyde_lc_readers()
    assert readers == {}, "read HYDE_LC_* variables through hyde_lc.core.settings.settings() only"


def _runs_at_import(tree: ast.Module) -> list[ast.AST]:
    """The nodes a module runs when it is imported (not the bodies of its functions)."""
    found: list[ast.AST] = []
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        found.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return found


ENVIRON_WRITES = {"setdefault", "pop", "popitem", "update", "clear"}
"""Methods of ``os.environ`` that change the environment."""


def _writes_environment(node: ast.AST) -> bool:
    """``os.environ.setdefault(...)``, ``os.environ[...] = ...``, ``os.putenv(...)``, ..."""
    if isinstance(node, ast.Subscript):
        return _is_environ(node.value) and not isinstance(node.ctx, ast.Load)
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return False
    method, owner = node.func.attr, node.func.value
    if _is_environ(owner):
        return method in ENVIRON_WRITES
    return method in ("putenv", "unsetenv") and isinstance(owner, ast.Name) and owner.id == "os"


def environment_writes_at_import(tree: ast.Module) -> list[int]:
    """Lines of ``tree`` that change the environment when the module is imported."""
    return sorted(
        node.lineno
        for node in _runs_at_import(tree)
        if isinstance(node, ast.Call | ast.Subscript) and _writes_environment(node)
    )


def test_the_scan_finds_writes_at_import_only() -> None:
    source = """
import os
os.environ.setdefault("A", "1")
os.environ["B"] = "1"
if True:
    os.environ.pop("C", None)
def later():
    os.environ.setdefault("D", "1")
class Holder:
    os.putenv("E", "1")
CACHE = {}
CACHE.update({"F": 1})
"""
    assert environment_writes_at_import(ast.parse(source)) == [3, 4, 6, 10]


def test_no_module_writes_the_environment_when_it_is_imported() -> None:
    writes = {
        path.relative_to(PACKAGE).as_posix(): lines
        for path in sorted(PACKAGE.rglob("*.py"))
        if (lines := environment_writes_at_import(ast.parse(path.read_text(encoding="utf-8"))))
    }
    assert writes == {}


def test_onnxruntime_is_imported_with_its_telemetry_off(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("onnxruntime")
    from hyde_lc.models.local_embeddings import import_onnxruntime

    for name in ("ORT_DISABLE_TELEMETRY", "ORT_TELEMETRY_DISABLED"):
        monkeypatch.delenv(name, raising=False)
    import_onnxruntime()
    assert os.environ["ORT_DISABLE_TELEMETRY"] == os.environ["ORT_TELEMETRY_DISABLED"] == "1"
    monkeypatch.setenv("ORT_DISABLE_TELEMETRY", "0")  # the user's choice is kept
    import_onnxruntime()
    assert os.environ["ORT_DISABLE_TELEMETRY"] == "0"


def test_ragas_is_imported_with_its_tracking_off(monkeypatch: pytest.MonkeyPatch) -> None:
    from hyde_lc.evaluation import ragas_metrics

    imported: list[tuple[str, str | None]] = []

    def import_module(name: str) -> SimpleNamespace:
        imported.append((name, os.environ.get("RAGAS_DO_NOT_TRACK")))
        return SimpleNamespace(RunConfig=dict, RougeScore=object)

    monkeypatch.setattr(ragas_metrics, "importlib", SimpleNamespace(import_module=import_module))
    monkeypatch.delenv("RAGAS_DO_NOT_TRACK", raising=False)
    ragas_metrics._ragas_class("RougeScore")
    monkeypatch.setenv("RAGAS_DO_NOT_TRACK", "false")  # the user's choice is kept
    ragas_metrics._run_config(None, None)
    assert imported == [("ragas.metrics", "true"), ("ragas.run_config", "false")]
