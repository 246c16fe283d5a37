"""A short kill loop (benchmarks/kill_loop.py): writers killed mid-write, both sides checked.

Eight rounds of ingest / replace / delete / index rebuild in writer subprocesses, each
SIGKILLed at a seeded random moment unless it finishes first (some are left to finish),
with a reader searching the lexical side throughout and a fresh checker after each round.
Asserted: no violation (every chunk ``store.get()`` shows is found by the lexical and the
dense side, nothing outside it or deleted is returned, no visible document is partial), no
failed writer, a reader that never met an error, an empty result or a result without the
stable chunk, and the JSON and Markdown reports written.
"""

import json

import pytest

from benchmarks.kill_loop import main

pytestmark = pytest.mark.integration


def test_a_short_kill_loop_keeps_both_sides_consistent(tmp_path):
    out = tmp_path / "out"
    args = ["--work-dir", str(tmp_path), "--rounds", "8", "--seed", "5", "--out", str(out)]
    code = main(args)
    report = json.loads((out / "kill_loop.json").read_text("utf-8"))
    totals = report["totals"]
    examples = {r["round"]: r["examples"] for r in report["rounds"] if r["examples"]}
    assert totals["violations"] == {}, json.dumps(examples, indent=1)[:4000]
    assert totals["rounds"] == 8 and totals["outcomes"].get("failed", 0) == 0
    assert totals["outcomes"].get("killed", 0) >= 1
    assert totals["reader_queries"] > 0 and totals["reader_problems"] == 0, report["reader"]
    assert totals["passed"] is True and code == 0
    assert report["meta"]["commit"] and report["meta"]["command"].endswith(f"--seed 5 --out {out}")
    table = (out / "kill_loop.md").read_text("utf-8")
    assert "| round | action |" in table and "**Violations: 0**" in table
