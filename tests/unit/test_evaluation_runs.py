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
from hyde_lc.evaluation.runs import Question, evaluate_questions, read_questions, read_records
from tests.fakes import ScriptedChat, WordCountChat

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


def _pipeline(store: Any, **options: Any) -> EvaluationPipeline:
    llm = _llm()
    options.setdefault("k", 2)
    return EvaluationPipeline.from_settings(
        store=store, custom_hyde_llm=llm, custom_answer_llm=llm, **options
    )


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

    left = 0

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


def test_resumed_run_equals_an_uninterrupted_one(tmp_path, store):
    questions = read_questions(_write_questions(tmp_path / "q.jsonl", QUESTIONS))
    whole = tmp_path / "whole.jsonl"
    summary = evaluate_questions(questions, _pipeline(store), whole, progress=False)
    assert (summary.done, summary.skipped, summary.failed) == (4, 0, 0)

    resumed = tmp_path / "resumed.jsonl"
    llm = _llm()
    dying = DiesAfter.from_settings(store=store, custom_hyde_llm=llm, custom_answer_llm=llm, k=2)
    dying.left = 2
    with pytest.raises(KeyboardInterrupt):
        evaluate_questions(questions, dying, resumed, progress=False)
    assert len(read_records(resumed)) == 2  # what finished was kept
    with resumed.open("a", encoding="utf-8") as sink:
        sink.write('{"user_input": "half a rec')  # killed mid-write
    assert len(read_records(resumed)) == 2

    summary = evaluate_questions(questions, _pipeline(store), resumed, progress=False)
    assert (summary.done, summary.skipped) == (2, 2)
    # The torn line is redone, and kept aside rather than destroyed.
    assert summary.set_aside == (3,)
    assert (tmp_path / "resumed.jsonl.corrupt").read_text("utf-8") == '{"user_input": "half a rec\n'
    assert _without_timings(read_records(resumed)) == _without_timings(read_records(whole))
    assert resumed.read_text("utf-8").endswith("}\n")
    # A third run has nothing left to do and changes nothing.
    before = resumed.read_bytes()
    assert evaluate_questions(questions, _pipeline(store), resumed, progress=False).done == 0
    assert resumed.read_bytes() == before


def test_failures_are_recorded_per_question_and_can_be_retried(tmp_path, store):
    questions = read_questions(_write_questions(tmp_path / "q.jsonl", QUESTIONS[:2]))
    out = tmp_path / "out.jsonl"
    broken = EvaluationPipeline.from_settings(
        store=store, mode="standard", custom_answer_llm=ScriptedChat(error=True), k=2
    )
    summary = evaluate_questions(questions, broken, out, progress=False)
    assert (summary.done, summary.failed) == (0, 2)
    records = read_records(out)
    assert all("model exploded" in r["metadata"]["error"] for r in records)
    # Without --retry-errors a rerun keeps the failures; with it they are redone in place.
    # (The same model, working again: another model would be other settings, refused.)
    working = ScriptedChat(replies=["They bend light. [1]"])
    fixed = EvaluationPipeline.from_settings(
        store=store, mode="standard", custom_answer_llm=working, k=2
    )
    assert evaluate_questions(questions, fixed, out, progress=False).done == 0
    summary = evaluate_questions(questions, fixed, out, retry_errors=True, progress=False)
    assert (summary.done, summary.failed) == (2, 0)
    records = read_records(out)
    assert [r["user_input"] for r in records] == [q.question for q in questions]
    assert not any(r["metadata"].get("error") for r in records)


def test_a_file_from_another_retrieval_method_is_not_mixed(tmp_path, store):
    questions = read_questions(_write_questions(tmp_path / "q.jsonl", QUESTIONS[:1]))
    out = tmp_path / "out.jsonl"
    evaluate_questions(questions, _pipeline(store), out, progress=False)
    standard = _pipeline(store, mode="standard")
    with pytest.raises(HydeLcError, match="--restart"):
        evaluate_questions(questions, standard, out, progress=False)
    evaluate_questions(questions, standard, out, resume=False, progress=False)
    assert [r["metadata"]["retrieval_method"] for r in read_records(out)] == ["hybrid"]


def test_offline_ragas_scores_records_without_any_model(store):
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


def test_judged_metrics_need_a_judge_and_unknown_metrics_are_refused(store):
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


def test_compare_writes_valid_pngs_html_and_summary(tmp_path, store):
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


# -- the question file ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"question": "q?", "reference": 5}, '"reference" must be a string'),
        ({"question": "q?", "reference_contexts": "one text"}, '"reference_contexts" must be'),
        ({"question": "q?", "reference_contexts": ["ok", 7]}, '"reference_contexts" must be'),
        ({"question": "q?", "reference_context_ids": [None]}, '"reference_context_ids" must'),
        ({"question": 5}, "has no question"),
        (["q?"], "is not a JSON object"),
    ],
    ids=["reference", "contexts-string", "contexts-item", "ids-item", "question", "array"],
)
def test_a_field_of_the_wrong_type_is_refused_at_read_time_naming_the_line(tmp_path, row, message):
    path = _write_questions(tmp_path / "q.jsonl", [QUESTIONS[0], row])
    with pytest.raises(HydeLcError, match=message) as refused:
        read_questions(path)
    assert f"{path}:2 " in str(refused.value)


