"""Small documents share one embedding pass and one Chroma write, each still whole."""

from pathlib import Path

import numpy as np
import pytest
from pydantic import Field

from hyde_lc.errors import IngestError
from hyde_lc.ingest.files import ingest_paths
from hyde_lc.search.lexical import lexical_search_for
from hyde_lc.store.collection import Write
from hyde_lc.store.lexical_index import lexical_query
from hyde_lc.store.vectorstore import open_store
from tests.fakes import FakeEmbeddings, chroma_of, long_text

SMALL = {"chunk_size": 300, "chunk_overlap": 20, "batch_size": 8}
"""Options under which a paragraph is one chunk and 8 chunks make a group."""


class BatchLogEmbeddings(FakeEmbeddings):
    """Records the size of each embedding call; fails once ``fail_after`` chunks are done."""

    sizes: list[int] = Field(default_factory=list)
    fail_after: float = float("inf")

    def embed_documents(self, texts):
        done = sum(self.sizes)
        if done + len(texts) > self.fail_after:
            raise RuntimeError("embedding service went away")
        object.__setattr__(self, "sizes", [*self.sizes, len(texts)])
        return super().embed_documents(texts)


@pytest.fixture
def upserts(monkeypatch) -> list[list[str]]:
    """The ids of every Chroma upsert made through a `Write`, call by call."""
    calls: list[list[str]] = []
    real = Write.upsert

    def record(self, ids, vectors, metadatas, documents):
        calls.append([str(i) for i in ids])
        return real(self, ids, vectors, metadatas, documents)

    monkeypatch.setattr(Write, "upsert", record)
    return calls


WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india"]
WORDS += ["juliet"]


