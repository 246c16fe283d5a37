"""The store: opening creates and writes nothing, pending documents stay out of every
read, the store location and the Chroma server timeout are checked. Real embedded Chroma
on disk, fake embeddings."""

import socket
import threading
from pathlib import Path

import chromadb
import pytest
from chromadb.config import Settings
from langchain_chroma import Chroma

from hyde_lc.errors import EmbeddingMismatchError, IngestError, StoreError
from hyde_lc.ingest.files import doc_version, ingest_paths
from hyde_lc.retrievers.hyde import HyDERetriever
from hyde_lc.retrievers.neighbors import NeighborExpandingRetriever
from hyde_lc.search.backend import backend_for
from hyde_lc.store.chroma_collection import COSINE, META_DIMENSION, META_MODEL, META_PENDING
from hyde_lc.store.location import StoreLocation
from hyde_lc.store.vectorstore import collection_info, open_store
from tests.fakes import (
    FakeEmbeddings,
    FixedHits,
    chroma_of,
    long_text,
    make_pdf,
    tree_digest,
    unique_text,
)


def raw_collection(folder: Path, name: str = "hyde_lc"):
    client = chromadb.PersistentClient(str(folder), settings=Settings(anonymized_telemetry=False))
    return client.get_or_create_collection(name, configuration=COSINE)


# -- opening creates and writes nothing --------------------------------------------------------


def test_opening_a_new_store_creates_nothing_and_reads_it_as_empty(tmp_path, fake_embeddings):
    folder = tmp_path / "store"
    store = open_store(folder, embeddings=fake_embeddings)
    assert store.similarity_search("lamp", k=3) == []
    assert store.max_marginal_relevance_search("lamp", k=3) == []
    assert store.get()["ids"] == []
    assert HyDERetriever(vectorstore=store, n_hypotheses=0).invoke("lamp") == []
    info = collection_info(store)
    assert (info["chunks"], info["documents"], info["embedding_model"]) == (0, [], None)
    assert not folder.exists()


def test_a_refused_file_creates_no_store_and_another_model_may_then_ingest(
    tmp_path, fake_embeddings
):
    binary = tmp_path / "image.txt"
    binary.write_bytes(bytes(range(32)) * 64)
    good = tmp_path / "good.txt"
    good.write_text(long_text(4, "g"))
    folder = tmp_path / "store"
    with pytest.raises(IngestError, match="does not look like text"):
        ingest_paths([good, binary], open_store(folder, embeddings=fake_embeddings), progress=False)
    assert not folder.exists()  # no folder, so no empty collection bound to the first model
    other = FakeEmbeddings(size=48, model_id="fake:other-48")
    report = ingest_paths([good], open_store(folder, embeddings=other), progress=False)
    assert report.files[0].status == "added"
    info = collection_info(open_store(folder, embeddings=other))
    assert (info["embedding_model"], info["embedding_dimension"]) == ("fake:other-48", 48)


def test_files_without_text_create_no_store(tmp_path, fake_embeddings):
    blank = tmp_path / "blank.txt"
    blank.write_text("  \n ")
    folder = tmp_path / "store"
    report = ingest_paths([blank], open_store(folder, embeddings=fake_embeddings), progress=False)
    assert report.files[0].status == "empty"
    assert not folder.exists()


def test_an_empty_collection_is_opened_without_a_write_and_takes_its_first_writes_model(
    tmp_path, fake_embeddings
):
    folder = tmp_path / "store"
    collection = raw_collection(folder)  # empty, bound to a model (as older versions left it)
    collection.modify(metadata={META_MODEL: "fake:old-16", META_DIMENSION: 16})
    bare = raw_collection(folder, "bare")  # empty, no record at all
    digest = tree_digest(folder)
    store = open_store(folder, embeddings=fake_embeddings)  # another model: fine, it is empty
    open_store(folder, collection="bare", embeddings=fake_embeddings)
    assert store.similarity_search("lamp") == []
    assert tree_digest(folder) == digest  # opening and reading wrote nothing
    assert bare.metadata is None
    doc = tmp_path / "d.txt"
    doc.write_text(long_text(3))
    ingest_paths([doc], store, progress=False)
    info = collection_info(open_store(folder, embeddings=fake_embeddings))
    assert (info["embedding_model"], info["embedding_dimension"]) == ("fake:hash-32", 32)
    with pytest.raises(EmbeddingMismatchError):  # now it holds vectors: no other model
        open_store(folder, embeddings=FakeEmbeddings(size=16, model_id="fake:old-16"))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"path": ""}, "store folder is empty"),
        ({"path": "  "}, "store folder is empty"),
        ({"url": ""}, "server URL is empty"),
        ({"path": "/tmp/x", "timeout": 0}, "positive number of seconds"),
        ({"path": "/tmp/x", "timeout": float("nan")}, "positive number of seconds"),
    ],
)
def test_bad_store_locations_are_refused(kwargs, message):
    with pytest.raises(StoreError, match=message):
        StoreLocation.resolve(**kwargs)


