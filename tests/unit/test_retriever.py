"""HyDERetriever: its public steps, dense fusion, settings, labels, runs, caches and fallbacks.

The hybrid side (dense + BM25) is in test_hybrid.py; tests of the dense fusion's math
pass ``lexical="off"`` so that only the vector search ranks.
"""

import asyncio
import threading
from typing import Any

import numpy as np
import pytest
from langchain_community.cache import SQLiteCache
from langchain_core.caches import InMemoryCache
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.globals import set_llm_cache
from langchain_core.prompts import PromptTemplate
from langchain_core.vectorstores import InMemoryVectorStore
from pydantic import Field

from hyde_lc.core.fusion import Fused, fuse_mean, reciprocal_rank_fusion
from hyde_lc.errors import EmbeddingMismatchError, InvalidSettingError
from hyde_lc.hyde.hypotheses import is_refusal, llm_identity
from hyde_lc.hyde.prompts import PROMPTS
from hyde_lc.models.local_llm import LocalChatModel
from hyde_lc.retrievers.hyde import MAX_HYPOTHESES, HyDERetriever
from hyde_lc.retrievers.label import configuration_label
from hyde_lc.search.lexical import LexicalSearch
from tests.fakes import TOPICS, FakeEmbeddings, RecordingEmbeddings, RunRecorder, ScriptedChat
from tests.unit import conftest as unit_conftest


def _ids(docs):
    return [d.metadata["source"] for d in docs]


def dense(store, **options) -> HyDERetriever:
    """A HyDERetriever that ranks by the vector search alone."""
    return HyDERetriever(vectorstore=store, lexical="off", **options)


# -- the dense fusion ------------------------------------------------------------------------


