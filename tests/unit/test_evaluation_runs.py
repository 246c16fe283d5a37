"""Evaluation runs (resume, failures), offline Ragas scoring, and the comparison report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hyde_lc.errors import HydeLcError
from hyde_lc.evaluation.compare import compare_modes, judge_pair
from hyde_lc.evaluation.ragas_metrics import mean_scores, score_records
from hyde_lc.evaluation.records import EvaluationPipeline
from hyde_lc.evaluation.runs import evaluate_questions, read_questions, read_records
from tests.unit.test_evaluation_records import WordCountChat
from tests.unit.test_retriever import ScriptedChat, store  # noqa: F401  (fixture)

TIMING_KEYS = {"execution_time", "hypothesis_time", "retrieval_time", "answer_time", "timings"}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
QUESTIONS = [
    {"question": "How do lighthouse lenses work?", "reference": "They bend light with prisms."},
    {"user_input": "What powers a lighthouse lamp?", "reference": "Oil, then electricity."},
    {"question": "Who kept lighthouses?", "reference": "Keepers.", "topic": "people"},
    {"question": "Why are lighthouses tall?", "reference": "To be seen from far away."},
]


def _llm() -> WordCountChat:
    return WordCountChat(
        replies={"Passage:": "Lighthouse lenses and lamps.", "Context:": "They bend light. [1]"}
    )


def _pipeline(store: Any, **options: Any) -> EvaluationPipeline:  # noqa: F811
    llm = _llm()
    options.setdefault("k", 2)
    return EvaluationPipeline(store=store, custom_hyde_llm=llm, custom_answer_llm=llm, **options)


def _write_questions(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    return path


def _without_timings(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for record in records:
        meta = {k: v for k, v in record["metadata"].items() if k not in TIMING_KEYS}
        out.append({**record, "metadata": meta})
    return out


class DiesAfter(EvaluationPipeline):
    """A pipeline whose process is "killed" (BaseException) on the n-th question."""

    def __init__(self, n: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.left = n

    def run(self, question: str, **kwargs: Any) -> dict[str, Any]:
        if self.left == 0:
            raise KeyboardInterrupt
        self.left -= 1
        return super().run(question, **kwargs)


def test_read_questions_accepts_question_or_user_input_and_keeps_extras(tmp_path):
    questions = read_questions(_write_questions(tmp_path / "q.jsonl", QUESTIONS))
    assert [q.question for q in questions][:2] == [
        "How do lighthouse lenses work?",
        "What powers a lighthouse lamp?",
    ]
    assert questions[2].extra == {"topic": "people"}
    assert len({q.key for q in questions}) == 4


@pytest.mark.parametrize(
    ("text", "message"),
    [("{not json\n", "not valid JSON"), ('{"reference": "x"}\n', "has no question"), ("\n", "")],
)
def test_bad_question_files_name_the_line(tmp_path, text, message):
    path = tmp_path / "q.jsonl"
    path.write_text(text, "utf-8")
    with pytest.raises(HydeLcError, match=message or "holds no questions"):
        read_questions(path)


def test_resumed_run_equals_an_uninterrupted_one(tmp_path, store):  # noqa: F811
    questions = read_questions(_write_questions(tmp_path / "q.jsonl", QUESTIONS))
    whole = tmp_path / "whole.jsonl"
    summary = evaluate_questions(questions, _pipeline(store), whole, progress=False)
    assert (summary.done, summary.skipped, summary.failed) == (4, 0, 0)

    resumed = tmp_path / "resumed.jsonl"
    llm = _llm()
    dying = DiesAfter(2, store=store, custom_hyde_llm=llm, custom_answer_llm=llm, k=2)
    with pytest.raises(KeyboardInterrupt):
        evaluate_questions(questions, dying, resumed, progress=False)
    assert len(read_records(resumed)) == 2  # what finished was kept
    with resumed.open("a", encoding="utf-8") as sink:
        sink.write('{"user_input": "half a rec')  # killed mid-write
    assert len(read_records(resumed)) == 2

    summary = evaluate_questions(questions, _pipeline(store), resumed, progress=False)
    assert (summary.done, summary.skipped) == (2, 2)
    assert _without_timings(read_records(resumed)) == _without_timings(read_records(whole))
    assert resumed.read_text("utf-8").endswith("}\n")
    # A third run has nothing left to do and changes nothing.
    before = resumed.read_bytes()
    assert evaluate_questions(questions, _pipeline(store), resumed, progress=False).done == 0
    assert resumed.read_bytes() == before


def test_failures_are_recorded_per_question_and_can_be_retried(tmp_path, store):  # noqa: F811
    questions = read_questions(_write_questions(tmp_path / "q.jsonl", QUESTIONS[:2]))
    out = tmp_path / "out.jsonl"
    broken = EvaluationPipeline(
        store=store, mode="standard", custom_answer_llm=ScriptedChat(error=True), k=2
    )
    summary = evaluate_questions(questions, broken, out, progress=False)
    assert (summary.done, summary.failed) == (0, 2)
    records = read_records(out)
    assert all("model exploded" in r["metadata"]["error"] for r in records)
    # Without --retry-errors a rerun keeps the failures; with it they are redone in place.
    fixed = EvaluationPipeline(store=store, mode="standard", custom_answer_llm=_llm(), k=2)
    assert evaluate_questions(questions, fixed, out, progress=False).done == 0
    summary = evaluate_questions(questions, fixed, out, retry_errors=True, progress=False)
    assert (summary.done, summary.failed) == (2, 0)
    records = read_records(out)
    assert [r["user_input"] for r in records] == [q.question for q in questions]
    assert not any(r["metadata"].get("error") for r in records)


def test_a_file_from_another_retrieval_method_is_not_mixed(tmp_path, store):  # noqa: F811
    questions = read_questions(_write_questions(tmp_path / "q.jsonl", QUESTIONS[:1]))
    out = tmp_path / "out.jsonl"
    evaluate_questions(questions, _pipeline(store), out, progress=False)
    standard = _pipeline(store, mode="standard")
    with pytest.raises(HydeLcError, match="--restart"):
        evaluate_questions(questions, standard, out, progress=False)
    evaluate_questions(questions, standard, out, resume=False, progress=False)
    assert [r["metadata"]["retrieval_method"] for r in read_records(out)] == ["standard"]


def test_offline_ragas_scores_records_without_any_model(store):  # noqa: F811
    pipeline = _pipeline(store)
    first = pipeline.run("How do lighthouse lenses work?", reference="They bend light. [1]")
    ids = first["retrieved_context_ids"]
    first["reference_context_ids"] = [ids[0], "not-retrieved"]
    first["reference_contexts"] = [first["retrieved_contexts"][0]]
    second = pipeline.run("Who kept lighthouses?")  # no reference: answer metrics skip it
    scores = score_records([first, second])
    assert scores[0]["string_similarity"] == pytest.approx(1.0)  # identical strings
    assert scores[0]["id_context_recall"] == pytest.approx(0.5)
    assert scores[0]["context_recall"] == pytest.approx(1.0)
    assert 0.0 < scores[0]["rouge"] <= 1.0
    assert all(value is None for value in scores[1].values())
    means = mean_scores(scores)
    assert means["id_context_recall"] == pytest.approx(0.5)


def test_judged_metrics_need_a_judge_and_unknown_metrics_are_refused(store):  # noqa: F811
    record = _pipeline(store).run("How do lighthouse lenses work?", reference="Prisms.")
    with pytest.raises(HydeLcError, match="judge"):
        score_records([record], ["faithfulness"])
    with pytest.raises(HydeLcError, match="choose from"):
        score_records([record], ["accuracy"])


def test_judge_pair_asks_both_orders_and_splits_to_tie():
    consistent = ScriptedChat(replies=["A", "B"])  # prefers the first answer in both orders
    assert judge_pair(consistent, "q?", "one", "two") == "first"
    biased = ScriptedChat(replies=["A"])  # always the first position: position bias
    assert judge_pair(biased, "q?", "one", "two") == "tie"


def test_compare_writes_valid_pngs_html_and_summary(tmp_path, store):  # noqa: F811
    questions = read_questions(_write_questions(tmp_path / "q.jsonl", QUESTIONS[:3]))
    report = compare_modes(
        questions,
        {"standard": _pipeline(store, mode="standard"), "hyde": _pipeline(store)},
        tmp_path / "report",
        metrics=["string_similarity", "rouge"],
        pairwise_judge=ScriptedChat(replies=["TIE"]),
        progress=False,
    )
    for name in ("metrics.png", "latency.png", "tokens.png"):
        data = (report.out_dir / name).read_bytes()
        assert data.startswith(PNG_SIGNATURE) and len(data) > 1000, name
    page = report.html_path.read_text("utf-8")
    assert "standard" in page and "hyde" in page and 'src="metrics.png"' in page
    assert "Who kept lighthouses?" in page
    summary = json.loads((report.out_dir / "summary.json").read_text("utf-8"))
    assert summary["pairwise"] == {"standard": 0, "hyde": 0, "tie": 3}
    hyde, standard = summary["aggregates"]["hyde"], summary["aggregates"]["standard"]
    assert hyde["questions"] == standard["questions"] == 3
    assert hyde["hypothesis_tokens_mean"] > 0 and standard["hypothesis_tokens_mean"] == 0
    assert 0.0 <= hyde["rouge"] <= 1.0
    assert len(summary["per_question"]) == 3
    assert {"standard", "hyde"} <= set(summary["per_question"][0])
    assert (report.out_dir / "standard.jsonl").exists() and (report.out_dir / "hyde.jsonl").exists()


def test_cli_evaluate_and_compare_refuse_bad_input_before_loading_anything(tmp_path, capsys):
    from hyde_lc.cli import main

    out = tmp_path / "out.jsonl"
    assert main(["evaluate", str(tmp_path / "missing.jsonl"), "--out", str(out)]) == 2
    assert "no question file" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"reference": "x"}\n', "utf-8")
    assert main(["compare", str(bad), "--out-dir", str(tmp_path / "r")]) == 2
    assert f"{bad}:1 has no question" in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "r").exists()
