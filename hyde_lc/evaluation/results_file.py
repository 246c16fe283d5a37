"""The results file of an evaluation run: recognised, checked, locked, never silently lost.

A results file holds one `EvaluationPipeline` record per line (JSON Lines), so each line
stays a Ragas-ready record that any JSON Lines reader can load. A line *is a record* when it
is a JSON object whose ``metadata`` holds a ``question_key`` string: every record
`evaluate_questions` writes has one, old files included. Records also carry
``metadata.settings``, everything that shaped them (see `hyde_lc.evaluation.runs`).

What a run does with the file it is given:

- a file in which no line is a record (notes, the question file, another tool's output) is
  refused untouched: `scan` finds no record and `refuse_foreign` says so;
- a line that is not a record, amid records (damaged, or added by hand), is appended byte
  for byte to ``<file>.corrupt`` (`set_aside`) and the records around it are kept; so is a
  last line cut short by a kill, whose question is then asked again;
- a rewrite (dropping those lines, reordering) goes through a unique temporary file in the
  same folder and an atomic rename (`replace_lines`), so a crash leaves the old file or the
  new one, never half of one;
- one writer at a time: `exclusive` holds a lock (`hyde_lc.core.locks`, an ``flock``) on
  ``<file>.lock`` for the whole run, and a second run is refused while it is held. The
  operating system releases the lock when its holder exits or is killed, so a crash never
  leaves the file locked.

Example:
    >>> from hyde_lc.evaluation.results_file import scan
    >>> scan("no-such-results.jsonl").records
    []

"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hyde_lc.core.locks import LockHeldError, file_lock, holder_note
from hyde_lc.errors import HydeLcError

CORRUPT_SUFFIX = ".corrupt"
"""Lines set aside from ``<file>`` are appended to ``<file>.corrupt``."""
OTHERS_SUFFIX = ".other"
"""Records of questions not in the run's question set, when asked to set them aside."""
LOCK_SUFFIX = ".lock"
"""A run holds ``<file>.lock`` (``flock``) while it writes ``<file>``."""
TORN_START = b'{"user_input": '
"""How every record begins: a cut-short last line that begins so is one of ours."""


@dataclass(frozen=True)
class Line:
    """One non-blank line of a results file."""

    number: int
    """1-based line number in the file."""
    raw: bytes
    """The bytes as they stand in the file, newline included when it had one."""
    record: dict[str, Any] | None
    """The record, or None when the line is not one."""


@dataclass(frozen=True)
class Contents:
    """What `scan` found in a results file."""

    path: Path
    lines: list[Line]

    @property
    def records(self) -> list[Line]:
        """The lines that are records, in file order."""
        return [line for line in self.lines if line.record is not None]

    @property
    def torn(self) -> Line | None:
        """A last line without newline that is not a record: a write cut short."""
        last = self.lines[-1] if self.lines else None
        if last is None or last.record is not None or last.raw.endswith(b"\n"):
            return None
        return last

    @property
    def damaged(self) -> list[Line]:
        """Complete lines that are not records."""
        torn = self.torn
        return [line for line in self.lines if line.record is None and line is not torn]

    @property
    def ends_cleanly(self) -> bool:
        """Appending a line would start a line of its own."""
        return not self.lines or self.lines[-1].raw.endswith(b"\n")

    @property
    def is_results_file(self) -> bool:
        """Empty, or holding a record (a lone torn record counts: a run killed at once)."""
        if not self.lines or self.records:
            return True
        torn = self.torn
        return len(self.lines) == 1 and torn is not None and torn.raw.startswith(TORN_START)


def is_record(value: Any) -> bool:
    """A JSON object whose ``metadata`` holds a ``question_key`` string."""
    meta = value.get("metadata") if isinstance(value, dict) else None
    return isinstance(meta, dict) and isinstance(meta.get("question_key"), str)