def test_paper_mean_searches_the_mean_of_query_and_hypothesis_embeddings(store, fake_embeddings):
    hyps = ["Fresnel lenses use prisms.", "Lenses focus the lamp."]
    retriever = dense(
        store,
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
    fused = retriever.fuse(retriever.embed(query, hyps))
    assert fused.vectors == [pytest.approx(expected)] and fused.weights is None
    assert result.search_vectors == [pytest.approx(expected)]


def test_include_query_false_uses_hypotheses_only(store, fake_embeddings):
    hyps = ["Bees make honey."]
    retriever = dense(store, hypothesis_llm=ScriptedChat(replies=hyps), include_query=False)
    fused = retriever.fuse(retriever.embed("anything", hyps))
    assert fused.vectors == [pytest.approx(fake_embeddings.embed_documents(hyps)[0])]


def test_concat_embeds_query_and_hypotheses_as_one_text(store, fake_embeddings):
    retriever = dense(store, hypothesis_llm=ScriptedChat(), fusion="concat")
    fused = retriever.fuse(retriever.embed("Q?", ["H1.", "H2."]))
    assert fused.vectors == [pytest.approx(fake_embeddings.embed_query("Q?\n\nH1.\n\nH2."))]


def test_rrf_equals_rank_fusion_of_the_separate_searches(store, fake_embeddings):
    hyps = TOPICS[4:6]
    retriever = dense(
        store,
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


def test_result_exposes_the_searched_vectors(store, fake_embeddings):
    retriever = HyDERetriever(
        vectorstore=store, hypothesis_llm=ScriptedChat(replies=["h"]), fusion="rrf"
    )
    result = retriever.retrieve_with_details("q")
    assert result.search_vectors == [
        pytest.approx(fake_embeddings.embed_query("q")),
        pytest.approx(fake_embeddings.embed_documents(["h"])[0]),
    ]


# -- the public steps ------------------------------------------------------------------------

HYPS = ["Fresnel lenses use prisms.", "Keepers wound the clockwork."]


@pytest.mark.parametrize(
    ("options", "hypotheses", "texts"),
    [
        ({}, HYPS, ["Q?", *HYPS]),
        ({"fusion": "rrf"}, HYPS, ["Q?", *HYPS]),
        ({"fusion": "concat"}, HYPS, ["\n\n".join(["Q?", *HYPS])]),
        ({"fusion": "concat", "include_query": False}, HYPS, ["\n\n".join(HYPS)]),
        ({"include_query": False}, HYPS, HYPS),
        ({}, [], ["Q?"]),
        ({"include_query": False}, [], ["Q?"]),  # no hypothesis: the query is searched
    ],
    ids=[
        "mean",
        "rrf",
        "concat",
        "concat-hypotheses-only",
        "hypotheses-only",
        "none",
        "none-hyp-only",
    ],
)
def test_embed_returns_the_texts_it_embedded_in_order(store, options, hypotheses, texts):
    embeddings = RecordingEmbeddings(size=32)
    retriever = HyDERetriever(
        vectorstore=store, embeddings=embeddings, hypothesis_llm=ScriptedChat(), **options
    )
    embeddings.read.clear()
    embedded = retriever.embed("Q?", hypotheses)
    assert embedded.texts == texts
    assert embeddings.texts == texts  # what the model read: these texts, nothing more
    reference = FakeEmbeddings(size=32)
    assert embedded.vectors == [pytest.approx(reference.embed_query(t)) for t in texts]
    assert embedded.hypotheses == len(hypotheses)


def test_embed_uses_a_query_vector_it_is_given(store):
    embeddings = RecordingEmbeddings(size=32)
    retriever = HyDERetriever(
        vectorstore=store, embeddings=embeddings, hypothesis_llm=ScriptedChat()
    )
    given = [1.0] + [0.0] * 31
    embeddings.read.clear()
    embedded = retriever.embed("Q?", HYPS, query_vector=given)
    assert embeddings.texts == HYPS  # the query was not embedded again
    assert embedded.texts == ["Q?", *HYPS] and embedded.vectors[0] == given
    assert embedded.query_vector == given


def test_fuse_weights_the_query_and_shares_the_rest_among_hypotheses(store, fake_embeddings):
    q = np.asarray(fake_embeddings.embed_query("Q?"))
    h = np.asarray(fake_embeddings.embed_documents(HYPS))
    mean = HyDERetriever(vectorstore=store, hypothesis_llm=ScriptedChat(), query_weight=0.6)
    (vector,) = mean.fuse(mean.embed("Q?", HYPS)).vectors
    assert vector == pytest.approx((0.6 * q + 0.2 * h[0] + 0.2 * h[1]).tolist())
    rrf = HyDERetriever(
        vectorstore=store, hypothesis_llm=ScriptedChat(), fusion="rrf", query_weight=0.6
    )
    fused = rrf.fuse(rrf.embed("Q?", HYPS))
    assert fused.weights == pytest.approx([0.6, 0.2, 0.2]) and len(fused.vectors) == 3
    paper = HyDERetriever(
        vectorstore=store, hypothesis_llm=ScriptedChat(), fusion="rrf", query_weight=None
    )
    assert paper.fuse(paper.embed("Q?", HYPS)).weights is None
    alone = mean.fuse(mean.embed("Q?", []))
    assert alone.vectors == [pytest.approx(q.tolist())] and alone.dropped == 0


def test_the_steps_composed_give_what_invoke_gives(store):
    retriever = HyDERetriever(vectorstore=store, hypothesis_llm=ScriptedChat(replies=HYPS[:1]), k=3)
    query = "How were the lamps tended?"
    written = retriever.write_hypotheses(query)
    assert written.texts == HYPS[:1] and written.prompts == retriever.build_prompts(query)
    fused = retriever.fuse(retriever.embed(query, written.texts))
    by_steps = retriever.search(fused, 3, query=query, hypotheses=written.texts)
    assert [d.id for d in by_steps] == [d.id for d in retriever.invoke(query)]
    assert all("found_by" in d.metadata for d in by_steps)  # the hybrid search ran


def test_search_takes_any_fused_vector(store, fake_embeddings):
    vector = fake_embeddings.embed_query(TOPICS[2])
    retriever = dense(store, n_hypotheses=0)
    found = retriever.search(Fused([vector]), k=3)
    assert _ids(found) == _ids(store.similarity_search_by_vector(vector, k=3))
    assert all(isinstance(d.metadata["score"], float) for d in found)
    # two vectors are two rankings, fused by rank with the given weights
    other = fake_embeddings.embed_query(TOPICS[6])
    both = retriever.search(Fused([vector, other], weights=[0.9, 0.1]), k=3)
    rankings = [[d.id for d in store.similarity_search_by_vector(v, k=20)] for v in (vector, other)]
    expected = reciprocal_rank_fusion(rankings, weights=[0.9, 0.1])[:3]
    assert [d.id for d in both] == [doc_id for doc_id, _ in expected]
    hybrid = HyDERetriever(vectorstore=store, n_hypotheses=0)
    found = hybrid.search(Fused([vector]), k=1, query="clockwork")
    assert found[0].page_content == TOPICS[1] and "lexical" in found[0].metadata["found_by"]


def test_async_steps_write_the_same_hypotheses(store):
    retriever = HyDERetriever(
        vectorstore=store, hypothesis_llm=ScriptedChat(replies=["one", "two"]), n_hypotheses=2
    )
    written = asyncio.run(retriever.awrite_hypotheses("q"))
    assert sorted(written.texts) == ["one", "two"] and written.fallback is None
    assert HyDERetriever(vectorstore=store, n_hypotheses=0).write_hypotheses("q").texts == []


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"fusion": "rrf"},
        {"fusion": "concat"},
        {"n_hypotheses": 0},
        {"include_query": False},
        {"include_query": False, "min_hypothesis_similarity": 0.0},
        {"llm": ScriptedChat(error=True)},
        {"llm": ScriptedChat(error=True), "include_query": False},
    ],
    ids=[
        "mean",
        "rrf",
        "concat",
        "standard",
        "hypotheses-only",
        "hypotheses-only-gated",
        "fallback",
        "fallback-hypotheses-only",
    ],
)
async def test_embedded_texts_are_every_text_the_embedding_model_read(store, options):
    options = dict(options)
    llm = options.pop("llm", None) or ScriptedChat(replies=HYPS)
    embeddings = RecordingEmbeddings(size=32)
    settings = {"n_hypotheses": 2, **options}
    retriever = HyDERetriever(
        vectorstore=store, embeddings=embeddings, hypothesis_llm=llm, **settings
    )
    for call in (retriever.retrieve_with_details, retriever.aretrieve_with_details):
        embeddings.read.clear()
        result = call("Q?")
        if asyncio.iscoroutine(result):
            result = await result
        assert sorted(result.embedded_texts) == sorted(embeddings.texts)


