"""A comparison measures its modes alike: warmed before any timed question, then in turns."""

from __future__ import annotations

import json
from typing import Any

from hyde_lc.evaluation.compare import compare_modes, turns
from hyde_lc.evaluation.records import EvaluationPipeline
from hyde_lc.evaluation.runs import evaluate_questions, read_questions
from tests.fakes import WordCountChat
from tests.unit.test_evaluation_runs import QUESTIONS, _write_questions

REPLIES = {"Passage:": "Lighthouse lenses and lamps.", "Context:": "They bend light. [1]"}


class WarmableChat(WordCountChat):
    """A local-like model: warmed once before its first call (which it checks); logs both."""

    log: Any  # the test's own list (a list[...] field would be copied)
    warmed: bool = False

    def warm_up(self) -> float:
        if not self.warmed:
            self.log.append(("warm", self.model_name))
            self.warmed = True
        return 0.0

    def _generate(self, messages, stop=None, run_manager=None, **kwargs: Any):
        assert self.warmed, "a timed call ran before the model was warmed"
        return super()._generate(messages, stop, run_manager, **kwargs)


class LoggedPipeline(EvaluationPipeline):
    """Logs each question it answers, under the name of its mode."""

    log: list[Any]
    mode_name = ""

    def run(self, question: str, **kwargs: Any) -> dict[str, Any]:
        self.log.append(("run", self.mode_name, question))
        return super().run(question, **kwargs)


def _pipelines(store: Any, log: list[Any]) -> dict[str, EvaluationPipeline]:
    pipelines: dict[str, EvaluationPipeline] = {}
    for name, mode in (("standard", "standard"), ("hyde", "hyde")):
        llm = WarmableChat(model_name=name, replies=REPLIES, log=log)
        pipeline = LoggedPipeline.from_settings(
            store=store, mode=mode, custom_hyde_llm=llm, custom_answer_llm=llm, k=2
        )
        pipeline.log, pipeline.mode_name = log, name
        pipelines[name] = pipeline
    return pipelines


def test_modes_are_warmed_first_then_take_turns_question_by_question(tmp_path, store):
    questions = read_questions(_write_questions(tmp_path / "q.jsonl", QUESTIONS[:3]))
    log: list[Any] = []
    report = compare_modes(
        questions, _pipelines(store, log), tmp_path / "report", metrics=["rouge"], progress=False
    )
    texts = [q.question for q in questions]
    assert log == [
        ("warm", "standard"),
        ("warm", "hyde"),
        ("run", "standard", texts[0]),
        ("run", "hyde", texts[0]),
        ("run", "hyde", texts[1]),
        ("run", "standard", texts[1]),
        ("run", "standard", texts[2]),
        ("run", "hyde", texts[2]),
    ]
    # Load time is reported per mode and stage, beside the latencies and never in them.
    assert set(report.load_s["standard"]) == {"retrieval", "answer"}
    assert set(report.load_s["hyde"]) == {"retrieval", "hypothesis", "answer"}
    for mode in ("standard", "hyde"):
        aggregates = report.aggregates[mode]
        assert aggregates["load_time_s"] == sum(report.load_s[mode].values())
    summary = json.loads((report.out_dir / "summary.json").read_text("utf-8"))
    assert summary["load_s"] == json.loads(json.dumps(report.load_s))
    page = report.html_path.read_text("utf-8")
    assert "took turns question by question" in page and "Loading before the first" in page


def test_a_comparison_with_nothing_left_to_ask_loads_nothing(tmp_path, store):
    questions = read_questions(_write_questions(tmp_path / "q.jsonl", QUESTIONS[:2]))
    compare_modes(
        questions, _pipelines(store, []), tmp_path / "report", metrics=["rouge"], progress=False
    )
    log: list[Any] = []
    report = compare_modes(
        questions, _pipelines(store, log), tmp_path / "report", metrics=["rouge"], progress=False
    )
    assert log == [] and report.load_s == {}
    assert report.aggregates["hyde"]["load_time_s"] is None
    assert "answered by an earlier run" in report.html_path.read_text("utf-8")


def test_a_resumed_comparison_asks_only_what_each_mode_lacks_in_turns(tmp_path, store):
    questions = read_questions(_write_questions(tmp_path / "q.jsonl", QUESTIONS[:3]))
    folder = tmp_path / "report"
    hyde_only = _pipelines(store, [])["hyde"]
    evaluate_questions(questions[:1], hyde_only, folder / "hyde.jsonl", progress=False)
    log: list[Any] = []
    compare_modes(questions, _pipelines(store, log), folder, metrics=["rouge"], progress=False)
    texts = [q.question for q in questions]
    assert [entry[1:] for entry in log if entry[0] == "run"] == [
        ("standard", texts[0]),
        ("hyde", texts[1]),
        ("standard", texts[1]),
        ("standard", texts[2]),
        ("hyde", texts[2]),
    ]


def test_turns_rotate_so_each_mode_goes_first_in_turn():
    modes = ["standard", "hyde", "hyde-window1"]
    assert [turns(modes, i)[0] for i in range(4)] == [
        "standard",
        "hyde",
        "hyde-window1",
        "standard",
    ]
    assert all(sorted(turns(modes, i)) == sorted(modes) for i in range(4))


def test_evaluate_warms_the_pipeline_before_its_first_question(tmp_path, store):
    questions = read_questions(_write_questions(tmp_path / "q.jsonl", QUESTIONS[:2]))
    log: list[Any] = []
    pipeline = _pipelines(store, log)["hyde"]
    summary = evaluate_questions(questions, pipeline, tmp_path / "out.jsonl", progress=False)
    assert log[0] == ("warm", "hyde") and [e[0] for e in log[1:]] == ["run", "run"]
    assert set(summary.load_s) == {"retrieval", "hypothesis", "answer"}
    again = evaluate_questions(questions, pipeline, tmp_path / "out.jsonl", progress=False)
    assert again.load_s == {} and len(log) == 3  # nothing to ask: nothing loaded


def test_warming_never_calls_a_model_without_its_own_warm_up(store):
    remote_like = WordCountChat(replies=REPLIES)  # no warm_up: a call would cost tokens
    pipeline = EvaluationPipeline.from_settings(
        store=store, custom_hyde_llm=remote_like, custom_answer_llm=remote_like, k=2
    )
    assert set(pipeline.warm_up()) == {"retrieval"}
    assert remote_like.prompts == []


def test_the_progress_bar_names_the_modes_as_the_table_does(tmp_path, store, monkeypatch):
    from hyde_lc.evaluation import compare

    shown: list[str] = []

    def recording_tqdm(iterable, desc="", **kwargs):
        shown.append(desc)
        return iterable

    monkeypatch.setattr(compare, "tqdm", recording_tqdm)
    questions = read_questions(_write_questions(tmp_path / "q.jsonl", QUESTIONS[:1]))
    report = compare_modes(
        questions, _pipelines(store, []), tmp_path / "report", metrics=["rouge"], progress=True
    )
    assert shown == [f"compare ({', '.join(report.modes)})"] == ["compare (standard, hyde)"]
