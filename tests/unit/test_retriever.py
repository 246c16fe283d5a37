import time

import pytest
from langchain_community.cache import SQLiteCache
from langchain_core.caches import InMemoryCache
from langchain_core.globals import set_llm_cache
from pydantic import ValidationError

from hyde_lc.fusion import fuse_mean, reciprocal_rank_fusion
from hyde_lc.hypotheses import is_refusal, llm_identity
from hyde_lc.local_llm import LocalChatModel
from hyde_lc.retriever import HyDERetriever
from tests.fakes import TOPICS, RunRecorder, ScriptedChat
from tests.unit import conftest as unit_conftest


def _ids(docs):
    return [d.metadata["source"] for d in docs]


def test_paper_mean_searches_the_mean_of_query_and_hypothesis_embeddings(store, fake_embeddings):
    hyps = ["Fresnel lenses use prisms.", "Lenses focus the lamp."]
    retriever = HyDERetriever(
        vectorstore=store,
        hypothesis_llm=ScriptedChat(replies=hyps),
        n_hypotheses=2,
        k=3,
        query_weight=None,  # the paper's equal weighting
    )
    query = "How do lighthouses focus light?"
    expected = fuse_mean(
        [fake_embeddings.embed_query(query), *fake_embeddings.embed_documents(hyps)]
    )
    result = retriever.retrieve_with_details(query)
    assert sorted(result.hypotheses) == sorted(hyps)
    direct = store.similarity_search_by_vector(expected, k=3)
    assert _ids(result.documents) == _ids(direct)
    assert retriever._embed_inputs({"query": query, "hypotheses": hyps})["vectors"] == [
        pytest.approx(expected)
    ]


def test_include_query_false_uses_hypotheses_only(store, fake_embeddings):
    hyps = ["Bees make honey."]
    retriever = HyDERetriever(
        vectorstore=store, hypothesis_llm=ScriptedChat(replies=hyps), include_query=False
    )
    vec = retriever._embed_inputs({"query": "anything", "hypotheses": hyps})["vectors"]
    assert vec == [pytest.approx(fake_embeddings.embed_documents(hyps)[0])]


def test_concat_embeds_query_and_hypotheses_as_one_text(store, fake_embeddings):
    retriever = HyDERetriever(vectorstore=store, hypothesis_llm=ScriptedChat(), fusion="concat")
    vec = retriever._embed_inputs({"query": "Q?", "hypotheses": ["H1.", "H2."]})["vectors"]
    assert vec == [pytest.approx(fake_embeddings.embed_query("Q?\n\nH1.\n\nH2."))]


def test_rrf_equals_rank_fusion_of_the_separate_searches(store, fake_embeddings):
    hyps = TOPICS[4:6]
    retriever = HyDERetriever(
        vectorstore=store,
        hypothesis_llm=ScriptedChat(replies=hyps),
        fusion="rrf",
        n_hypotheses=2,
        k=4,
        rrf_candidates=5,
        query_weight=None,  # equal rankings
    )
    docs = retriever.invoke(TOPICS[0])
    vectors = [fake_embeddings.embed_query(TOPICS[0]), *fake_embeddings.embed_documents(hyps)]
    rankings = [[d.id for d in store.similarity_search_by_vector(v, k=5)] for v in vectors]
    expected = reciprocal_rank_fusion(rankings)[:4]
    assert [d.id for d in docs] == [doc_id for doc_id, _ in expected]
    assert [d.metadata["score"] for d in docs] == pytest.approx([s for _, s in expected])
    assert all(isinstance(d.metadata["similarity"], float) for d in docs)


def test_n_hypotheses_are_distinct_samples(store):
    llm = ScriptedChat(replies=["one", "two", "three"])
    retriever = HyDERetriever(vectorstore=store, hypothesis_llm=llm, n_hypotheses=3)
    assert sorted(retriever.retrieve_with_details("q").hypotheses) == ["one", "three", "two"]


def test_prompt_list_gives_one_hypothesis_per_prompt(store):
    retriever = HyDERetriever(
        vectorstore=store,
        hypothesis_llm=ScriptedChat(),
        prompt=["factual", "analytical", "comparative"],
    )
    result = retriever.retrieve_with_details("Why did keepers leave?")
    assert len(result.prompts) == 3
    assert result.prompts[0].startswith("Write a factual")
    assert len(result.hypotheses) == 3


def test_k_at_construction_and_per_call(store):
    retriever = HyDERetriever(vectorstore=store, hypothesis_llm=ScriptedChat(), k=3)
    assert len(retriever.invoke("light")) == 3
    assert len(retriever.invoke("light", k=1)) == 1