# -- labels ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "label"),
    [
        ({"n_hypotheses": 0, "lexical": "off"}, "standard"),
        ({"n_hypotheses": 0}, "hybrid"),
        ({}, "hybrid-hyde"),
        ({"lexical": "off"}, "hyde"),
        (
            {"fusion": "rrf", "query_weight": None, "n_hypotheses": 4},
            "hybrid-hyde(fusion=rrf,w=paper,n=4)",
        ),
        ({"fusion": "concat", "lexical": "off"}, "hyde(fusion=concat)"),
        ({"include_query": False, "lexical": "off"}, "hyde(hypotheses-only)"),
        ({"query_weight": 0.6, "lexical": "off"}, "hyde(w=0.6)"),
        ({"min_hypothesis_similarity": 0.5}, "hybrid-hyde(gate=0.5)"),
        ({"prompt": "{question}?"}, "hybrid-hyde(prompt=custom)"),
        ({"prompt": "scifact"}, "hybrid-hyde(prompt=scifact)"),
        ({"n_hypotheses": 0, "dense_weight": 0.3}, "hybrid(dense=0.3)"),
        ({"n_hypotheses": 0, "hybrid_fusion": "rrf"}, "hybrid(hybrid-fusion=rrf)"),
        ({"n_hypotheses": 0, "fusion": "rrf", "query_weight": None}, "hybrid"),  # no HyDE: moot
        ({"n_hypotheses": 0, "dense_weight": 0.3, "lexical": "off"}, "standard"),  # no BM25: moot
    ],
)
def test_the_label_names_the_configuration_and_its_non_default_settings(store, options, label):
    retriever = HyDERetriever(vectorstore=store, hypothesis_llm=ScriptedChat(), **options)
    assert retriever.label == configuration_label(retriever) == label
    result = retriever.retrieve_with_details("light")
    assert result.label == label
    assert all(d.metadata["retrieval_mode"] == label for d in result.documents)
    assert result.lexical == label.startswith("hybrid")


