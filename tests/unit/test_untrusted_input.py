"""Untrusted input: symbolic links out of the ingested folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyde_lc.documents import find_files
from hyde_lc.errors import IngestError
from hyde_lc.ingest import ingest_paths
from hyde_lc.store import iter_metadatas, open_store
from tests.fakes import long_text

# -- symbolic links -------------------------------------------------------------------------


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """Files outside the corpus: a secret with no suffix, and a document named .txt."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n" * 5)
    (folder / "elsewhere.txt").write_text(long_text(3, "elsewhere"))
    return folder


@pytest.fixture
def corpus(tmp_path: Path, outside: Path) -> Path:
    folder = tmp_path / "corpus"
    (folder / "sub").mkdir(parents=True)
    (folder / "own.txt").write_text(long_text(4, "own"))
    (folder / "passwd.txt").symlink_to(outside / "passwd")
    (folder / "elsewhere.txt").symlink_to(outside / "elsewhere.txt")
    (folder / "sub" / "alias.txt").symlink_to(folder / "own.txt")  # inside: harmless
    (folder / "linked").symlink_to(outside, target_is_directory=True)
    return folder


def test_a_link_out_of_the_folder_is_skipped_and_says_why(corpus, outside):
    found = find_files([corpus])
    assert found.files == [(corpus / "own.txt").resolve()]
    reasons = {Path(s.path).name: s.reason for s in found.skipped}
    assert set(reasons) == {"passwd.txt", "elsewhere.txt", "linked"}
    assert f"symbolic link to {outside / 'passwd'}, outside {corpus}" in reasons["passwd.txt"]
    assert "--follow-links" in reasons["elsewhere.txt"]
    assert reasons["linked"].startswith("folder skipped: it is a symbolic link")


def test_following_links_still_judges_the_type_by_the_target(corpus, outside):
    found = find_files([corpus], follow_links=True)
    assert sorted(p.name for p in found.files) == ["elsewhere.txt", "own.txt"]
    assert outside / "passwd" not in found.files
    reasons = {Path(s.path).name: s.reason for s in found.skipped}
    assert set(reasons) == {"passwd.txt"}
    assert "not a supported file" in reasons["passwd.txt"]


def test_followed_folder_links_that_loop_are_walked_once(tmp_path):
    folder = tmp_path / "loop"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "a.txt").write_text(long_text(2, "a"))
    (folder / "sub" / "up").symlink_to(folder, target_is_directory=True)
    found = find_files([folder], follow_links=True)
    assert found.files == [(folder / "sub" / "a.txt").resolve()]


def test_a_link_given_by_name_is_judged_by_its_target(tmp_path, outside):
    link = tmp_path / "passwd.txt"
    link.symlink_to(outside / "passwd")
    with pytest.raises(IngestError, match=r"symbolic link to .*passwd, which is not a supported"):
        find_files([link])


def test_ingest_never_stores_the_target_of_a_link_out_of_the_folder(
    tmp_path, corpus, fake_embeddings
):
    store = open_store(tmp_path / "store", embeddings=fake_embeddings)
    report = ingest_paths([corpus], store, progress=False)
    status = {Path(f.source).name: f.status for f in report.files}
    assert status == {
        "own.txt": "added",
        "passwd.txt": "skipped",
        "elsewhere.txt": "skipped",
        "linked": "skipped",
    }
    sources = {meta["source"] for _, meta in iter_metadatas(store)}
    assert sources == {str((corpus / "own.txt").resolve())}
