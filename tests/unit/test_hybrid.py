"""Hybrid retrieval: the collection's lexical index next to its vectors, kept current."""

import asyncio
import logging
import os
import shutil
import threading
from typing import Any

import chromadb
import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore

from hyde_lc.ingest.files import ingest_paths
from hyde_lc.retrievers.hyde import HyDERetriever
from hyde_lc.search.lexical import LexicalSearch, lexical_search_for
from hyde_lc.store.chroma_collection import META_HEAD, SEQ
from hyde_lc.store.collection import HybridCollection
from hyde_lc.store.lexical_index import LexicalIndex, lexical_query
from hyde_lc.store.vectorstore import open_store
from tests.fakes import FIVE_FILES, FakeEmbeddings, ScriptedChat, chroma_of, long_text, write_files

TEXTS = FIVE_FILES


@pytest.fixture
def folder(tmp_path):
    return write_files(tmp_path / "docs")


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
    assert_current(store)  # ingest left it current
    search = lexical_search_for(store)
    assert search is not None
    assert [i for i, _ in search.search(lexical_query("bells guns"), k=5)] == []


def head(store) -> int:
    return int(chroma_of(store).fresh_metadata().get(META_HEAD) or 0)


def assert_current(store) -> None:
    """The index holds the collection's last write and every chunk, without a catch-up."""
    hybrid = HybridCollection.of(store)
    index = hybrid._open_index()
    assert index is not None and index.cursor() == head(store)
    assert len(index) == store._collection.count()


def test_a_write_the_index_missed_is_caught_and_rebuilt(store, fake_embeddings):
    assert_current(store)
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


def test_a_write_killed_after_its_records_is_indexed_and_rolled_forward(store, fake_embeddings):
    # A writer wrote a chunk (stamped past the head) and was killed before the head moved.
    before = head(store)
    raw = chromadb.PersistentClient(path=str(store.location.path)).get_collection("hyde_lc")
    raw.add(
        ids=["orphan"],
        documents=["Lightships anchored where no tower could stand."],
        embeddings=[fake_embeddings.embed_query("x")],
        metadatas=[{"source": "orphan", "file_name": "orphan", SEQ: before + 1}],
    )
    # No write is under way (the store's lock is free): a new reader indexes it, as the
    # dense side already finds it.
    assert lexically_found(store, "lightships anchored") == {"orphan"}
    # The next write rolls it forward: the head passes it, and the index holds it.
    store.add_texts(["Tenders carried oil to the lights."], [{"file_name": "t"}], ids=["tender"])
    assert head(store) == before + 2
    assert lexically_found(store, "lightships anchored") == {"orphan"}
    assert_current(store)


def test_deletions_logged_by_a_killed_writer_are_finished_by_the_next(store):
    (keeper,) = store.get(where={"file_name": "keeper.txt"})["ids"]
    hybrid = HybridCollection.of(store)
    hybrid.log_deletions([keeper], head(store) + 1)  # logged, then killed before deleting
    # Chroma still holds it, and so does the lexical side (no false "deleted").
    assert lexically_found(store, "clockwork wicks") == {"keeper.txt"}
    store.add_texts(["Tenders carried oil to the lights."], [{"file_name": "t"}], ids=["tender"])
    assert store.get(ids=[keeper])["ids"] == []
    assert lexically_found(store, "clockwork wicks") == set()
    assert_current(store)


def test_langchain_writes_update_the_index_without_a_rebuild(store, caplog):
    with caplog.at_level(logging.INFO, logger="hyde_lc.store.collection"):
        for n in range(3):
            name = f"station-{n}"
            store.add_texts(
                [f"Signal station {n} flew storm cones."], [{"file_name": name}], ids=[name]
            )
            assert name in lexically_found(store, f"station {n} storm cones")  # a new reader
    assert_current(store)
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "building the lexical index" in m or "caught up" in m]


def test_the_index_lives_beside_the_collection(store):
    folder = HybridCollection.of(store).base
    assert folder is not None and folder.is_relative_to(store.location.path)