def test_mmr_is_dense_only_and_its_label_says_so(store):
    retriever = HyDERetriever(
        vectorstore=store, hypothesis_llm=ScriptedChat(), search_type="mmr", k=3
    )
    result = retriever.retrieve_with_details("light")
    assert not result.lexical and "found_by" not in result.documents[0].metadata
    assert result.label == "hyde(search=mmr)"


def test_the_label_over_other_stores(fake_embeddings):
    store = InMemoryVectorStore(fake_embeddings)
    store.add_texts(TOPICS, ids=[f"t{i}" for i in range(len(TOPICS))])
    assert HyDERetriever(vectorstore=store, n_hypotheses=0).label == "standard"
    assert HyDERetriever(vectorstore=store, hypothesis_llm=ScriptedChat()).label == "hyde"
    brought = HyDERetriever(
        vectorstore=store, n_hypotheses=0, lexical=LexicalSearch.from_store(store)
    )
    assert brought.label == "hybrid"


def test_documents_carry_score_and_label(store):
    retriever = HyDERetriever(vectorstore=store, hypothesis_llm=ScriptedChat())
    docs = retriever.invoke("light")
    assert retriever.label == "hybrid-hyde"
    assert all(d.metadata["retrieval_mode"] == "hybrid-hyde" for d in docs)
    scores = [d.metadata["score"] for d in docs]
    assert scores == sorted(scores, reverse=True)


def test_zero_hypotheses_is_standard_retrieval(store):
    llm = ScriptedChat(error=True)  # would raise if it were called
    for lexical, label in (("off", "standard"), ("auto", "hybrid")):
        retriever = HyDERetriever(
            vectorstore=store, hypothesis_llm=llm, n_hypotheses=0, k=2, lexical=lexical
        )
        result = retriever.retrieve_with_details(TOPICS[3])
        assert result.label == label and result.hypotheses == [] and result.fallback is None
        assert result.documents[0].page_content == TOPICS[3]
    assert llm.log == []


# -- settings --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"fusion": "max"}, "mean, concat, rrf"),
        ({"prompt": "nope"}, "scifact"),
        ({"prompt": "{QUESTION} given {context}"}, r"\{QUESTION\}, \{context\}: .* one variable"),
        ({"prompt": []}, "at least one prompt"),
        ({"k": 0}, "k must be a whole number of at least 1"),
        ({"k": 2.5}, "k: Input should be a valid integer"),
        ({"n_hypotheses": MAX_HYPOTHESES + 1}, "between 0 .* and 64"),
        ({"n_hypotheses": -1}, "between 0 .* and 64"),
        ({"dense_weight": 2}, "dense_weight must lie between 0 and 1"),
        ({"hybrid_fusion": "max"}, "score, rrf"),
        ({"lexical": "bm25"}, "'auto', 'off' or a LexicalSearch"),
        ({"timeout": 0}, "timeout must be a positive number"),
        ({"hypothesis_llm": None, "n_hypotheses": 1}, "needs a hypothesis_llm"),
        ({"fusoin": "rrf"}, "fusoin: no such setting"),
        ({"rrf_candidates": 0}, "rrf_candidates must be at least 1"),
        ({"max_query_chars": 0}, "max_query_chars must be at least 1"),
    ],
)
def test_invalid_settings_are_refused_at_construction_with_the_fix(store, options, message):
    settings = {"vectorstore": store, "hypothesis_llm": ScriptedChat(), **options}
    with pytest.raises(InvalidSettingError, match=message) as caught:
        HyDERetriever(**settings)
    assert isinstance(caught.value, ValueError)  # what LangChain callers catch
    assert "settings: settings:" not in str(caught.value)


