"""Context metrics that read like the truth: a reference inside a chunk counts as found."""

from __future__ import annotations

import json

import pytest
from ragas.exceptions import LLMDidNotFinishException

from hyde_lc.cli.evaluate import chosen_notes, null_notes
from hyde_lc.evaluation import EvaluationPipeline, choose_metrics, compare_modes, score_records
from hyde_lc.evaluation.containment import (
    contained_precision,
    contained_recall,
    contains,
    found_share,
)
from hyde_lc.evaluation.ragas_metrics import (
    CONTAINED_PAIR,
    STRING_PAIR,
    choose_context_metrics,
)
from hyde_lc.evaluation.scoring_failures import NO_ERROR, failure_reason
from tests.fakes import ScriptedChat, WordCountChat

SENTENCE = "The first Fresnel lens was installed in the Cordouan lighthouse in 1823."
FILLER = (
    "Lighthouses mark dangerous coasts and harbour entrances, and each has its own pattern "
    "of flashes so that sailors can tell one light from another at night. "
)


def chunk_with(sentence: str, before: int = 5, after: int = 5) -> str:
    """A chunk of about 1,000 characters with ``sentence`` in its middle."""
    return FILLER * before + sentence + " " + FILLER * after


def test_a_reference_inside_a_chunk_is_found_whatever_its_spacing_and_case():
    chunk = chunk_with(
        "The first Fresnel lens was installed\nin the  Cordouan\tLighthouse in 1823."
    )
    assert len(chunk) > 1000
    assert found_share(SENTENCE.upper(), chunk) == 1.0
    assert found_share("ＴＨＥ  first Fresnel lens", chunk) == 1.0  # full-width (NFKC)
    assert contains(chunk, SENTENCE)


def test_a_near_miss_still_counts_and_unrelated_text_does_not():
    chunk = chunk_with(SENTENCE)
    assert contains(chunk, "The first Fresnell lens was instaled at the Cordouan lighthouse, 1823.")
    assert not contains(chunk, "Keepers rowed out to the rock every three weeks with supplies.")
    assert found_share("Keepers rowed out to the rock every three weeks.", chunk) < 0.7


