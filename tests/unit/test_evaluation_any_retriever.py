"""Any LangChain retriever can be evaluated and compared beside hyde_lc's own."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_classic.retrievers import EnsembleRetriever
from langchain_core.documents import Document

from hyde_lc import HyDERetriever
from hyde_lc.errors import HydeLcError, InvalidSettingError
from hyde_lc.evaluation.compare import compare_modes
from hyde_lc.evaluation.records import EvaluationPipeline, query_for_evaluation
from hyde_lc.evaluation.runs import evaluate_questions, read_questions, read_records
from hyde_lc.evaluation.usage import embedding_usage
from tests.fakes import FixedHits, ScriptedChat, WordCountChat
from tests.unit.test_comparison_order import REPLIES, WarmableChat
from tests.unit.test_evaluation_runs import QUESTIONS, _write_questions


def test_a_vector_store_retriever_is_evaluated_with_absent_stages_as_none(store):
    answer = ScriptedChat(replies=["Prisms [1]."])
    record = query_for_evaluation(
        "How do lighthouse lenses work?",
        retriever=store.as_retriever(search_kwargs={"k": 2}),
        answer_llm=answer,
        reference="Prisms.",
    )
    assert record["response"] == "Prisms [1]." and len(record["retrieved_contexts"]) == 2
    meta = record["metadata"]
    assert meta["retrieval_method"] == "VectorStoreRetriever(HydeChroma,similarity)"
    assert meta["k"] == 2
    # No hypothesis stage in this retriever: absent, not zero.
    assert meta["stages"]["hypothesis"] is None
    assert meta["hypothesis_time"] is None and meta["hyde_cost"] is None
    assert meta["hypothetical_documents"] is None and meta["lexical"] is None
    assert meta["timings"]["hypothesis_s"] is None and meta["timings"]["retrieval_s"] > 0
    # The question is embedded once by the store's embeddings: that is measured.
    assert meta["stages"]["embedding"]["calls"] == 1
    expected = embedding_usage(["How do lighthouse lenses work?"], store.embeddings)
    assert meta["embedding_tokens"] == expected.input_tokens > 0
    assert meta["embedding_model"] == meta["stages"]["embedding"]["model_id"]
    # ScriptedChat reports 5 in / 7 out: the answer is the only LLM stage.
    assert (meta["input_tokens"], meta["output_tokens"]) == (5, 7)
    assert meta["answer_model_id"] is not None and meta["hyde_model_id"] is None


def test_an_ensemble_of_vector_retrievers_counts_each_embedding_of_the_question(store):
    dense = store.as_retriever(search_kwargs={"k": 2})
    ensemble = EnsembleRetriever(retrievers=[dense, dense], weights=[0.5, 0.5])
    pipeline = EvaluationPipeline(ensemble)
    record = pipeline.run("Who kept lighthouses?")
    meta = record["metadata"]
    assert meta["retrieval_method"].startswith("EnsembleRetriever(VectorStoreRetriever")
    single = EvaluationPipeline(dense).run("Who kept lighthouses?")["metadata"]
    assert meta["embedding_tokens"] == 2 * single["embedding_tokens"]
    assert meta["k"] is None  # an ensemble does not say
    assert record["response"] is None and meta["stages"]["answer"]["calls"] == 0


def test_a_retriever_whose_embedding_use_is_unknown_has_no_made_up_cost(store):
    hits = [Document("Keepers tended the lamp.", id="a"), Document("Oil lamps.", id="b")]
    pipeline = EvaluationPipeline(FixedHits(hits=hits), answer_llm=ScriptedChat(replies=["x"]))
    meta = pipeline.run("Who kept lighthouses?")["metadata"]
    assert meta["stages"]["embedding"] is None and meta["embedding_tokens"] is None
    assert meta["embedding_cost"] is None and meta["total_cost"] is None
    assert "embedding: not measured for a FixedHits" in meta["cost_source"]
    assert meta["retrieval_method"] == "FixedHits"
    assert pipeline.store is None and pipeline.k is None


def test_llm_calls_made_inside_a_retriever_are_recorded_as_their_own_stage():
    class AsksAModel(FixedHits):
        llm: Any = None

        def _get_relevant_documents(self, query, *, run_manager, k=None, **kwargs):
            self.llm.invoke(query, config={"callbacks": run_manager.get_child()})
            return self.hits

    inner = ScriptedChat(replies=["rewritten"])
    retriever = AsksAModel(hits=[Document("Keepers.", id="a")], llm=inner)
    meta = EvaluationPipeline(retriever).run("Who kept lighthouses?")["metadata"]
    used = meta["stages"]["retriever_llm"]
    assert used["calls"] == 1 and (used["input_tokens"], used["output_tokens"]) == (5, 7)
    assert (meta["input_tokens"], meta["output_tokens"]) == (5, 7)


def test_something_that_is_not_a_retriever_is_refused_naming_the_fix(store):
    with pytest.raises(InvalidSettingError, match=r"store\.as_retriever\(\)") as refused:
        EvaluationPipeline(store)  # type: ignore[arg-type]
    assert "HydeChroma" in str(refused.value)


def test_a_file_made_with_another_retriever_configuration_is_refused(tmp_path, store):
    questions = read_questions(_write_questions(tmp_path / "q.jsonl", QUESTIONS[:1]))
    out = tmp_path / "out.jsonl"
    evaluate_questions(
        questions, EvaluationPipeline(store.as_retriever(search_kwargs={"k": 2})), out,
        progress=False,
    )  # fmt: skip
    wider = EvaluationPipeline(store.as_retriever(search_kwargs={"k": 3}))
    with pytest.raises(HydeLcError, match="k: 2 -> 3"):
        evaluate_questions(questions, wider, out, progress=False)


def test_compare_takes_retrievers_built_in_python_warmed_first_then_in_turns(tmp_path, store):
    """A user's own retriever beside hyde_lc's: same answer model, same order rules."""
    questions = read_questions(_write_questions(tmp_path / "q.jsonl", QUESTIONS[:3]))
    log: list[Any] = []
    answer = WarmableChat(model_name="shared", replies=REPLIES, log=log)
    seen: list[tuple[str, str]] = []

    class Logged(FixedHits):
        def _get_relevant_documents(self, query, *, run_manager, k=None, **kwargs):
            seen.append(("mine", query))
            return super()._get_relevant_documents(query, run_manager=run_manager, k=k)

    mine = Logged(hits=[Document("Keepers tended lighthouse lamps.", id="k1")])
    ours = HyDERetriever(vectorstore=store, k=2, n_hypotheses=0)
    report = compare_modes(
        questions,
        {"mine": mine, "hyde_lc": ours},
        tmp_path / "report",
        answer_llm=answer,
        metrics=["rouge"],
        progress=False,
    )
    assert log == [("warm", "shared")]  # one shared model, warmed before any question
    assert seen[0] == ("mine", "Which search terms open the indexes before timing?")
    asked = [q for _, q in seen[1:]]
    assert asked == [q.question for q in questions]
    assert report.modes == ["mine", "hyde_lc"]
    mine_records = read_records(tmp_path / "report" / "mine.jsonl")
    assert [r["metadata"]["retrieval_method"] for r in mine_records] == ["mine"] * 3
    assert report.aggregates["mine"]["hypothesis_tokens_mean"] is None  # absent, not 0
    assert report.aggregates["mine"]["embedding_tokens_mean"] is None
    assert report.aggregates["hyde_lc"]["hypothesis_tokens_mean"] == 0
    assert report.aggregates["mine"]["answer_tokens_mean"] > 0
    assert set(report.load_s["mine"]) == {"retrieval", "answer"}


def test_compare_turns_interleave_a_python_retriever_with_a_pipeline(tmp_path, store):
    questions = read_questions(_write_questions(tmp_path / "q.jsonl", QUESTIONS[:2]))
    order: list[str] = []

    class Logged(FixedHits):
        name_: str = ""

        def _get_relevant_documents(self, query, *, run_manager, k=None, **kwargs):
            order.append(self.name_)
            return super()._get_relevant_documents(query, run_manager=run_manager, k=k)

    hits = [Document("Keepers.", id="k")]
    compare_modes(
        questions,
        {"a": Logged(hits=hits, name_="a"), "b": Logged(hits=hits, name_="b")},
        tmp_path / "r",
        answer_llm=WordCountChat(replies=REPLIES),
        metrics=["rouge"],
        progress=False,
    )
    assert order == ["a", "b", "a", "b", "b", "a"]  # warm-up a, b; then q1 a, b; q2 b, a


@pytest.mark.parametrize("name", ["", "a/b", "../x", ".hidden"])
def test_a_mode_name_that_cannot_name_a_file_is_refused(tmp_path, store, name):
    with pytest.raises(HydeLcError, match="cannot name its records file"):
        compare_modes([], {name: store.as_retriever(), "b": store.as_retriever()}, tmp_path)


def test_a_mode_that_is_neither_a_pipeline_nor_a_retriever_is_refused(tmp_path, store):
    with pytest.raises(HydeLcError, match="give an EvaluationPipeline or a LangChain retriever"):
        compare_modes([], {"a": store, "b": store.as_retriever()}, tmp_path)
