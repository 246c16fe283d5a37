"""Records are found by their question's content: files resume across edits, never mix sets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hyde_lc.errors import HydeLcError
from hyde_lc.evaluation.compare import compare_modes
from hyde_lc.evaluation.ragas_metrics import score_records
from hyde_lc.evaluation.runs import (
    evaluate_questions,
    question_key,
    read_questions,
    read_records,
)
from tests.unit.test_evaluation_output_file import NeverRuns
from tests.unit.test_evaluation_runs import _llm, _pipeline, _write_questions

Q1 = [
    {"question": "How do lighthouse lenses work?", "reference_contexts": ["Lenses bend light."]},
    {"question": "What powers a lighthouse lamp?", "reference_contexts": ["Oil lamps."]},
    {"question": "Who kept lighthouses?", "reference_contexts": ["Keepers tended them."]},
]
Q2 = [
    {"question": "Why are lighthouses tall?", "reference_contexts": ["Seen from afar."]},
    {"question": "Who kept lighthouses?", "reference_contexts": ["Keepers tended them."]},
]


def _run(questions: Any, pipeline: Any, out: Path, **kw: Any) -> Any:
    return evaluate_questions(questions, pipeline, out, progress=False, **kw)


class Counting:
    """Counts the questions a pipeline answers."""

    def __init__(self, pipeline: Any) -> None:
        self.asked: list[str] = []
        original = pipeline.run

        def run(question: str, **kwargs: Any) -> dict[str, Any]:
            self.asked.append(question)
            return original(question, **kwargs)

        pipeline.run = run
        self.pipeline = pipeline


def test_a_question_inserted_at_the_top_is_the_only_one_asked(tmp_path, store):
    out = tmp_path / "out.jsonl"
    _run(read_questions(_write_questions(tmp_path / "q.jsonl", Q1)), _pipeline(store), out)
    grown = [{"question": "Why are lighthouses tall?"}, *Q1]
    counting = Counting(_pipeline(store))
    summary = _run(read_questions(_write_questions(tmp_path / "q.jsonl", grown)),
                   counting.pipeline, out)  # fmt: skip
    assert counting.asked == ["Why are lighthouses tall?"]  # the others were all re-asked
    assert (summary.done, summary.skipped) == (1, 3)
    assert [r["user_input"] for r in read_records(out)] == [q["question"] for q in grown]


def test_a_file_made_from_another_question_set_is_refused_untouched(tmp_path, store):
    out = tmp_path / "r.jsonl"
    _run(read_questions(_write_questions(tmp_path / "q1.jsonl", Q1)), _pipeline(store), out)
    before = out.read_bytes()
    q2 = read_questions(_write_questions(tmp_path / "q2.jsonl", Q2))
    with pytest.raises(HydeLcError) as refused:
        _run(q2, NeverRuns(_pipeline(store).retriever, answer_llm=_llm()), out)
    message = str(refused.value)
    assert "holds 2 records of questions that are not in this question set" in message
    assert "'How do lighthouse lenses work?'" in message
    assert "--set-aside-others" in message and "--restart" in message
    assert out.read_bytes() == before


def test_other_questions_set_aside_leave_only_this_sets_records_to_score(tmp_path, store):
    out = tmp_path / "r.jsonl"
    _run(read_questions(_write_questions(tmp_path / "q1.jsonl", Q1)), _pipeline(store), out)
    q2 = read_questions(_write_questions(tmp_path / "q2.jsonl", Q2))
    counting = Counting(_pipeline(store))
    summary = _run(q2, counting.pipeline, out, set_aside_others=True)
    assert counting.asked == ["Why are lighthouses tall?"]  # the shared question is kept
    assert summary.others_set_aside == 2 and summary.others_file == out.with_name("r.jsonl.other")
    assert [r["user_input"] for r in read_records(out)] == [q["question"] for q in Q2]
    assert len(read_records(summary.others_file)) == 2
    fresh = tmp_path / "fresh.jsonl"
    _run(q2, _pipeline(store), fresh)
    mixed_free = score_records(read_records(out), ["context_recall"])
    assert mixed_free == score_records(read_records(fresh), ["context_recall"])


def test_the_same_question_with_another_reference_is_not_reused(tmp_path, store):
    out = tmp_path / "r.jsonl"
    _run(read_questions(_write_questions(tmp_path / "q.jsonl", Q1[:1])), _pipeline(store), out)
    changed = [{**Q1[0], "reference_contexts": ["Another passage."]}]
    with pytest.raises(HydeLcError, match="changed or removed"):
        _run(read_questions(_write_questions(tmp_path / "q.jsonl", changed)), _pipeline(store), out)


def test_a_question_repeated_in_a_file_is_asked_for_each_line(tmp_path, store):
    out = tmp_path / "r.jsonl"
    questions = read_questions(_write_questions(tmp_path / "q.jsonl", [Q1[0], Q1[1], Q1[0]]))
    assert questions[2].key == questions[0].key + "#2"
    _run(questions, _pipeline(store), out)
    again = _run(questions, _pipeline(store), out)
    assert (again.done, again.skipped) == (0, 3) and len(read_records(out)) == 3


def test_records_keyed_by_line_in_an_older_file_resume_by_their_content(tmp_path, store):
    out = tmp_path / "r.jsonl"
    questions = read_questions(_write_questions(tmp_path / "q.jsonl", Q1))
    _run(questions, _pipeline(store), out)
    old = []
    for number, record in enumerate(read_records(out), start=1):  # as older versions wrote
        record["metadata"]["question_key"] = question_key(number, record["user_input"])
        old.append(json.dumps(record, ensure_ascii=False) + "\n")
    out.write_text("".join(old), "utf-8")
    grown = read_questions(_write_questions(tmp_path / "q.jsonl", [Q2[0], *Q1]))
    counting = Counting(_pipeline(store))
    _run(grown, counting.pipeline, out)
    assert counting.asked == [Q2[0]["question"]]
    assert len(read_records(out)) == 4


def test_compare_refuses_a_folder_made_from_another_question_set(tmp_path, store):
    folder = tmp_path / "report"
    modes = {"standard": _pipeline(store, mode="standard"), "hyde": _pipeline(store)}
    compare_modes(_write_questions(tmp_path / "q1.jsonl", Q1), modes, folder,
                  metrics=["context_recall"], progress=False)  # fmt: skip
    with pytest.raises(HydeLcError, match="not in this question set"):
        compare_modes(_write_questions(tmp_path / "q2.jsonl", Q2), modes, folder,
                      metrics=["context_recall"], progress=False)  # fmt: skip
    report = compare_modes(_write_questions(tmp_path / "q2.jsonl", Q2), modes, folder,
                           metrics=["context_recall"], progress=False,
                           set_aside_others=True)  # fmt: skip
    assert [row["question"] for row in report.per_question] == [q["question"] for q in Q2]
    assert (folder / "hyde.jsonl.other").exists()


# -- question files that cannot be read ------------------------------------------------------


def test_json_nested_too_deep_names_the_file_and_line(tmp_path):
    path = tmp_path / "deep.jsonl"
    path.write_text('{"question": "fine?"}\n' + "[" * 200_000 + "]" * 200_000 + "\n", "utf-8")
    with pytest.raises(HydeLcError, match=rf"{path}:2 nests JSON .* deeper than can be read"):
        read_questions(path)


def test_a_results_line_nested_too_deep_is_set_aside_not_a_crash(tmp_path, store):
    out = tmp_path / "r.jsonl"
    questions = read_questions(_write_questions(tmp_path / "q.jsonl", Q1[:1]))
    _run(questions, _pipeline(store), out)
    with out.open("a", encoding="utf-8") as sink:
        sink.write("[" * 200_000 + "]" * 200_000 + "\n")
    summary = _run(questions, _pipeline(store), out)
    assert summary.set_aside == (2,) and len(read_records(out)) == 1


def test_a_lone_surrogate_names_the_line(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text('{"question": "ok?"}\n{"question": "bad \\ud800 one?"}\n', "utf-8")
    with pytest.raises(HydeLcError, match=rf"{path}:2 holds a lone surrogate"):
        read_questions(path)
