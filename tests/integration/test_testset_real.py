"""A test set from the bundled sample with the default writer (Qwen2.5-Coder 0.5B) and
the default rephraser (the answer model, Qwen2.5-Coder 1.5B), then tune, from the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hyde_lc.evaluation.runs import read_questions
from hyde_lc.evaluation.testset import rejected_path
from tests.fakes import ROOT

pytestmark = pytest.mark.integration


def run(*args: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(ROOT), "HYDE_LC_THREADS": "1", "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-m", "hyde_lc.cli", *args],
        capture_output=True,
        text=True,
        env={**env, **(env_extra or {})},
        cwd=ROOT,
        timeout=300,
    )


def test_testset_then_tune_on_the_sample(sample_store_dir, tmp_path):
    out = tmp_path / "set.jsonl"
    store = ["--store", str(sample_store_dir)]
    made = run(
        "testset", "--n", "1", "--max-drafts", "3", "--out", str(out),
        "--writer", "local:qwen2.5-coder-0.5b", *store,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    drafts = out.read_text().count("\n") + rejected_path(out).read_text().count("\n")
    assert 1 <= drafts <= 3
    if not out.read_text().strip():
        pytest.skip(f"the writer's drafts were all dropped: {rejected_path(out).read_text()}")
    questions = read_questions(out)  # what hyde-lc evaluate reads
    for q in questions:
        assert q.reference_context_ids and q.reference_contexts
        assert q.extra["source"].endswith("lighthouses.pdf")
    dropped = [json.loads(line) for line in rejected_path(out).read_text().splitlines()]
    pairs = [(q.extra["testset"]["first_draft"], q.question) for q in questions]
    pairs += [(r["first_draft"], r["question"]) for r in dropped if r["reason"] != "unparsed"]
    for first, question in pairs:  # the writer's draft, then the rephraser's question
        assert first and question
    assert any(first != question for first, question in pairs)
    for q in questions:
        assert q.extra["testset"]["rephraser"].startswith("qwen2.5-coder-1.5b")
    tuned = run(
        "tune", str(out), "--configs", "dense", "bm25", "hybrid", "--windows", "0", "1",
        "--out-dir", str(tmp_path / "report"), *store,
    )  # fmt: skip
    assert tuned.returncode == 0, tuned.stderr
    assert "recommended: " in tuned.stdout and "hyde-lc: --mode standard" in tuned.stdout
    report = json.loads((tmp_path / "report" / "tune.json").read_text())
    assert [r["name"] for r in report["rows"]] == ["dense", "bm25", "hybrid"]
    assert [w["window"] for w in report["windows"]] == [0, 1]