def small_files(folder: Path, n: int) -> list[Path]:
    """``doc00.txt``... of two one-chunk paragraphs each, file i tagged with ``WORDS[i]``."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        path = folder / f"doc{i:02d}.txt"
        path.write_text(long_text(2, f"{WORDS[i]} "))
        paths.append(path)
    return paths


def doc_of_id(store) -> dict[str, str]:
    return {id_: Path(meta["source"]).name for id_, meta in chroma_of(store).metadatas()}


def chunks_by_doc(store) -> dict[str, int]:
    out: dict[str, int] = {}
    for _, meta in chroma_of(store).metadatas():
        name = Path(meta["source"]).name
        out[name] = out.get(name, 0) + 1
        assert meta["chunk_count"] >= 1
    return out


def test_small_files_share_writes_and_embedding_calls_and_each_is_whole(tmp_path, upserts):
    paths = small_files(tmp_path / "docs", 10)
    embeddings = BatchLogEmbeddings(size=32)
    store = open_store(tmp_path / "store", embeddings=embeddings)
    report = ingest_paths(paths, store, progress=False, **SMALL)
    # The report keeps the order of the files, each with its own chunks.
    assert [Path(f.source).name for f in report.files] == [p.name for p in paths]
    assert all(f.status == "added" and f.embedded == f.chunks == 2 for f in report.files)
    # 20 chunks in 8-chunk groups: 3 writes and 3 embedding calls instead of 10 each.
    assert [len(call) for call in upserts] == [8, 8, 4]
    assert embeddings.sizes == [8, 8, 4]
    # No file is split between two writes.
    owner = doc_of_id(store)
    assert sum(len({owner[i] for i in call}) for call in upserts) == 10
    assert chunks_by_doc(store) == {p.name: 2 for p in paths}
    # Every chunk has its own text's vector (none shifted within a shared write)...
    held = store.get(include=["documents", "embeddings"])
    expected = FakeEmbeddings(size=32).embed_documents(held["documents"])
    assert np.allclose(held["embeddings"], expected, atol=1e-6)
    # ... and is found by the lexical side.
    lexical = lexical_search_for(store)
    for i in (0, 5, 9):
        found = [owner[id_] for id_, _ in lexical.search(lexical_query(WORDS[i]), k=5)]
        assert found == [f"doc{i:02d}.txt"] * 2
    again = ingest_paths(paths, store, progress=False, **SMALL)
    assert {f.status for f in again.files} == {"unchanged"} and len(upserts) == 3


def test_a_document_is_never_split_to_fill_a_group(tmp_path, upserts):
    folder = tmp_path / "docs"
    paths = small_files(folder, 3)
    middle = folder / "doc01.txt"
    middle.write_text(long_text(7, "long-"))  # 7 chunks: does not fit after doc00's 2
    store = open_store(tmp_path / "store", embeddings=FakeEmbeddings(size=32))
    report = ingest_paths(paths, store, progress=False, **SMALL)
    assert [f.chunks for f in report.files] == [2, 7, 2]
    owner = doc_of_id(store)
    assert [sorted({owner[i] for i in call}) for call in upserts] == [
        ["doc00.txt"],
        ["doc01.txt"],
        ["doc02.txt"],
    ]


def test_files_are_written_in_order_around_a_document_written_in_parts(tmp_path, upserts):
    folder = tmp_path / "docs"
    first, big, last = small_files(folder, 3)
    big.write_text(long_text(30, "big-"))  # more chunks than one write takes
    store = open_store(tmp_path / "store", embeddings=FakeEmbeddings(size=32))
    report = ingest_paths([first, big, last], store, progress=False, max_write=6, **SMALL)
    assert [f.status for f in report.files] == ["added"] * 3
    owner = doc_of_id(store)
    order = [owner[call[0]] for call in upserts]
    assert order[0] == first.name and order[-1] == last.name
    assert set(order[1:-1]) == {big.name} and len(order) > 3


def test_a_failed_group_leaves_earlier_groups_written_and_its_files_out(tmp_path, upserts):
    paths = small_files(tmp_path / "docs", 10)
    embeddings = BatchLogEmbeddings(size=32, fail_after=12)  # the second group fails
    store = open_store(tmp_path / "store", embeddings=embeddings)
    with pytest.raises(IngestError) as failed:
        ingest_paths(paths, store, progress=False, **SMALL)
    message = str(failed.value)
    named, _, why = message.partition(": writing the chunks of these 4 files (one Chroma call)")
    assert [Path(n).name for n in named.split(" and ")[0].split(", ")] == [
        "doc04.txt",
        "doc05.txt",
        "doc06.txt",
    ]
    assert named.endswith(" and 1 more") and "the collection is as before for them" in why
    assert "embedding service went away" in message and "ingest again" in message
    # The first group whole, nothing of the second: no file half written.
    assert chunks_by_doc(store) == {p.name: 2 for p in paths[:4]}
    object.__setattr__(embeddings, "fail_after", float("inf"))
    report = ingest_paths(paths, store, progress=False, **SMALL)
    assert [f.status for f in report.files] == ["unchanged"] * 4 + ["added"] * 6
    assert embeddings.sizes == [8, 8, 4]
    assert chunks_by_doc(store) == {p.name: 2 for p in paths}


def test_replaced_files_in_a_group_lose_their_old_versions(tmp_path, upserts):
    paths = small_files(tmp_path / "docs", 4)
    store = open_store(tmp_path / "store", embeddings=FakeEmbeddings(size=32))
    ingest_paths(paths, store, progress=False, **SMALL)
    for path in paths[1:3]:
        path.write_text(long_text(3, f"new-{path.stem}-"))
    upserts.clear()
    report = ingest_paths(paths, store, progress=False, **SMALL)
    assert [f.status for f in report.files] == ["unchanged", "replaced", "replaced", "unchanged"]
    assert [len(call) for call in upserts] == [6]  # both new versions in one write
    assert chunks_by_doc(store) == {"doc00.txt": 2, "doc01.txt": 3, "doc02.txt": 3, "doc03.txt": 2}
    texts = " ".join(store.get()["documents"])
    assert "lamp. new-doc01-0." in texts and "lamp. bravo 0." not in texts


def test_unchanged_files_between_changed_ones_do_not_break_the_group(tmp_path, upserts):
    paths = small_files(tmp_path / "docs", 6)
    store = open_store(tmp_path / "store", embeddings=FakeEmbeddings(size=32))
    ingest_paths(paths, store, progress=False, **SMALL)
    for path in paths[::2]:
        path.write_text(long_text(1, f"new-{path.stem}-"))
    upserts.clear()
    report = ingest_paths(paths, store, progress=False, **SMALL)
    assert [f.status for f in report.files] == ["replaced", "unchanged"] * 3
    assert [len(call) for call in upserts] == [3]


# -- LangChain Documents (ingest_documents) -----------------------------------------------


def test_sources_with_few_chunks_share_writes_and_keep_their_order(tmp_path, upserts):
    from langchain_core.documents import Document

    from hyde_lc.ingest.documents import ingest_documents

    docs = [
        Document(f"{WORDS[i]} paragraph {j} of source {i}", metadata={"source": f"s{i}"})
        for i in range(10)
        for j in range(2)
    ]
    embeddings = BatchLogEmbeddings(size=32)
    store = open_store(tmp_path / "store", embeddings=embeddings)
    report = ingest_documents(docs, store, batch_size=8)
    assert [(f.source, f.status, f.embedded) for f in report.files] == [
        (f"s{i}", "added", 2) for i in range(10)
    ]
    assert [len(call) for call in upserts] == [8, 8, 4] and embeddings.sizes == [8, 8, 4]
    held = store.get(include=["documents", "embeddings", "metadatas"])
    expected = FakeEmbeddings(size=32).embed_documents(held["documents"])
    assert np.allclose(held["embeddings"], expected, atol=1e-6)
    source_of = dict(zip(held["ids"], (m["source"] for m in held["metadatas"]), strict=True))
    assert sum(len({source_of[i] for i in call}) for call in upserts) == 10


def test_a_chunk_moved_to_a_later_source_of_the_same_write_is_kept(tmp_path, upserts):
    from langchain_core.documents import Document

    from hyde_lc.ingest.documents import ingest_documents

    store = open_store(tmp_path / "store", embeddings=FakeEmbeddings(size=32))
    ingest_documents([Document("tides", id="x", metadata={"source": "a"})], store)
    upserts.clear()
    moved = [
        Document("currents", id="y", metadata={"source": "a"}),
        Document("tides", id="x", metadata={"source": "b"}),
    ]
    report = ingest_documents(moved, store)
    assert [(f.source, f.status) for f in report.files] == [("a", "replaced"), ("b", "added")]
    assert upserts == [["y", "x"]]  # one write for both sources
    held = store.get(include=["metadatas"])
    assert dict(zip(held["ids"], (m["source"] for m in held["metadatas"]), strict=True)) == {
        "x": "b",
        "y": "a",
    }


@pytest.mark.parametrize("bad", [{"batch_size": 0}, {"batch_size": -3}, {"max_write": 0}])
def test_a_chunk_count_below_one_is_refused_before_anything_is_written(tmp_path, bad):
    from langchain_core.documents import Document

    from hyde_lc.ingest.documents import ingest_documents

    (path,) = small_files(tmp_path / "docs", 1)
    store = open_store(tmp_path / "store", embeddings=FakeEmbeddings(size=32))
    (name,) = bad
    with pytest.raises(IngestError, match=rf"^{name} must be a whole number of chunks, at least 1"):
        ingest_paths([path], store, progress=False, **bad)
    if name == "batch_size":
        with pytest.raises(IngestError, match="batch_size must be a whole number"):
            ingest_documents([Document("tides", metadata={"source": "a"})], store, **bad)
    assert not (tmp_path / "store").exists()


def test_a_source_that_only_loses_a_chunk_to_another_is_replaced(tmp_path):
    from langchain_core.documents import Document

    from hyde_lc.ingest.documents import ingest_documents

    store = open_store(tmp_path / "store", embeddings=FakeEmbeddings(size=32))
    kept = Document("currents", id="w", metadata={"source": "a"})
    ingest_documents([kept, Document("tides", id="x", metadata={"source": "a"})], store)
    report = ingest_documents([kept, Document("tides", id="x", metadata={"source": "b"})], store)
    assert [(f.source, f.status, f.embedded) for f in report.files] == [
        ("a", "replaced", 0),
        ("b", "added", 1),
    ]


def test_unchanged_sources_are_settled_without_waiting_for_a_write(tmp_path, monkeypatch):
    from langchain_core.documents import Document

    import hyde_lc.ingest.documents as document_ingest

    docs = [Document(f"text {i}", id=f"d{i}", metadata={"source": f"s{i}"}) for i in range(5)]
    store = open_store(tmp_path / "store", embeddings=FakeEmbeddings(size=32))
    document_ingest.ingest_documents(docs, store)
    finished: list[str] = []
    real = document_ingest._finish

    def record(write, plan, given, limit):
        finished.append(plan.source)
        return real(write, plan, given, limit)

    monkeypatch.setattr(document_ingest, "_finish", record)
    docs[1] = Document("text 1, changed", id="d1", metadata={"source": "s1"})
    report = document_ingest.ingest_documents(docs, store, batch_size=8)
    assert [f.status for f in report.files] == ["unchanged", "replaced"] + ["unchanged"] * 3
    # s1 waits for its group's write (the last one); the others are settled on the way.
    assert finished == ["s0", "s2", "s3", "s4", "s1"]


def test_a_group_retires_its_old_versions_in_one_delete(tmp_path, monkeypatch, caplog):
    paths = small_files(tmp_path / "docs", 4)
    store = open_store(tmp_path / "store", embeddings=FakeEmbeddings(size=32))
    ingest_paths(paths, store, progress=False, **SMALL)
    for path in paths:
        path.write_text(long_text(1, f"new-{path.stem}-"))
    wheres: list[dict] = []
    real = Write.delete_where

    def record(self, where):
        wheres.append(where)
        return real(self, where)

    monkeypatch.setattr(Write, "delete_where", record)
    with caplog.at_level("INFO", logger="hyde_lc.ingest.files"):
        report = ingest_paths(paths, store, progress=False, **SMALL)
    assert [f.status for f in report.files] == ["replaced"] * 4
    assert len(wheres) == 1 and len(wheres[0]["$or"]) == 4
    assert chunks_by_doc(store) == {p.name: 1 for p in paths}
    logged = [r.getMessage().split()[1] for r in caplog.records if r.getMessage()[:8] == "replaced"]
    assert [Path(name).name for name in logged] == [p.name for p in paths]


def test_log_lines_keep_the_files_order(tmp_path, caplog):
    paths = small_files(tmp_path / "docs", 3)
    store = open_store(tmp_path / "store", embeddings=FakeEmbeddings(size=32))
    ingest_paths(paths[2:], store, progress=False, **SMALL)  # the last file: unchanged below
    with caplog.at_level("INFO", logger="hyde_lc.ingest.files"):
        ingest_paths(paths, store, progress=False, **SMALL)
    lines = [r.getMessage().split()[:2] for r in caplog.records if "chunks)" in r.getMessage()]
    assert [(status, Path(name).name) for status, name in lines] == [
        ("added", "doc00.txt"),
        ("added", "doc01.txt"),
        ("unchanged", "doc02.txt"),
    ]


def test_a_numpy_integer_is_a_valid_batch_size(tmp_path):
    paths = small_files(tmp_path / "docs", 2)
    store = open_store(tmp_path / "store", embeddings=FakeEmbeddings(size=32))
    report = ingest_paths(paths, store, progress=False, batch_size=np.int64(8))
    assert [f.status for f in report.files] == ["added", "added"]