def test_the_timeout_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("HYDE_LC_CHROMA_TIMEOUT", "2.5")
    assert StoreLocation.resolve(url="http://127.0.0.1:1").timeout == 2.5
    monkeypatch.setenv("HYDE_LC_CHROMA_TIMEOUT", "soon")
    with pytest.raises(StoreError, match="HYDE_LC_CHROMA_TIMEOUT must be a positive number"):
        StoreLocation.resolve(url="http://127.0.0.1:1")


def test_bad_collection_names_are_refused_on_open(tmp_path, fake_embeddings):
    for name in ("ab", "-abc", "a..b", "127.0.0.1"):
        with pytest.raises(StoreError, match="invalid collection name"):
            open_store(tmp_path / "store", collection=name, embeddings=fake_embeddings)
    assert not (tmp_path / "store").exists()


@pytest.fixture
def silent_server():
    """A TCP server on 127.0.0.1 that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join(5)
    for conn in held:
        conn.close()
    server.close()


def test_a_server_that_never_answers_fails_naming_it(silent_server, fake_embeddings, monkeypatch):
    monkeypatch.setenv("HYDE_LC_CHROMA_TIMEOUT", "1")
    outcome: list[BaseException | None] = []

    def open_it() -> None:
        try:
            open_store(url=silent_server, embeddings=fake_embeddings)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=open_it, daemon=True)
    thread.start()
    thread.join(120)  # generous: the point is that it comes back at all
    assert outcome, "open_store waited for ever on a server that never answers"
    assert isinstance(outcome[0], StoreError)
    assert silent_server in str(outcome[0]) and "did not answer within 1 s" in str(outcome[0])


# -- pending documents stay out of every read --------------------------------------------------


@pytest.fixture
def two_docs(tmp_path, fake_embeddings):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "hidden.txt").write_text(long_text(10, "hidden"))
    (folder / "shown.txt").write_text(long_text(10, "shown"))
    store = open_store(tmp_path / "store", embeddings=fake_embeddings)
    ingest_paths([folder], store, chunk_size=200, chunk_overlap=20, progress=False)
    got = store.existing_collection().get(include=["documents", "metadatas"])
    hidden = [
        (text, meta)
        for text, meta in zip(got["documents"], got["metadatas"], strict=True)
        if meta["file_name"] == "hidden.txt"
    ]
    meta = hidden[0][1]
    version = doc_version(meta["source"], meta["doc_id"], 200, 20)
    return store, version, hidden


def _files(docs) -> set[str]:
    return {d.metadata["file_name"] for d in docs}


def test_chunks_of_a_pending_document_stay_out_of_every_read(two_docs, fake_embeddings):
    store, version, hidden = two_docs
    text = next(t for t, _ in hidden if "hidden3." in t)  # finds its own chunk first
    assert "hidden.txt" in _files(store.similarity_search(text, k=3))
    chroma_of(store).set_pending(add=[version])
    assert chroma_of(store).pending() == [version]
    k = 40  # more than the collection holds: everything visible comes back
    assert _files(store.similarity_search(text, k=k)) == {"shown.txt"}
    assert _files(d for d, _ in store.similarity_search_with_score(text, k=k)) == {"shown.txt"}
    assert _files(store.max_marginal_relevance_search(text, k=5, fetch_k=k)) == {"shown.txt"}
    assert _files(store.as_retriever(search_kwargs={"k": k}).invoke(text)) == {"shown.txt"}
    got = store.get(include=["metadatas"])
    assert {m["file_name"] for m in got["metadatas"]} == {"shown.txt"}
    for options in ({}, {"search_type": "mmr"}):
        hyde = HyDERetriever(vectorstore=store, n_hypotheses=0, k=k, **options)
        assert _files(hyde.invoke(text)) == {"shown.txt"}
    # langchain-chroma's own Chroma over the collection gives no public access to the
    # collection's metadata, where pending versions are listed: only open_store's store
    # leaves them out.
    plain = Chroma(
        collection_name="hyde_lc", client=store.chroma_client(), embedding_function=fake_embeddings
    )
    assert "hidden.txt" in _files(plain.similarity_search(text, k=k))
    info = collection_info(store)
    assert [d["source"].rsplit("/", 1)[-1] for d in info["documents"]] == ["shown.txt"]
    assert info["chunks"] == info["documents"][0]["chunks"]
    assert info["incomplete"][0]["chunks_written"] == len(hidden)
    # Neighbour expansion reads no neighbour of a hidden chunk, even from a base that
    # does not filter: the hit comes back alone.
    raw = plain.similarity_search(text, k=1)[0]
    raw.metadata["score"] = 1.0
    wide = NeighborExpandingRetriever(
        base_retriever=FixedHits(hits=[raw]), vectorstore=store, k=1, window=2
    )
    (window,) = wide.invoke("q")
    assert window.page_content == raw.page_content
    assert (window.metadata["window_start"], window.metadata["window_end"]) == (
        raw.metadata["chunk_index"],
        raw.metadata["chunk_index"],
    )
    chroma_of(store).set_pending(remove=[version])
    assert chroma_of(store).pending() == []
    assert "hidden.txt" in _files(store.similarity_search(text, k=3))
    assert META_PENDING not in (store.chroma_client().get_collection("hyde_lc").metadata or {})


def test_visible_where_changes_nothing_while_nothing_is_pending(two_docs):
    store, version, _ = two_docs
    assert chroma_of(store).visible_where() is None
    assert chroma_of(store).visible_where({"source": "x"}) == {"source": "x"}
    chroma_of(store).set_pending(add=[version])
    assert chroma_of(store).visible_where({"source": "x"}) == {
        "$and": [{"source": "x"}, {"doc_version": {"$nin": [version]}}]
    }


def test_a_reader_sees_a_document_pended_by_another_store_object(
    tmp_path, two_docs, fake_embeddings
):
    store, version, hidden = two_docs
    reader = open_store(tmp_path / "store", embeddings=fake_embeddings)
    text = hidden[0][0]
    assert "hidden.txt" in _files(reader.similarity_search(text, k=40))
    chroma_of(store).set_pending(add=[version])  # the pending list is read fresh on every search
    assert _files(reader.similarity_search(text, k=40)) == {"shown.txt"}


@pytest.mark.parametrize("limit", [2048, 8])
def test_searches_around_pending_chunks_find_the_nearest_visible_ones(
    tmp_path, fake_embeddings, monkeypatch, limit
):
    """Pending chunks are dropped from more results than asked for (or, past a limit,
    filtered out by Chroma): the same k nearest visible chunks either way."""
    import hyde_lc.store.chroma_collection

    monkeypatch.setattr(hyde_lc.store.chroma_collection, "POST_FILTER_LIMIT", limit)
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(6):
        (folder / f"d{i}.txt").write_text(unique_text(f"doc{i}", 8))
    store = open_store(tmp_path / "store", embeddings=fake_embeddings)
    ingest_paths([folder], store, chunk_size=150, chunk_overlap=0, progress=False)
    got = store.existing_collection().get(include=["metadatas", "documents"])
    hidden = sorted({m["doc_version"] for m in got["metadatas"] if m["file_name"] < "d4"})
    chroma_of(store).set_pending(add=hidden)  # two thirds of the collection
    where = {"doc_version": {"$nin": hidden}}
    for text in got["documents"][::9]:
        vector = fake_embeddings.embed_query(text)
        expected = store.existing_collection().query(
            query_embeddings=[vector], n_results=5, where=where
        )
        found = store.similarity_search_by_vector(vector, k=5)
        assert [d.id for d in found] == expected["ids"][0]
        mmr = store.max_marginal_relevance_search_by_vector(vector, k=3, fetch_k=10)
        assert len(mmr) == 3 and not {d.metadata["doc_version"] for d in mmr} & set(hidden)
    # A filter of the caller's is combined with the pending one.
    mine = store.similarity_search("doc1", k=5, filter={"file_name": "d1.txt"})
    assert mine == []
    assert store.similarity_search("doc5", k=5, filter={"file_name": "d5.txt"})


def test_langchain_writes_create_the_collection_with_the_model_recorded(tmp_path, fake_embeddings):
    folder = tmp_path / "store"
    store = open_store(folder, embeddings=fake_embeddings)
    store.add_texts(["The keeper lit the lamp at dusk."], metadatas=[{"source": "note"}])
    assert store.similarity_search("lamp", k=1)[0].page_content.startswith("The keeper")
    with pytest.raises(EmbeddingMismatchError, match="fake:hash-32"):
        open_store(folder, embeddings=FakeEmbeddings(size=16, model_id="fake:other-16"))
    # Raw chromadb writes through the store create it too (benchmarks add in batches).
    raw = open_store(tmp_path / "raw", embeddings=fake_embeddings)
    raw.create_collection().add(ids=["a"], embeddings=[[0.1] * 32], documents=["a"])
    assert (
        collection_info(open_store(tmp_path / "raw", embeddings=fake_embeddings))["embedding_model"]
        == "fake:hash-32"
    )


def test_the_vector_search_helpers_leave_pending_documents_out(two_docs, fake_embeddings):

    store, version, hidden = two_docs
    text = next(t for t, _ in hidden if "hidden3." in t)
    vector = fake_embeddings.embed_query(text)
    plain = Chroma(
        collection_name="hyde_lc", client=store.chroma_client(), embedding_function=fake_embeddings
    )
    ids = [d.id for d in plain.similarity_search(text, k=40)]
    for target in (store, plain):  # the same hits and relevance, through public API only
        top = backend_for(target, "off").scored(vector, 1, {})
        assert _files(top) == {"hidden.txt"} and top[0].metadata["score"] > 0.99
    chroma_of(store).set_pending(add=[version])
    for target in (store,):
        found = backend_for(target, "off").scored(vector, 40, {})
        assert _files(found) == {"shown.txt"}
        assert all(-1 <= d.metadata["score"] <= 1.0001 for d in found)
        diverse = backend_for(target, "off").mmr(vector, 5, {"fetch_k": 40})
        assert _files(diverse) == {"shown.txt"} and all(d.metadata["score"] for d in diverse)
        assert _files(backend_for(target, "off").documents(ids)) == {"shown.txt"}


def test_pages_count_includes_pages_inside_chunks(tmp_path, fake_embeddings):
    short = "A short page about the lamp room and the lens, with a few words. " * 2
    pdf = make_pdf(tmp_path / "s.pdf", [short, short, short])
    store = open_store(tmp_path / "store", embeddings=fake_embeddings)
    ingest_paths([pdf], store, chunk_size=1000, chunk_overlap=100, progress=False)
    assert len(list(chroma_of(store).metadatas())) == 1
    assert collection_info(store)["documents"][0]["pages"] == 3


def test_langchain_attributes_answer_on_a_store_opened_fresh(tmp_path, fake_embeddings):
    """A LangChain user's attribute access works from the start (Chroma's own attributes)."""
    folder = tmp_path / "fresh"
    store = open_store(folder, embeddings=fake_embeddings)
    assert not folder.exists()  # opening created nothing
    assert store._chroma_collection is None and store._collection_name == "hyde_lc"
    assert store._embedding_function is fake_embeddings
    assert store._collection.count() == 0  # the collection a user reaches for is made now
    assert store._collection_metadata[META_MODEL] == "fake:hash-32"
    assert store._client.get_collection("hyde_lc").name == "hyde_lc"
    store.add_texts(["The keeper lit the lamp."])
    assert store._collection.count() == 1
