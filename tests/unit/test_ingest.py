import contextlib
import hashlib
import os
import threading
import time
from pathlib import Path

import pytest
from langchain_core.documents import Document

from hyde_lc.errors import EmbeddingMismatchError, IngestError, StoreError
from hyde_lc.ingest.files import chunk_id, ingest_paths, load_document, split_document
from hyde_lc.store.vectorstore import collection_info, open_store
from tests.fakes import (
    SAMPLE_PDF,
    FakeEmbeddings,
    chroma_of,
    long_text,
    make_pdf,
    tree_digest,
)


class CountingEmbeddings(FakeEmbeddings):
    calls: int = 0

    def embed_documents(self, texts):
        object.__setattr__(self, "calls", self.calls + len(texts))
        return super().embed_documents(texts)


@pytest.fixture
def docs(tmp_path):
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text(long_text(12, "a"))
    (folder / "sub" / "b.md").write_text("# B\n\n" + long_text(8, "b"))
    (folder / "ignored.csv").write_text("x,y\n")
    return folder


def by_source(store):
    out: dict[str, dict[str, dict]] = {}
    for id_, meta in chroma_of(store).metadatas():
        out.setdefault(Path(meta["source"]).name, {})[id_] = meta
    return out


def test_chunks_carry_metadata_and_consecutive_indexes(tmp_path, docs, fake_embeddings):
    store = open_store(tmp_path / "store", embeddings=fake_embeddings)
    report = ingest_paths([docs], store, chunk_size=300, chunk_overlap=60, progress=False)
    assert [Path(f.source).name for f in report.files] == ["a.txt", "b.md"]  # csv ignored
    for name, chunks in by_source(store).items():
        metas = sorted(chunks.values(), key=lambda m: m["chunk_index"])
        assert [m["chunk_index"] for m in metas] == list(range(len(metas)))
        assert {m["chunk_count"] for m in metas} == {len(metas)}
        assert len({m["doc_id"] for m in metas}) == 1
        assert {m["embedding_model"] for m in metas} == {"fake:hash-32"}
        assert all(m["file_name"] == name and m["page"] == 0 for m in metas)
        assert {m["page_label"] for m in metas} == {"1"}
        # Each id derives from the metadata (neighbour expansion reads neighbours by id).
        assert {m["chunk_size"] for m in metas} == {300} and {
            m["chunk_overlap"] for m in metas
        } == {60}
        for id_, m in chunks.items():
            assert id_ == chunk_id(m["source"], m["doc_id"], 300, 60, m["chunk_index"])
        starts = [m["start_index"] for m in metas]
        assert starts == sorted(starts)
    # start_index locates each chunk's text in the document text exactly.
    text = load_document(docs / "a.txt").text
    got = store._collection.get(where={"file_name": "a.txt"}, include=["documents", "metadatas"])
    for body, meta in zip(got["documents"], got["metadatas"], strict=True):
        assert text[meta["start_index"] : meta["start_index"] + len(body)] == body


def test_reingest_is_a_no_op(tmp_path, docs):
    embeddings = CountingEmbeddings(size=32)
    store = open_store(tmp_path / "store", embeddings=embeddings)
    ingest_paths([docs], store, chunk_size=300, chunk_overlap=60, progress=False)
    before = by_source(store)
    calls = embeddings.calls
    report = ingest_paths([docs], store, chunk_size=300, chunk_overlap=60, progress=False)
    assert {f.status for f in report.files} == {"unchanged"}
    assert embeddings.calls == calls  # nothing embedded again
    assert by_source(store) == before


def test_a_run_that_embeds_nothing_shows_no_embedding_bar(tmp_path, docs, capsys):
    store = open_store(tmp_path / "store", embeddings=CountingEmbeddings(size=32))
    ingest_paths([docs], store, chunk_size=300, chunk_overlap=60)
    assert "embedding" in capsys.readouterr().err  # the first run embeds, with its bar
    ingest_paths([docs], store, chunk_size=300, chunk_overlap=60)
    assert "embedding" not in capsys.readouterr().err  # no "embedding: 0chunk" bar


