"""NeighborExpandingRetriever: windows of neighbouring chunks around each hit, from any store."""

import itertools
import logging
import re

import chromadb
import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore

import hyde_lc.retrievers.neighbors
from hyde_lc.errors import InvalidSettingError
from hyde_lc.ingest.files import ingest_paths, load_document
from hyde_lc.retrievers.hyde import HyDERetriever
from hyde_lc.retrievers.neighbors import NeighborExpandingRetriever, join_chunks, trim_to_budget
from hyde_lc.store.vectorstore import open_store
from tests.fakes import FakeEmbeddings, FixedHits, RunRecorder, ScriptedChat, chroma_of, unique_text


@pytest.fixture
def corpus(tmp_path, fake_embeddings):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.txt").write_text(unique_text("alpha", 12))
    (folder / "b.txt").write_text(unique_text("beta", 4))
    store = open_store(tmp_path / "store", embeddings=fake_embeddings)
    ingest_paths([folder], store, chunk_size=120, chunk_overlap=40, progress=False)
    chunks: dict[tuple[str, int], Document] = {}
    got = store._collection.get(include=["documents", "metadatas"])
    for id_, text, meta in zip(got["ids"], got["documents"], got["metadatas"], strict=True):
        chunks[(meta["file_name"], meta["chunk_index"])] = Document(
            text, metadata={**meta, "score": 1.0}, id=id_
        )
    texts = {name: load_document(folder / name).text for name in ("a.txt", "b.txt")}
    return store, chunks, texts


def hits(chunks, *keys, score=None):
    out = []
    for rank, key in enumerate(keys):
        doc = chunks[key].model_copy(deep=True)
        doc.metadata["score"] = score or 1.0 - rank / 100
        out.append(doc)
    return out


def expander(store, chunks, *keys, **kwargs):
    return NeighborExpandingRetriever(
        base_retriever=FixedHits(hits=hits(chunks, *keys)), vectorstore=store, **kwargs
    )


def span_text(chunks, texts, name, lo, hi):
    start = chunks[(name, lo)].metadata["start_index"]
    end = chunks[(name, hi)].metadata["start_index"] + len(chunks[(name, hi)].page_content)
    return texts[name][start:end]


def test_window_text_is_the_document_text_over_the_span(corpus):
    store, chunks, texts = corpus

    def end(i):
        return chunks[("a.txt", i)].metadata["start_index"] + len(chunks[("a.txt", i)].page_content)

    # a hit whose neighbours overlap it on both sides, so overlap removal is exercised
    hit = next(
        i
        for i in range(1, 20)
        if chunks[("a.txt", i)].metadata["start_index"] < end(i - 1)
        and chunks[("a.txt", i + 1)].metadata["start_index"] < end(i)
    )
    (doc,) = expander(store, chunks, ("a.txt", hit), k=1).invoke("q")
    assert doc.page_content == span_text(chunks, texts, "a.txt", hit - 1, hit + 1)
    meta = doc.metadata
    assert (meta["hit_chunk_index"], meta["window_start"], meta["window_end"]) == (
        hit,
        hit - 1,
        hit + 1,
    )
    assert meta["start_index"] == chunks[("a.txt", hit - 1)].metadata["start_index"]
    assert meta["pages"] == [0] and meta["page_label"] == "1" and meta["score"] == 1.0


def test_windows_stop_at_the_documents_edges(corpus):
    store, chunks, _texts = corpus
    last = chunks[("b.txt", 0)].metadata["chunk_count"] - 1
    first_doc, last_doc = expander(
        store, chunks, ("b.txt", 0), ("b.txt", last), k=2, window=2
    ).invoke("q")
    assert (first_doc.metadata["window_start"], first_doc.metadata["window_end"]) == (0, 2)
    assert (last_doc.metadata["window_start"], last_doc.metadata["window_end"]) == (last - 2, last)
    assert "alpha" not in first_doc.page_content + last_doc.page_content


