"""One file lock for every writer in hyde_lc: store folders, lexical indexes, results files.

`file_lock` holds an ``flock`` on a file for the length of a block, across processes and
threads (each holder opens its own handle). The operating system releases it when its
holder exits or is killed, so a crash never leaves it held. The holder writes a note
(``process <pid>``) into the file, which others name in their messages. By default a
second holder waits; with ``wait=False`` it is refused at once (`LockHeldError`, with the
holder's note), and with ``remove=True`` the file is removed on release. Two looks that
take nothing: `is_locked` (held by anyone) and `holder_note` (held by another than this
thread, and by whom). ``filelock``'s `FileLock` was not used: it has no "who holds it"
note and no look without taking the lock, both of which the messages and probes here need.

Example:
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "x.lock"
    >>> with file_lock(path):
    ...     is_locked(path)
    True
    >>> is_locked(path)
    False

"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any

from hyde_lc.errors import HydeLcError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory file locks
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

_HELD: dict[str, int] = {}
"""Locks held by this process, by path, with the holding thread (re-entry is allowed)."""
_HELD_LOCK = threading.Lock()
_REFUSE_ATTEMPTS = 25
"""Tries (20 ms apart) before ``wait=False`` refuses: a look holds the lock for a moment."""
_UNKNOWN_HOLDER = "another process"


class LockHeldError(HydeLcError):
    """Another holder has the lock that ``file_lock(..., wait=False)`` asked for."""

    def __init__(self, path: Path, holder: str) -> None:
        super().__init__(f"{path} is held by {holder}")
        self.path = path
        self.holder = holder
        """The holder's note (``process 4242``), or ``another process``."""


@contextmanager
def file_lock(
    path: Path, *, waiting_note: str | None = None, wait: bool = True, remove: bool = False
) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created with its folder) while the block runs.

    Re-entrant within one thread. If another holder has it, the call waits, logging
    ``waiting_note`` (when given) once with the holder's note; with ``wait=False`` it
    raises `LockHeldError` instead. ``remove=True`` removes the file on release, before
    unlocking, so that whoever opened it meanwhile sees it is stale and locks the new one.
    An `OSError` from creating the file or its folder is raised as it is.
    """
    if fcntl is None or held_here(path):  # pragma: no cover - Windows
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = _locked_handle(path, waiting_note, wait)
    try:
        with holding(handle, path):
            yield
    finally:
        if remove:
            with suppress(OSError):
                path.unlink()
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


def _locked_handle(path: Path, waiting_note: str | None, wait: bool) -> IO[str]:
    """An open handle on ``path``, locked, on the file that is at ``path`` now."""
    while True:
        handle = path.open("a+", encoding="utf-8", errors="replace")
        try:
            if not _try_lock(handle, 1 if wait else _REFUSE_ATTEMPTS):
                if not wait:
                    raise LockHeldError(path, _note(handle))
                if waiting_note:
                    logger.warning(
                        "%s by %s; waiting for it to finish", waiting_note, _note(handle)
                    )
                fcntl.flock(handle, fcntl.LOCK_EX)
            if _is_current(handle, path):
                return handle
        except BaseException:
            handle.close()
            raise
        handle.close()  # its holder removed it as we opened it: lock the new one


def _try_lock(handle: IO[Any], attempts: int) -> bool:
    """Lock ``handle`` without waiting, trying ``attempts`` times 20 ms apart."""
    for attempt in range(attempts):
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if attempt + 1 < attempts:
                time.sleep(0.02)
    return False


def _is_current(handle: IO[Any], path: Path) -> bool:
    """Whether ``handle`` is open on the file at ``path`` (not one removed meanwhile)."""
    try:
        return os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino
    except FileNotFoundError:
        return False


def _note(handle: IO[str]) -> str:
    """The holder's note in the lock file open as ``handle``."""
    try:
        handle.seek(0)
        return handle.read().strip() or _UNKNOWN_HOLDER
    except OSError:
        return _UNKNOWN_HOLDER


def held_here(path: Path) -> bool:
    """Whether this thread holds ``path``'s lock (taking it again is a re-entry)."""
    with _HELD_LOCK:
        return _HELD.get(os.path.realpath(path)) == threading.get_ident()


@contextmanager
def holding(handle: IO[str], path: Path) -> Iterator[None]:
    """While the block runs, ``path``'s lock (locked through ``handle``) is this thread's.

    Writes ``process <pid>`` into the lock file, which waiting holders name in messages.
    """
    key = os.path.realpath(path)
    with _HELD_LOCK:
        _HELD[key] = threading.get_ident()
    try:
        handle.seek(0)
        handle.truncate()
        handle.write(f"process {os.getpid()}\n")
        handle.flush()
        yield
    finally:
        with _HELD_LOCK:
            _HELD.pop(key, None)


def is_locked(path: Path) -> bool:
    """Whether some process (this one included) holds ``path``'s exclusive lock now."""
    if fcntl is None or not path.is_file():  # pragma: no cover - Windows
        return False
    with _HELD_LOCK:
        if os.path.realpath(path) in _HELD:
            return True
    with path.open("r") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def holder_note(path: Path) -> str | None:
    """The note of whoever other than this thread holds ``path``'s lock now, else None.

    A look only: nothing is created, and the lock is taken for a moment only when free.
    A lock file that cannot be read counts as free (taking the lock will say why).
    """
    if fcntl is None or not path.is_file() or held_here(path):
        return None
    try:
        with path.open("r", encoding="utf-8", errors="replace") as handle:
            if _try_lock(handle, 1):
                fcntl.flock(handle, fcntl.LOCK_UN)
                return None
            return _note(handle)
    except OSError:
        return None
