"""One file lock for every writer in hyde_lc: store folders, lexical indexes, results files.

`file_lock` holds an ``flock`` on a file for the length of a block, across processes and
threads (each holder opens its own handle). The operating system releases it when its
holder exits or is killed, so a crash never leaves it held. Exclusive by default;
``shared=True`` takes a shared lock, which only tells whether an exclusive holder is there
(`is_locked`). ``filelock``'s `FileLock` was not used: it has no shared mode and no
"who holds it" note, both of which the messages and the probes here need.

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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory file locks
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

_HELD: dict[str, int] = {}
"""Locks held by this process, by path, with the holding thread (re-entry is allowed)."""
_HELD_LOCK = threading.Lock()


@contextmanager
def file_lock(path: Path, *, waiting_note: str | None = None) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created with its folder) while the block runs.

    Re-entrant within one thread. If another holder has it, ``waiting_note`` (when
    given) is logged once, with the holder's note, and the call waits.
    """
    if fcntl is None or held_here(path):  # pragma: no cover - Windows
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if waiting_note:
                handle.seek(0)
                holder = handle.read().strip() or "another process"
                logger.warning("%s by %s; waiting for it to finish", waiting_note, holder)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            with holding(handle, path):
                yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def held_here(path: Path) -> bool:
    """Whether this thread holds ``path``'s lock (taking it again is a re-entry)."""
    with _HELD_LOCK:
        return _HELD.get(os.path.realpath(path)) == threading.get_ident()


@contextmanager
def holding(handle: Any, path: Path) -> Iterator[None]:
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