def encode(record: dict[str, Any]) -> bytes:
    """One record as one line."""
    return (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")


def _parse(raw: bytes, accept: Callable[[Any], bool]) -> dict[str, Any] | None:
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None  # RecursionError: nested deeper than Python parses; no record is
    return value if accept(value) else None


def scan(path: str | os.PathLike[str], accept: Callable[[Any], bool] = is_record) -> Contents:
    """Every non-blank line of ``path``, each parsed as a record or not (nothing changes).

    Lines split at newline bytes only, as records are written; a missing file has none.
    ``accept`` says which JSON values are records (by default evaluation records; a test
    set's lines are any JSON object).
    """
    target = Path(path)
    try:
        data = target.read_bytes()
    except FileNotFoundError:
        return Contents(target, [])
    except IsADirectoryError:
        raise HydeLcError(f"{target} is a folder, not a results file") from None
    except OSError as exc:
        raise HydeLcError(f"cannot read {target}: {exc.strerror}") from exc
    pieces = data.split(b"\n")
    lines = []
    for index, piece in enumerate(pieces):
        raw = piece + b"\n" if index < len(pieces) - 1 else piece
        if raw.strip():
            lines.append(Line(index + 1, raw, _parse(raw, accept)))
    return Contents(target, lines)


def refuse_foreign(contents: Contents, flag: str) -> None:
    """Raise when no line of the file is a record: it is not a results file.

    ``flag`` is the option that chose the file (``--out``, ``--out-dir``), for the message.
    """
    if contents.is_results_file:
        return
    first = contents.lines[0]
    shown = first.raw[:60].decode("utf-8", "replace").strip()
    raise HydeLcError(
        f"{contents.path} is not a results file (line {first.number}, {shown!r}, is not an "
        f"evaluation record, and no line is). Nothing was run or changed. Choose another "
        f"{flag}, or pass --restart (resume=False in Python) to replace the file; its "
        "contents are then lost."
    )


def set_aside(path: Path, lines: Iterable[Line], suffix: str = CORRUPT_SUFFIX) -> Path:
    """Append ``lines`` byte for byte to ``<path><suffix>`` (synced); returns that path.

    ``suffix`` is ``.corrupt`` for lines that are not records, ``.other`` for records of
    another question set. A line without newline (cut short) gets one, so later appends
    start lines of their own.
    """
    corrupt = path.with_name(path.name + suffix)
    try:
        with corrupt.open("ab") as sink:
            for line in lines:
                sink.write(line.raw if line.raw.endswith(b"\n") else line.raw + b"\n")
            sink.flush()
            os.fsync(sink.fileno())
    except OSError as exc:
        raise HydeLcError(
            f"cannot write {corrupt} to keep lines set aside from {path} "
            f"({exc.strerror}); nothing was changed"
        ) from exc
    return corrupt


def replace_lines(path: Path, lines: Iterable[bytes]) -> None:
    """Replace ``path`` atomically with exactly ``lines`` (each ends with a newline).

    The temporary file is unique (``tempfile`` in the same folder, so the rename stays on
    one file system) and takes the old file's permissions.
    """
    handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            for line in lines:
                out.write(line if line.endswith(b"\n") else line + b"\n")
            out.flush()
            os.fsync(out.fileno())
        path.touch()  # a new file gets the usual permissions, then the rename keeps them
        shutil.copymode(path, name)
        os.replace(name, path)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise


def _lock_path(path: Path) -> Path:
    return path.with_name(path.name + LOCK_SUFFIX)


def check_unlocked(path: Path, flag: str) -> None:
    """Raise if another run holds ``path`` now (a look only: nothing is created)."""
    lock = _lock_path(path)
    holder = holder_note(lock)
    if holder is not None:
        raise _in_use(path, lock, flag, holder)


def _in_use(path: Path, lock: Path, flag: str, holder: str) -> HydeLcError:
    return HydeLcError(
        f"{path} is in use by another run ({holder}, holding {lock}). Nothing was "
        f"changed. Wait for it to finish, or choose another {flag}."
    )


@contextmanager
def exclusive(path: Path, flag: str) -> Iterator[None]:
    """Be the only run writing ``path`` while the block runs; refuse if another is.

    Holds `hyde_lc.core.locks.file_lock` on ``<path>.lock`` (written with this process's
    id, removed on release), the lock the store's writers hold too; unlike them, it
    refuses rather than waits. Re-entrant within one thread, so `compare_modes` can hold
    its files while `evaluate_questions` runs each.
    """
    lock = _lock_path(path)
    with ExitStack() as held:
        try:
            held.enter_context(file_lock(lock, wait=False, remove=True))
        except LockHeldError as exc:
            raise _in_use(path, lock, flag, exc.holder) from None
        except OSError as exc:
            raise HydeLcError(
                f"cannot create the lock file {lock} ({exc.strerror}): {path.parent} must be a "
                "folder you can write to"
            ) from exc
        yield


def differences(
    records: Iterable[Line], settings: dict[str, Any], fields: dict[str, Any]
) -> list[str]:
    """``setting: stored -> asked`` for every setting in which a record differs from a run.

    A record compares its ``metadata.settings`` with ``settings``. Every setting of the run
    is compared: one the record does not hold (it was written before the setting existed)
    shows as ``not recorded``, so such records are never taken for this run's; a record
    whose settings lack ``retrieval_method`` is compared by the one in its metadata. A
    record written without any settings compares the fields it has (``retrieval_method``,
    ``k``, ``llm_hyde_model``, ``llm_answer_model``, ``embedding_model``) with ``fields``,
    the same fields of a record this run would write.
    """
    stored: dict[str, list[Any]] = {}
    asked: dict[str, Any] = {}
    for line in records:
        assert line.record is not None
        meta = line.record["metadata"]
        own = meta.get("settings")
        if isinstance(own, dict):
            if "retrieval_method" not in own and "retrieval_method" in meta:
                own = {**own, "retrieval_method": meta["retrieval_method"]}
            pairs = [(name, own.get(name, NOT_RECORDED), settings[name]) for name in settings]
        else:
            pairs = [(LEGACY_FIELDS[f], meta[f], fields[f]) for f in fields if f in meta]
        for name, value, wanted in pairs:
            if value != wanted:
                seen = stored.setdefault(name, [])
                if value not in seen:
                    seen.append(value)
                asked.setdefault(name, wanted)
    return [
        f"{name}: {', '.join(map(_shown, values))} -> {_shown(asked[name])}"
        for name, values in stored.items()
    ]


class _NotRecorded:
    """A setting a stored record does not hold."""

    def __repr__(self) -> str:
        return "not recorded"


NOT_RECORDED: Any = _NotRecorded()


LEGACY_FIELDS = {
    "retrieval_method": "retrieval_method",
    "k": "k",
    "llm_hyde_model": "hypothesis_model",
    "llm_answer_model": "answer_model",
    "embedding_model": "embedding_model",
}
"""Record fields compared for records without ``metadata.settings``, and their names."""


def _shown(value: Any) -> str:
    if value is NOT_RECORDED:
        return "not recorded"
    if value is None:
        return "none"
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