def test_overlapping_hits_merge_and_the_result_is_topped_up_to_k(corpus):
    store, chunks, texts = corpus
    keys = [("a.txt", 5), ("a.txt", 6), ("a.txt", 8), ("a.txt", 20), ("b.txt", 4), ("a.txt", 27)]
    docs = expander(store, chunks, *keys, k=3).invoke("q")
    assert len(docs) == 3
    merged = docs[0].metadata
    assert merged["hit_chunk_indexes"] == [5, 6, 8]  # 4-6, 5-7 and 7-9 overlap or touch
    assert (merged["window_start"], merged["window_end"]) == (4, 9)
    assert merged["score"] == pytest.approx(1.0)  # the best hit's
    assert docs[0].page_content == span_text(chunks, texts, "a.txt", 4, 9)
    assert [(d.metadata["file_name"], d.metadata["hit_chunk_index"]) for d in docs[1:]] == [
        ("a.txt", 20),
        ("b.txt", 4),
    ]


def test_no_text_appears_twice(corpus):
    store, chunks, _ = corpus
    keys = [("a.txt", i) for i in (3, 5, 11, 13, 16)]
    docs = expander(store, chunks, *keys, k=5).invoke("q")
    ranges = sorted((d.metadata["window_start"], d.metadata["window_end"]) for d in docs)
    for (_, end), (start, _) in itertools.pairwise(ranges):
        assert start > end
    sentences = [s for d in docs for s in d.page_content.split(". ") if len(s) > 40]
    assert len(sentences) == len(set(sentences))


def test_asymmetric_window_and_document_order(corpus):
    store, chunks, _ = corpus
    docs = expander(
        store, chunks, ("a.txt", 20), ("a.txt", 3), k=2, before=0, after=2, order="document"
    ).invoke("q")
    assert [(d.metadata["window_start"], d.metadata["window_end"]) for d in docs] == [
        (3, 5),
        (20, 22),
    ]


def test_max_chars_keeps_the_hit_and_fits_the_budget(corpus):
    store, chunks, _ = corpus
    hit_text = chunks[("a.txt", 10)].page_content
    (doc,) = expander(store, chunks, ("a.txt", 10), k=1, window=3, max_chars=450).invoke("q")
    assert len(doc.page_content) <= 450 and hit_text in doc.page_content
    assert doc.metadata["window_start"] <= 10 <= doc.metadata["window_end"]
    assert doc.metadata["window_end"] - doc.metadata["window_start"] < 6


@pytest.mark.parametrize("collection", ["current", "older"])
def test_neighbours_come_from_one_read(corpus, monkeypatch, collection):
    store, chunks, _ = corpus
    keys = [("a.txt", 2), ("b.txt", 5), ("a.txt", 15)]
    found = hits(chunks, *keys)
    if collection == "older":  # ingested before chunk_size/overlap were stored: no ids
        for doc in found:
            del doc.metadata["chunk_size"], doc.metadata["chunk_overlap"]
    calls = []
    original = type(store._collection).get

    def spy(self, *args, **kwargs):
        calls.append(kwargs)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(type(store._collection), "get", spy)
    base = FixedHits(hits=found)
    docs = NeighborExpandingRetriever(base_retriever=base, vectorstore=store, k=3).invoke("q")
    assert len(calls) == 1
    if collection == "current":  # read by id: exactly the windows' chunks
        assert "where" not in calls[0] and len(calls[0]["ids"]) == 9
    else:  # documents x indexes (a superset); each window keeps only its span
        assert "ids" not in calls[0] and calls[0]["where"]
    spans = [
        (d.metadata["file_name"], d.metadata["window_start"], d.metadata["window_end"])
        for d in docs
    ]
    assert spans == [("a.txt", 1, 3), ("b.txt", 4, 6), ("a.txt", 14, 16)]
    expected = [chunks[("a.txt", 1)], chunks[("a.txt", 2)], chunks[("a.txt", 3)]]
    assert docs[0].page_content == join_chunks(expected)


async def test_k_per_call_and_async(corpus):
    store, chunks, _ = corpus
    retriever = expander(store, chunks, *[("a.txt", i) for i in (2, 10, 18, 26)], k=3)
    assert len(retriever.invoke("q", k=2)) == 2
    assert [d.id for d in await retriever.ainvoke("q")] == [d.id for d in retriever.invoke("q")]


def test_hyde_base_and_inferred_store(corpus):
    store, _, _ = corpus
    hyde = HyDERetriever(vectorstore=store, hypothesis_llm=ScriptedChat())
    wide = NeighborExpandingRetriever(base_retriever=hyde, k=2)
    assert wide.vectorstore is store
    docs = wide.invoke("keeper lamp")
    assert len(docs) == 2 and all(d.metadata["retrieval_mode"] == hyde.label for d in docs)
    assert all(d.metadata["window_end"] > d.metadata["window_start"] for d in docs)


