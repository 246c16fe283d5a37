"""results_table: Ragas' scores beside each record's tokens, cost, times and models."""

from __future__ import annotations

import warnings

import pytest

from hyde_lc.errors import HydeLcError
from hyde_lc.evaluation import results_table, score_records
from hyde_lc.evaluation.records import EvaluationPipeline
from tests.fakes import ScriptedChat


@pytest.fixture
def records(store):
    llm = ScriptedChat(replies=["Lenses bend light. [1]", "Keepers. [1]"])
    pipeline = EvaluationPipeline.from_settings(
        store=store, mode="standard", custom_answer_llm=llm, k=2
    )
    return [
        pipeline.run("How do lighthouse lenses work?", reference="Lenses bend light."),
        pipeline.run("Who kept lighthouses?", reference="Keepers did."),
    ]


def _ragas(records):
    from ragas import EvaluationDataset, evaluate

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from ragas.metrics import RougeScore

        return evaluate(
            EvaluationDataset.from_list(records), metrics=[RougeScore()], show_progress=False
        )


def test_ragas_drops_the_metadata_and_results_table_joins_it_back(records):
    result = _ragas(records)  # the records as they are: Ragas takes them, metadata and all
    assert "total_cost" not in result.to_pandas().columns  # what the join is for
    table = results_table(result, records)
    assert list(table["user_input"]) == [r["user_input"] for r in records]
    assert table["rouge_score(mode=fmeasure)"].between(0, 1).all()
    for row, record in zip(table.to_dict("records"), records, strict=True):
        meta = record["metadata"]
        for key in ("input_tokens", "output_tokens", "embedding_tokens", "total_cost",
                    "execution_time", "answer_time", "answer_model_id", "embedding_model",
                    "retrieval_method"):  # fmt: skip
            assert row[key] == meta[key], key
        assert row["answer_input_tokens"] == meta["stages"]["answer"]["input_tokens"] == 5
        assert row["hypothesis_output_tokens"] == 0  # standard: the stage ran no call


def test_the_scores_of_score_records_join_the_same_way(records):
    table = results_table(score_records(records, ["rouge", "string_similarity"]), records)
    assert {"user_input", "response", "reference", "rouge", "total_cost"} <= set(table.columns)
    assert list(table["answer_output_tokens"]) == [7, 7]


def test_the_table_says_which_context_metrics_ran_and_why_a_metric_is_null(records):
    for record in records:
        record["reference_contexts"] = ["light"]  # short next to every chunk
    table = results_table(score_records(records), records)
    assert {"contained_context_recall", "contained_context_precision"} <= set(table.columns)
    assert "context_recall" not in table.columns
    assert "under half as long" in table.attrs["chosen"]["contained_context_recall"]
    assert table.attrs["not_scored"]["id_context_recall"] == "no record has reference_context_ids"


def test_rows_that_do_not_pair_with_the_records_are_refused(records):
    result = _ragas(records)
    with pytest.raises(HydeLcError, match=r"in the order given to EvaluationDataset\.from_list"):
        results_table(result, list(reversed(records)))
    with pytest.raises(HydeLcError, match="2 rows and there are 1 records"):
        results_table(result, records[:1])
    with pytest.raises(HydeLcError, match="got a str"):
        results_table("scores", records)


def test_a_stage_absent_from_a_record_is_missing_in_the_table(store, records):
    other = EvaluationPipeline(store.as_retriever(search_kwargs={"k": 2}))
    mixed = [records[0], other.run("Who kept lighthouses?")]
    table = results_table(score_records(mixed, ["rouge"]), mixed)
    assert table["hypothesis_input_tokens"].isna().tolist() == [False, True]  # missing, not 0
    # no hypotheses written in either: no time, rather than the few microseconds of a no-op
    assert table["hypothesis_time"].isna().tolist() == [True, True]
