"""A small soak (benchmarks/soak.py): concurrent retrievals, embedded and through a server.

2,000 chunks, 100 retrievals after a warm-up of 20, 8 threads, through `HyDERetriever`
over both client modes. Checked: no retrieval failed or was skipped, every retrieval was
timed, and resident memory grew less than `BOUND_MB` after the warm-up, in this process
and in the server's. Latencies are recorded, never asserted (timing is the benchmark's
business).
"""

import json
from pathlib import Path

import pytest

from benchmarks.soak import CHROMA, MODES, main, run_soak

pytestmark = pytest.mark.integration
BOUND_MB = 50.0
"""Memory growth allowed after the warm-up, per process (the soak script's default)."""


def test_small_soak_in_both_client_modes(tmp_path):
    modes = MODES if Path(CHROMA).exists() else ("embedded",)
    report = run_soak(
        chunks=2000,
        retrievals=100,
        warmup=20,
        concurrency=8,
        modes=modes,
        memory_bound_mb=BOUND_MB,
        time_limit=600,
        work_dir=tmp_path,
    )
    rows = {row["mode"]: row for row in report["modes"]}
    assert set(rows) == set(modes)
    for row in rows.values():
        assert row["chunks"] == 2000
        assert row["errors"] == 0, row["error_samples"]
        assert row["skipped"] == 0 and row["completed"] == 100
        assert row["retrieval_mode"] == "hybrid" and row["k"] == 10  # no LLM, BM25 beside
        latency = row["latency"]
        assert 0 < latency["p50_ms"] <= latency["p95_ms"] <= latency["p99_ms"] <= latency["max_ms"]
        for memory in row["memory_mb"].values():
            assert memory["growth_after_warmup"] < BOUND_MB, row["memory_mb"]
            assert memory["peak"] >= memory["end"] > 0
        assert row["passed"] is True
    if "server" in rows:
        assert set(rows["server"]["memory_mb"]) == {"client", "server"}
        assert rows["server"]["url"].startswith("http://127.0.0.1:")
    assert report["passed"] is True


def test_soak_script_writes_json_and_markdown(tmp_path):
    out = tmp_path / "out"
    args = ["--chunks", "300", "--retrievals", "16", "--warmup", "4", "--concurrency", "4"]
    args += ["--hypotheses", "1", "--modes", "embedded", "--out", str(out)]
    assert main(args) == 0
    report = json.loads((out / "soak.json").read_text("utf-8"))
    (row,) = report["modes"]
    assert row["errors"] == 0 and row["completed"] == 16
    assert row["retrieval_mode"] == "hybrid-hyde"  # through the fake instant LLM
    table = (out / "soak.md").read_text("utf-8")
    assert "| embedded | 0 | 16 |" in table and "passed:" in table
