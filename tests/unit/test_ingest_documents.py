"""ingest_documents: Documents from LangChain's loaders and splitters, into a hybrid collection."""

import pytest
from langchain_community.document_loaders import PyPDFLoader
from langchain_core.documents import Document
from langchain_text_splitters import RecursiveCharacterTextSplitter

from hyde_lc import HyDERetriever, ingest_documents
from hyde_lc.errors import IngestError
from hyde_lc.search.lexical import lexical_search_for
from hyde_lc.store.lexical_index import lexical_query
from hyde_lc.store.vectorstore import open_store
from tests.fakes import SAMPLE_PDF, FakeEmbeddings, ScriptedChat, chroma_of


class CountingEmbeddings(FakeEmbeddings):
    calls: int = 0

    def embed_documents(self, texts):
        object.__setattr__(self, "calls", self.calls + len(texts))
        return super().embed_documents(texts)


@pytest.fixture(scope="module")
def pdf_chunks() -> list[Document]:
    """The sample PDF as a LangChain user splits it: PyPDFLoader pages, then a splitter."""
    pages = PyPDFLoader(str(SAMPLE_PDF)).load()
    splitter = RecursiveCharacterTextSplitter(
        chunk_size=400, chunk_overlap=80, add_start_index=True
    )
    return splitter.split_documents(pages)


def test_splitter_output_is_stored_as_given_and_searchable_both_ways(tmp_path, pdf_chunks):
    store = open_store(tmp_path / "store", embeddings=FakeEmbeddings(size=32))
    report = ingest_documents(pdf_chunks, store)
    assert [(f.source, f.status, f.chunks) for f in report.files] == [
        (str(SAMPLE_PDF), "added", len(pdf_chunks))
    ]
    stored = {id_: meta for id_, meta in chroma_of(store).metadatas()}
    assert len(stored) == len(pdf_chunks)
    # the loader's and splitter's metadata, untouched: 0-based page, its label, start_index
    first = next(m for m in stored.values() if m["page"] == 0 and m["start_index"] == 0)
    assert first["page_label"] == "1" and first["source"] == str(SAMPLE_PDF)
    assert {m["total_pages"] for m in stored.values()} == {pdf_chunks[0].metadata["total_pages"]}
    # the BM25 side was written in the same step: an exact term finds its chunk
    lexical = lexical_search_for(store)
    assert lexical is not None
    fresnel = [d for d in pdf_chunks if "Fresnel" in d.page_content]
    hits = lexical.search(lexical_query("Fresnel"), k=3)
    assert hits and store.get_by_ids([hits[0][0]])[0].page_content in {
        d.page_content for d in fresnel
    }
    # and the retriever searches both sides of it
    retriever = HyDERetriever(vectorstore=store, hypothesis_llm=ScriptedChat(), n_hypotheses=0)
    result = retriever.retrieve_with_details("Fresnel lens")
    assert result.lexical and any("lexical" in d.metadata["found_by"] for d in result.documents)


def test_the_same_documents_again_embed_nothing_and_ids_are_stable(tmp_path, pdf_chunks):
    embeddings = CountingEmbeddings(size=32)
    store = open_store(tmp_path / "store", embeddings=embeddings)
    ingest_documents(pdf_chunks, store)
    ids = sorted(store.get()["ids"])
    calls = embeddings.calls
    again = ingest_documents([d.model_copy(deep=True) for d in pdf_chunks], store)
    assert [f.status for f in again.files] == ["unchanged"] and again.files[0].embedded == 0
    assert embeddings.calls == calls
    assert sorted(store.get()["ids"]) == ids


def test_a_source_is_replaced_by_what_the_call_brings(tmp_path):
    store = open_store(tmp_path / "store", embeddings=FakeEmbeddings(size=32))
    old = [Document(f"old part {i} about tides", metadata={"source": "a.txt"}) for i in range(3)]
    other = [Document("keepers and lamps", metadata={"source": "b.txt"})]
    ingest_documents(old + other, store)
    new = [Document("new text about fog horns", metadata={"source": "a.txt"})]
    report = ingest_documents(new, store)
    assert [(f.source, f.status) for f in report.files] == [("a.txt", "replaced")]
    texts = sorted(store.get()["documents"])
    assert texts == ["keepers and lamps", "new text about fog horns"]
    # the BM25 side forgot the replaced chunks too
    lexical = lexical_search_for(store)
    assert lexical is not None and lexical.search(lexical_query("tides"), k=5) == []
    # replace=False adds to a source instead
    ingest_documents(
        [Document("more on sirens", metadata={"source": "a.txt"})], store, replace=False
    )
    assert len(store.get(where={"source": "a.txt"})["ids"]) == 2


def test_given_ids_are_kept_and_a_changed_text_is_updated(tmp_path):
    store = open_store(tmp_path / "store", embeddings=FakeEmbeddings(size=32))
    ingest_documents([Document("first", id="c1", metadata={"source": "s", "draft": True})], store)
    report = ingest_documents([Document("second", id="c1", metadata={"source": "s"})], store)
    assert report.files[0].status == "replaced" and report.files[0].embedded == 1
    (doc,) = store.get_by_ids(["c1"])
    assert doc.page_content == "second" and doc.metadata == {"source": "s"}  # key dropped
    again = ingest_documents([Document("second", id="c1", metadata={"source": "s"})], store)
    assert again.files[0].status == "unchanged"


def test_bad_documents_fail_before_anything_is_written(tmp_path):
    folder = tmp_path / "store"
    store = open_store(folder, embeddings=FakeEmbeddings(size=32))
    good = Document("fine", metadata={"source": "a"})
    nested = Document("bad", metadata={"source": "a", "author": {"name": "x"}})
    with pytest.raises(IngestError, match=r"author=.*filter_complex_metadata"):
        ingest_documents([good, nested], store)
    clash = [Document("one", id="x"), Document("two", id="x")]
    with pytest.raises(IngestError, match="two different Documents have the id 'x'"):
        ingest_documents(clash, store)
    with pytest.raises(IngestError, match="takes LangChain Documents"):
        ingest_documents(["just a string"], store)  # type: ignore[list-item]
    assert not folder.exists()  # nothing created


def test_a_progress_bar_is_shown_by_default_as_for_files(tmp_path, capsys):
    store = open_store(tmp_path / "store", embeddings=FakeEmbeddings(size=32))
    ingest_documents([Document("lamps", metadata={"source": "a.txt"})], store)
    assert "embedding" in capsys.readouterr().err
    ingest_documents([Document("horns", metadata={"source": "b.txt"})], store, progress=False)
    assert "embedding" not in capsys.readouterr().err
