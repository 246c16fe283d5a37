"""`hyde-lc speed` end to end on a small slice of SciFact, with the real local models.

Only the shape and the invariants of the figures are checked here (timings are the
benchmark's business, not a test's): every stage measured, p50 <= p95, the ingest wrote
what the splitter made, ``abatch`` finds the same documents as sequential calls, HNSW
recall is a fraction, HyDE costs more than standard retrieval on every remote model.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes import SHARED

pytestmark = pytest.mark.integration
SCIFACT = SHARED / "data" / "scifact"


@pytest.mark.skipif(not SCIFACT.is_dir(), reason="needs ../shared/data/scifact beside the repo")
def test_speed_cli_on_a_small_slice(tmp_path):
    out = tmp_path / "speed"
    command = [
        str(Path(sys.executable).parent / "hyde-lc"),
        "speed", str(SCIFACT), "--docs", "20", "--queries", "2", "--scale", "1500",
        "--concurrency-queries", "3", "--latency", "0.05", "--llm", "local:smollm2-135m",
        "--out", str(out),
    ]  # fmt: skip
    env = {**os.environ, "HYDE_LC_THREADS": os.environ.get("HYDE_LC_THREADS", "1")}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((out / "speed.json").read_text("utf-8"))
    assert "| whole ingest path |" in (out / "speed.md").read_text("utf-8")

    ingest = result["ingest"]
    assert ingest["documents"] == 20 and ingest["chunks"] >= 20
    assert ingest["ratio"] > 0 and ingest["embed_chunks_per_s"] > 0

    query = result["query"]
    assert query["retrieval_method"] == "hybrid-hyde+window=1"
    assert query["collection_chunks"] == ingest["chunks"]
    expected = {"hypothesis", "embedding", "search", "expansion", "answer", "total"}
    expected |= {"retrieval outside the LLM", "retrieval outside the LLM and embedder"}
    assert expected <= set(query["stages"])
    for stats in query["stages"].values():
        assert stats["n"] == 2 and 0 <= stats["p50_ms"] <= stats["p95_ms"]
    assert query["stages"]["hypothesis"]["p50_ms"] > 0 and query["stages"]["answer"]["p50_ms"] > 0

    costs = result["cost"]["models"]
    models = ["gpt-4o-mini", "gpt-4.1-mini", "gpt-5-mini", "gpt-4o"]
    assert [row["model"] for row in costs] == models
    for row in costs:
        assert row["hyde_total"] > row["standard_total"] > 0 and row["hypothesis"] > 0

    concurrency = result["concurrency"]
    assert concurrency["same_documents"] is True and concurrency["queries"] == 3

    (scale,) = result["scale"]["rows"]
    assert scale["size"] == 1500 and 0.0 <= scale["recall_at_k"] <= 1.0
