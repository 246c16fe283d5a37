"""Page numbers as LangChain's PyPDFLoader records them, and collections ingested before."""

from langchain_community.document_loaders import PyPDFLoader
from langchain_core.documents import Document
from pypdf import PdfReader, PdfWriter
from pypdf.constants import PageLabelStyle

from hyde_lc import NeighborExpandingRetriever, ingest_documents, ingest_paths, open_store
from hyde_lc.answer import citation
from hyde_lc.store.collection import HybridCollection
from tests.fakes import FakeEmbeddings, FixedHits, chroma_of, long_text, make_pdf


def labelled_pdf(tmp_path):
    """Two front-matter pages numbered i, ii, then the body from 1 (as books are)."""
    plain = make_pdf(tmp_path / "plain.pdf", [long_text(2, f"p{n}") for n in range(4)])
    writer = PdfWriter(clone_from=PdfReader(plain))
    writer.set_page_label(0, 1, style=PageLabelStyle.LOWERCASE_ROMAN)
    writer.set_page_label(2, 3, style=PageLabelStyle.DECIMAL)
    path = tmp_path / "book.pdf"
    writer.write(path)
    return path


def test_ingested_pages_follow_pypdfloader_and_cite_the_printed_label(tmp_path):
    pdf = labelled_pdf(tmp_path)
    store = open_store(tmp_path / "store", embeddings=FakeEmbeddings(size=32))
    ingest_paths([pdf], store, chunk_size=300, chunk_overlap=0, progress=False)
    loaded = {d.metadata["page"]: d.metadata["page_label"] for d in PyPDFLoader(str(pdf)).load()}
    assert loaded == {0: "i", 1: "ii", 2: "1", 3: "2"}
    chunks = list(chroma_of(store).iter_chunks())
    for chunk in chunks:  # the same numbers LangChain's loader gives the page
        assert chunk.metadata["page_label"] == loaded[chunk.metadata["page"]]
        assert chunk.metadata["page_label_end"] == loaded[chunk.metadata["page_end"]]
    first_body = min(
        (c for c in chunks if c.metadata["page"] == 2), key=lambda c: c.metadata["start_index"]
    )
    assert citation(first_body) == "book.pdf, p. 1"
    front = next(c for c in chunks if c.metadata["page"] == 0)
    assert citation(front).endswith(", p. i") or citation(front).endswith("pp. i-ii")


def test_a_collection_ingested_before_labels_still_cites_its_pages(tmp_path):
    """Chunks written when page counted from 1 (no page_label) keep their citations."""
    store = open_store(tmp_path / "store", embeddings=FakeEmbeddings(size=32))
    ingest_paths(
        [make_pdf(tmp_path / "a.pdf", [long_text(2, "x"), long_text(2, "y")])],
        store,
        chunk_size=200,
        chunk_overlap=0,
        progress=False,
    )
    # rewrite the chunks as the earlier ingestion stored them: 1-based, no labels
    got = store._collection.get(include=["metadatas", "documents", "embeddings"])
    old = []
    for meta in got["metadatas"]:
        meta = {k: v for k, v in meta.items() if not k.startswith("page_label")}
        meta["page"], meta["page_end"] = meta["page"] + 1, meta["page_end"] + 1
        old.append(meta)
    with HybridCollection.of(store).writing() as write:
        write.delete(got["ids"])  # Chroma merges metadata on upsert: written anew
        write.upsert(got["ids"], got["embeddings"], old, got["documents"])
    assert not any("page_label" in m for m in store.get()["metadatas"])
    chunks = sorted(chroma_of(store).iter_chunks(), key=lambda c: c.metadata["chunk_index"])
    assert citation(chunks[0]) == "a.pdf, p. 1"
    last = chunks[-1]
    assert citation(last).endswith("p. 2")
    # windows over old chunks cite them the same way
    hit = chunks[-1]
    wide = NeighborExpandingRetriever(base_retriever=FixedHits(hits=[hit]), vectorstore=store)
    (window,) = wide.invoke("q", k=1)
    assert "page_label" not in window.metadata and citation(window).endswith(("p. 2", "pp. 1-2"))


def test_documents_from_a_loader_without_labels_get_one_from_their_page(tmp_path):
    store = open_store(tmp_path / "store", embeddings=FakeEmbeddings(size=32))
    docs = [
        Document("first page text", metadata={"source": "r.pdf", "page": 0}),
        Document("labelled already", metadata={"source": "r.pdf", "page": 1, "page_label": "B"}),
    ]
    ingest_documents(docs, store)
    cited = sorted(citation(d) for d in chroma_of(store).iter_chunks())
    assert cited == ["r.pdf, p. 1", "r.pdf, p. B"]
