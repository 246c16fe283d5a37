"""``hyde-lc evaluate`` / ``compare`` through the real command: what it refuses, what it keeps.

A real embedded Chroma store with the sample PDF (MiniLM embeddings); retrieval-only
standard runs need no LLM. Every refusal exits 2, names the file and the way on, and leaves
the output file byte for byte as it was.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hyde_lc.evaluation import read_records
from tests.fakes import ROOT

pytestmark = pytest.mark.integration
HYDE_LC = str(Path(sys.executable).parent / "hyde-lc")
SAMPLE_QUESTIONS = ROOT / "hyde_lc" / "sample" / "questions.jsonl"
RETRIEVAL = ("--mode", "standard", "--retrieval-only")


@pytest.fixture(scope="module")
def env(sample_store_dir):
    return {
        **{k: v for k, v in os.environ.items() if k != "HYDE_LC_PRICING"},
        "HYDE_LC_STORE": str(sample_store_dir),  # read only: evaluate never writes to it
        "HYDE_LC_HYPOTHESIS_LLM": "local:smollm2-135m",
        "HYDE_LC_ANSWER_LLM": "local:smollm2-135m",
        "HYDE_LC_THREADS": os.environ.get("HYDE_LC_THREADS", "1"),
    }


@pytest.fixture
def questions(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text(
        "".join(SAMPLE_QUESTIONS.read_text("utf-8").splitlines(keepends=True)[:2]), "utf-8"
    )
    return path


def run(env, *args):
    return subprocess.run([HYDE_LC, *args], env=env, capture_output=True, text=True, timeout=600)


def refused(done, *fragments):
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    for fragment in fragments:
        assert fragment in done.stderr, done.stderr


def test_a_notes_file_given_as_out_is_refused_untouched(env, questions, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("Pharos: 100 m? check the source.\nFresnel: 1823\n", "utf-8")
    before = notes.read_bytes()
    done = run(env, "evaluate", str(questions), "--out", str(notes), *RETRIEVAL)
    refused(done, str(notes), "not a results file", "--restart", "--out")
    assert notes.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "q.jsonl"]


def test_the_question_file_given_as_out_is_refused_even_with_restart(env, questions):
    before = questions.read_bytes()
    for extra in ((), ("--restart",)):
        done = run(env, "evaluate", str(questions), "--out", str(questions), *RETRIEVAL, *extra)
        refused(done, "is the question file")
    assert questions.read_bytes() == before


def test_a_resume_with_other_settings_is_refused_with_the_differences(env, questions, tmp_path):
    out = tmp_path / "out.jsonl"
    first = run(env, "evaluate", str(questions), "--out", str(out), "--k", "2", *RETRIEVAL)
    assert first.returncode == 0, first.stderr
    before = out.read_bytes()
    done = run(env, "evaluate", str(questions), "--out", str(out), "--k", "1", *RETRIEVAL)
    refused(done, str(out), "k: 2 -> 1", "--restart")
    assert out.read_bytes() == before

    again = run(env, "evaluate", str(questions), "--out", str(out), "--k", "1", *RETRIEVAL,
                "--restart")  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert [r["metadata"]["k"] for r in read_records(out)] == [1, 1]


def test_a_second_run_is_refused_while_another_holds_the_file(env, questions, tmp_path):
    out = tmp_path / "out.jsonl"
    first = run(env, "evaluate", str(questions), "--out", str(out), "--k", "2", *RETRIEVAL)
    assert first.returncode == 0, first.stderr
    before = out.read_bytes()
    with (tmp_path / "out.jsonl.lock").open("a+") as held:  # as a running evaluate holds it
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("process 4242\n")
        held.flush()
        for extra in ((), ("--restart",)):
            done = run(env, "evaluate", str(questions), "--out", str(out), "--k", "2",
                       *RETRIEVAL, *extra)  # fmt: skip
            refused(done, str(out), "in use by another run", "process 4242")
        assert out.read_bytes() == before
    after = run(env, "evaluate", str(questions), "--out", str(out), "--k", "2", *RETRIEVAL)
    assert after.returncode == 0 and "0 answered, 2 already in" in after.stdout


def test_a_damaged_line_is_moved_aside_and_reported(env, questions, tmp_path):
    out = tmp_path / "out.jsonl"
    first = run(env, "evaluate", str(questions), "--out", str(out), "--k", "2", *RETRIEVAL)
    assert first.returncode == 0, first.stderr
    one, two = out.read_bytes().splitlines(keepends=True)
    out.write_bytes(one + b"edited by hand\n" + two)
    done = run(env, "evaluate", str(questions), "--out", str(out), "--k", "2", *RETRIEVAL)
    assert done.returncode == 0, done.stderr
    corrupt = tmp_path / "out.jsonl.corrupt"
    assert f"{out}: line 2 is not a record" in done.stderr and str(corrupt) in done.stderr
    assert "0 answered, 2 already in" in done.stdout
    assert corrupt.read_bytes() == b"edited by hand\n"
    assert out.read_bytes() == one + two


def _missing_store(env, tmp_path):
    """An env whose store does not exist: a check made after opening it would say so."""
    return {**env, "HYDE_LC_STORE": str(tmp_path / "no-store")}


def test_an_out_folder_is_refused_before_the_store_or_any_model_is_opened(env, questions, tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    done = run(_missing_store(env, tmp_path), "evaluate", str(questions), "--out", str(folder))
    refused(done, f"--out {folder} is a folder")
    assert list(folder.iterdir()) == [] and not (tmp_path / "no-store").exists()
    report = tmp_path / "report.txt"
    report.write_text("a file", "utf-8")
    done = run(_missing_store(env, tmp_path), "compare", str(questions), "--out-dir", str(report))
    refused(done, f"--out-dir {report} is a file")


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "no such file"), ("{oops", "is not valid JSON"), ("[]", "must be a JSON object")],
    ids=["missing", "bad-json", "wrong-shape"],
)
def test_a_bad_pricing_variable_is_refused_before_anything_runs(
    env, questions, tmp_path, content, message
):
    pricing = tmp_path / "pricing.json"
    if content is not None:
        pricing.write_text(content, "utf-8")
    bad = {**_missing_store(env, tmp_path), "HYDE_LC_PRICING": str(pricing)}
    out = tmp_path / "out.jsonl"
    for command in (
        ("evaluate", str(questions), "--out", str(out)),
        ("compare", str(questions), "--out-dir", str(tmp_path / "report")),
    ):
        refused(run(bad, *command), f"HYDE_LC_PRICING={pricing}", message)
    assert not out.exists() and not (tmp_path / "report").exists()


def test_a_question_file_that_is_not_utf8_names_the_line(env, tmp_path):
    questions = tmp_path / "q.jsonl"
    questions.write_bytes(
        json.dumps({"question": "Who built the Pharos?"}).encode() + b"\n"
        + '{"question": "Où est le phare?"}\n'.encode("latin-1")
    )  # fmt: skip
    done = run(env, "evaluate", str(questions), "--out", str(tmp_path / "out.jsonl"))
    refused(done, f"{questions}:2 is not UTF-8")


def test_compare_refuses_a_report_folder_made_with_other_settings(env, tmp_path):
    questions = tmp_path / "q.jsonl"
    questions.write_text(SAMPLE_QUESTIONS.read_text("utf-8").splitlines(keepends=True)[0], "utf-8")
    report = tmp_path / "report"
    args = ("compare", str(questions), "--out-dir", str(report), "--modes", "standard",
            "--window", "1", "--retrieval-only", "--metrics", "rouge")  # fmt: skip
    first = run(env, *args, "--k", "2")
    assert first.returncode == 0, first.stderr
    before = {p.name: p.read_bytes() for p in report.iterdir()}
    done = run(env, *args, "--k", "1")
    refused(done, "k: 2 -> 1", "--restart", "--out-dir")
    assert {p.name: p.read_bytes() for p in report.iterdir()} == before
    again = run(env, *args, "--k", "1", "--restart")
    assert again.returncode == 0, again.stderr
    assert [r["metadata"]["k"] for r in read_records(report / "standard.jsonl")] == [1]


def test_records_without_the_lexical_settings_are_not_resumed(env, questions, tmp_path):
    out = tmp_path / "out.jsonl"
    args = ("evaluate", str(questions), "--out", str(out), "--k", "2", *RETRIEVAL)
    first = run(env, *args, "--lexical", "off")
    assert first.returncode == 0, first.stderr
    assert {r["metadata"]["retrieval_method"] for r in read_records(out)} == {"standard"}
    lines = []
    for record in read_records(out):  # as written before the lexical settings existed
        for name in ("lexical", "dense_weight", "hybrid_fusion", "lexical_query_repeats"):
            record["metadata"]["settings"].pop(name)
        lines.append(json.dumps(record) + "\n")
    out.write_text("".join(lines), "utf-8")
    before = out.read_bytes()
    done = run(env, *args)  # hybrid by default now
    refused(done, "retrieval_method: standard -> hybrid", "lexical: not recorded -> auto")
    assert out.read_bytes() == before


def test_score_says_why_context_metrics_are_null(env, questions, tmp_path):
    """The sample questions have references but no reference_contexts."""
    out = tmp_path / "r.jsonl"
    done = run(env, "evaluate", str(questions), "--out", str(out), *RETRIEVAL, "--score")
    assert done.returncode == 0, done.stderr
    scores = json.loads(done.stdout[done.stdout.index("{") :])
    assert scores["context_recall"] is None and scores["context_precision"] is None
    assert "context_precision, context_recall: null: no record has reference_contexts" in (
        done.stderr
    )
    assert f'give each question in {questions} "reference_contexts"' in done.stderr


def test_results_of_another_question_file_are_refused_then_set_aside(env, tmp_path):
    lines = SAMPLE_QUESTIONS.read_text("utf-8").splitlines(keepends=True)
    q1, q2 = tmp_path / "q1.jsonl", tmp_path / "q2.jsonl"
    q1.write_text("".join(lines[:2]), "utf-8")
    q2.write_text("".join(lines[1:3]), "utf-8")  # one question shared, one new
    out = tmp_path / "r.jsonl"
    assert run(env, "evaluate", str(q1), "--out", str(out), *RETRIEVAL).returncode == 0
    before = out.read_bytes()
    done = run(env, "evaluate", str(q2), "--out", str(out), *RETRIEVAL, "--score")
    refused(done, "holds 1 record of questions that are not in this question set",
            "--set-aside-others", "--restart")  # fmt: skip
    assert out.read_bytes() == before
    moved = run(env, "evaluate", str(q2), "--out", str(out), *RETRIEVAL, "--set-aside-others")
    assert moved.returncode == 0, moved.stderr
    assert "1 answered, 1 already in" in moved.stdout
    assert f"1 record(s) of questions not in {q2} moved to {out}.other" in moved.stderr
    asked = [json.loads(line)["question"] for line in lines[1:3]]
    assert [r["user_input"] for r in read_records(out)] == asked
