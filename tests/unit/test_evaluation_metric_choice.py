"""Which metrics score: those the given judges allow, and every null explained."""

from __future__ import annotations

import logging

import pytest

from hyde_lc.cli.evaluate import null_notes
from hyde_lc.errors import HydeLcError
from hyde_lc.evaluation import choose_metrics, score_records
from hyde_lc.evaluation.records import EvaluationPipeline
from tests.fakes import ScriptedChat


@pytest.fixture
def retrieved_only(store):
    """Records without answers or references: no metric that needs them can run."""
    pipeline = EvaluationPipeline(store.as_retriever(search_kwargs={"k": 2}))
    return [pipeline.run("How do lighthouse lenses work?"), pipeline.run("Who kept them?")]


def test_a_judge_without_embeddings_scores_what_it_can_and_says_what_it_left_out(
    retrieved_only, caplog
):
    judge = ScriptedChat(replies=["unused"])
    with caplog.at_level(logging.WARNING, logger="hyde_lc.evaluation.ragas_metrics"):
        scores = score_records(retrieved_only, judge_llm=judge)  # raised before
    assert list(scores.left_out) == ["answer_relevancy"]
    assert "judge_embeddings" in scores.left_out["answer_relevancy"]
    assert "answer_relevancy needs judge_embeddings" in caplog.text
    assert set(scores[0]) == {*choose_metrics(judge)[0]}
    assert {"faithfulness", "llm_context_precision"} <= set(scores[0])


def test_the_metrics_a_judge_allows():
    judge = ScriptedChat()
    assert "faithfulness" not in choose_metrics()[0]
    assert set(choose_metrics()[1]) == {"faithfulness", "answer_relevancy", "llm_context_precision"}
    assert set(choose_metrics(judge)[1]) == {"answer_relevancy"}
    assert choose_metrics(judge, object())[1] == {}  # type: ignore[arg-type]


def test_naming_answer_relevancy_without_embeddings_is_still_an_error(retrieved_only):
    with pytest.raises(HydeLcError, match="judge_embeddings"):
        score_records(retrieved_only, ["answer_relevancy"], judge_llm=ScriptedChat())


def test_each_null_metric_says_which_column_no_record_has(retrieved_only):
    scores = score_records(retrieved_only)
    assert scores.not_scored["context_recall"] == "no record has reference_contexts"
    assert scores.not_scored["id_context_recall"] == "no record has reference_context_ids"
    assert scores.not_scored["rouge"] == "no record has reference or response"
    assert all(value is None for row in scores for value in row.values())


def test_a_metric_that_scored_some_record_is_not_called_null(store):
    pipeline = EvaluationPipeline(store.as_retriever(search_kwargs={"k": 2}))
    first = pipeline.run("How do lighthouse lenses work?", reference_contexts=["Lenses."])
    scores = score_records([first, pipeline.run("Who kept them?")], ["context_recall"])
    assert scores.not_scored == {} and scores[0]["context_recall"] is not None


def test_the_cli_notes_name_the_question_file_and_the_field_to_add():
    notes = null_notes(
        {
            "context_precision": "no record has reference_contexts",
            "context_recall": "no record has reference_contexts",
            "rouge": "no record has reference or response",
        },
        "qs.jsonl",
    )
    assert notes[0].startswith("context_precision, context_recall: null: no record has ")
    assert 'give each question in qs.jsonl "reference_contexts": [' in notes[0]
    assert '"reference": "the expected answer"' in notes[1]