async def test_invalid_settings_are_refused_per_call(store):
    retriever = HyDERetriever(vectorstore=store, hypothesis_llm=ScriptedChat())
    for bad in (0, -1, 1.5, True, "3"):
        with pytest.raises(InvalidSettingError, match="k must be a whole number"):
            retriever.invoke("q", k=bad)
    with pytest.raises(InvalidSettingError, match="k must be"):
        retriever.retrieve_with_details("q", k=0)
    with pytest.raises(InvalidSettingError, match="k must be"):
        await retriever.ainvoke("q", k=0)
    with pytest.raises(InvalidSettingError, match="k must be"):
        await retriever.aretrieve_with_details("q", k=0)


def test_the_usual_langchain_spelling_of_k_sets_the_default(store):
    retriever = HyDERetriever(
        vectorstore=store, hypothesis_llm=ScriptedChat(), search_kwargs={"k": 2}
    )
    assert retriever.k == 2 and "k" not in retriever.search_kwargs
    assert len(retriever.invoke("q")) == 2


def test_other_embeddings_than_the_collection_was_built_with_are_refused(store):
    with pytest.raises(EmbeddingMismatchError):
        HyDERetriever(
            vectorstore=store,
            hypothesis_llm=ScriptedChat(),
            embeddings=FakeEmbeddings(size=32, model_id="fake:other"),
        )


def test_a_store_without_embeddings_needs_them_given():
    class NoEmbeddings(InMemoryVectorStore):
        @property
        def embeddings(self):
            return None

    store = NoEmbeddings(DeterministicFakeEmbedding(size=8))
    with pytest.raises(InvalidSettingError, match="pass embeddings="):
        HyDERetriever(vectorstore=store, n_hypotheses=0)
    given = HyDERetriever(vectorstore=store, n_hypotheses=0, embeddings=FakeEmbeddings(size=8))
    assert isinstance(given.embedding_model, FakeEmbeddings)


def test_prompt_template_alias_and_template_string(store):
    def prompts(prompt):
        retriever = HyDERetriever(vectorstore=store, hypothesis_llm=ScriptedChat(), prompt=prompt)
        return retriever.build_prompts("Why {did} keepers leave?")

    template = PromptTemplate.from_template("Answer as a keeper would: {question}")
    assert prompts(template) == ["Answer as a keeper would: Why {did} keepers leave?"]
    assert prompts("sci_fact") == prompts("scifact")
    assert prompts("sci_fact")[0].startswith(PROMPTS["scifact"].template.split("{")[0])
    assert prompts("Q: {question}\nA:") == ["Q: Why {did} keepers leave?\nA:"]
    with pytest.raises(InvalidSettingError, match="one variable \\(the question\\)"):
        HyDERetriever(
            vectorstore=store,
            hypothesis_llm=ScriptedChat(),
            prompt=PromptTemplate.from_template("{topic}: {question}"),
        )


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
    assert len(retriever.invoke("light", k=100)) == len(TOPICS)  # all there is


# -- hypotheses ------------------------------------------------------------------------------