def test_hits_without_chunk_metadata_come_back_as_found_saying_why(corpus):
    store, _, _ = corpus
    hit = Document("no metadata here", metadata={"source": "x"})
    bare = FixedHits(hits=[hit])
    (doc,) = NeighborExpandingRetriever(base_retriever=bare, vectorstore=store).invoke("q")
    assert doc.page_content == hit.page_content and "window_start" not in doc.metadata
    assert "lacks chunk_index, start_index" in doc.metadata["neighbors_note"]
    assert "add_start_index=True" in doc.metadata["neighbors_note"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"vectorstore": None}, "pass vectorstore"),
        ({"k": 0}, "k must be a whole number of at least 1"),
        ({"window": -1}, "window must be 0 or more"),
        ({"before": -1}, "before must be 0 or more"),
        ({"after": -2}, "after must be 0 or more"),
        ({"candidates": 0}, "candidates must be at least 1"),
        ({"max_chars": 0}, "max_chars must be at least 1"),
        ({"order": "random"}, "order"),
    ],
)
def test_settings_are_validated(corpus, options, message):
    store, _, _ = corpus
    settings = {"base_retriever": FixedHits(hits=[]), "vectorstore": store, **options}
    with pytest.raises(InvalidSettingError, match=message):
        NeighborExpandingRetriever(**settings)


async def test_k_is_checked_per_call(corpus):
    store, chunks, _ = corpus
    retriever = expander(store, chunks, ("a.txt", 2))
    with pytest.raises(InvalidSettingError, match="k must be a whole number"):
        retriever.invoke("q", k=0)
    with pytest.raises(InvalidSettingError, match="k must be a whole number"):
        await retriever.aretrieve_with_details("q", k=-1)


def test_join_chunks_restores_dropped_whitespace():
    parts = [
        Document("abc def", metadata={"start_index": 0}),
        Document("ghi", metadata={"start_index": 9, "gap_before": "\n\n"}),
        Document("hi jk", metadata={"start_index": 10}),
    ]
    assert join_chunks(parts) == "abc def\n\nghi jk"


def test_gap_metadata_rebuilds_the_whole_document(corpus):
    store, _, texts = corpus
    metas = sorted(
        (m for _, m in chroma_of(store).metadatas() if m["file_name"] == "b.txt"),
        key=lambda m: m["chunk_index"],
    )
    got = store._collection.get(where={"file_name": "b.txt"}, include=["documents", "metadatas"])
    by_index = {
        m["chunk_index"]: Document(t, metadata=m)
        for t, m in zip(got["documents"], got["metadatas"], strict=True)
    }
    rebuilt = join_chunks([by_index[m["chunk_index"]] for m in metas])
    assert rebuilt == texts["b.txt"].strip()


def test_clustered_hits_make_the_base_fetch_more_until_k_windows(corpus):
    store, chunks, _ = corpus
    clustered = [("a.txt", i) for i in range(2, 14)] + [("b.txt", 3), ("a.txt", 30)]
    base = FixedHits(hits=hits(chunks, *clustered))
    docs = NeighborExpandingRetriever(base_retriever=base, vectorstore=store, k=3).invoke("q")
    assert len(docs) == 3
    assert base.requests == [9, 18]  # 9 hits made one window; 18 reached three
    assert (docs[0].metadata["window_start"], docs[0].metadata["window_end"]) == (1, 14)


def test_a_small_collection_gives_fewer_windows_without_looping(corpus):
    store, chunks, _ = corpus
    base = FixedHits(hits=hits(chunks, ("b.txt", 1), ("b.txt", 2)))
    docs = NeighborExpandingRetriever(base_retriever=base, vectorstore=store, k=4).invoke("q")
    assert len(docs) == 1 and base.requests == [12]


def test_hits_after_k_windows_do_not_grow_them(corpus):
    store, chunks, _ = corpus
    keys = [("a.txt", 10), ("a.txt", 20), ("a.txt", 30), ("a.txt", 11), ("a.txt", 21)]
    docs = expander(store, chunks, *keys, k=3).invoke("q")
    assert [(d.metadata["window_start"], d.metadata["window_end"]) for d in docs] == [
        (9, 11),
        (19, 21),
        (29, 31),
    ]