def test_a_question_file_that_is_not_utf8_names_the_file_and_line(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_bytes(b'{"question": "fine?"}\n' + '{"question": "café?"}\n'.encode("cp1252"))
    with pytest.raises(HydeLcError, match="is not UTF-8") as refused:
        read_questions(path)
    assert f"{path}:2 " in str(refused.value) and "save it as UTF-8" in str(refused.value)


def test_a_byte_order_mark_is_not_a_broken_first_line(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(QUESTIONS[0]).encode() + b"\n")
    assert [q.question for q in read_questions(path)] == [QUESTIONS[0]["question"]]


# -- hand-built questions ------------------------------------------------------------------


def test_hand_built_questions_get_keys_from_their_text_and_reference():
    lamp, tower = Question("What powers a lamp?"), Question("Why are towers tall?")
    assert lamp.key and tower.key and lamp.key != tower.key
    assert Question("What powers a lamp?").key == lamp.key  # stable across runs
    assert Question("What powers a lamp?", reference="Oil.").key != lamp.key
    assert Question("x?", key="mine").key == "mine"


def test_a_hand_built_question_added_later_is_asked_not_skipped(tmp_path, store):
    out = tmp_path / "out.jsonl"
    first = Question("How do lighthouse lenses work?")
    evaluate_questions([first], _pipeline(store), out, progress=False)
    second = Question("Who kept lighthouses?")
    summary = evaluate_questions([first, second], _pipeline(store), out, progress=False)
    assert (summary.done, summary.skipped) == (1, 1)
    assert [r["user_input"] for r in read_records(out)] == [first.question, second.question]


def test_the_same_key_twice_in_one_run_is_refused_naming_both(tmp_path, store):
    out = tmp_path / "out.jsonl"
    twice = [Question("Who kept lighthouses?"), Question("Why?"), Question("Who kept lighthouses?")]
    with pytest.raises(HydeLcError, match=r"questions 1 and 3 .*'Who kept lighthouses\?'"):
        evaluate_questions(twice, _pipeline(store), out, progress=False)
    same_key = [Question("a?", key="k1"), Question("b?", key="k1")]
    with pytest.raises(HydeLcError, match="questions 1 and 2 share the key 'k1'"):
        compare_modes(
            same_key,
            {"standard": _pipeline(store, mode="standard"), "hyde": _pipeline(store)},
            tmp_path / "report",
            progress=False,
        )
    assert not out.exists() and not (tmp_path / "report").exists()


def test_compare_pairs_each_hand_built_question_with_its_own_answer(tmp_path, store):
    llm = WordCountChat(
        replies={"lamp": "Lamps burned oil.", "tower": "Towers are seen from afar."}
    )
    pipelines = {
        "standard": EvaluationPipeline.from_settings(
            store=store, mode="standard", custom_answer_llm=llm, k=2
        ),
        "hyde": EvaluationPipeline.from_settings(
            store=store, custom_hyde_llm=llm, custom_answer_llm=llm, k=2
        ),
    }
    questions = [Question("What did a lamp burn?"), Question("Why is a tower tall?")]
    report = compare_modes(
        questions, pipelines, tmp_path / "report", metrics=["rouge"], progress=False
    )
    answers = [row["standard"]["answer"] for row in report.per_question]
    assert answers == ["Lamps burned oil.", "Towers are seen from afar."]


# -- pricing -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        ("{not json", "is not valid JSON"),
        ('{"as_of": "2025-01-01", "models": ["gpt-4o"]}', '"models" must map'),
        ('{"as_of": "2025-01-01", "models": {"gpt-4o": {"input": "cheap"}}}', "gpt-4o"),
        ('{"models": {}}', '"as_of"'),
    ],
    ids=["missing", "bad-json", "models-list", "price-not-number", "no-date"],
)
def test_a_bad_pricing_file_is_refused_naming_the_variable_before_any_llm_call(
    tmp_path,
    store,
    monkeypatch,
    content,
    message,
):
    from hyde_lc.evaluation.pricing import PricingTable

    pricing = tmp_path / "pricing.json"
    if content is not None:
        pricing.write_text(content, "utf-8")
    monkeypatch.setenv("HYDE_LC_PRICING", str(pricing))
    with pytest.raises(HydeLcError, match=message) as refused:
        PricingTable.load()
    assert f"HYDE_LC_PRICING={pricing}" in str(refused.value)

    llm = _llm()
    out = tmp_path / "out.jsonl"
    pipeline = EvaluationPipeline.from_settings(
        store=store, custom_hyde_llm=llm, custom_answer_llm=llm, k=2
    )
    with pytest.raises(HydeLcError, match="HYDE_LC_PRICING"):
        evaluate_questions([Question("What powers a lamp?")], pipeline, out, progress=False)
    assert llm.prompts == [] and not out.exists()


# -- plots ---------------------------------------------------------------------------------


@pytest.fixture
def svg_backend():
    import matplotlib

    before = matplotlib.get_backend()
    matplotlib.use("svg")
    yield
    matplotlib.use(before)


def test_compare_leaves_the_matplotlib_backend_alone(tmp_path, store, svg_backend):
    import matplotlib

    questions = read_questions(_write_questions(tmp_path / "q.jsonl", QUESTIONS[:1]))
    report = compare_modes(
        questions,
        {"standard": _pipeline(store, mode="standard"), "hyde": _pipeline(store)},
        tmp_path / "report",
        metrics=["rouge"],
        progress=False,
    )
    assert matplotlib.get_backend() == "svg"  # a notebook's backend stays as it was
    assert (report.out_dir / "metrics.png").read_bytes().startswith(PNG_SIGNATURE)