def test_n_hypotheses_are_distinct_samples(store):
    llm = ScriptedChat(replies=["one", "two", "three"])
    retriever = HyDERetriever(vectorstore=store, hypothesis_llm=llm, n_hypotheses=3)
    assert sorted(retriever.retrieve_with_details("q").hypotheses) == ["one", "three", "two"]


@pytest.mark.parametrize("use_async", [False, True])
async def test_hypotheses_are_generated_concurrently(store, use_async):
    n = 4
    # Each call waits until all n are in flight: made one after another, they would not be.
    llm = ScriptedChat(replies=["a", "b", "c", "d"], rendezvous=n)
    retriever = HyDERetriever(vectorstore=store, n_hypotheses=n, hypothesis_llm=llm)
    if use_async:
        result = await retriever.aretrieve_with_details("light")
    else:
        result = retriever.retrieve_with_details("light")
    assert sorted(result.hypotheses) == ["a", "b", "c", "d"]
    assert llm.max_in_flight == n, "the hypotheses were not written concurrently"


class WaitsForTheQueryVector(ScriptedChat):
    """Writes its passage once the query has been embedded (or gives up after 20 s)."""

    embedded: Any = Field(default_factory=threading.Event)
    saw_query_vector: list[bool] = Field(default_factory=list)

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.saw_query_vector.append(self.embedded.wait(20))
        return super()._generate(messages, stop, run_manager, **kwargs)

    async def _agenerate(self, messages, stop=None, run_manager=None, **kwargs):
        self.saw_query_vector.append(await asyncio.to_thread(self.embedded.wait, 20))
        return await super()._agenerate(messages, stop, run_manager, **kwargs)


@pytest.mark.parametrize("use_async", [False, True])
async def test_the_query_is_embedded_while_the_hypotheses_are_written(store, use_async):
    llm = WaitsForTheQueryVector(replies=["Lenses bend light."])
    query = "How do lenses work?"
    embeddings = RecordingEmbeddings(
        size=32, on_query=lambda text: llm.embedded.set() if text == query else None
    )
    retriever = HyDERetriever(vectorstore=store, embeddings=embeddings, hypothesis_llm=llm)
    embeddings.read.clear()
    if use_async:
        result = await retriever.aretrieve_with_details(query)
    else:
        result = retriever.retrieve_with_details(query)
    # The writer saw the query's vector made before it wrote: the two ran side by side.
    assert llm.saw_query_vector == [True]
    assert embeddings.read == [("query", query), ("documents", "Lenses bend light.")]
    assert result.hypotheses == ["Lenses bend light."] and result.fallback is None


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


async def test_abatch_and_ainvoke_match_sync(store):
    retriever = HyDERetriever(vectorstore=store, n_hypotheses=0, k=2)
    sync = [_ids(d) for d in retriever.batch(TOPICS[:3])]
    asyn = [_ids(d) for d in await retriever.abatch(TOPICS[:3])]
    assert sync == asyn


# -- runs ------------------------------------------------------------------------------------


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


def _shape(recorder: RunRecorder) -> list[tuple[str, bool]]:
    """(kind, whether its parent is the root run) of every run, sorted."""
    (root,) = [r for r in recorder.runs if r[2] is None]
    return sorted((kind, parent == root[1]) for kind, _, parent, _ in recorder.runs)


@pytest.mark.parametrize("use_async", [False, True])
async def test_retrieve_with_details_is_one_retriever_run_like_invoke(store, use_async):
    retriever = HyDERetriever(vectorstore=store, hypothesis_llm=ScriptedChat(), n_hypotheses=2)
    details, plain = RunRecorder(), RunRecorder()
    config = {"callbacks": [details], "tags": ["mine"], "run_name": "lookup"}
    if use_async:
        result = await retriever.aretrieve_with_details("light", config)
        docs = await retriever.ainvoke("light", {**config, "callbacks": [plain]})
    else:
        result = retriever.retrieve_with_details("light", config)
        docs = retriever.invoke("light", {**config, "callbacks": [plain]})
    (root,) = [r for r in details.runs if r[0] == "retriever"]
    assert root[2] is None and "mine" in root[3]
    assert [d.id for d in details.ended[root[1]]] == [d.id for d in result.documents]
    assert (
        _shape(details)
        == _shape(plain)
        == [
            ("hyde.embed", True),
            ("llm", True),
            ("llm", True),
            ("retriever", False),
        ]
    )
    assert [d.id for d in docs] == [d.id for d in result.documents]