@pytest.mark.parametrize("use_async", [False, True])
async def test_base_retriever_run_nests_under_the_expander(corpus, use_async):
    store, _, _ = corpus
    recorder = RunRecorder()
    hyde = HyDERetriever(vectorstore=store, hypothesis_llm=ScriptedChat())
    wide = NeighborExpandingRetriever(base_retriever=hyde, k=2)
    config = {"callbacks": [recorder]}
    await wide.ainvoke("q", config=config) if use_async else wide.invoke("q", config=config)
    retrievers = [r for r in recorder.runs if r[0] == "retriever"]
    outer = next(r for r in retrievers if r[2] is None)
    inner = [r for r in retrievers if r[2] is not None]
    assert inner and all(r[2] == outer[1] for r in inner)
    llm_runs = [r for r in recorder.runs if r[0] == "llm"]
    assert llm_runs and all(r[2] == inner[0][1] for r in llm_runs)  # hypothesis under HyDE


# -- windows, budgets and hits that moved ----------------------------------------------------


def test_budget_trimming_takes_the_next_chunk_first():
    chunks = [
        Document("x" * 10, metadata={"chunk_index": i, "start_index": 11 * i, "gap_before": " "})
        for i in range(5)
    ]
    kept = trim_to_budget(chunks, {2}, max_chars=21)
    assert [c.metadata["chunk_index"] for c in kept] == [2, 3]


def test_chunks_without_spaces_rebuild_exactly(tmp_path, fake_embeddings):
    text = "灯塔" * 60
    (tmp_path / "cjk.txt").write_text(text)
    store = open_store(tmp_path / "store", embeddings=fake_embeddings)
    ingest_paths([tmp_path / "cjk.txt"], store, chunk_size=50, chunk_overlap=0, progress=False)
    got = store._collection.get(include=["documents", "metadatas"])
    chunks = sorted(
        (Document(t, metadata=m) for t, m in zip(got["documents"], got["metadatas"], strict=True)),
        key=lambda d: d.metadata["chunk_index"],
    )
    assert join_chunks(chunks) == load_document(tmp_path / "cjk.txt").text == text


def test_a_hit_missing_from_the_store_is_returned_as_found(corpus):
    store, _, _ = corpus
    ghost = Document(
        "a hit from elsewhere",
        metadata={
            "source": "/elsewhere.txt",
            "chunk_index": 3,
            "start_index": 0,
            "doc_id": "x",
            "score": 0.5,
        },
    )
    (doc,) = NeighborExpandingRetriever(
        base_retriever=FixedHits(hits=[ghost]), vectorstore=store, k=1, max_chars=100
    ).invoke("q")
    assert doc.page_content == "a hit from elsewhere" and doc.metadata["score"] == 0.5


def test_a_hyde_base_writes_hypotheses_once_per_call_across_top_up_rounds(corpus):
    store, _, _ = corpus
    llm = ScriptedChat(replies=["one passage", "another passage"])
    hyde = HyDERetriever(vectorstore=store, hypothesis_llm=llm)
    wide = NeighborExpandingRetriever(base_retriever=hyde, k=3, candidates=1)
    result = wide.retrieve_with_details("q")
    assert len(result.documents) == 3 and result.rounds > 1  # asked for 1, 2, 4, ... hits
    assert len(llm.log) == 1
    wide.invoke("q")
    assert len(llm.log) == 2  # a new call samples afresh


def test_chunk_index_stored_as_text_comes_back_as_found_saying_why(corpus):
    store, chunks, _ = corpus
    (hit,) = hits(chunks, ("a.txt", 4))
    hit.metadata["chunk_index"] = "4"
    retriever = NeighborExpandingRetriever(base_retriever=FixedHits(hits=[hit]), vectorstore=store)
    (doc,) = retriever.invoke("q")
    assert doc.page_content == hit.page_content
    assert re.search(r"chunk_index as an integer.*'4' \(str\)", doc.metadata["neighbors_note"])


# -- the details of a run --------------------------------------------------------------------