def test_changed_document_is_replaced_and_nothing_else(tmp_path, docs, fake_embeddings):
    store = open_store(tmp_path / "store", embeddings=fake_embeddings)
    ingest_paths([docs], store, chunk_size=300, chunk_overlap=60, progress=False)
    before = by_source(store)
    (docs / "a.txt").write_text(long_text(5, "changed"))
    report = ingest_paths([docs], store, chunk_size=300, chunk_overlap=60, progress=False)
    status = {Path(f.source).name: f.status for f in report.files}
    assert status == {"a.txt": "replaced", "b.md": "unchanged"}
    after = by_source(store)
    assert after["b.md"] == before["b.md"]
    assert not set(after["a.txt"]) & set(before["a.txt"])  # old chunks gone
    assert len({m["doc_id"] for m in after["a.txt"].values()}) == 1
    assert store._collection.count() == len(after["a.txt"]) + len(after["b.md"])


def test_pdf_pages_blank_pages_and_page_spans(tmp_path, fake_embeddings):
    pdf = make_pdf(tmp_path / "p.pdf", [long_text(3, "one"), "", long_text(3, "three")])
    doc = load_document(pdf)
    assert doc.page_numbers == [1, 3]
    assert any("page 2 skipped" in note for note in doc.notes)
    store = open_store(tmp_path / "store", embeddings=fake_embeddings)
    report = ingest_paths([pdf], store, chunk_size=400, chunk_overlap=50, progress=False)
    assert any("page 2 skipped" in n for n in report.files[0].notes)
    metas = sorted((m for _, m in chroma_of(store).metadatas()), key=lambda m: m["chunk_index"])
    # pages as PyPDFLoader gives them: 0-based page, printed label
    assert metas[0]["page"] == 0 and metas[-1]["page_end"] == 2
    assert all(m["page"] in (0, 2) for m in metas)
    assert (metas[0]["page_label"], metas[-1]["page_label_end"]) == ("1", "3")


def test_chunk_spanning_short_pages_records_both_pages(tmp_path, fake_embeddings):
    short = "A short page about the lamp room and the lens, with a few words. " * 2
    pdf = make_pdf(tmp_path / "s.pdf", [short, "", short])
    store = open_store(tmp_path / "store", embeddings=fake_embeddings)
    ingest_paths([pdf], store, chunk_size=1000, chunk_overlap=100, progress=False)
    ((_, meta),) = chroma_of(store).metadatas()
    assert (meta["page"], meta["page_end"]) == (0, 2)
    assert (meta["page_label"], meta["page_label_end"]) == ("1", "3")


def test_other_embedding_model_is_refused_and_store_untouched(tmp_path, docs, fake_embeddings):
    store_dir = tmp_path / "store"
    ingest_paths([docs], open_store(store_dir, embeddings=fake_embeddings), progress=False)
    digest = tree_digest(store_dir)
    other = FakeEmbeddings(size=48, model_id="fake:other-48")
    with pytest.raises(EmbeddingMismatchError, match=r"fake:hash-32.*32 dimensions.*fake:other-48"):
        open_store(store_dir, embeddings=other)
    assert tree_digest(store_dir) == digest
    info = collection_info(open_store(store_dir, embeddings=fake_embeddings))
    assert (info["embedding_model"], info["embedding_dimension"]) == ("fake:hash-32", 32)
    assert info["chunks"] == sum(d["chunks"] for d in info["documents"])


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda d: d / "missing.pdf", "no such file"),
        (lambda d: (d / "fake.pdf").write_text("just text") and d / "fake.pdf", "not a PDF"),
        (lambda d: (d / "x.docx").write_text("x") and d / "x.docx", "unsupported file type"),
        (lambda d: (d / "empty").mkdir() or d / "empty", "no supported files"),
        (
            lambda d: (d / "broken.pdf").write_bytes(b"%PDF-1.4\n garbage") and d / "broken.pdf",
            "could not read",
        ),
        (
            lambda d: (d / "cut.pdf").write_bytes(SAMPLE_PDF.read_bytes()[:9000]) and d / "cut.pdf",
            r"cut\.pdf: pypdf could not read this PDF .* damaged or truncated",
        ),
    ],
    ids=["missing", "not-a-pdf", "unsupported", "empty-folder", "corrupt-pdf", "truncated-pdf"],
)
def test_bad_input_fails_before_anything_is_written(
    tmp_path, docs, fake_embeddings, setup, message
):
    store_dir = tmp_path / "store"
    store = open_store(store_dir, embeddings=fake_embeddings)
    ingest_paths([docs / "a.txt"], store, progress=False)
    digest = tree_digest(store_dir)
    bad = setup(tmp_path)
    with pytest.raises(IngestError, match=message):
        ingest_paths([docs / "sub", bad], store, progress=False)
    assert tree_digest(store_dir) == digest