def test_a_sentence_cut_at_the_chunks_edge_is_not_contained():
    first_half = SENTENCE[: len(SENTENCE) // 2]
    chunk = FILLER * 5 + first_half  # the other half is in the next chunk
    assert found_share(SENTENCE, chunk) == pytest.approx(0.5, abs=0.1)
    assert not contains(chunk, SENTENCE)


def test_chinese_references_are_found_across_line_breaks_and_full_width_punctuation():
    reference = "一八二三年，科尔杜昂灯塔装上了第一台菲涅耳透镜。"
    chunk = (
        "灯塔是一种为船只指引方向的建筑。" * 10
        + "一八二三年,科尔杜昂灯塔装上了\n第一台菲涅耳透镜。"
        + "守塔人住在塔旁的小屋里。" * 10
    )
    assert contains(chunk, reference)
    assert not contains(chunk, "泉州的六胜塔是宋元时期的航标。")


def test_precision_is_rank_aware_and_recall_counts_references_found():
    hit, miss = chunk_with(SENTENCE), chunk_with("")
    other = "The Pharos of Alexandria was designed by Sostratus of Cnidus."
    assert contained_precision([hit, miss], [SENTENCE]) == 1.0
    assert contained_precision([miss, hit], [SENTENCE]) == 0.5
    assert contained_precision([miss, miss], [SENTENCE]) == 0.0
    assert contained_recall([miss, hit], [SENTENCE, other]) == 0.5
    assert contained_recall([miss, chunk_with(other), hit], [SENTENCE, other]) == 1.0


def record(retrieved: list[str], references: list[str], **more) -> dict:
    return {
        "user_input": "Where was the first Fresnel lens installed?",
        "retrieved_contexts": retrieved,
        "reference_contexts": references,
        **more,
    }


def test_short_references_in_long_chunks_get_the_containment_pair_by_default():
    records = [record([chunk_with(SENTENCE), chunk_with("")], [SENTENCE])]
    pair, why = choose_context_metrics(records)
    assert pair == CONTAINED_PAIR
    assert why is not None and "under half as long" in why
    scores = score_records(records)
    assert scores[0]["contained_context_recall"] == 1.0
    assert scores[0]["contained_context_precision"] == 1.0
    assert not set(STRING_PAIR) & set(scores[0])  # the other pair did not run
    assert scores.chosen["contained_context_recall"] == why
    assert set(choose_metrics(records=records)[0]) >= set(CONTAINED_PAIR)


def test_references_as_long_as_the_chunks_keep_ragas_string_metrics():
    chunk = chunk_with(SENTENCE)
    records = [record([chunk], [chunk[:-20]])]
    pair, why = choose_context_metrics(records)
    assert pair == STRING_PAIR and why is not None and "at least half" in why
    assert choose_context_metrics([record([chunk], [])]) == (STRING_PAIR, None)  # no data
    assert "context_recall" in score_records(records)[0]


def test_ragas_string_metrics_can_still_be_named():
    records = [record([chunk_with(SENTENCE)], [SENTENCE])]
    scores = score_records(records, ["context_recall", "contained_context_recall"])
    assert scores[0] == {"context_recall": 0.0, "contained_context_recall": 1.0}
    assert scores.chosen == {}


def test_a_judge_that_stops_at_its_token_cap_is_named_in_not_scored():
    judge = ScriptedChat(replies=['{"statements": ["The lens'], finish_reason="length")
    records = [record([chunk_with(SENTENCE)], [SENTENCE], response="In 1823, at Cordouan.")]
    scores = score_records(records, ["faithfulness"], judge_llm=judge)
    assert scores[0]["faithfulness"] is None
    reason = scores.not_scored["faithfulness"]
    assert "did not finish its output" in reason and "LLMDidNotFinishException" in reason
    assert "max_tokens" in reason


def test_an_unparsable_judge_reply_is_named_on_every_record():
    judge = ScriptedChat(replies=["I cannot answer in JSON."])
    records = [
        record([chunk_with(SENTENCE)], [SENTENCE], response="In 1823."),
        record([chunk_with(SENTENCE)], [SENTENCE], response="At Cordouan."),
    ]
    scores = score_records(records, ["faithfulness"], judge_llm=judge)
    assert [row["faithfulness"] for row in scores] == [None, None]
    reason = scores.not_scored["faithfulness"]
    assert reason.startswith("the judge's reply was not the JSON Ragas asked for")
    assert "(RagasOutputParserException)" in reason


def test_failures_are_counted_by_kind_and_unknown_ones_keep_their_message():
    errors = {0: TimeoutError(), 2: RuntimeError("model exploded")}
    reason = failure_reason(errors, rows=4, unscored=3)
    assert reason.startswith("3 of 4 records: a job ran past the timeout (TimeoutError)")
    assert "(on 1); Ragas raised RuntimeError: model exploded (on 1); " in reason
    assert reason.endswith(f"{NO_ERROR} (on 1)")  # a NaN without an exception
    assert failure_reason({}, rows=2, unscored=2) == NO_ERROR


def test_compare_chooses_one_context_pair_for_every_mode_and_says_why(tmp_path, store):
    llm = WordCountChat(replies={"Passage:": "Lenses and prisms.", "Context:": "Prisms. [1]"})
    rows = [
        {"question": "How do lighthouse lenses work?", "reference_contexts": ["concentric prisms"]},
        {"question": "Who wound the clockwork?", "reference_contexts": ["wound the clockwork"]},
    ]
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    pipelines = {
        mode: EvaluationPipeline.from_settings(
            store=store, mode=mode, k=k, custom_hyde_llm=llm, custom_answer_llm=llm
        )
        for mode, k in (("standard", 1), ("hyde", 3))
    }
    report = compare_modes(questions, pipelines, tmp_path / "report", progress=False)
    assert set(report.chosen) == set(CONTAINED_PAIR)
    for mode in ("standard", "hyde"):
        assert report.aggregates[mode]["contained_context_recall"] is not None
        assert "context_recall" not in report.aggregates[mode]
    summary = json.loads((report.out_dir / "summary.json").read_text("utf-8"))
    assert summary["metrics_chosen"] == report.chosen
    assert summary["not_scored"]["id_context_recall"] == "no record has reference_context_ids"
    page = report.html_path.read_text("utf-8")
    assert "contained_context_precision, contained_context_recall: chosen: the reference" in page
    assert "no score: no record has reference_context_ids" in page


def test_the_cli_says_which_pair_ran_and_how_to_give_the_judge_more_tokens():
    reason = failure_reason({0: LLMDidNotFinishException()}, rows=1, unscored=1)
    (note,) = null_notes({"faithfulness": reason}, "qs.jsonl")
    assert note.startswith("faithfulness: null: the judge did not finish its output")
    assert note.endswith("(from the command line: --judge-max-tokens, 1024 by default)")
    assert chosen_notes(dict.fromkeys(CONTAINED_PAIR, "short references")) == [
        "contained_context_precision, contained_context_recall: chosen: short references"
    ]
