"""The results file of `evaluate_questions` / `compare_modes`: never lost, never mixed.

A file that is not a results file is refused untouched; a damaged line is moved aside to
``<file>.corrupt`` (byte for byte) and the records around it are kept; a resume with other
settings is refused with the differences; a second run on one file is refused while the
first holds it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from hyde_lc.errors import HydeLcError
from hyde_lc.evaluation import Question
from hyde_lc.evaluation.compare import compare_modes
from hyde_lc.evaluation.records import EvaluationPipeline
from hyde_lc.evaluation.runs import evaluate_questions, read_questions, read_records
from tests.fakes import WordCountChat
from tests.unit.test_evaluation_runs import QUESTIONS, _llm, _pipeline, _write_questions

fcntl = pytest.importorskip("fcntl")


class NeverRuns(EvaluationPipeline):
    """A pipeline for runs that must be refused before any question is asked."""

    def run(self, question: str, **kwargs: Any) -> dict[str, Any]:
        raise AssertionError(f"a question ran: {question}")


def _questions(tmp_path: Path, n: int = 4) -> list[Question]:
    return read_questions(_write_questions(tmp_path / "q.jsonl", QUESTIONS[:n]))


def _run(questions: list[Question], pipeline: EvaluationPipeline, out: Path, **kw: Any) -> Any:
    return evaluate_questions(questions, pipeline, out, progress=False, **kw)


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def _corrupt(path: Path) -> Path:
    return path.with_name(path.name + ".corrupt")


def _lock_file(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


# -- a file that is not a results file ---------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [
        b"Notes on lighthouses\nThe Pharos was 100 m tall.\n",
        b'{"question": "How do lighthouse lenses work?"}\n{"question": "Who kept them?"}\n',
        b"[1, 2, 3]\n",
        b"just one line without a newline",
    ],
    ids=["notes", "question-file", "json-of-something-else", "one-line"],
)
def test_a_file_that_is_not_a_results_file_is_refused_untouched(tmp_path, store, content):
    out = tmp_path / "notes.txt"
    out.write_bytes(content)
    never = NeverRuns.from_settings(store=store, mode="standard", retrieval_only=True, k=2)
    with pytest.raises(HydeLcError) as refused:
        _run(_questions(tmp_path), never, out)
    message = str(refused.value)
    assert str(out) in message and "not a results file" in message
    assert "--restart" in message and "--out" in message
    assert out.read_bytes() == content
    assert not _corrupt(out).exists() and not _lock_file(out).exists()
    # --restart is the explicit way to replace it.
    summary = _run(_questions(tmp_path), _pipeline(store, mode="standard"), out, resume=False)
    assert summary.done == 4 and len(read_records(out)) == 4


def test_a_damaged_line_is_moved_aside_and_the_records_around_it_are_kept(tmp_path, store):
    questions = _questions(tmp_path)
    out = tmp_path / "out.jsonl"
    _run(questions[:3], _pipeline(store), out)
    first, second, third = _lines(out)
    damaged = b'{"user_input": "How do lighthouse lenses work?", "response": "Pri\n'
    note = b"checked by hand: answers 1-3 look right\n"
    out.write_bytes(first + damaged + second + note + third)

    summary = _run(questions, _pipeline(store), out)
    assert (summary.done, summary.skipped) == (1, 3)  # nothing valid was redone
    assert summary.set_aside == (2, 4)
    assert summary.corrupt_file == _corrupt(out)
    assert _corrupt(out).read_bytes() == damaged + note  # byte for byte
    records = read_records(out)
    assert [r["user_input"] for r in records] == [q.question for q in questions]
    assert _lines(out)[:3] == [first, second, third]  # kept records are not rewritten

    # A later damage is appended to the same .corrupt file, never written over it.
    with out.open("ab") as sink:
        sink.write(b"\x00\x01 garbage\n")
    with out.open("a", encoding="utf-8") as sink:
        sink.write(json.dumps({"another": "tool"}) + "\n")
    summary = _run(questions, _pipeline(store), out)
    assert summary.set_aside == (5, 6) and summary.skipped == 4
    assert _corrupt(out).read_bytes() == damaged + note + b'\x00\x01 garbage\n{"another": "tool"}\n'
    assert len(read_records(out)) == 4


def test_a_line_that_is_not_utf8_is_moved_aside_byte_for_byte(tmp_path, store):
    questions = _questions(tmp_path, 2)
    out = tmp_path / "out.jsonl"
    _run(questions, _pipeline(store), out)
    first, second = _lines(out)
    latin1 = '{"note": "café"}\n'.encode("latin-1")
    out.write_bytes(first + latin1 + second)
    summary = _run(questions, _pipeline(store), out)
    assert summary.set_aside == (2,) and summary.skipped == 2 and summary.done == 0
    assert _corrupt(out).read_bytes() == latin1
    assert out.read_bytes() == first + second


def test_the_damage_is_reported_in_the_log_naming_the_lines_and_the_corrupt_file(
    tmp_path,
    store,
    caplog,
):
    questions = _questions(tmp_path, 2)
    out = tmp_path / "out.jsonl"
    _run(questions, _pipeline(store), out)
    first, second = _lines(out)
    out.write_bytes(first + b"oops\n" + second + b'{"user_input": "half')
    with caplog.at_level("WARNING", logger="hyde_lc"):
        _run(questions, _pipeline(store), out)
    text = caplog.text
    assert f"{out}: line 2 is not a record" in text
    assert "last line was cut short" in text
    assert str(_corrupt(out)) in text


# -- settings ------------------------------------------------------------------------------


def test_records_carry_the_settings_that_made_them(tmp_path, store):
    out = tmp_path / "out.jsonl"
    _run(_questions(tmp_path, 1), _pipeline(store, window=1), out)
    settings = read_records(out)[0]["metadata"]["settings"]
    assert settings["k"] == 2 and settings["window"] == 1 and settings["order"] == "relevance"
    assert settings["retrieval_method"] == "hybrid-hyde+window=1"
    assert settings["retrieval_only"] is False
    assert settings["fusion"] == "mean" and settings["n_hypotheses"] == 1
    assert settings["include_query"] is True and settings["query_weight"] == 0.8
    assert settings["prompt"] == "generic"
    assert settings["hypothesis_model"] == settings["answer_model"] == "WordCountChat:word-counter"
    assert settings["embedding_model"] == "fake:hash-32"
    assert settings["collection"] == "hyde_lc"
    assert settings["store"] == str(tmp_path / "store")
    # the hybrid side is part of the configuration too
    assert settings["lexical"] == "auto" and settings["dense_weight"] == 0.5
    assert settings["hybrid_fusion"] == "score" and settings["lexical_query_repeats"] == 5


def test_settings_that_cannot_matter_are_none(tmp_path, store):
    out = tmp_path / "out.jsonl"
    dense = _pipeline(store, mode="standard", lexical="off")
    _run(_questions(tmp_path, 1), dense, out)
    settings = read_records(out)[0]["metadata"]["settings"]
    assert settings["retrieval_method"] == "standard" and settings["n_hypotheses"] == 0
    for name in ("fusion", "prompt", "query_weight", "dense_weight", "hybrid_fusion", "order"):
        assert settings[name] is None, name
    assert settings["hypothesis_model"] is None


def test_a_resume_with_other_settings_is_refused_listing_the_differences(tmp_path, store):
    questions = _questions(tmp_path)
    out = tmp_path / "out.jsonl"
    _run(questions[:2], _pipeline(store), out)  # k=2, with answers
    before = out.read_bytes()
    other = NeverRuns.from_settings(store=store, custom_hyde_llm=_llm(), k=1, retrieval_only=True)
    with pytest.raises(HydeLcError) as refused:
        _run(questions, other, out)
    message = str(refused.value)
    assert str(out) in message
    assert "k: 2 -> 1" in message and "retrieval_only: false -> true" in message
    assert "answer_model: WordCountChat:word-counter -> none" in message
    assert "--restart" in message and "--out" in message
    assert out.read_bytes() == before

    restarted = _pipeline(store, k=1, retrieval_only=True)
    assert _run(questions, restarted, out, resume=False).done == 4
    assert {r["metadata"]["settings"]["k"] for r in read_records(out)} == {1}


@pytest.mark.parametrize(
    ("change", "difference"),
    [
        ({"window": 1}, "window: 0 -> 1"),
        ({"n_hypotheses": 2}, "n_hypotheses: 1 -> 2"),
        ({"fusion": "rrf"}, "fusion: mean -> rrf"),
        ({"query_weight": 0.5}, "query_weight: 0.8 -> 0.5"),
        ({"include_query": False}, "include_query: true -> false"),
        ({"prompt": "scifact"}, "prompt: generic -> scifact"),
        ({"custom_answer_llm": WordCountChat(model_name="other")}, "answer_model"),
        ({"lexical": "off"}, "retrieval_method: hybrid-hyde -> hyde; lexical: auto -> off"),
        ({"dense_weight": 0.3}, "dense_weight: 0.5 -> 0.3"),
        ({"hybrid_fusion": "rrf"}, "hybrid_fusion: score -> rrf"),
        ({"lexical_query_repeats": 2}, "lexical_query_repeats: 5 -> 2"),
        ({"min_hypothesis_similarity": 0.5}, "min_hypothesis_similarity: none -> 0.5"),
    ],
    ids=[
        "window",
        "n",
        "fusion",
        "weight",
        "hypotheses-only",
        "prompt",
        "answer-model",
        "lexical",
        "dense-weight",
        "hybrid-fusion",
        "repeats",
        "gate",
    ],
)
def test_every_setting_that_shapes_a_record_is_checked(tmp_path, store, change, difference):
    questions = _questions(tmp_path, 1)
    out = tmp_path / "out.jsonl"
    _run(questions, _pipeline(store), out)
    before = out.read_bytes()
    options: dict[str, Any] = {"custom_hyde_llm": _llm(), "custom_answer_llm": _llm(), "k": 2}
    with pytest.raises(HydeLcError, match=difference):
        _run(questions, NeverRuns.from_settings(store=store, **{**options, **change}), out)
    assert out.read_bytes() == before


def test_the_embedding_model_and_the_collection_are_settings(tmp_path, store, fake_embeddings):
    from hyde_lc.ingest.files import ingest_paths
    from hyde_lc.store.vectorstore import open_store

    questions = _questions(tmp_path, 1)
    out = tmp_path / "out.jsonl"
    _run(questions, _pipeline(store), out)
    other = open_store(tmp_path / "store", collection="other", embeddings=fake_embeddings)
    ingest_paths([tmp_path / "docs"], other, progress=False)
    with pytest.raises(HydeLcError, match="collection: hyde_lc -> other"):
        _run(
            questions,
            NeverRuns.from_settings(
                store=other, custom_hyde_llm=_llm(), custom_answer_llm=_llm(), k=2
            ),
            out,
        )


def test_a_file_written_without_settings_still_resumes_and_is_checked(tmp_path, store):
    questions = _questions(tmp_path)
    out = tmp_path / "out.jsonl"
    _run(questions[:2], _pipeline(store), out)
    legacy = []
    for record in read_records(out):  # the records as the package wrote them before
        del record["metadata"]["settings"]
        legacy.append(json.dumps(record, ensure_ascii=False) + "\n")
    out.write_text("".join(legacy), "utf-8")

    answer = {"custom_answer_llm": _llm()}
    with pytest.raises(HydeLcError, match="k: 2 -> 1"):
        _run(
            questions,
            NeverRuns.from_settings(store=store, custom_hyde_llm=_llm(), k=1, **answer),
            out,
        )
    with pytest.raises(HydeLcError, match="retrieval_method: hybrid-hyde -> hybrid"):
        _run(questions, NeverRuns.from_settings(store=store, mode="standard", k=2, **answer), out)
    summary = _run(questions, _pipeline(store), out)
    assert (summary.done, summary.skipped) == (2, 2)
    assert _lines(out)[:2] == [line.encode() for line in legacy]


def test_records_made_before_the_lexical_settings_existed_are_not_mixed(tmp_path, store):
    """A file of dense HyDE records, as written before the hybrid settings existed."""
    questions = _questions(tmp_path)
    out = tmp_path / "out.jsonl"
    _run(questions[:2], _pipeline(store, lexical="off"), out)
    old = []
    for record in read_records(out):
        meta = record["metadata"]
        meta["retrieval_method"] = "hyde"
        settings = meta["settings"]
        settings["mode"] = "hyde"
        for name in ("retrieval_method", "lexical", "dense_weight", "hybrid_fusion",
                     "lexical_query_repeats", "hybrid_candidates", "search_type",
                     "search_kwargs", "max_query_chars", "rrf_candidates",
                     "hypothesis_length", "min_hypothesis_similarity", "before", "after",
                     "max_chars", "candidates"):  # fmt: skip
            settings.pop(name)
        old.append(json.dumps(record, ensure_ascii=False) + "\n")
    out.write_text("".join(old), "utf-8")
    before = out.read_bytes()

    with pytest.raises(HydeLcError) as refused:
        _run(questions, NeverRuns.from_settings(store=store, custom_hyde_llm=_llm(),
                                                custom_answer_llm=_llm(), k=2), out)  # fmt: skip
    message = str(refused.value)
    assert "retrieval_method: hyde -> hybrid-hyde" in message
    assert "lexical: not recorded -> auto" in message
    assert "dense_weight: not recorded -> 0.5" in message and "--restart" in message
    # the same dense configuration is refused too: those records never said so
    with pytest.raises(HydeLcError, match="lexical: not recorded -> off"):
        _run(questions, NeverRuns.from_settings(store=store, custom_hyde_llm=_llm(),
                                                custom_answer_llm=_llm(), k=2, lexical="off"),
             out)  # fmt: skip
    assert out.read_bytes() == before


def test_compare_refuses_a_report_folder_made_with_other_settings(tmp_path, store):
    questions = _questions(tmp_path, 2)
    folder = tmp_path / "report"

    def pipelines(cls: type[EvaluationPipeline], k: int) -> dict[str, EvaluationPipeline]:
        llm = _llm()
        return {
            "standard": cls.from_settings(store=store, mode="standard", custom_answer_llm=llm, k=k),
            "hyde": cls.from_settings(store=store, custom_hyde_llm=llm, custom_answer_llm=llm, k=k),
        }

    compare_modes(
        questions, pipelines(EvaluationPipeline, 2), folder, metrics=["rouge"], progress=False
    )
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    with pytest.raises(HydeLcError) as refused:
        compare_modes(questions, pipelines(NeverRuns, 1), folder, progress=False)
    message = str(refused.value)
    assert "k: 2 -> 1" in message and str(folder / "standard.jsonl") in message
    assert "--restart" in message and "--out-dir" in message
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before

    report = compare_modes(
        questions,
        pipelines(EvaluationPipeline, 1),
        folder,
        metrics=["rouge"],
        resume=False,
        progress=False,
    )
    assert report.aggregates["hyde"]["questions"] == 2
    for mode in ("standard", "hyde"):
        assert [r["metadata"]["k"] for r in read_records(folder / f"{mode}.jsonl")] == [1, 1]


# -- one writer at a time ------------------------------------------------------------------


class WaitsInside(EvaluationPipeline):
    """Signals when its first question starts, then waits until released."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.started = threading.Event()
        self.release = threading.Event()

    def run(self, question: str, **kwargs: Any) -> dict[str, Any]:
        self.started.set()
        assert self.release.wait(120), "the test never released the first run"
        return super().run(question, **kwargs)