def test_invalid_chunking_is_refused(tmp_path, docs, fake_embeddings):
    store = open_store(tmp_path / "store", embeddings=fake_embeddings)
    with pytest.raises(IngestError, match="chunk_overlap"):
        ingest_paths([docs], store, chunk_size=100, chunk_overlap=100, progress=False)


def test_non_utf8_text_is_read_with_a_note(tmp_path, fake_embeddings):
    path = tmp_path / "latin.txt"
    path.write_bytes("Caf\xe9 au lait near the phare de Cordouan, ".encode("cp1252") * 3)
    doc = load_document(path)
    assert "Café" in doc.text and any("UTF-8" in n for n in doc.notes)


def test_foreign_collection_is_not_adopted(tmp_path, fake_embeddings):
    import chromadb

    client = chromadb.PersistentClient(path=str(tmp_path / "store"))
    client.create_collection("hyde_lc").add(ids=["x"], embeddings=[[0.1] * 32], documents=["x"])
    with pytest.raises(StoreError, match="not built by hyde_lc"):
        open_store(tmp_path / "store", embeddings=fake_embeddings)


# -- documents larger than one write ---------------------------------------------------------

LARGE = {"chunk_size": 200, "chunk_overlap": 20, "batch_size": 4, "max_write": 12}
"""Options under which a document of 60 paragraphs takes several Chroma writes."""


class FlakyEmbeddings(FakeEmbeddings):
    """Counts the chunks it embeds; fails once ``fail_after`` chunks have been embedded."""

    embedded: int = 0
    fail_after: float = float("inf")

    def embed_documents(self, texts):
        if self.embedded + len(texts) > self.fail_after:
            raise RuntimeError("embedding service went away")
        object.__setattr__(self, "embedded", self.embedded + len(texts))
        return super().embed_documents(texts)


def versions(store) -> dict[str, list[int]]:
    """doc_id -> chunk indexes the collection holds (searchable or not)."""
    out: dict[str, list[int]] = {}
    for _, meta in chroma_of(store).metadatas():
        out.setdefault(meta["doc_id"], []).append(meta["chunk_index"])
    return {doc_id: sorted(indexes) for doc_id, indexes in out.items()}


def searchable(store, queries: list[str]) -> set[str]:
    """The doc_ids that reads through the store return for these queries."""
    found = {m["doc_id"] for m in store.get(include=["metadatas"])["metadatas"]}
    for query in queries:
        found |= {d.metadata["doc_id"] for d in store.similarity_search(query, k=100)}
    return found


def test_a_document_larger_than_one_write_is_hidden_until_complete_then_resumed(tmp_path):

    doc = tmp_path / "big.txt"
    doc.write_text(long_text(60, "old"))
    embeddings = FlakyEmbeddings(size=32)
    store = open_store(tmp_path / "store", embeddings=embeddings)
    first = ingest_paths([doc], store, progress=False, **LARGE)
    old_count = first.files[0].chunks
    assert old_count > 3 * LARGE["max_write"] and first.files[0].embedded == old_count
    (old_id,) = versions(store)
    doc.write_text(long_text(60, "new"))
    new_chunks = [c.text for c in split_document(load_document(doc), "m", 200, 20)]
    object.__setattr__(embeddings, "fail_after", embeddings.embedded + 28)  # 2 writes of 12
    with pytest.raises(IngestError, match=r"24 of \d+ chunks written.*resumes from the chunks"):
        ingest_paths([doc], store, progress=False, **LARGE)
    held = versions(store)
    (new_id,) = set(held) - {old_id}
    assert held[old_id] == list(range(old_count)) and held[new_id] == list(range(24))
    # Searches, get and info see the old version only, whole.
    assert searchable(store, new_chunks[:30]) == {old_id}
    info = collection_info(store)
    assert [(d["doc_id"], d["chunks"]) for d in info["documents"]] == [(old_id, old_count)]
    assert [(d["doc_id"], d["chunks_written"]) for d in info["incomplete"]] == [(new_id, 24)]
    # Ingesting again embeds only what is missing, then switches to the new version.
    object.__setattr__(embeddings, "fail_after", float("inf"))
    before = embeddings.embedded
    report = ingest_paths([doc], store, progress=False, **LARGE)
    (result,) = report.files
    assert (result.status, result.embedded) == ("replaced", result.chunks - 24)
    assert embeddings.embedded - before == result.chunks - 24
    assert versions(store) == {new_id: list(range(result.chunks))}
    assert searchable(store, new_chunks[:30]) == {new_id}
    assert chroma_of(store).pending() == [] and collection_info(store)["incomplete"] == []