@pytest.mark.parametrize("use_async", [False, True])
async def test_retrieve_with_details_gives_the_base_details_and_the_windows(corpus, use_async):
    store, _, _ = corpus
    llm = ScriptedChat(replies=["alpha paragraph 3 names item 31"])
    hyde = HyDERetriever(vectorstore=store, hypothesis_llm=llm)
    wide = NeighborExpandingRetriever(base_retriever=hyde, k=2, candidates=1)
    recorder = RunRecorder()
    config = {"callbacks": [recorder]}
    if use_async:
        result = await wide.aretrieve_with_details("q", config)
    else:
        result = wide.retrieve_with_details("q", config)
    assert result.label == f"{hyde.label}+window=1" == wide.label
    assert result.hypotheses == ["alpha paragraph 3 names item 31"] and len(llm.log) == 1
    assert len(result.documents) == 2 and "window_start" in result.documents[0].metadata
    assert result.rounds >= 2 and result.lexical
    assert {"hypothesis_s", "embedding_s", "search_s", "expansion_s"} <= set(result.timings)
    # every round embedded the query and the (cached) hypothesis again: all are counted
    assert len(result.embedded_texts) == 2 * result.rounds
    # one run for the expander; each round a child retriever run with its own children
    roots = [r for r in recorder.runs if r[2] is None]
    assert [r[0] for r in roots] == ["retriever"]
    assert [d.id for d in recorder.ended[roots[0][1]]] == [d.id for d in result.documents]
    rounds = [r for r in recorder.runs if r[0] == "retriever" and r[2] == roots[0][1]]
    assert len(rounds) == result.rounds
    (llm_run,) = [r for r in recorder.runs if r[0] == "llm"]
    assert llm_run[2] == rounds[0][1]


def test_labels_name_the_span_and_order(corpus):
    store, _, _ = corpus
    hyde = HyDERetriever(vectorstore=store, n_hypotheses=0, lexical="off")
    assert NeighborExpandingRetriever(base_retriever=hyde).label == "standard+window=1"
    assert (
        NeighborExpandingRetriever(base_retriever=hyde, before=0, after=2, order="document").label
        == "standard+before=0,after=2,order=document"
    )
    plain = NeighborExpandingRetriever(base_retriever=FixedHits(hits=[]), vectorstore=store)
    assert plain.label == "FixedHits+window=1"


# -- other stores ----------------------------------------------------------------------------


def in_memory(chunks, fake_embeddings, keep=None):
    """An InMemoryVectorStore of the corpus' chunks with their ids and (kept) metadata."""
    store = InMemoryVectorStore(fake_embeddings)
    docs = []
    for doc in chunks.values():
        meta = {k: v for k, v in doc.metadata.items() if keep is None or k in keep}
        meta.pop("score", None)
        docs.append(Document(doc.page_content, metadata=meta, id=doc.id))
    store.add_documents(docs)
    return store


@pytest.fixture
def warnings_once(monkeypatch, caplog):
    """The neighbour warnings of this test alone (each is logged once per process)."""
    monkeypatch.setattr(hyde_lc.retrievers.neighbors, "_WARNED", set())
    with caplog.at_level(logging.WARNING, logger="hyde_lc.retrievers.neighbors"):
        yield lambda: [
            r.getMessage() for r in caplog.records if r.name == "hyde_lc.retrievers.neighbors"
        ]


def test_an_in_memory_store_of_hyde_lc_chunks_expands_by_id(corpus, fake_embeddings):
    store, chunks, texts = corpus
    memory = in_memory(chunks, fake_embeddings)
    keys = [("a.txt", 5), ("b.txt", 2)]
    found = hits(chunks, *keys)
    wide = NeighborExpandingRetriever(base_retriever=FixedHits(hits=found), vectorstore=memory, k=2)
    docs = wide.invoke("q")
    assert [(d.metadata["window_start"], d.metadata["window_end"]) for d in docs] == [
        (4, 6),
        (1, 3),
    ]
    assert docs[0].page_content == span_text(chunks, texts, "a.txt", 4, 6)
    chroma = NeighborExpandingRetriever(base_retriever=FixedHits(hits=found), vectorstore=store)
    assert [d.page_content for d in docs] == [d.page_content for d in chroma.invoke("q", k=2)]
    assert all("neighbors_note" not in d.metadata for d in docs)
    # a HyDE base over the same store: the store is inferred, the windows are read by id
    hyde = HyDERetriever(vectorstore=memory, hypothesis_llm=ScriptedChat())
    result = NeighborExpandingRetriever(base_retriever=hyde, k=2).retrieve_with_details("q")
    assert len(result.documents) == 2 and not result.lexical
    assert all("window_start" in d.metadata for d in result.documents)


