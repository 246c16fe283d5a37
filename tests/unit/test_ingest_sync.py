"""ingest_paths(remove_missing=True): a folder's files renamed or deleted leave the collection."""

import os
from pathlib import Path

import pytest

from hyde_lc.ingest import reading
from hyde_lc.ingest.files import REMOVED_NOTE, ingest_paths, missing_sources
from hyde_lc.search.lexical import lexical_search_for
from hyde_lc.store.lexical_index import lexical_query
from hyde_lc.store.vectorstore import open_store
from tests.fakes import chroma_of, long_text


def _text(word: str) -> str:
    return f"The {word} keeper wrote about {word} at dawn.\n\n" + long_text(3, word)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "alpha.txt").write_text(_text("zephyrine"))
    (docs / "beta.md").write_text(_text("quillwort"))
    (docs / "sub" / "gamma.txt").write_text(_text("marramgrass"))
    return docs


@pytest.fixture
def store(tmp_path, fake_embeddings):
    return open_store(tmp_path / "store", embeddings=fake_embeddings)


def sources(store) -> set[str]:
    return {Path(meta["source"]).name for _, meta in chroma_of(store).metadatas()}


def bm25_hits(store, word: str) -> list[str]:
    lexical = lexical_search_for(store)
    assert lexical is not None
    return [id_ for id_, _ in lexical.search(lexical_query(word), k=5)]


def dense_sources(store, word: str) -> set[str]:
    return {Path(d.metadata["source"]).name for d in store.similarity_search(_text(word), k=20)}


def test_a_renamed_file_is_searched_under_its_new_name_only(folder, store):
    ingest_paths([folder], store, progress=False)
    (folder / "alpha.txt").rename(folder / "renamed.txt")
    report = ingest_paths([folder], store, progress=False, remove_missing=True)
    statuses = {Path(f.source).name: f.status for f in report.files}
    assert statuses == {
        "renamed.txt": "added",
        "beta.md": "unchanged",
        "gamma.txt": "unchanged",
        "alpha.txt": "removed",
    }
    removed = next(f for f in report.files if f.status == "removed")
    assert removed.source == str((folder / "alpha.txt").resolve())
    assert removed.chunks > 0 and removed.notes == [REMOVED_NOTE]
    assert "removed" in report.summary()
    assert sources(store) == {"renamed.txt", "beta.md", "gamma.txt"}
    assert "alpha.txt" not in dense_sources(store, "zephyrine")
    found = {
        Path(d.metadata["source"]).name for d in store.get_by_ids(bm25_hits(store, "zephyrine"))
    }
    assert found == {"renamed.txt"}


def test_a_deleted_file_leaves_both_search_sides(folder, store):
    ingest_paths([folder], store, progress=False)
    assert bm25_hits(store, "marramgrass")
    (folder / "sub" / "gamma.txt").unlink()
    report = ingest_paths([folder], store, progress=False, remove_missing=True)
    assert [Path(f.source).name for f in report.files if f.status == "removed"] == ["gamma.txt"]
    assert sources(store) == {"alpha.txt", "beta.md"}
    assert bm25_hits(store, "marramgrass") == []
    assert "gamma.txt" not in dense_sources(store, "marramgrass")


def test_without_remove_missing_nothing_is_removed(folder, store):
    ingest_paths([folder], store, progress=False)
    (folder / "beta.md").unlink()
    report = ingest_paths([folder], store, progress=False)
    assert "removed" not in {f.status for f in report.files}
    assert "beta.md" in sources(store)


def test_documents_outside_the_folders_are_never_touched(tmp_path, folder, store):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "loose.txt").write_text(_text("sea-holly"))
    (outside / "other.txt").write_text(_text("samphire"))
    ingest_paths([folder, outside / "loose.txt", outside / "other.txt"], store, progress=False)
    (outside / "other.txt").unlink()  # gone, but outside the folder being synced
    (folder / "beta.md").unlink()
    # a file given by name is ingested only: nothing beside it is looked at
    report = ingest_paths(
        [folder, outside / "loose.txt"], store, progress=False, remove_missing=True
    )
    assert [Path(f.source).name for f in report.files if f.status == "removed"] == ["beta.md"]
    assert sources(store) == {"alpha.txt", "gamma.txt", "loose.txt", "other.txt"}


def test_a_sibling_folder_sharing_the_name_prefix_is_not_inside(tmp_path, folder, store):
    twin = tmp_path / "docs-old"
    twin.mkdir()
    (twin / "old.txt").write_text(_text("eelgrass"))
    ingest_paths([folder, twin], store, progress=False)
    (twin / "old.txt").unlink()
    ingest_paths([folder], store, progress=False, remove_missing=True)
    assert "old.txt" in sources(store)


def test_an_unreadable_sub_folder_keeps_its_documents(folder, store, monkeypatch):
    ingest_paths([folder], store, progress=False)
    # gone for real, but its folder cannot be read now: its absence cannot be known
    (folder / "sub" / "gamma.txt").unlink()
    (folder / "sub" / "delta.txt").write_text(_text("thrift"))
    real_walk = os.walk

    def walk(top, onerror=None, followlinks=False):  # "sub" cannot be listed (EACCES)
        for here, dirs, names in real_walk(top, followlinks=followlinks):
            if "sub" in dirs:
                dirs.remove("sub")
                if onerror is not None:
                    where = os.path.join(here, "sub")
                    onerror(PermissionError(13, "Permission denied", where))
            yield here, dirs, names

    monkeypatch.setattr(reading.os, "walk", walk)
    (folder / "beta.md").unlink()
    report = ingest_paths([folder], store, progress=False, remove_missing=True)
    by_status = {f.status: f for f in report.files if f.status in ("removed", "skipped")}
    assert Path(by_status["removed"].source).name == "beta.md"
    skipped = by_status["skipped"]
    assert skipped.source.endswith("sub")
    assert any("kept" in note for note in skipped.notes)
    assert sources(store) == {"alpha.txt", "gamma.txt"}
    assert bm25_hits(store, "marramgrass")


def test_missing_sources_keeps_what_it_cannot_be_sure_of(tmp_path, monkeypatch):
    root = tmp_path / "docs"
    root.mkdir()
    (root / "here.txt").write_text("x")
    gone = str(root / "gone.txt")
    unsure = str(root / "unsure.txt")
    real_lstat = os.lstat

    def lstat(path, *args, **kwargs):
        if str(path) == unsure:
            raise PermissionError(13, "Permission denied", unsure)
        return real_lstat(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", lstat)
    stored = [gone, unsure, str(root / "here.txt"), "relative.txt", "https://example.org/a"]
    assert missing_sources(stored, [root], []) == [gone]
    assert missing_sources(stored, [root], [], skipped=[str(root)]) == []