def test_a_failure_while_removing_the_old_version_leaves_only_the_new_one_searchable(
    tmp_path, fake_embeddings, monkeypatch
):
    import hyde_lc.ingest.files

    doc = tmp_path / "big.txt"
    doc.write_text(long_text(60, "old"))
    store = open_store(tmp_path / "store", embeddings=fake_embeddings)
    ingest_paths([doc], store, progress=False, **LARGE)
    (old_id,) = versions(store)
    doc.write_text(long_text(60, "new"))

    def fail(*args, **kwargs):
        raise RuntimeError("the store went away")

    monkeypatch.setattr(hyde_lc.ingest.files.Write, "delete_where", fail)
    with pytest.raises(RuntimeError):
        ingest_paths([doc], store, progress=False, **LARGE)
    (new_id,) = set(versions(store)) - {old_id}
    assert searchable(store, [long_text(1, "old"), long_text(1, "new")]) == {new_id}
    monkeypatch.undo()
    report = ingest_paths([doc], store, progress=False, **LARGE)
    assert (report.files[0].status, report.files[0].embedded) == ("replaced", 0)
    assert set(versions(store)) == {new_id}
    assert collection_info(store)["incomplete"] == []


class FailingEmbeddings(FakeEmbeddings):
    """Fails every embedding call after the first ``fail_after``."""

    fail_after: int = 10**9
    seen: int = 0

    def embed_documents(self, texts):
        object.__setattr__(self, "seen", self.seen + 1)
        if self.seen > self.fail_after:
            raise RuntimeError("embedding service went away")
        return super().embed_documents(texts)


def test_a_failed_replacement_is_undone_and_the_old_version_kept(tmp_path):
    doc = tmp_path / "d.txt"
    doc.write_text(long_text(20, "old"))
    embeddings = FailingEmbeddings(size=32)
    store = open_store(tmp_path / "store", embeddings=embeddings)
    ingest_paths([doc], store, chunk_size=200, chunk_overlap=40, batch_size=4, progress=False)
    digest = tree_digest(tmp_path / "store")
    doc.write_text(long_text(20, "new"))
    object.__setattr__(embeddings, "fail_after", embeddings.seen + 1)  # 2nd batch fails
    with pytest.raises(IngestError, match="partial write was undone"):
        ingest_paths([doc], store, chunk_size=200, chunk_overlap=40, batch_size=4, progress=False)
    # Every chunk, vector and setting as before (the head did not move: nothing was written).
    assert tree_digest(tmp_path / "store") == digest


def test_a_file_gone_blank_keeps_its_previous_version(tmp_path, fake_embeddings):
    doc = tmp_path / "d.txt"
    doc.write_text(long_text(5))
    store = open_store(tmp_path / "store", embeddings=fake_embeddings)
    ingest_paths([doc], store, progress=False)
    before = store._collection.count()
    doc.write_text("   \n  ")
    report = ingest_paths([doc], store, progress=False)
    assert report.files[0].status == "empty"
    assert "previously ingested version is kept" in report.files[0].notes[-1]
    assert store._collection.count() == before


def test_a_killed_run_that_wrote_nothing_leaves_no_trace_after_the_next(tmp_path, fake_embeddings):
    from hyde_lc.ingest.files import doc_version

    doc = tmp_path / "d.txt"
    doc.write_text(long_text(4))
    store = open_store(tmp_path / "store", embeddings=fake_embeddings)
    ingest_paths([doc], store, progress=False)
    chroma_of(store).set_pending(add=[doc_version("/gone.txt", "0" * 20, 1000, 200)])  # no chunks
    ingest_paths([doc], store, progress=False)
    assert chroma_of(store).pending() == []


# -- splitting in segments -------------------------------------------------------------------


def test_a_document_of_one_segment_is_split_as_a_whole(tmp_path):
    """Chunks and ids as a split of the whole text gives: existing collections keep theirs."""
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    path = tmp_path / "a.txt"
    path.write_text(long_text(30, "w"))
    text = path.read_text()
    doc_id = hashlib.sha256(text.encode("utf-8")).hexdigest()[:20]
    splitter = RecursiveCharacterTextSplitter(
        chunk_size=300, chunk_overlap=60, add_start_index=True
    )
    pieces = splitter.create_documents([text])
    chunks = split_document(load_document(path), "m", 300, 60)
    assert [(c.id, c.text, c.metadata["start_index"]) for c in chunks] == [
        (chunk_id(str(path), doc_id, 300, 60, i), p.page_content, p.metadata["start_index"])
        for i, p in enumerate(pieces)
    ]