def test_a_store_without_an_index_searches_dense_only_and_says_so_once(caplog, fake_embeddings):
    store = InMemoryVectorStore(fake_embeddings)
    store.add_documents([Document(t, id=n) for n, t in TEXTS.items()])
    with caplog.at_level(logging.WARNING, logger="hyde_lc.search.lexical"):
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
    import hyde_lc.ingest.files

    doc = tmp_path / "big.txt"
    doc.write_text(long_text(40, "old"))
    settings = {"chunk_size": 200, "chunk_overlap": 20, "max_write": 12}
    store = open_store(tmp_path / "store", embeddings=fake_embeddings)
    ingest_paths([doc], store, progress=False, **settings)
    doc.write_text(long_text(40, "new"))  # as many chunks: the count does not change

    def fail(*args, **kwargs):
        raise RuntimeError("the store went away")

    monkeypatch.setattr(
        hyde_lc.ingest.files.Write, "delete_where", fail
    )  # removing the old version
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


def test_a_reader_during_a_write_finds_what_each_call_wrote_without_a_rebuild(
    store, fake_embeddings, caplog
):
    hybrid = HybridCollection.of(store)
    with caplog.at_level(logging.INFO, logger="hyde_lc.store.collection"):
        with hybrid.writing() as write:  # a writer at work (this process holds the lock)
            write.upsert(
                ["mid"],
                [fake_embeddings.embed_query("mid")],
                [{"source": "mid", "file_name": "mid"}],
                ["Clockwork mechanisms turned the lens."],
            )
            # One Chroma call is whole: another reader finds it on both sides at once.
            assert lexically_found(store, "clockwork") == {"keeper.txt", "mid"}
        assert lexically_found(store, "clockwork") == {"keeper.txt", "mid"}
    assert_current(store)
    assert not [r for r in caplog.records if "building" in r.getMessage()]


def test_threads_searching_a_collection_whose_index_is_not_built_yet(tmp_path, folder):
    # The first searches build the index; threads that open it meanwhile must not clear it.
    from concurrent.futures import ThreadPoolExecutor

    store = open_store(tmp_path / "store", embeddings=FakeEmbeddings(size=32))
    ingest_paths([folder], store, progress=False)
    index = HybridCollection.of(store).base
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
    retriever = HyDERetriever(vectorstore=store, n_hypotheses=0, k=2)
    first = retriever.invoke("who wound the clockwork")
    gone = first[0].id
    real = HybridCollection.documents

    def without_gone(self, ids):
        return [d for d in real(self, ids) if d.id != gone]

    monkeypatch.setattr(HybridCollection, "documents", without_gone)
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


# -- one search: two Chroma calls, filters inside the index -----------------------------------


class CallCounter:
    """Counts calls to chromadb's collection and client methods while active."""

    COLLECTION = ("query", "get", "count", "peek", "add", "upsert", "update", "delete", "modify")
    CLIENT = ("get_collection", "get_or_create_collection", "list_collections", "create_collection")

    def __init__(self, monkeypatch):
        from chromadb.api.client import Client
        from chromadb.api.models.Collection import Collection

        self.calls: list[str] = []
        self.active = False
        for cls, names in ((Collection, self.COLLECTION), (Client, self.CLIENT)):
            for name in names:
                monkeypatch.setattr(cls, name, self._counted(name, getattr(cls, name)))

    def _counted(self, name, method):
        def counted(*args, **kwargs):
            if self.active:
                self.calls.append(name)
            return method(*args, **kwargs)

        return counted


@pytest.mark.parametrize("call", ["invoke", "ainvoke"])
def test_a_warm_hybrid_query_makes_two_chroma_calls(store, monkeypatch, call):
    monkeypatch.setenv("HYDE_LC_REFRESH_INTERVAL", "60")
    counter = CallCounter(monkeypatch)
    retriever = HyDERetriever(vectorstore=store, n_hypotheses=0, k=2)
    run = (lambda q: asyncio.run(retriever.ainvoke(q))) if call == "ainvoke" else retriever.invoke
    run("who wound the clockwork")  # warm: the state is read once
    counter.active = True
    docs = run("who wound the clockwork")
    assert names(docs)[0] == "keeper.txt" and "lexical" in docs[0].metadata["found_by"]
    assert sorted(counter.calls) == ["get", "query"]


