"""LexicalSearch over a user's own store: ids found for the user, and a store that changes."""

import logging

import chromadb
import pytest
from langchain_chroma import Chroma
from langchain_community.docstore.in_memory import InMemoryDocstore
from langchain_community.vectorstores import FAISS
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore

import hyde_lc.search.lexical
from hyde_lc import HyDERetriever, LexicalSearch
from hyde_lc.errors import InvalidSettingError
from hyde_lc.store.lexical_index import lexical_query
from tests.fakes import FakeEmbeddings

TEXTS = {
    "keeper": "The keeper wound the clockwork that turned the lens every night.",
    "fog": "Fog signals sounded a horn when the light could not be seen.",
    "oil": "Colza oil and later paraffin fuelled the lamps of the towers.",
}


def docs() -> list[Document]:
    """The texts as a loader gives them: metadata, no ids."""
    return [Document(t, metadata={"source": f"{n}.txt"}) for n, t in TEXTS.items()]


def found(lexical: LexicalSearch, words: str) -> list[str]:
    return [hit[0] for hit in lexical.search(lexical_query(words), k=3)]


@pytest.fixture
def warnings_once(monkeypatch, caplog):
    monkeypatch.setattr(hyde_lc.search.lexical, "_WARNED", set())
    with caplog.at_level(logging.WARNING, logger="hyde_lc.search.lexical"):
        yield lambda: [r.getMessage() for r in caplog.records if r.name == "hyde_lc.search.lexical"]


def test_documents_without_ids_get_the_ids_the_in_memory_store_gave_them():
    store = InMemoryVectorStore(FakeEmbeddings(size=32))
    ids = store.add_documents(docs())  # the store makes uuids; the Documents stay id-less
    lexical = LexicalSearch.from_documents(store, docs())
    assert found(lexical, "clockwork") == [ids[0]]
    retriever = HyDERetriever(vectorstore=store, n_hypotheses=0, k=1, lexical=lexical)
    result = retriever.retrieve_with_details("clockwork")
    assert result.lexical and result.documents[0].id == ids[0]


def faiss_without_the_faiss_package(embeddings) -> FAISS:
    """LangChain's real FAISS store, its docstore filled as FAISS.add_documents fills it.

    The vector index itself (the faiss package) is not needed to list or read chunks.
    """
    held = {f"uuid-{i}": Document(d.page_content, metadata=d.metadata, id=f"uuid-{i}")
            for i, d in enumerate(docs())}  # fmt: skip
    return FAISS(
        embedding_function=embeddings,
        index=None,
        docstore=InMemoryDocstore(held),
        index_to_docstore_id=dict(enumerate(held)),
    )


def test_a_faiss_store_gives_its_ids_and_its_chunks():
    store = faiss_without_the_faiss_package(FakeEmbeddings(size=32))
    assert found(LexicalSearch.from_documents(store, docs()), "horn") == ["uuid-1"]
    assert found(LexicalSearch.from_store(store), "paraffin") == ["uuid-2"]


def test_the_real_faiss_store_end_to_end():
    pytest.importorskip("faiss")
    embeddings = FakeEmbeddings(size=32)
    store = FAISS.from_documents(docs(), embeddings)
    lexical = LexicalSearch.from_documents(store, docs())
    retriever = HyDERetriever(vectorstore=store, n_hypotheses=0, k=1, lexical=lexical)
    assert retriever.invoke("paraffin colza")[0].metadata["source"] == "oil.txt"


def test_documents_the_store_does_not_hold_are_refused_saying_what_to_do():
    store = InMemoryVectorStore(FakeEmbeddings(size=32))
    store.add_documents(docs()[:2])
    with pytest.raises(InvalidSettingError, match=r"1 of the 3 Documents .* add them to the store"):
        LexicalSearch.from_documents(store, docs())


def test_a_store_that_cannot_be_listed_names_the_ids_to_pass():
    class Opaque(VectorStore):
        """A store with no way to list what it holds (as many hosted stores)."""

        def similarity_search(self, query, k=4, **kwargs):
            return []

        @classmethod
        def from_texts(cls, texts, embedding, metadatas=None, **kwargs):
            return cls()

    with pytest.raises(InvalidSettingError, match=r"ids = store.add_documents\(docs\)"):
        LexicalSearch.from_documents(Opaque(), docs())
    with pytest.raises(InvalidSettingError, match="cannot list the chunks of a Opaque"):
        LexicalSearch.from_store(Opaque())


def test_an_index_of_chosen_documents_says_when_the_store_changed(warnings_once):
    store = InMemoryVectorStore(FakeEmbeddings(size=32))
    store.add_documents(docs(), ids=list(TEXTS))
    lexical = LexicalSearch.from_documents(store, store.get_by_ids(list(TEXTS)))
    retriever = HyDERetriever(vectorstore=store, n_hypotheses=0, k=2, lexical=lexical)
    assert not lexical.stale
    assert all("lexical_note" not in d.metadata for d in retriever.invoke("horn"))
    store.add_documents([Document("A siren replaced the horn.", id="siren")])
    for _ in range(2):
        assert found(lexical, "siren") == []  # not indexed: only the dense side finds it
    assert lexical.stale
    # ... and the results say so, not only the log
    assert all(".refresh()" in d.metadata["lexical_note"] for d in retriever.invoke("siren"))
    (warning,) = warnings_once()  # once per change, not once per search
    assert "holds 4 chunks, 3 when" in warning and ".refresh()" in warning
    lexical.refresh()
    assert found(lexical, "siren") == ["siren"] and not lexical.stale


def test_an_index_from_the_store_follows_it(warnings_once):
    store = InMemoryVectorStore(FakeEmbeddings(size=32))
    store.add_documents(docs(), ids=list(TEXTS))
    lexical = LexicalSearch.from_store(store)
    retriever = HyDERetriever(vectorstore=store, n_hypotheses=0, k=1, lexical=lexical)
    store.add_documents([Document("A siren replaced the horn.", id="siren")])
    top = retriever.invoke("siren")[0]
    assert top.id == "siren" and "lexical" in top.metadata["found_by"]
    store.delete(["fog"])
    assert "fog" not in found(lexical, "horn")
    assert not lexical.stale and warnings_once() == []


def test_an_index_of_a_plain_chroma_collection_follows_it(tmp_path):
    embeddings = FakeEmbeddings(size=32)
    client = chromadb.PersistentClient(path=str(tmp_path / "theirs"))
    theirs = Chroma.from_documents(
        docs(), embeddings, ids=list(TEXTS), client=client, collection_name="theirs"
    )
    lexical = LexicalSearch.from_store(theirs)
    lexical.CHECK_INTERVAL_S = 0  # count at every search (default: once a second)
    theirs.add_documents([Document("A siren replaced the horn.", id="siren")])
    assert found(lexical, "siren") == ["siren"]
