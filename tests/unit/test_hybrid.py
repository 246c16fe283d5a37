"""Hybrid retrieval: the collection's lexical index next to its vectors, kept current."""

import asyncio
import logging
import shutil
import threading
from typing import Any

import chromadb
import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore

from hyde_lc.ingest import ingest_paths
from hyde_lc.lexical import LexicalSearch, lexical_query, lexical_search_for
from hyde_lc.retriever import HyDERetriever
from hyde_lc.store import WRITING, collection_state, lexical_folder, open_store
from tests.fakes import FakeEmbeddings, ScriptedChat, long_text

TEXTS = {
    "lens.txt": "Augustin Fresnel designed a stepped lens of concentric prisms in 1822.",
    "keeper.txt": "Keepers trimmed wicks and wound the clockwork every night.",
    "fog.txt": "Fog signals used horns, bells and guns when the light could not be seen.",
    "bees.txt": "Bees pollinate flowers and make honey in their hives.",
    "yeast.txt": "Sourdough bread rises thanks to wild yeast and lactic bacteria.",
}


@pytest.fixture
def folder(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in TEXTS.items():
        (docs / name).write_text(text)
    return docs


@pytest.fixture
def store(tmp_path, folder, fake_embeddings):
    st = open_store(tmp_path / "store", embeddings=fake_embeddings)
    ingest_paths([folder], st, progress=False)
    return st


def names(docs):
    return [d.metadata["file_name"] for d in docs]


def test_an_exact_term_is_found_by_the_lexical_side(store):
    # Hash embeddings carry no meaning: only BM25 can find "clockwork".
    retriever = HyDERetriever(vectorstore=store, n_hypotheses=0, k=2)
    result = retriever.retrieve_with_details("who wound the clockwork")
    top = result.documents[0]
    assert top.metadata["file_name"] == "keeper.txt"
    assert "lexical" in top.metadata["found_by"] and top.metadata["lexical_score"] > 0
    assert result.lexical and result.label == "hybrid"
    scores = [d.metadata["score"] for d in result.documents]
    assert scores == sorted(scores, reverse=True)


def test_lexical_off_is_dense_only(store, fake_embeddings):
    dense = HyDERetriever(vectorstore=store, n_hypotheses=0, k=3, lexical="off")
    docs = dense.invoke("who wound the clockwork")
    direct = store.similarity_search_by_vector(
        fake_embeddings.embed_query("who wound the clockwork"), k=3
    )
    assert names(docs) == names(direct)
    assert dense.label == "standard" and "found_by" not in docs[0].metadata


def test_hypotheses_feed_the_lexical_query(store):
    writer = ScriptedChat(replies=["Bakers rely on sourdough starters full of yeast."])
    retriever = HyDERetriever(vectorstore=store, hypothesis_llm=writer, k=1)
    result = retriever.retrieve_with_details("what makes bread rise")
    assert names(result.documents) == ["yeast.txt"]
    assert result.label == "hybrid-hyde"


def test_the_search_filter_narrows_lexical_hits_too(store):
    retriever = HyDERetriever(
        vectorstore=store, n_hypotheses=0, k=3, search_kwargs={"filter": {"file_name": "bees.txt"}}
    )
    assert set(names(retriever.invoke("clockwork keepers honey"))) == {"bees.txt"}


def test_reingesting_a_changed_file_updates_the_index(store, folder):
    (folder / "fog.txt").write_text("Foghorns were replaced by electric diaphragm emitters.")
    ingest_paths([folder], store, progress=False)
    retriever = HyDERetriever(vectorstore=store, n_hypotheses=0, k=1)
    assert names(retriever.invoke("diaphragm emitters")) == ["fog.txt"]
    search = lexical_search_for(store)
    assert search is not None and not search.ensure_current()  # ingest left it current
    assert [i for i, _ in search.search(search_terms("bells guns"), k=5)] == []


def search_terms(text):
    return lexical_query(text)


def test_a_write_the_index_missed_is_caught_and_rebuilt(store, fake_embeddings):
    search = lexical_search_for(store)
    assert search is not None and not search.ensure_current()
    # Another program writes to the collection directly: the count changes.
    raw = chromadb.PersistentClient(path=str(store.location.path)).get_collection("hyde_lc")
    raw.add(
        ids=["outsider"],
        documents=["Lighthouse tenders carried supplies to remote stations."],
        embeddings=[fake_embeddings.embed_query("x")],
        metadatas=[{"source": "outsider", "file_name": "outsider"}],
    )
    fresh = open_store(store.location.path, embeddings=fake_embeddings)
    retriever = HyDERetriever(vectorstore=fresh, n_hypotheses=0, k=1)
    assert [d.id for d in retriever.invoke("tenders carried supplies")] == ["outsider"]


def test_a_writer_killed_mid_write_leaves_a_mark_that_forces_a_rebuild(store, fake_embeddings):
    from hyde_lc.store import renew_generation

    search = lexical_search_for(store)
    assert search is not None
    search.ensure_current()
    renew_generation(store, writing=True)  # a writer began... and died (no lock is held)
    generation, _ = collection_state(store)
    assert generation.startswith(WRITING)
    assert search.ensure_current()  # rebuilt, not trusted


def test_the_index_lives_beside_the_collection(store):
    folder = lexical_folder(store)
    assert folder is not None and folder.is_relative_to(store.location.path)


def test_a_store_without_an_index_searches_dense_only_and_says_so_once(caplog, fake_embeddings):
    store = InMemoryVectorStore(fake_embeddings)
    store.add_documents([Document(t, id=n) for n, t in TEXTS.items()])
    with caplog.at_level(logging.WARNING, logger="hyde_lc.lexical"):
        first = HyDERetriever(vectorstore=store, n_hypotheses=0, k=2)
        first.invoke("clockwork")
        HyDERetriever(vectorstore=store, n_hypotheses=0, k=2).invoke("clockwork")
    warnings = [r for r in caplog.records if "no lexical index" in r.getMessage()]
    assert len(warnings) <= 1 and first.label == "standard"


def test_a_lexical_side_can_be_built_from_any_store(fake_embeddings):
    store = InMemoryVectorStore(fake_embeddings)
    store.add_documents([Document(t, id=n) for n, t in TEXTS.items()])
    retriever = HyDERetriever(
        vectorstore=store, n_hypotheses=0, k=1, lexical=LexicalSearch.from_store(store)
    )
    result = retriever.retrieve_with_details("who wound the clockwork")
    assert [d.id for d in result.documents] == ["keeper.txt"] and result.label == "hybrid"


@pytest.mark.parametrize("pass_embeddings", [True, False])
def test_a_chroma_collection_built_without_hyde_lc_is_searched(tmp_path, pass_embeddings):
    embeddings = FakeEmbeddings(size=32)
    docs = [Document(t, id=n, metadata={"name": n}) for n, t in TEXTS.items()]
    client = chromadb.PersistentClient(path=str(tmp_path / "theirs"))
    Chroma.from_documents(docs, embeddings, client=client, collection_name="theirs")
    theirs = Chroma(
        client=client,
        collection_name="theirs",
        embedding_function=None if pass_embeddings else embeddings,
    )
    metadata_before = dict(theirs._collection.metadata or {})
    retriever = HyDERetriever(
        vectorstore=theirs,
        embeddings=embeddings if pass_embeddings else None,
        n_hypotheses=0,
        k=2,
        lexical=LexicalSearch.from_store(theirs),
    )
    assert retriever.invoke("who wound the clockwork")[0].id == "keeper.txt"
    assert dict(theirs._collection.metadata or {}) == metadata_before  # nothing written


# -- the index through every kind of write ---------------------------------------------------


def lexically_found(store, text: str, k: int = 10) -> set[str]:
    """file_name of the chunks the lexical side finds for ``text``, as a new reader sees it."""
    fresh = open_store(store.location.path, embeddings=store.embeddings)
    search = lexical_search_for(fresh)
    assert search is not None
    ids = [chunk_id for chunk_id, _ in search.search(lexical_query(text), k)]
    return {d.metadata["file_name"] for d in search.documents(ids)}


def test_a_replacement_of_the_same_size_is_indexed_and_the_old_text_is_gone(store, folder):
    # Same number of chunks before and after: only the generation can tell the index.
    (folder / "fog.txt").write_text("Foghorns were replaced by electric diaphragm emitters.")
    ingest_paths([folder], store, progress=False)
    assert lexically_found(store, "diaphragm emitters") == {"fog.txt"}
    assert lexically_found(store, "bells guns") == set()


def test_a_failure_after_the_new_version_became_searchable_leaves_an_index_of_it(
    tmp_path, fake_embeddings, monkeypatch
):
    import hyde_lc.ingest

    doc = tmp_path / "big.txt"
    doc.write_text(long_text(40, "old"))
    settings = {"chunk_size": 200, "chunk_overlap": 20, "max_write": 12}
    store = open_store(tmp_path / "store", embeddings=fake_embeddings)
    ingest_paths([doc], store, progress=False, **settings)
    doc.write_text(long_text(40, "new"))  # as many chunks: the count does not change

    def fail(*args, **kwargs):
        raise RuntimeError("the store went away")

    monkeypatch.setattr(hyde_lc.ingest, "delete_where", fail)  # removing the old version
    with pytest.raises(RuntimeError):
        ingest_paths([doc], store, progress=False, **settings)
    monkeypatch.undo()
    # The new version is what searches see now; so must the lexical side.
    assert lexically_found(store, "new17") == {"big.txt"}
    assert lexically_found(store, "old17") == set()
    retriever = HyDERetriever(vectorstore=store, n_hypotheses=0, k=1)
    assert "new17." in retriever.invoke("new17")[0].page_content


def test_chunks_deleted_through_the_store_leave_the_index(store):
    (keeper,) = store.get(where={"file_name": "keeper.txt"})["ids"]
    store.delete(ids=[keeper])
    assert lexically_found(store, "clockwork wicks") == set()
    retriever = HyDERetriever(vectorstore=store, n_hypotheses=0, k=5)
    assert "keeper.txt" not in names(retriever.invoke("clockwork wicks"))


def test_a_chunk_rewritten_through_the_store_is_indexed_anew(store):
    # A LangChain write through the hyde_lc store that keeps the count: an update in place.
    (fog,) = store.get(where={"file_name": "fog.txt"})["ids"]
    meta = store.get(ids=[fog])["metadatas"][0]
    store.update_document(fog, Document("Radio beacons replaced the fog signals.", metadata=meta))
    assert lexically_found(store, "radio beacons") == {"fog.txt"}
    assert lexically_found(store, "horns bells guns") == set()


def test_a_foreign_write_of_another_count_is_caught(store, fake_embeddings):
    # Another program adds to the collection: the visible count differs, the index is rebuilt.
    raw = chromadb.PersistentClient(path=str(store.location.path)).get_collection("hyde_lc")
    raw.add(
        ids=["outsider"],
        documents=["Lighthouse tenders carried supplies to remote stations."],
        embeddings=[fake_embeddings.embed_query("x")],
        metadatas=[{"source": "outsider", "file_name": "outsider"}],
    )
    assert lexically_found(store, "tenders supplies") == {"outsider"}
    raw.delete(ids=["outsider"])
    assert lexically_found(store, "tenders supplies") == set()


def test_a_reader_during_a_write_searches_the_index_as_it_is(store, folder):
    from hyde_lc.store import renew_generation, write_lock

    search = lexical_search_for(store)
    assert search is not None and not search.ensure_current()
    with write_lock(store):  # a writer at work (this process holds the lock)
        renew_generation(store, writing=True)
        assert not lexical_search_for(store).ensure_current()  # not rebuilt under the writer
        assert lexically_found(store, "clockwork") == {"keeper.txt"}
    # the writer is gone without finishing: the next reader rebuilds
    assert lexical_search_for(store).ensure_current()
    assert not lexical_search_for(store).ensure_current()  # and only once


def test_threads_searching_a_collection_whose_index_is_not_built_yet(tmp_path, folder):
    # The first searches build the index; threads that open it meanwhile must not clear it.
    from concurrent.futures import ThreadPoolExecutor

    store = open_store(tmp_path / "store", embeddings=FakeEmbeddings(size=32))
    ingest_paths([folder], store, progress=False)
    index = lexical_folder(store)
    assert index is not None
    shutil.rmtree(index)  # as a collection from before lexical indexes: nothing on disk yet
    retriever = HyDERetriever(vectorstore=store, n_hypotheses=0, k=1)

    def search(_: int) -> list[str]:
        fresh = HyDERetriever(vectorstore=store, n_hypotheses=0, k=1)
        return names(fresh.invoke("who wound the clockwork"))

    with ThreadPoolExecutor(8) as pool:
        found = list(pool.map(search, range(16)))
    assert found == [["keeper.txt"]] * 16
    assert names(retriever.invoke("sourdough yeast")) == ["yeast.txt"]


class Meeting:
    """Two sides of a search that each wait (10 s at most) until the other has started."""

    def __init__(self) -> None:
        self.started = {"dense": threading.Event(), "lexical": threading.Event()}
        self.missed: list[str] = []

    def arrive(self, side: str) -> None:
        self.started[side].set()
        other = "lexical" if side == "dense" else "dense"
        if not self.started[other].wait(10):
            self.missed.append(side)


class MeetingEmbeddings(FakeEmbeddings):
    """Embeddings whose query (or document) embedding meets the lexical search."""

    meeting: Any = None
    meet_on: str = "query"

    def embed_query(self, text: str) -> list[float]:
        if self.meet_on == "query":
            self.meeting.arrive("dense")
        return super().embed_query(text)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if self.meet_on == "documents":
            self.meeting.arrive("dense")
        return super().embed_documents(texts)


class MeetingLexical(LexicalSearch):
    def __init__(self, base: LexicalSearch, meeting: Meeting) -> None:
        super().__init__(base.vectorstore, base.index)
        self.meeting = meeting
        self.queries: list[set[str]] = []

    def search(self, weights, k, where=None):
        self.queries.append(set(weights))
        self.meeting.arrive("lexical")
        return super().search(weights, k, where)


@pytest.mark.parametrize("call", ["invoke", "ainvoke"])
@pytest.mark.parametrize("hypotheses", [0, 1])
def test_the_lexical_search_runs_while_the_dense_side_embeds(call, hypotheses):
    # The BM25 query needs only texts: it must not wait for the embeddings (of the question
    # in the default configuration, of the hypotheses with HyDE), nor they for it.
    docs = [Document(text, id=name) for name, text in TEXTS.items()]
    store = InMemoryVectorStore(FakeEmbeddings(size=32))
    store.add_documents(docs)
    meeting = Meeting()
    lexical = MeetingLexical(LexicalSearch.from_documents(store, docs), meeting)
    embeddings = MeetingEmbeddings(
        size=32, meeting=meeting, meet_on="documents" if hypotheses else "query"
    )
    retriever = HyDERetriever(
        vectorstore=store,
        embeddings=embeddings,
        lexical=lexical,
        n_hypotheses=hypotheses,
        hypothesis_llm=ScriptedChat(replies=["Wicks were trimmed by the keepers."]),
        k=2,
    )
    question = "who wound the clockwork"
    if call == "invoke":
        found = retriever.invoke(question)
    else:
        found = asyncio.run(retriever.ainvoke(question))
    assert meeting.missed == []
    assert found[0].id == "keeper.txt"
    (terms,) = lexical.queries
    assert ("wick" in terms) == bool(hypotheses)  # the hypothesis fed the lexical side


def test_a_failing_embedding_fails_the_hybrid_search(store):
    class Broken(FakeEmbeddings):
        def embed_query(self, text: str) -> list[float]:
            raise RuntimeError("embedding server down")

    retriever = HyDERetriever(vectorstore=store, embeddings=Broken(size=32), n_hypotheses=0)
    with pytest.raises(RuntimeError, match="embedding server down"):
        retriever.invoke("who wound the clockwork")


def test_a_chunk_gone_before_its_text_is_read_is_skipped_and_k_still_returned(store, monkeypatch):
    # The dense side returns ids only; texts are read afterwards. A chunk deleted in
    # between is left out, and the next ones in the ranking fill its place.
    from hyde_lc import store as store_module

    retriever = HyDERetriever(vectorstore=store, n_hypotheses=0, k=2)
    first = retriever.invoke("who wound the clockwork")
    gone = first[0].id
    real = store_module.documents_by_id

    def without_gone(st, ids, where=None):
        return [d for d in real(st, ids, where) if d.id != gone]

    monkeypatch.setattr(store_module, "documents_by_id", without_gone)
    again = retriever.invoke("who wound the clockwork")
    assert len(again) == 2 and gone not in {d.id for d in again}
    assert again[0].id == first[1].id
    assert all(d.page_content for d in again)


class SharedDocumentsStore(InMemoryVectorStore):
    """A store that hands out its own Document objects (as a cache in front of a store may)."""

    def __init__(self, embedding: Any) -> None:
        super().__init__(embedding)
        self.shared: dict[str, Document] = {}

    def similarity_search_with_score_by_vector(self, embedding, k=4, filter=None, **kwargs):
        found = super().similarity_search_with_score_by_vector(embedding, k, filter, **kwargs)
        return [(self.shared.setdefault(str(d.id), d), score) for d, score in found]


def test_hybrid_search_leaves_the_stores_own_documents_unchanged(fake_embeddings):
    store = SharedDocumentsStore(fake_embeddings)
    store.add_documents([Document(t, id=n, metadata={"name": n}) for n, t in TEXTS.items()])
    retriever = HyDERetriever(
        vectorstore=store, n_hypotheses=0, k=2, lexical=LexicalSearch.from_store(store)
    )
    first = retriever.invoke("who wound the clockwork")
    again = retriever.invoke("who wound the clockwork")
    assert store.shared and all(d.metadata == {"name": d.id} for d in store.shared.values())
    assert [d.id for d in first] == [d.id for d in again] and first[0].id == "keeper.txt"
    assert all({"score", "found_by", "dense_score"} <= set(d.metadata) for d in first)
    assert not any(d is s for d in first for s in store.shared.values())