def test_the_state_is_read_again_once_the_refresh_interval_has_passed(store, monkeypatch):
    monkeypatch.setenv("HYDE_LC_REFRESH_INTERVAL", "0")
    counter = CallCounter(monkeypatch)
    retriever = HyDERetriever(vectorstore=store, n_hypotheses=0, k=2)
    retriever.invoke("who wound the clockwork")
    counter.active = True
    retriever.invoke("who wound the clockwork")
    # the dense query and the winners' read, plus the state read for this search (by each
    # side, at most); the chunk count is checked far less often
    assert counter.calls.count("query") == 1 and counter.calls.count("get") == 1
    assert 1 <= counter.calls.count("get_collection") <= 2 and "count" not in counter.calls


def test_a_bad_refresh_interval_is_refused_naming_the_variable(store, monkeypatch):
    from hyde_lc.errors import InvalidSettingError

    monkeypatch.setenv("HYDE_LC_REFRESH_INTERVAL", "soon")
    with pytest.raises(InvalidSettingError, match="HYDE_LC_REFRESH_INTERVAL"):
        HyDERetriever(vectorstore=store, n_hypotheses=0, k=2).invoke("clockwork")


def test_a_filtered_hybrid_search_finds_the_filtered_chunk_lexically(tmp_path, fake_embeddings):
    # 150 chunks say "beacon" more often than the one the filter keeps: it is far outside
    # the lexical top 100 of the whole collection, and must still be found by BM25.
    store = open_store(tmp_path / "store", embeddings=fake_embeddings)
    texts = [f"Beacon beacon beacon number {n} on the headland." for n in range(150)]
    metas = [{"file_name": f"noise-{n}.txt"} for n in range(150)]
    texts.append("Far down the coast, among many other things, stood one beacon. " * 4)
    metas.append({"file_name": "target.txt"})
    store.add_texts(texts, metas)
    retriever = HyDERetriever(
        vectorstore=store,
        n_hypotheses=0,
        k=3,
        search_kwargs={"filter": {"file_name": {"$in": ["target.txt"]}}},
    )
    (found,) = retriever.invoke("beacon")
    assert found.metadata["file_name"] == "target.txt"
    assert "lexical" in found.metadata["found_by"] and found.metadata["lexical_score"] > 0


def test_a_filter_the_lexical_side_cannot_apply_is_refused_when_the_retriever_is_made(store):
    from hyde_lc.errors import InvalidSettingError
    from hyde_lc.search.lexical import lexical_search_for
    from hyde_lc.store.lexical_index import lexical_query

    where = {"page": {"$gt": 1}}
    with pytest.raises(InvalidSettingError, match="lexical='off'") as made:
        HyDERetriever(vectorstore=store, n_hypotheses=0, k=2, search_kwargs={"filter": where})
    side = lexical_search_for(store)
    assert side is not None
    with pytest.raises(InvalidSettingError) as searched:
        side.search(lexical_query("clockwork"), 2, where)
    assert str(made.value).endswith(str(searched.value))  # the message a search gives
    retriever = HyDERetriever(vectorstore=store, n_hypotheses=0, k=2)
    with pytest.raises(InvalidSettingError, match=r"operator \$gt"):
        retriever.search_kwargs = {"filter": where}
    dense = HyDERetriever(
        vectorstore=store,
        n_hypotheses=0,
        k=2,
        lexical="off",
        search_kwargs={"filter": {"page": {"$gt": 1}}},
    )
    dense.invoke("clockwork")  # dense only takes it


def test_an_index_of_an_older_layout_is_replaced_by_a_new_one(store):
    base = HybridCollection.of(store).base
    shutil.rmtree(base)
    base.mkdir()
    (base / "meta.json").write_text("{}")  # an index kept directly in the folder
    (base / "hyde_lc_lexical.json").write_text('{"format": 2, "generation": "x"}')
    assert lexically_found(store, "clockwork") == {"keeper.txt"}
    assert not (base / "meta.json").exists()
    assert_current(store)


