import hashlib
from pathlib import Path

import pytest

from hyde_lc.errors import EmbeddingMismatchError, IngestError, StoreError
from hyde_lc.ingest import chunk_id, ingest_paths, load_document
from hyde_lc.store import collection_info, iter_metadatas, open_store
from tests.conftest import SAMPLE_PDF, FakeEmbeddings, make_pdf

PARAGRAPH = (
    "The keeper climbed the tower at dusk to light the lamp. {n} He wound the clockwork that "
    "turned the lens and wrote the weather in the log. Ships passing the reef counted the "
    "flashes to know which light they saw. "
)


def long_text(n_paragraphs: int, tag: str = "") -> str:
    return "\n\n".join(PARAGRAPH.format(n=f"{tag}{i}.") for i in range(n_paragraphs))


def tree_digest(folder: Path) -> str:
    """Digest of a collection's logical content: ids, texts, metadata, vectors, settings.

    Not of the files' bytes: Chroma rewrites its sqlite file and HNSW headers on every
    open, even a read-only one, so bytes change although nothing stored did.
    """
    import chromadb
    from chromadb.config import Settings

    client = chromadb.PersistentClient(str(folder), settings=Settings(anonymized_telemetry=False))
    digest = hashlib.sha256()
    for collection in sorted(client.list_collections(), key=lambda c: c.name):
        got = collection.get(include=["documents", "metadatas", "embeddings"])
        order = sorted(range(len(got["ids"])), key=lambda i: got["ids"][i])
        digest.update(repr((collection.name, sorted((collection.metadata or {}).items()))).encode())
        for i in order:
            vector = [round(float(x), 6) for x in got["embeddings"][i]]
            meta = sorted(got["metadatas"][i].items())
            digest.update(repr((got["ids"][i], got["documents"][i], meta, vector)).encode())
    return digest.hexdigest()


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
    for id_, meta in iter_metadatas(store):
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
        assert all(m["file_name"] == name and m["page"] == 1 for m in metas)
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
    metas = sorted((m for _, m in iter_metadatas(store)), key=lambda m: m["chunk_index"])
    assert metas[0]["page"] == 1 and metas[-1]["page_end"] == 3
    assert all(m["page"] in (1, 3) for m in metas)


def test_chunk_spanning_short_pages_records_both_pages(tmp_path, fake_embeddings):
    short = "A short page about the lamp room and the lens, with a few words. " * 2
    pdf = make_pdf(tmp_path / "s.pdf", [short, "", short])
    store = open_store(tmp_path / "store", embeddings=fake_embeddings)
    ingest_paths([pdf], store, chunk_size=1000, chunk_overlap=100, progress=False)
    ((_, meta),) = iter_metadatas(store)
    assert (meta["page"], meta["page_end"]) == (1, 3)


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
