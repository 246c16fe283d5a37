"""The notebooks: run top to bottom on the embedded models, stored with their outputs.

Each notebook is executed here as a user runs it, with ``jupyter nbconvert --to notebook
--execute`` (so it never rots, and the ``notebooks`` extra's Jupyter does run it), with
nothing reaching the network, shows real progress bars (ipywidgets, no "IProgress not
found" warning), and is stored in the repository with the outputs of a run (hypotheses,
scores, plots), so they can be read on a code host without running anything. Every module
a notebook imports is declared by hyde-lc's ``notebooks`` extra.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import nbformat
import pytest
from packaging.requirements import Requirement

pytestmark = pytest.mark.integration
NOTEBOOKS = sorted((Path(__file__).parents[2] / "notebooks").glob("*.ipynb"))
IDS = [p.stem for p in NOTEBOOKS]
# What each notebook must print when it worked (a notebook without an entry fails).
EXPECTED = {
    "quickstart": (
        "added",
        "hypothesis:",
        "hybrid-hyde",
        "Sources:",
        "answer tokens streamed",
        "itemgetter('question') | retriever",
        "LCEL:",
    ),
    "evaluation": (
        "added",
        "hypothesis:",
        "hypothesis ",
        "local model (no charge)",
        "rouge",
        "recommended: ",
        "id_context_recall",
    ),
}
IMAGES = {"quickstart": 0, "evaluation": 4}
WIDGET = "application/vnd.jupyter.widget-view+json"


def outputs(notebook: nbformat.NotebookNode) -> list[dict]:
    return [o for cell in notebook.cells for o in cell.get("outputs", [])]


def printed(notebook: nbformat.NotebookNode) -> str:
    return "".join(o.get("text", "") for o in outputs(notebook))


def images(notebook: nbformat.NotebookNode) -> int:
    return len([o for o in outputs(notebook) if "image/png" in o.get("data", {})])


ROOT = Path(__file__).parents[2]
JUPYTER = Path(sys.executable).with_name("jupyter")

# Loaded by every Python process of the run (nbconvert and the kernel it starts): a
# connection or name lookup beyond this machine is refused and written down.
OFFLINE = """
import os, socket

_LOG = os.environ["HYDE_LC_TEST_NETWORK_LOG"]
with open(_LOG + ".guarded", "a", encoding="utf-8") as guarded:
    guarded.write(f"{os.getpid()}\\n")  # this process runs with the guard


def _local(host):
    host = str(host)
    return host in ("", "localhost", "::1", "0.0.0.0") or host.startswith("127.")


def _refuse(what):
    with open(_LOG, "a", encoding="utf-8") as log:
        log.write(f"{what}\\n")
    raise OSError(f"network use refused by the test: {what}")


_connect, _connect_ex, _getaddrinfo = (
    socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo
)


def connect(self, address):
    if self.family in (socket.AF_INET, socket.AF_INET6) and not _local(address[0]):
        _refuse(address)
    return _connect(self, address)


def connect_ex(self, address):
    if self.family in (socket.AF_INET, socket.AF_INET6) and not _local(address[0]):
        _refuse(address)
    return _connect_ex(self, address)


def getaddrinfo(host, *args, **kwargs):
    if host is not None and not _local(host):
        _refuse(host)
    return _getaddrinfo(host, *args, **kwargs)


socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo = (
    connect, connect_ex, getaddrinfo
)
"""


def executed_by_nbconvert(path: Path, folder: Path) -> tuple[nbformat.NotebookNode, str]:
    """``path`` run by ``jupyter nbconvert --to notebook --execute`` in ``folder``, offline.

    Returns the executed notebook and the network uses refused ("" when none).
    """
    assert JUPYTER.exists(), f"{JUPYTER} missing: the notebooks extra installs Jupyter"
    guard = folder / "offline"
    guard.mkdir()
    (guard / "sitecustomize.py").write_text(OFFLINE, encoding="utf-8")
    log = folder / "network.log"
    log.touch()
    copy = shutil.copy(path, folder / path.name)  # the run writes beside the notebook
    env = {
        **os.environ,
        "HYDE_LC_QUICKSTART_LLM": "local:smollm2-135m",
        "HYDE_LC_THREADS": os.environ.get("HYDE_LC_THREADS", "1"),
        "HYDE_LC_TEST_NETWORK_LOG": str(log),
        # the checkout under test first, then the guard
        "PYTHONPATH": os.pathsep.join(
            [str(ROOT), str(guard), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
    }
    command = [
        str(JUPYTER), "nbconvert", "--to", "notebook", "--execute", "--output", "executed",
        "--ExecutePreprocessor.timeout=600", str(copy),
    ]  # fmt: skip
    run = subprocess.run(
        command, cwd=folder, env=env, capture_output=True, text=True, timeout=1200, check=False
    )
    assert run.returncode == 0, run.stderr[-4000:]
    guarded = (folder / "network.log.guarded").read_text().split()
    assert len(set(guarded)) >= 2, "the guard did not reach nbconvert and its kernel"
    return nbformat.read(folder / "executed.ipynb", as_version=4), log.read_text()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_jupyter_nbconvert_runs_the_notebook_offline_with_progress_bars(path, tmp_path):
    notebook, network = executed_by_nbconvert(path, tmp_path)
    assert not network, f"the notebook reached for the network: {network}"
    assert not [o for o in outputs(notebook) if o.get("output_type") == "error"]
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert [cell.get("execution_count") for cell in code] == list(range(1, len(code) + 1))
    text = printed(notebook)
    for marker in EXPECTED[path.stem]:
        assert marker in text, marker
    assert images(notebook) == IMAGES[path.stem]
    assert "IProgress not found" not in text and "TqdmWarning" not in text
    bars = [o for o in outputs(notebook) if WIDGET in o.get("data", {})]
    assert bars, "no progress bar widget (the ingest shows one)"


def test_the_notebooks_extra_opens_notebooks_in_jupyterlab():
    """What ``make notebooks-open`` runs is installed, and knows its notebook server."""
    run = subprocess.run(
        [str(JUPYTER), "lab", "--version"], capture_output=True, text=True, check=False
    )
    assert run.returncode == 0 and re.match(r"\d+\.\d+", run.stdout), run.stderr
    assert "notebooks-open:" in (ROOT / "Makefile").read_text()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_notebook_is_stored_with_its_outputs(path):
    """Readable without running: every code cell holds the outputs of a clean run."""
    notebook = nbformat.read(path, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(cell.get("outputs") for cell in code), "a code cell without outputs"
    counts = [cell.get("execution_count") for cell in code]
    assert counts == list(range(1, len(code) + 1)), "not stored from one top-to-bottom run"
    assert not [o for o in outputs(notebook) if o.get("output_type") == "error"]
    text = printed(notebook)
    for marker in EXPECTED[path.stem]:
        assert marker in text, marker
    assert images(notebook) == IMAGES[path.stem]
    assert "IProgress not found" not in text


def _imported_modules(notebook: nbformat.NotebookNode) -> set[str]:
    names = set()
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        # top-level `await` is valid in a notebook, not in a module: parse it in a function
        source = "async def _cell():\n" + "\n".join(
            f"    {line}" for line in cell.source.splitlines()
        )
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def _declared(extras: set[str]) -> set[str]:
    """Distributions hyde-lc requires directly, with ``extras`` (followed through itself)."""
    names, todo, seen = set(), set(extras), set()
    while todo:
        extra = todo.pop()
        seen.add(extra)
        for line in metadata.requires("hyde-lc") or []:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate({"extra": extra}):
                continue
            name = re.sub(r"[-_.]+", "-", req.name).lower()
            if name == "hyde-lc":
                todo |= set(req.extras) - seen
            else:
                names.add(name)
    return names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_every_import_is_declared_by_the_notebooks_extra(path):
    declared = _declared({"notebooks"})
    providers = metadata.packages_distributions()
    undeclared = []
    for module in sorted(_imported_modules(nbformat.read(path, as_version=4))):
        if module in sys.stdlib_module_names or module == "hyde_lc":
            continue
        dists = {re.sub(r"[-_.]+", "-", d).lower() for d in providers.get(module, [])}
        if not dists & declared:
            undeclared.append(f"{module} ({', '.join(sorted(dists)) or 'not installed'})")
    assert not undeclared, f"imported but not declared in hyde-lc[notebooks]: {undeclared}"