def test_an_index_older_than_the_feed_keeps_is_rebuilt_not_caught_up(store, monkeypatch):
    import hyde_lc.store.collection as hc

    monkeypatch.setattr(hc, "FEED_TRIM_EVERY", 1)
    monkeypatch.setattr(hc, "FEED_KEEP_WRITES", 1)
    (keeper,) = store.get(where={"file_name": "keeper.txt"})["ids"]
    # Another client's index, left at the current head, misses the next two writes.
    other = open_store(store.location.path, embeddings=store.embeddings)
    stale = HybridCollection.of(other)
    assert stale.sync(max_age=0) is not None
    store.delete(ids=[keeper])
    store.add_texts(["Tenders carried oil to the lights."], [{"file_name": "t"}], ids=["tender"])
    feed = HybridCollection.of(store).feed(create=False)
    assert feed.get(include=[])["ids"] == []  # the deletion's record was trimmed away
    index = stale._open_index()
    index.mark(index.cursor() - 1)  # as if this client's own index were that far behind
    assert lexically_found(other, "clockwork wicks") == set()  # rebuilt: the deletion holds
    assert_current(other)


def test_a_damaged_index_segment_is_rebuilt_and_searched(store):
    base = HybridCollection.of(store).base
    current = base / (base / "CURRENT").read_text().strip()
    for segment in current.glob("*.store"):
        # Damaged as the next process finds it: an empty file under the segment's name.
        # (Cut short in place, a file this process has memory-mapped would crash it with
        # SIGBUS on the next read, as it would any mmap reader: replaced, the old mapping
        # keeps its pages.)
        empty = segment.with_suffix(".empty")
        empty.write_bytes(b"")
        os.replace(empty, segment)
    assert lexically_found(store, "clockwork") == {"keeper.txt"}
    assert_current(store)


def test_an_index_that_cannot_be_written_leaves_the_search_dense_only_and_says_so(
    store, monkeypatch, caplog
):
    import hyde_lc.store.collection as hc

    shutil.rmtree(HybridCollection.of(store).base)  # must be rebuilt, and cannot be

    def no_space(self):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(hc.HybridCollection, "rebuild", no_space)
    retriever = HyDERetriever(vectorstore=store, n_hypotheses=0, k=2)
    with caplog.at_level(logging.WARNING, logger="hyde_lc.store.collection"):
        docs = retriever.invoke("who wound the clockwork")
        retriever.invoke("who wound the clockwork")
    assert len(docs) == 2 and all(d.metadata["found_by"] == ["dense"] for d in docs)
    warnings = [r.getMessage() for r in caplog.records if "dense only" in r.getMessage()]
    assert len(warnings) == 1 and "No space left" in warnings[0]


def test_the_head_never_moves_back(store):

    before = head(store)
    chroma_of(store).set_head(before - 1)  # a second writer that took an older number
    assert head(store) == before


def test_repeated_ids_are_read_once(store):
    (keeper,) = store.get(where={"file_name": "keeper.txt"})["ids"]
    search = lexical_search_for(store)
    assert [d.id for d in search.documents([keeper, keeper])] == [keeper]


def test_a_reader_with_an_old_state_never_returns_part_of_a_document_begun_since(
    store, fake_embeddings, monkeypatch
):
    import hyde_lc.store.collection as hc

    monkeypatch.setenv("HYDE_LC_REFRESH_INTERVAL", "60")
    hybrid = HybridCollection.of(store)
    old = hybrid.snapshot()  # this reader's state, read before the write began
    with hybrid.writing() as write:  # another writer, written in parts: pending meanwhile
        write.set_pending(add=["big-v2"])
        write.upsert(
            ["part-1"],
            [fake_embeddings.embed_query("part")],
            [{"source": "big", "file_name": "big", "doc_version": "big-v2"}],
            ["Quartzite breakwaters sheltered the harbour."],
        )
        hc._SNAPSHOTS[hybrid._key] = old  # as a reader in another process still has it
        search = lexical_search_for(store)
        hits = search.search(lexical_query("quartzite breakwaters"), k=5)
        assert search.documents([i for i, _ in hits]) == []
        retriever = HyDERetriever(vectorstore=store, n_hypotheses=0, k=8)
        assert "big" not in names(retriever.invoke("quartzite breakwaters"))
        write.set_pending(remove=["big-v2"])
    assert "big" in names(retriever.invoke("quartzite breakwaters"))


