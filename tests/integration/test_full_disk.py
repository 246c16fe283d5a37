"""A write on a full disk, on a real size-limited filesystem (a tmpfs of 8 MB).

Two situations: the whole store on the full disk, and the BM25 index alone on one (a
tmpfs of 1 MB mounted over the store's index folder; see the last test).

The store is filled with a file that leaves little room, a new document is ingested
(it must fail, saying the disk is full and that the collection is as before), the filler
is removed, and a fresh Chroma client (which applies whatever Chroma had logged) must
show the collection as it was: the failed document is in neither the dense nor the BM25
results. Ingesting it again then succeeds completely.

The filesystem is mounted in a user and mount namespace of its own (``unshare``), so
the test needs no privileges where the kernel allows those; as root without them it
mounts a tmpfs itself (and unmounts it after). Otherwise it is skipped, saying why.
The scenario runs in a child process (`tests.integration.full_disk`) inside that
namespace.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from hyde_lc.store.location import LEXICAL_FOLDER
from tests.integration.fault_matrix import base_env

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SIZE = "8m"
Run = Callable[..., dict[str, Any]]


def _mount_script(folder: Path, size: str) -> str:
    return f'mount -t tmpfs -o size={size} tmpfs "{folder}" && exec "$@"'


def _can_unshare(folder: Path, size: str) -> bool:
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    probe = [unshare, "--user", "--map-root-user", "--mount", "sh", "-c"]
    probe += [_mount_script(folder, size), "sh", "true"]
    return subprocess.run(probe, capture_output=True).returncode == 0


@contextmanager
def tmpfs_on(folder: Path, size: str) -> Iterator[list[str]]:
    """A command prefix under which a fresh tmpfs of ``size`` is mounted on ``folder``.

    In a user and mount namespace of the command's own where the kernel allows them (the
    prefix does it); as root without them, mounted here for the block's length (the
    prefix is empty). Otherwise the test is skipped, saying why.
    """
    if _can_unshare(folder, size):
        prefix = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c"]
        yield [*prefix, _mount_script(folder, size), "sh"]
        return
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip(
            "no size-limited filesystem: user namespaces are not allowed here (unshare "
            "--user --map-root-user --mount failed) and the test does not run as root"
        )
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small filesystem here: {done.stderr.strip()}")
    try:
        yield []
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def _scenario(prefix: list[str], *args: str) -> dict[str, Any]:
    """Run `tests.integration.full_disk` with ``args`` under ``prefix``; what it printed."""
    env = {**base_env(), "PYTHONPATH": str(ROOT)}
    env.pop("HYDE_LC_EMBEDDINGS")  # a copied store is opened with its own model
    command = [sys.executable, "-m", "tests.integration.full_disk", *args]
    done = subprocess.run(
        [*prefix, *command], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def small_filesystem(tmp_path: Path, sample_store_dir: Path) -> Iterator[Run]:
    """Runs the full-disk scenario on a fresh 8 MB tmpfs; yields ``run(free_kb, *flags)``."""
    folder = tmp_path / "small"
    folder.mkdir()
    with tmpfs_on(folder, SIZE) as prefix:

        def run(free_kb: int, *flags: str) -> dict[str, Any]:
            return _scenario(prefix, str(folder), str(sample_store_dir), str(free_kb), *flags)

        yield run


def _check(seen: dict[str, Any]) -> None:
    """The failed write said why and what to do, never showed, and a retry completed."""
    failed = seen["failed"]
    assert failed is not None, "the write on the full disk did not fail"
    assert failed.startswith("NoSpaceError: "), failed
    assert "no space left on the device holding" in failed
    assert "Free space there, then run the same command again" in failed
    assert "the collection is as before" in failed
    before, after, final = seen["before"], seen["after"], seen["final"]
    assert after["count"] == before["count"]
    assert after["new_chunks"] == after["bm25_hits"] == after["dense_hits_new"] == 0
    ((status, chunks),) = seen["retried"]
    assert status == "added"
    assert final["new_chunks"] == chunks and final["count"] == before["count"] + chunks
    assert final["bm25_hits"] > 0 and final["dense_hits_new"] > 0


def test_a_write_without_room_is_refused_before_it_starts(small_filesystem: Run) -> None:
    seen = small_filesystem(200)
    _check(seen)
    assert "this write needs about" in seen["failed"]


@pytest.mark.skipif(
    os.environ.get("HYDE_LC_FULL_DISK_APPLY_TEST") != "1",
    reason="chromadb 1.5.9 sometimes hangs in its own SQLite worker when the disk fills "
    "while it applies a logged write, so this case runs only when asked "
    "(HYDE_LC_FULL_DISK_APPLY_TEST=1); the undo itself is tested in "
    "tests/unit/test_failed_write_undone.py",
)
def test_a_write_failing_on_a_full_disk_never_shows(small_filesystem: Run) -> None:
    """Chroma logs the write, then fails to apply it: the undo keeps it from showing later.

    With 500 KB free Chroma's log takes the write and applying it fails; without the undo
    the write's chunks appeared at the next open once space was freed.
    """
    seen = small_filesystem(500, "--no-room-check")
    _check(seen)


def test_a_full_disk_under_the_bm25_index_alone_is_named_and_searched_around(
    tmp_path: Path,
) -> None:
    """The index folder on a full filesystem of its own, the store on a roomy one.

    A write is refused naming the index's folder and the room there, not the store's
    disk; a write that meets the full disk half-way (the check turned off) keeps its
    chunks and says why the index lags; searches meanwhile answer dense only and say so
    in every result; once space is freed the next search catches the index up.
    """
    store = tmp_path / "store"
    index_folder = store / LEXICAL_FOLDER
    index_folder.mkdir(parents=True)
    with tmpfs_on(index_folder, "1m") as prefix:
        seen = _scenario(prefix, "index", str(store))
    held = f"no space left on the device holding the BM25 index {index_folder}/"
    refused, failed = seen["refused"], seen["failed"]
    assert refused.startswith("NoSpaceError: ") and held in refused, refused
    assert re.search(r"\((\d+ bytes|\d+\.\d KB) free, this write needs about", refused), refused
    assert "the collection is as before" in refused
    assert seen["counts"][1] == seen["counts"][0]  # refused before anything was written
    assert failed.startswith("NoSpaceError: ") and held in failed, failed
    assert "the chunks written are stored" in failed
    assert seen["counts"][2] == seen["counts"][0] + 1  # the chunk is kept
    while_full = seen["while_full"]
    assert while_full["error"] is None, while_full["error"]
    assert while_full["hits"] and all(
        "searched dense only" in (note or "") and str(index_folder) in note
        for _, _, note in while_full["hits"]
    )
    assert not any("lexical" in found_by for _, found_by, _ in while_full["hits"])
    freed = seen["after_freeing"]
    assert freed["error"] is None and not any(note for _, _, note in freed["hits"])
    assert any(name == "tide.txt" and "lexical" in by for name, by, _ in freed["hits"])