@pytest.mark.parametrize("use_async", [False, True])
async def test_a_store_without_hyde_lc_ids_widens_by_start_index(
    corpus, fake_embeddings, warnings_once, use_async
):
    _, chunks, texts = corpus
    # positions, but not what the ids derive from (chunk_size, chunk_overlap, doc_id)
    memory = in_memory(
        chunks, fake_embeddings, keep={"source", "chunk_index", "start_index", "file_name"}
    )
    keys = [("a.txt", 5), ("a.txt", 9), ("b.txt", 2)]
    found = [
        Document(d.page_content, metadata=memory.get_by_ids([d.id])[0].metadata, id=d.id)
        for d in hits(chunks, *keys)
    ]
    wide = NeighborExpandingRetriever(base_retriever=FixedHits(hits=found), vectorstore=memory, k=3)
    docs = await wide.ainvoke("q", k=2) if use_async else wide.invoke("q", k=2)
    assert [(d.metadata["window_start"], d.metadata["window_end"]) for d in docs] == [
        (4, 6),
        (8, 10),
    ]
    # the text of the span; the whitespace the splitter dropped between chunks is a space
    # (hyde_lc's ingestion records it exactly: gap_before)
    expected = span_text(chunks, texts, "a.txt", 4, 6)
    assert docs[0].page_content.split() == expected.split()
    assert all("neighbors_note" not in d.metadata for d in docs) and warnings_once() == []


def test_a_store_that_cannot_list_its_chunks_gives_bare_hits_a_note_and_one_warning(
    corpus, fake_embeddings, warnings_once
):
    _, chunks, _ = corpus

    class Unlisted(VectorStore):
        """Reads by id, cannot list what it holds (as many hosted stores)."""

        def __init__(self, docs):
            self._docs = {d.id: d for d in docs}

        def get_by_ids(self, ids, /):
            return [self._docs[i] for i in ids if i in self._docs]

        def similarity_search(self, query, k=4, **kwargs):
            return []

        @classmethod
        def from_texts(cls, texts, embedding, metadatas=None, **kwargs):
            raise NotImplementedError

    memory = Unlisted(
        [Document(d.page_content, id=d.id, metadata={"source": d.metadata["source"],
                  "start_index": d.metadata["start_index"]}) for d in chunks.values()]
    )  # fmt: skip
    found = memory.get_by_ids([chunks[("a.txt", 5)].id, chunks[("b.txt", 2)].id])
    wide = NeighborExpandingRetriever(base_retriever=FixedHits(hits=found), vectorstore=memory, k=2)
    for _ in range(2):
        docs = wide.invoke("q")
        assert [d.id for d in docs] == [d.id for d in found]
        assert all("cannot list a document's chunks" in d.metadata["neighbors_note"] for d in docs)
    (warning,) = warnings_once()
    assert "Unlisted cannot list" in warning


def test_chunk_positions_numbered_per_page_give_bare_hits_and_a_warning(tmp_path, warnings_once):
    # A loader that numbers each page's chunks from 0: two chunks of one source at position 0.
    embeddings = FakeEmbeddings(size=32)
    pages = [
        Document(
            f"Page {page}, part {part}: the keeper's log of storm {page * 10 + part}.",
            metadata={"source": "log.pdf", "page": page, "chunk_index": part, "start_index": 0},
            id=f"p{page}c{part}",
        )
        for page in (1, 2)
        for part in (0, 1)
    ]
    client = chromadb.PersistentClient(path=str(tmp_path / "theirs"))
    theirs = Chroma.from_documents(pages, embeddings, client=client, collection_name="theirs")
    found = theirs.get_by_ids(["p1c0", "p2c1"])
    wide = NeighborExpandingRetriever(base_retriever=FixedHits(hits=found), vectorstore=theirs)
    docs = wide.invoke("q")
    assert sorted(d.id for d in docs) == ["p1c0", "p2c1"]
    assert all("start at the same start_index" in d.metadata["neighbors_note"] for d in docs)
    assert all("window_start" not in d.metadata for d in docs)  # nothing mixed in
    (warning,) = warnings_once()
    assert "several chunks of log.pdf" in warning
