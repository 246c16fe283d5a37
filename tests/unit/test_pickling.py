"""Retrievers, stores and models sent to another process: what pickles, what is made again
there, what is refused plainly; the configuration as JSON, with no secret in it."""

from __future__ import annotations

import json
import multiprocessing
import pickle
from pathlib import Path

import pytest
from langchain_core.language_models import FakeListChatModel
from langchain_core.prompts import PromptTemplate
from langchain_core.vectorstores import InMemoryVectorStore

from hyde_lc.errors import NotPortableError
from hyde_lc.hyde.embeddings import HyDEEmbeddings
from hyde_lc.hyde.hypothesis_cache import HypothesisCache
from hyde_lc.ingest.files import ingest_paths
from hyde_lc.models.local_embeddings import MiniLMEmbeddings
from hyde_lc.retrievers.hyde import HyDERetriever
from hyde_lc.retrievers.neighbors import NeighborExpandingRetriever
from hyde_lc.search.lexical import LexicalSearch
from hyde_lc.store import location
from hyde_lc.store.vectorstore import HydeChroma, open_store
from tests.fakes import TOPICS, FakeEmbeddings, unique_text


def round_trip(obj):
    return pickle.loads(pickle.dumps(obj))


def found(retriever, query: str, **kwargs) -> list[tuple[str | None, float]]:
    return [(d.id, d.metadata["score"]) for d in retriever.invoke(query, **kwargs)]


@pytest.fixture
def writer() -> FakeListChatModel:
    return FakeListChatModel(responses=["Keepers lit the lamp and trimmed the wicks."])


# -- retrievers over a collection on disk -----------------------------------------------------


def test_a_hyde_retriever_comes_back_over_the_same_folder_and_finds_the_same(store, writer):
    retriever = HyDERetriever(vectorstore=store, hypothesis_llm=writer, k=3)
    copy = round_trip(retriever)
    assert copy.vectorstore is not store  # reopened, with a client of its own
    assert isinstance(copy.vectorstore, HydeChroma)
    assert copy.vectorstore.location == store.location
    assert copy.hyde_transform is not retriever.hyde_transform  # made again from the fields
    assert copy.label == retriever.label == "hybrid-hyde"
    assert found(copy, "lighthouse keepers") == found(retriever, "lighthouse keepers")
    assert copy.model_dump(exclude={"vectorstore", "hypothesis_llm"}) == retriever.model_dump(
        exclude={"vectorstore", "hypothesis_llm"}
    )


def test_settings_assigned_before_pickling_travel_and_are_in_force(store):
    retriever = HyDERetriever(vectorstore=store, k=2)
    retriever.lexical = "off"
    retriever.dense_weight = 0.3
    copy = round_trip(retriever)
    assert (copy.lexical, copy.dense_weight, copy.label) == ("off", 0.3, "standard")
    assert copy.hybrid_search.lexical_side is None
    assert found(copy, "bread yeast") == found(retriever, "bread yeast")