# -- caches ----------------------------------------------------------------------------------


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


def test_for_repeated_calls_reuses_the_hypotheses_of_a_query(store):
    llm = ScriptedChat(replies=["one", "two"])
    retriever = HyDERetriever(vectorstore=store, hypothesis_llm=llm)
    repeated = retriever.for_repeated_calls()
    first = repeated.retrieve_with_details("q", k=2)
    deeper = repeated.retrieve_with_details("q", k=5)
    assert len(llm.log) == 1 and deeper.hypotheses == first.hypotheses
    retriever.invoke("q")
    assert len(llm.log) == 2  # the original retriever samples afresh
    assert HyDERetriever(vectorstore=store, n_hypotheses=0).for_repeated_calls().n_hypotheses == 0


# -- search options --------------------------------------------------------------------------


def test_mmr_and_metadata_filter(store):
    mmr = HyDERetriever(vectorstore=store, hypothesis_llm=ScriptedChat(), search_type="mmr", k=4)
    docs = mmr.invoke("light")
    assert len(docs) == 4 and len({d.id for d in docs}) == 4
    assert all(isinstance(d.metadata["score"], float) for d in docs)
    only = HyDERetriever(
        vectorstore=store,
        hypothesis_llm=ScriptedChat(),
        k=3,
        search_kwargs={"filter": {"file_name": "t5.txt"}},
    )
    assert {d.metadata["file_name"] for d in only.invoke("light")} == {"t5.txt"}


# Other test modules still import the fixture from here; it lives in tests/unit/conftest.py.
store = unit_conftest.store


def test_without_a_writer_the_retriever_searches_the_question_itself(store):
    retriever = HyDERetriever(vectorstore=store)  # no hypothesis_llm: the measured default
    result = retriever.retrieve_with_details(TOPICS[1])
    assert retriever.n_hypotheses == 0 and result.hypotheses == []
    assert result.label == "hybrid" and result.documents[0].page_content == TOPICS[1]


@pytest.mark.parametrize("use_async", [False, True])
async def test_retrieve_with_details_keeps_the_run_id_it_is_given(store, use_async):
    """The details come from LangChain's own run: the run id given to it names it."""
    import uuid

    retriever = HyDERetriever(vectorstore=store, hypothesis_llm=ScriptedChat())
    recorder, run_id = RunRecorder(), uuid.uuid4()
    config = {"callbacks": [recorder]}
    if use_async:
        result = await retriever.aretrieve_with_details("light", config, run_id=run_id)
    else:
        result = retriever.retrieve_with_details("light", config, run_id=run_id)
    (root,) = [r for r in recorder.runs if r[0] == "retriever"]
    assert root[1] == run_id and result.documents


async def test_details_of_nested_retrievers_stay_apart(store):
    """A detailed retriever run inside another's run reports to its own caller only."""
    from hyde_lc import NeighborExpandingRetriever

    inner = HyDERetriever(vectorstore=store, hypothesis_llm=ScriptedChat(), k=2)
    outer = NeighborExpandingRetriever(base_retriever=inner, k=2, window=1)
    details = outer.retrieve_with_details("light")
    assert details.label == outer.label and details.rounds >= 1
    assert all("window_start" in d.metadata for d in details.documents)
    again = await outer.aretrieve_with_details("light")
    assert [d.id for d in again.documents] == [d.id for d in details.documents]