def test_documents_carry_score_and_mode(store):
    docs = HyDERetriever(vectorstore=store, hypothesis_llm=ScriptedChat()).invoke("light")
    assert all(d.metadata["retrieval_mode"] == "hyde:mean" for d in docs)
    scores = [d.metadata["score"] for d in docs]
    assert scores == sorted(scores, reverse=True)


def test_zero_hypotheses_is_standard_retrieval(store):
    llm = ScriptedChat(error=True)  # would raise if it were called
    retriever = HyDERetriever(vectorstore=store, hypothesis_llm=llm, n_hypotheses=0, k=2)
    result = retriever.retrieve_with_details(TOPICS[3])
    assert result.mode == "standard" and result.hypotheses == [] and result.fallback is None
    assert result.documents[0].page_content == TOPICS[3]


@pytest.mark.parametrize(
    ("llm", "reason"),
    [
        (ScriptedChat(error=True), "error: RuntimeError"),
        (ScriptedChat(delay=2.0), "timeout"),
        (ScriptedChat(replies=["   "]), "empty or refusal"),
        (
            ScriptedChat(replies=["I'm sorry, but I can't help with medical claims."]),
            "empty or refusal",
        ),
    ],
    ids=["raises", "times-out", "empty", "refuses"],
)
def test_fallback_to_plain_query(store, llm, reason):
    retriever = HyDERetriever(vectorstore=store, hypothesis_llm=llm, k=3, timeout=0.5)
    standard = HyDERetriever(vectorstore=store, n_hypotheses=0, k=3).invoke(TOPICS[1])
    docs = retriever.invoke(TOPICS[1])
    assert all(reason in d.metadata["hyde_fallback"] for d in docs)
    assert _ids(docs) == _ids(standard)


async def test_async_fallback_on_timeout(store):
    retriever = HyDERetriever(
        vectorstore=store, hypothesis_llm=ScriptedChat(delay=2.0), timeout=0.3
    )
    docs = await retriever.ainvoke("light")
    assert "timeout" in docs[0].metadata["hyde_fallback"]


def test_refusal_detection():
    assert is_refusal("I'm sorry, I cannot do that")
    assert is_refusal("As an AI language model, I ...")
    assert is_refusal("")
    assert not is_refusal("Sorrel is a leafy plant.")


async def test_async_generates_hypotheses_concurrently(store):
    delay, n = 0.4, 4
    retriever = HyDERetriever(
        vectorstore=store,
        n_hypotheses=n,
        hypothesis_llm=ScriptedChat(replies=["a", "b", "c", "d"], delay=delay),
    )
    start = time.perf_counter()
    result = await retriever.aretrieve_with_details("light")
    elapsed = time.perf_counter() - start
    assert len(result.hypotheses) == n
    assert elapsed < n * delay * 0.6, f"took {elapsed:.2f}s: not concurrent"


async def test_abatch_and_ainvoke_match_sync(store):
    retriever = HyDERetriever(vectorstore=store, n_hypotheses=0, k=2)
    sync = [_ids(d) for d in retriever.batch(TOPICS[:3])]
    asyn = [_ids(d) for d in await retriever.abatch(TOPICS[:3])]
    assert sync == asyn


@pytest.mark.parametrize("use_async", [False, True])
async def test_child_runs_nest_under_the_retriever(store, use_async):
    recorder = RunRecorder()
    retriever = HyDERetriever(vectorstore=store, hypothesis_llm=ScriptedChat(), n_hypotheses=2)
    config = {"callbacks": [recorder]}
    if use_async:
        await retriever.ainvoke("light", config=config)
    else:
        retriever.invoke("light", config=config)
    (root,) = [r for r in recorder.runs if r[0] == "retriever"]
    llm_runs = [r for r in recorder.runs if r[0] == "llm"]
    embed_runs = [r for r in recorder.runs if r[0] == "hyde.embed"]
    assert len(llm_runs) == 2
    assert all(r[2] == root[1] and "hyde.hypothesis" in r[3] for r in llm_runs)
    assert len(embed_runs) == 1 and embed_runs[0][2] == root[1]


def test_invalid_settings_are_refused_with_the_valid_choices(store):
    with pytest.raises(ValidationError, match="mean, concat, rrf"):
        HyDERetriever(vectorstore=store, fusion="max")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="scifact"):
        HyDERetriever(vectorstore=store, prompt="nope")
    with pytest.raises(ValidationError, match="at least 1"):
        HyDERetriever(vectorstore=store, k=0)
    with pytest.raises(ValueError, match="hypothesis_llm"):
        HyDERetriever(vectorstore=store).invoke("q")