def test_a_killed_replacement_of_the_same_size_is_indexed_by_the_next_reader(
    store, fake_embeddings
):
    from hyde_lc.store.chroma_collection import META_WRITING

    (fog,) = store.get(where={"file_name": "fog.txt"})["ids"]
    seq = head(store) + 1
    # A writer marks its write, replaces one chunk by another (same count), is killed.
    chroma_of(store).set_value(META_WRITING, seq)
    raw = chromadb.PersistentClient(path=str(store.location.path)).get_collection("hyde_lc")
    raw.add(
        ids=["fog-v2"],
        documents=["Radio beacons replaced the fog signals."],
        embeddings=[fake_embeddings.embed_query("x")],
        metadatas=[{"source": "fog", "file_name": "fog.txt", SEQ: seq}],
    )
    HybridCollection.of(store).log_deletions([fog], seq)
    raw.delete(ids=[fog])
    assert lexically_found(store, "radio beacons") == {"fog.txt"}
    assert lexically_found(store, "horns bells guns") == set()
    # The next write, even one that changes nothing, finishes it: the head passes it.
    with HybridCollection.of(store).writing():
        pass
    assert head(store) == seq + 1 and META_WRITING not in chroma_of(store).fresh_metadata()
    assert_current(store)


def test_an_index_that_fails_to_take_a_change_is_rebuilt(store, monkeypatch):
    from hyde_lc.store.lexical_index import LexicalIndex

    real = LexicalIndex.apply
    calls = []

    def fails_once(self, added, deleted):
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("FileAlreadyExists: a kill left this commit's delete file")
        return real(self, added, deleted)

    monkeypatch.setattr(LexicalIndex, "apply", fails_once)
    store.add_texts(["Tenders carried oil to the lights."], [{"file_name": "t"}], ids=["tender"])
    monkeypatch.undo()
    assert lexically_found(store, "tenders oil") == {"t"}
    assert_current(store)


def test_a_chunk_a_killed_write_deleted_and_wrote_again_is_kept_by_the_roll_forward(
    store, fake_embeddings
):
    (keeper,) = store.get(where={"file_name": "keeper.txt"})["ids"]
    seq = head(store) + 1
    hybrid = HybridCollection.of(store)
    hybrid.log_deletions([keeper], seq)  # the killed write deleted it...
    raw = chromadb.PersistentClient(path=str(store.location.path)).get_collection("hyde_lc")
    raw.upsert(  # ...and wrote it again, then was killed
        ids=[keeper],
        documents=["Keepers wound the clockwork and polished the brass."],
        embeddings=[fake_embeddings.embed_query("x")],
        metadatas=[{"source": "keeper", "file_name": "keeper.txt", SEQ: seq}],
    )
    with hybrid.writing():  # the next write rolls it forward
        pass
    assert store.get(ids=[keeper])["ids"] == [keeper]
    assert lexically_found(store, "polished brass") == {"keeper.txt"}


def test_a_warm_search_does_not_reload_the_bm25_index(store, monkeypatch):
    """The index in use is searched as it is; reading it again is the refresh's job."""
    monkeypatch.setenv("HYDE_LC_REFRESH_INTERVAL", "60")  # no state refresh in between
    retriever = HyDERetriever(vectorstore=store, n_hypotheses=0, k=2)
    retriever.invoke("who wound the clockwork")  # warm
    reloads = []
    monkeypatch.setattr(LexicalIndex, "reload", lambda self: reloads.append(self))
    monkeypatch.setattr(LexicalIndex, "__len__", lambda self: reloads.append(self) or 0)
    for _ in range(3):
        assert retriever.invoke("who wound the clockwork")
    assert reloads == []
