import hashlib
import sys

import pytest

from hyde_lc.errors import ModelNotInstalledError, WeightChecksumError
from hyde_lc.models.weights import PartSet


@pytest.fixture
def part_packages(tmp_path, monkeypatch):
    """Three fake part packages `fakepart_1..3` with data/partNN.bin on sys.path."""
    blobs = [b"GGUF" + bytes(range(256)) * 40, b"middle" * 1000, b"tail-bytes"]
    for i, blob in enumerate(blobs, start=1):
        pkg = tmp_path / "site" / f"fakepart_{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(blob)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("HYDE_LC_CACHE_DIR", str(tmp_path / "cache"))
    for i in range(1, 4):
        sys.modules.pop(f"fakepart_{i}", None)
    whole = b"".join(blobs)
    return whole, tmp_path / "cache" / "models"


def _partset(whole: bytes, sha: str | None = None) -> PartSet:
    return PartSet(
        name="fake",
        module_pattern="fakepart_{}",
        n_parts=3,
        filename="fake.gguf",
        sha256=sha or hashlib.sha256(whole).hexdigest(),
        size=len(whole),
        requirement="pip install fake-parts",
    )


def test_parts_are_concatenated_verified_and_cached(part_packages):
    whole, models = part_packages
    path = _partset(whole).path()
    assert path == models / "fake.gguf"
    assert path.read_bytes() == whole
    assert [p.name for p in models.iterdir()] == ["fake.gguf"]  # no temp file left
    mtime = path.stat().st_mtime_ns
    assert _partset(whole).path().stat().st_mtime_ns == mtime  # reused, not rebuilt


def test_checksum_mismatch_leaves_nothing_behind(part_packages):
    whole, models = part_packages
    with pytest.raises(WeightChecksumError, match="--force-reinstall"):
        _partset(whole, sha="0" * 64).path()
    assert list(models.iterdir()) == []


def test_missing_part_package_names_the_install_command(part_packages):
    whole, _ = part_packages
    bigger = PartSet(
        "fake", "fakepart_{}", 4, "fake.gguf", "0" * 64, len(whole), "pip install fake-parts"
    )
    with pytest.raises(ModelNotInstalledError, match="pip install fake-parts"):
        bigger.path()