def test_a_long_document_is_split_in_segments_that_rebuild_it_exactly(
    tmp_path, fake_embeddings, monkeypatch
):
    import hyde_lc.ingest.reading
    from hyde_lc.retrievers.neighbors import join_chunks

    monkeypatch.setattr(hyde_lc.ingest.reading, "SEGMENT_CHARS", 2500)
    path = tmp_path / "long.txt"
    path.write_text("  " + long_text(80, "s") + "\n")  # about 20 segments
    text = path.read_text()
    store = open_store(tmp_path / "store", embeddings=fake_embeddings)
    ingest_paths([path], store, chunk_size=300, chunk_overlap=30, progress=False, max_write=50)
    got = store.get(include=["documents", "metadatas"])
    stored = sorted(
        zip(got["ids"], got["documents"], got["metadatas"], strict=True),
        key=lambda item: item[2]["chunk_index"],
    )
    metas = [meta for _, _, meta in stored]
    assert [m["chunk_index"] for m in metas] == list(range(len(stored)))
    assert {m["chunk_count"] for m in metas} == {len(stored)}
    assert metas[0]["doc_id"] != hashlib.sha256(text.encode()).hexdigest()[:20]
    for _, body, meta in stored:
        assert text[meta["start_index"] : meta["start_index"] + len(body)] == body
    documents = [Document(page_content=body, metadata=meta) for _, body, meta in stored]
    assert metas[0]["gap_before"] + join_chunks(documents) == text.rstrip()
    # The in-memory split gives the same chunks as the streamed ingestion.
    again = split_document(load_document(path), "fake:hash-32", 300, 30)
    assert [(c.id, c.text) for c in again] == [(id_, body) for id_, body, _ in stored]


@pytest.mark.parametrize("block", [1, 7, 999, 10**9])
def test_segments_do_not_depend_on_how_the_text_is_read(block):
    from hyde_lc.ingest.reading import iter_segments

    text = long_text(40, "b") + " " + "x" * 3000 + "\n" + long_text(5, "c")
    blocks = [text[i : i + block] for i in range(0, len(text), block)]
    segments = list(iter_segments(blocks, size=1000))
    assert segments == list(iter_segments([text], size=1000))
    assert all(len(s) <= 1000 for _, s in segments)
    assert "".join(s for _, s in segments) == text
    assert [o for o, _ in segments] == [
        sum(len(s) for _, s in segments[:i]) for i in range(len(segments))
    ]
    assert segments[0][1].endswith("\n\n")  # cut after a paragraph where there is one


# -- what is not a regular file ------------------------------------------------------------------


def _unblock_reader(fifo: Path, after: float) -> None:
    """Open the pipe for writing after a while, so a reader stuck on it gets EOF (no hang)."""
    time.sleep(after)
    with contextlib.suppress(OSError):  # nobody was reading it
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def test_a_pipe_given_by_name_is_refused_without_reading_it(tmp_path, fake_embeddings):
    fifo = tmp_path / "feed.txt"
    os.mkfifo(fifo)
    threading.Thread(target=_unblock_reader, args=(fifo, 30), daemon=True).start()
    store = open_store(tmp_path / "store", embeddings=fake_embeddings)
    with pytest.raises(IngestError, match=r"feed\.txt: it is a named pipe \(FIFO\), not a regular"):
        ingest_paths([fifo], store, progress=False)
    assert not (tmp_path / "store").exists()


def test_things_in_folders_that_cannot_be_read_as_files_are_skipped_with_a_note(
    tmp_path, docs, fake_embeddings
):
    os.mkfifo(docs / "pipe.md")
    threading.Thread(target=_unblock_reader, args=(docs / "pipe.md", 30), daemon=True).start()
    (docs / "gone.txt").symlink_to(tmp_path / "nowhere.txt")
    store = open_store(tmp_path / "store", embeddings=fake_embeddings)
    report = ingest_paths([docs], store, progress=False)
    by_name = {Path(f.source).name: f for f in report.files}
    assert {name: f.status for name, f in by_name.items()} == {
        "a.txt": "added",
        "b.md": "added",
        "pipe.md": "skipped",
        "gone.txt": "skipped",
    }
    assert "named pipe" in by_name["pipe.md"].notes[0]
    assert "cannot read it" in by_name["gone.txt"].notes[0]
    assert "skipped" in report.summary() and "named pipe" in report.summary()