def test_windows_come_back_the_same_and_base_and_expansion_share_one_store(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.txt").write_text(unique_text("alpha", 10))
    store = open_store(tmp_path / "store", embeddings=FakeEmbeddings(size=32))
    ingest_paths([folder], store, chunk_size=120, chunk_overlap=40, progress=False)
    retriever = NeighborExpandingRetriever(
        base_retriever=HyDERetriever(vectorstore=store), k=2, window=1
    )
    copy = round_trip(retriever)
    assert copy.vectorstore is copy.base_retriever.vectorstore
    ours = retriever.invoke("alpha paragraph 3")
    theirs = copy.invoke("alpha paragraph 3")
    assert [(d.id, d.page_content) for d in theirs] == [(d.id, d.page_content) for d in ours]
    assert "neighbors_note" not in theirs[0].metadata  # widened, not returned bare


async def test_an_unpickled_retriever_answers_async_too(store):
    retriever = HyDERetriever(vectorstore=store, k=2)
    copy = round_trip(retriever)
    docs = await copy.ainvoke("volcano magma")
    assert [d.id for d in docs] == [d.id for d in retriever.invoke("volcano magma")]


def test_a_store_that_cannot_be_opened_where_unpickled_says_why_at_the_first_call(
    store, monkeypatch
):
    """An error while unpickling would end a worker without a word: the call says it."""
    retriever = HyDERetriever(vectorstore=store, k=2)
    data = pickle.dumps(retriever)
    monkeypatch.setattr(location, "_forked_from_embedded", True)
    copy = pickle.loads(data)  # no error here
    with pytest.raises(NotPortableError, match="spawn"):
        copy.invoke("bees")
    monkeypatch.setattr(location, "_forked_from_embedded", False)
    assert found(copy, "bees") == found(retriever, "bees")  # tried again, and made


# -- stores of other kinds -----------------------------------------------------------------


@pytest.mark.parametrize("on_disk", [False, True])
def test_a_langchain_chroma_is_refused_with_what_to_do_instead(tmp_path, on_disk):
    """Its public API does not say where it lives (a folder, a server, or memory)."""
    from langchain_chroma import Chroma

    folder = {"persist_directory": str(tmp_path)} if on_disk else {}
    chroma = Chroma(f"lc_{on_disk}", embedding_function=FakeEmbeddings(size=8), **folder)
    chroma.add_texts(["a lamp"])
    with pytest.raises(NotPortableError, match=r"open_store\('/path/to/folder'"):
        pickle.dumps(HyDERetriever(vectorstore=chroma, lexical="off"))
    wide = NeighborExpandingRetriever(base_retriever=chroma.as_retriever(), vectorstore=chroma)
    with pytest.raises(NotPortableError, match="another process cannot open it"):
        pickle.dumps(wide)


def test_an_in_memory_store_travels_as_a_copy_of_its_data():
    store = InMemoryVectorStore(FakeEmbeddings(size=8))
    store.add_texts(TOPICS)
    retriever = HyDERetriever(vectorstore=store, lexical=LexicalSearch.from_store(store), k=2)
    copy = round_trip(retriever)
    assert found(copy, "stock market") == found(retriever, "stock market")
    assert copy.hybrid_search.lexical_side is not None  # indexed again from the copy


def test_a_lexical_side_built_from_documents_is_refused_with_what_to_do():
    store = InMemoryVectorStore(FakeEmbeddings(size=8))
    ids = store.add_texts(TOPICS[:2])
    lexical = LexicalSearch.from_documents(store, store.get_by_ids(ids))
    with pytest.raises(NotPortableError, match=r"from_store"):
        pickle.dumps(HyDERetriever(vectorstore=store, lexical=lexical))


def test_a_hypothesis_cache_file_travels_and_one_in_memory_is_refused(tmp_path):
    cache = HypothesisCache(tmp_path / "h.sqlite")
    copy = round_trip(cache)
    assert copy.path == cache.path
    with pytest.raises(NotPortableError, match="file"):
        pickle.dumps(HypothesisCache(":memory:"))


# -- models ------------------------------------------------------------------------------


def test_an_onnx_encoder_travels_as_its_settings_and_loads_its_sessions_where_used():
    encoder = MiniLMEmbeddings(batch_size=7, query_threads=2)
    encoder._session = encoder._query_session = encoder._tokenizer = object()  # as if loaded
    copy = round_trip(encoder)
    assert (copy.batch_size, copy.query_threads, copy.model_id) == (7, 2, "local:minilm")
    assert (copy._session, copy._query_session, copy._tokenizer) == (None, None, None)
    assert copy._lock is not encoder._lock and copy._lock.acquire(blocking=False)
    assert encoder._session is not None  # the original keeps its own


@pytest.mark.parametrize("kind", ["minilm-dq", "bge"])
def test_every_onnx_encoder_travels_as_its_own_kind(kind):
    from hyde_lc.models.bge_embeddings import BgeSmallEmbeddings
    from hyde_lc.models.minilm_quantized import MiniLMDynamicEmbeddings

    cls = {"minilm-dq": MiniLMDynamicEmbeddings, "bge": BgeSmallEmbeddings}[kind]
    copy = round_trip(cls(batch_size=5, max_tokens=128))
    assert type(copy) is cls and (copy.batch_size, copy.max_tokens) == (5, 128)
    assert copy._session is None and copy.model_id == cls().model_id


def test_the_multilingual_encoder_and_a_local_chat_model_travel_as_settings(tmp_path):
    from hyde_lc.models.local_llm import LocalChatModel
    from hyde_lc.models.multilingual_embeddings import MultilingualE5Embeddings

    e5 = round_trip(MultilingualE5Embeddings(threads=3, hypothesis_prefix="query"))
    assert (e5.threads, e5.hypothesis_prefix) == (3, "query")
    llm = LocalChatModel(
        model_path=str(tmp_path / "w.gguf"), temperature=0.1, max_tokens=9, seed=4, threads=1
    )
    copy = round_trip(llm)
    assert copy.model_dump() == llm.model_dump()
    assert not copy.loaded  # its engine loads at its first call, in the process that calls


def test_hyde_embeddings_make_their_transform_again(writer):
    embeddings = HyDEEmbeddings.from_llm(writer, FakeEmbeddings(size=8), query_weight=0.5)
    copy = round_trip(embeddings)
    assert copy.hyde_transform is not embeddings.hyde_transform
    assert copy.query_weight == 0.5
    assert copy.embed_query("lamps") == embeddings.embed_query("lamps")


def test_an_openai_model_travels_as_its_settings_with_the_key_it_holds():
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model="gpt-x", api_key="sk-held", base_url="http://127.0.0.1:9/v1")
    store = InMemoryVectorStore(FakeEmbeddings(size=8))
    data = pickle.dumps(HyDERetriever(vectorstore=store, hypothesis_llm=llm, lexical="off"))
    copy = pickle.loads(data).hypothesis_llm
    assert (copy.model_name, copy.openai_api_base) == ("gpt-x", "http://127.0.0.1:9/v1")
    assert copy.openai_api_key.get_secret_value() == "sk-held"  # as its object held it