def test_hypothesis_cache_makes_a_rerun_free(store):
    llm = ScriptedChat(replies=["one", "two", "three"])
    retriever = HyDERetriever(
        vectorstore=store, hypothesis_llm=llm, n_hypotheses=3, hypothesis_cache=InMemoryCache()
    )
    first = retriever.retrieve_with_details("light")
    second = retriever.retrieve_with_details("light")
    assert len(llm.log) == 3  # the second run made no LLM call
    assert sorted(second.hypotheses) == sorted(first.hypotheses) == ["one", "three", "two"]
    assert (first.cache_hits, second.cache_hits) == (0, 3)
    assert second.hypothesis_messages == []  # no tokens spent
    assert _ids(second.documents) == _ids(first.documents)


async def test_hypothesis_cache_async_and_persistent(store, tmp_path):
    path = str(tmp_path / "hyp.sqlite")
    llm = ScriptedChat(replies=["alpha", "beta"])

    def make():
        return HyDERetriever(
            vectorstore=store,
            hypothesis_llm=llm,
            n_hypotheses=2,
            hypothesis_cache=SQLiteCache(database_path=path),
        )

    first = await make().aretrieve_with_details("tides")
    second = make().retrieve_with_details("tides")  # a new cache object on the same file
    assert len(llm.log) == 2 and second.cache_hits == 2
    assert sorted(second.hypotheses) == sorted(first.hypotheses) == ["alpha", "beta"]


def test_cache_is_keyed_by_question_and_model_settings(store):
    cache = InMemoryCache()
    llm = ScriptedChat(replies=["p"])
    HyDERetriever(vectorstore=store, hypothesis_llm=llm, hypothesis_cache=cache).invoke("a")
    HyDERetriever(vectorstore=store, hypothesis_llm=llm, hypothesis_cache=cache).invoke("b")
    hotter = ScriptedChat(replies=["p"], delay=0.001)  # other parameters: another model string
    HyDERetriever(vectorstore=store, hypothesis_llm=hotter, hypothesis_cache=cache).invoke("a")
    assert len(llm.log) == 2 and len(hotter.log) == 1


def test_cache_identity_of_local_models_includes_sampling_settings():
    hot = LocalChatModel(model_path="m.gguf", model_name="m", temperature=0.7)
    cold = LocalChatModel(model_path="m.gguf", model_name="m", temperature=0.0)
    assert llm_identity(hot) != llm_identity(cold)
    assert llm_identity(hot) == llm_identity(hot.model_copy())


def test_failures_are_not_cached(store):
    llm = ScriptedChat(replies=["I'm sorry, I can't."])
    retriever = HyDERetriever(
        vectorstore=store, hypothesis_llm=llm, hypothesis_cache=InMemoryCache()
    )
    assert retriever.retrieve_with_details("q").fallback
    retriever.retrieve_with_details("q")
    assert len(llm.log) == 2


def test_a_global_llm_cache_does_not_collapse_samples(store):
    set_llm_cache(InMemoryCache())
    try:
        llm = ScriptedChat(replies=["one", "two", "three"])
        retriever = HyDERetriever(vectorstore=store, hypothesis_llm=llm, n_hypotheses=3)
        retriever.invoke("light")
        again = retriever.retrieve_with_details("light")
        assert sorted(again.hypotheses) != ["one", "one", "one"]
        assert len(set(again.hypotheses)) == 3
    finally:
        set_llm_cache(None)


def test_mmr_and_metadata_filter(store):
    mmr = HyDERetriever(vectorstore=store, hypothesis_llm=ScriptedChat(), search_type="mmr", k=4)
    docs = mmr.invoke("light")
    assert len(docs) == 4 and len({d.id for d in docs}) == 4
    only = HyDERetriever(
        vectorstore=store,
        hypothesis_llm=ScriptedChat(),
        k=3,
        search_kwargs={"filter": {"file_name": "t5.txt"}},
    )
    assert {d.metadata["file_name"] for d in only.invoke("light")} == {"t5.txt"}


def test_result_exposes_the_searched_vectors(store, fake_embeddings):
    retriever = HyDERetriever(
        vectorstore=store, hypothesis_llm=ScriptedChat(replies=["h"]), fusion="rrf"
    )
    result = retriever.retrieve_with_details("q")
    assert result.search_vectors == [
        pytest.approx(fake_embeddings.embed_query("q")),
        pytest.approx(fake_embeddings.embed_documents(["h"])[0]),
    ]


# Other test modules still import the fixture from here; it lives in tests/unit/conftest.py.
store = unit_conftest.store
