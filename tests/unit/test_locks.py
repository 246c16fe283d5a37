"""`hyde_lc.core.locks`: the one file lock, its refusing mode and its looks.

Another holder is a second handle on the same file in this process: ``flock`` locks
belong to open file descriptions, so it conflicts as another process would (a test in
test_evaluation_output_file.py holds one from a killed child process).
"""

from __future__ import annotations

import ast
import fcntl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from hyde_lc.core.locks import LockHeldError, file_lock, holder_note, is_locked

PACKAGE = Path(__file__).resolve().parents[2] / "hyde_lc"


@contextmanager
def held_elsewhere(path: Path, note: str = "process 4242") -> Iterator[None]:
    """``path`` locked through a handle of its own, with ``note`` in it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        handle.write(f"{note}\n")
        handle.flush()
        yield


def test_a_lock_is_held_for_the_block_and_re_entrant_in_its_thread(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "x.lock"
    with file_lock(path):
        assert is_locked(path) and holder_note(path) is None  # this thread's own
        with file_lock(path, wait=False):
            assert path.read_text().startswith("process ")
    assert not is_locked(path) and path.exists()  # kept unless remove=True


def test_wait_false_refuses_at_once_naming_the_holder(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    with held_elsewhere(path), pytest.raises(LockHeldError) as refused, file_lock(path, wait=False):
        pytest.fail("the block ran while another held the lock")
    assert refused.value.holder == "process 4242" and refused.value.path == path
    assert path.read_text() == "process 4242\n"  # the holder's note is left alone


def test_a_waiting_lock_logs_its_note_and_gets_the_lock_when_released(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "x.lock"
    release = threading.Event()
    holding = threading.Event()

    def hold() -> None:
        with held_elsewhere(path, "process 77"):
            holding.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    assert holding.wait(30)
    threading.Timer(0.2, release.set).start()
    with (
        caplog.at_level("WARNING", logger="hyde_lc.core.locks"),
        file_lock(path, waiting_note="x is being written"),
    ):
        assert release.is_set()
    holder.join(30)
    assert "x is being written by process 77; waiting for it to finish" in caplog.text


def test_remove_deletes_the_lock_file_on_release(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    with file_lock(path, wait=False, remove=True):
        assert path.exists()
    assert not path.exists()


def test_a_lock_file_removed_while_being_opened_is_not_the_one_locked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A holder that removes its file on release: whoever opened the old file locks anew."""
    path = tmp_path / "x.lock"
    opened: list[bool] = []
    real_open = Path.open

    def open_then_lose_it(self: Path, *args: Any, **kwargs: Any) -> Any:
        handle = real_open(self, *args, **kwargs)
        if self == path and not opened:
            opened.append(True)
            self.unlink()  # the holder tidied it away between our open and our lock
        return handle

    monkeypatch.setattr(Path, "open", open_then_lose_it)
    with file_lock(path, wait=False, remove=True):
        assert opened and path.exists()
        assert is_locked(path)


def test_holder_note_looks_without_creating_or_keeping_anything(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    assert holder_note(path) is None and not path.exists()
    with held_elsewhere(path):
        assert holder_note(path) == "process 4242"
    assert holder_note(path) is None
    with file_lock(path, wait=False):  # the look did not keep the lock
        pass


def test_an_empty_note_names_another_process(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    with held_elsewhere(path, ""):
        assert holder_note(path) == "another process"
        with (
            pytest.raises(LockHeldError, match="held by another process"),
            file_lock(path, wait=False),
        ):
            pass


def test_only_the_locks_module_calls_flock() -> None:
    users = sorted(
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if (isinstance(node, ast.Import) and any(a.name == "fcntl" for a in node.names))
        or (isinstance(node, ast.ImportFrom) and node.module == "fcntl")
    )
    assert users == ["core/locks.py"]