def test_a_second_run_on_the_same_file_is_refused_while_the_first_runs(tmp_path, store):
    questions = _questions(tmp_path)
    out = tmp_path / "out.jsonl"
    llm = _llm()
    first = WaitsInside.from_settings(store=store, custom_hyde_llm=llm, custom_answer_llm=llm, k=2)
    errors: list[BaseException] = []

    def run_first() -> None:
        try:
            _run(questions, first, out)
        except BaseException as exc:  # reported below
            errors.append(exc)

    thread = threading.Thread(target=run_first)
    thread.start()
    try:
        assert first.started.wait(120)
        with pytest.raises(HydeLcError, match="in use by another run") as refused:
            _run(questions, _pipeline(store), out)
        assert str(out) in str(refused.value)
    finally:
        first.release.set()
        thread.join(120)
    assert not errors
    keys = [r["metadata"]["question_key"] for r in read_records(out)]
    assert keys == [q.key for q in questions]  # each question once, none lost
    assert not _lock_file(out).exists()  # released and tidied away


def test_a_lock_held_by_another_process_refuses_and_changes_nothing(tmp_path, store):
    questions = _questions(tmp_path, 2)
    out = tmp_path / "out.jsonl"
    _run(questions[:1], _pipeline(store), out)
    before = out.read_bytes()
    with _lock_file(out).open("a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("process 4242\n")
        held.flush()
        never = NeverRuns.from_settings(
            store=store, custom_hyde_llm=_llm(), custom_answer_llm=_llm(), k=2
        )
        for resume in (True, False):  # not even --restart may touch it
            with pytest.raises(HydeLcError, match=r"in use by another run.*process 4242"):
                _run(questions, never, out, resume=resume)
        assert out.read_bytes() == before


def test_a_killed_holder_does_not_leave_the_file_locked(tmp_path, store):
    out = tmp_path / "out.jsonl"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time\n"
            "f = open(sys.argv[1], 'a+'); fcntl.flock(f, fcntl.LOCK_EX)\n"
            "f.write('process x\\n'); f.flush(); print('locked', flush=True); time.sleep(600)",
            str(_lock_file(out)),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        with pytest.raises(HydeLcError, match="in use"):
            _run(_questions(tmp_path, 1), _pipeline(store), out)
    finally:
        holder.kill()
        holder.wait()
    assert _run(_questions(tmp_path, 1), _pipeline(store), out).done == 1


def test_an_output_path_that_is_a_folder_is_refused(tmp_path, store):
    folder = tmp_path / "results"
    folder.mkdir()
    never = NeverRuns.from_settings(store=store, mode="standard", retrieval_only=True, k=2)
    with pytest.raises(HydeLcError, match=f"{folder} is a folder"):
        _run(_questions(tmp_path), never, folder)
    assert list(folder.iterdir()) == []


def test_an_output_path_under_a_file_is_refused(tmp_path, store):
    notes = tmp_path / "notes.txt"
    notes.write_text("keep me\n", "utf-8")
    never = NeverRuns.from_settings(store=store, mode="standard", retrieval_only=True, k=2)
    with pytest.raises(HydeLcError, match=f"{notes} is a file, not a folder"):
        _run(_questions(tmp_path), never, notes / "out.jsonl")
    assert notes.read_text("utf-8") == "keep me\n"