# -- fork: what a forked child must not use of its parent's ------------------------------


def _child_state(out) -> None:
    from hyde_lc.models import local_llm
    from hyde_lc.search import hybrid

    ran = hybrid.in_background(lambda: "ran").result(timeout=10)
    out.put((list(local_llm._ENGINES), location._forked_from_embedded, ran))


def test_a_forked_child_forgets_the_parents_engines_pools_and_chroma(store, monkeypatch):
    from hyde_lc.models import local_llm
    from hyde_lc.search import hybrid

    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork on this platform")
    monkeypatch.setitem(local_llm._ENGINES, ("parent.gguf", 1, 1, 1, 1), object())  # type: ignore[arg-type]
    hybrid.in_background(lambda: None).result()  # the parent's pool has a thread
    store.similarity_search("bees")  # the parent has opened an embedded store
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=_child_state, args=(out,))
    child.start()
    engines, forked_from_embedded, ran = out.get(timeout=60)
    child.join(30)
    assert (engines, forked_from_embedded, ran) == ([], True, "ran")
    assert not location._forked_from_embedded  # the parent itself is unchanged


# -- the configuration as JSON --------------------------------------------------------------


def test_a_config_written_to_json_builds_the_same_retriever(tmp_path: Path):
    """Nothing is loaded: the store opens no model, the writer loads at its first call."""
    store = open_store(tmp_path / "store", embeddings=MiniLMEmbeddings(batch_size=8))
    writer = FakeListChatModel(responses=["x"])
    retriever = HyDERetriever(
        vectorstore=store,
        k=2,
        dense_weight=0.4,
        prompt=["web_search", "Passage about {question}:"],
        hypothesis_cache=HypothesisCache(tmp_path / "h.sqlite"),
        hypothesis_llm=writer,
        n_hypotheses=2,
    )
    with pytest.raises(NotPortableError, match="hypothesis LLM"):  # a fake has no spec
        retriever.to_config()
    retriever.n_hypotheses = 0
    retriever.hypothesis_llm = None
    config = retriever.to_config()
    (tmp_path / "retriever.json").write_text(json.dumps(config))
    again = HyDERetriever.from_config(json.loads((tmp_path / "retriever.json").read_text()))
    assert again.to_config() == config
    assert (again.k, again.dense_weight, again.label) == (2, 0.4, retriever.label)
    assert again.vectorstore.location == store.location
    assert again.vectorstore.embeddings.batch_size == 8
    assert again.vectorstore.embeddings._session is None  # not loaded
    assert config["store"]["embeddings"] == {"spec": "local:minilm", "settings": {"batch_size": 8}}


def test_a_config_holds_no_api_key_and_takes_one_when_built(tmp_path, monkeypatch):
    from langchain_openai import ChatOpenAI

    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment")
    store = open_store(tmp_path / "store", embeddings=MiniLMEmbeddings())
    llm = ChatOpenAI(model="gpt-x", api_key="sk-secret-in-code", temperature=0.2, max_tokens=50)
    wide = NeighborExpandingRetriever(
        base_retriever=HyDERetriever(vectorstore=store, hypothesis_llm=llm), window=2
    )
    config = wide.to_config()
    written = json.dumps(config)
    assert "sk-" not in written
    assert config["base"]["hypothesis_llm"]["spec"] == "openai:gpt-x"
    given = NeighborExpandingRetriever.from_config(json.loads(written), api_key="sk-given")
    built = given.base_retriever.hypothesis_llm
    assert built.openai_api_key.get_secret_value() == "sk-given"
    assert (built.temperature, built.max_tokens, given.window) == (0.2, 50, 2)
    from_env = HyDERetriever.from_config(config["base"]).hypothesis_llm
    assert from_env.openai_api_key.get_secret_value() == "sk-from-the-environment"


def test_what_cannot_be_a_spec_is_refused_naming_it(store):
    prompt = PromptTemplate.from_template("Write about {question}")
    with pytest.raises(NotPortableError, match=r"HyDERetriever.prompt.*Pickle"):
        HyDERetriever(vectorstore=store, prompt=prompt, hypothesis_llm=None).to_config()
    memory = InMemoryVectorStore(FakeEmbeddings(size=8))
    with pytest.raises(NotPortableError, match="vector store"):
        HyDERetriever(vectorstore=memory, lexical="off").to_config()
    with pytest.raises(NotPortableError, match="not a HyDERetriever configuration"):
        HyDERetriever.from_config({"retriever": "Other"})
