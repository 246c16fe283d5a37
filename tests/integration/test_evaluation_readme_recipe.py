"""The README's recipe "Evaluating your own retriever beside hyde_lc's", run as written."""

from __future__ import annotations

import pytest

from hyde_lc.evaluation import read_records
from hyde_lc.models import loading as models
from tests.fakes import ROOT
from tests.readme import own_block

pytestmark = pytest.mark.integration


def test_the_readme_recipe_runs_as_written(sample_store_dir, tmp_path, monkeypatch, capsys):
    lines = (ROOT / "hyde_lc" / "sample" / "questions.jsonl").read_text("utf-8").splitlines()
    (tmp_path / "questions.jsonl").write_text(lines[0] + "\n", "utf-8")
    monkeypatch.chdir(tmp_path)
    # Short answers keep the test fast; the recipe's code runs unchanged.
    monkeypatch.setitem(models.ROLE_MAX_TOKENS, "answer", 48)
    monkeypatch.setenv("HYDE_LC_STORE", str(sample_store_dir))  # read only
    monkeypatch.setenv("HYDE_LC_ANSWER_LLM", "local:smollm2-135m")
    exec(compile(own_block(__file__), "README.md", "exec"), {})  # our own README, as a user runs it
    printed = capsys.readouterr().out
    assert "user_input" in printed and "total_cost" in printed
    mine = read_records(tmp_path / "report" / "mine.jsonl")
    ours = read_records(tmp_path / "report" / "hyde_lc.jsonl")
    assert len(mine) == len(ours) == 1
    assert mine[0]["metadata"]["stages"]["answer"]["input_tokens"] > 0
    assert all(r["metadata"]["stages"]["hypothesis"] is None for r in mine)
    assert all(r["metadata"]["retrieval_method"] == "mine" for r in mine)
    assert all(r["metadata"]["embedding_tokens"] > 0 for r in mine)  # measured, not None
    assert all(r["response"] for r in mine + ours)
