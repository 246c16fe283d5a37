"""`hyde-lc bench` on real SciFact (20 queries) with the real MiniLM and SmolLM2.

MiniLM is named (``local:minilm``, the shipped graph): the standard row is compared query
by query with the committed full run, made with it.

The first run on a machine embeds the 5,183 abstracts (about 3 minutes on 2 cores); the
matrix is cached in the hyde_lc cache folder after that.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes import ROOT, SHARED

pytestmark = pytest.mark.integration
SCIFACT = SHARED / "data" / "scifact"
FULL_RUN = ROOT / "benchmarks" / "results" / "scifact-standard" / "results.json"


@pytest.mark.skipif(not SCIFACT.is_dir(), reason="needs ../shared/data/scifact beside the repo")
@pytest.mark.timeout(1800)  # as long as its command may take (embedding the corpus first)
def test_bench_cli_on_twenty_scifact_queries(tmp_path):
    out = tmp_path / "bench"
    command = [
        str(Path(sys.executable).parent / "hyde-lc"),
        "bench", str(SCIFACT), "--limit", "20",
        "--modes", "default", "mean+q", "rrf", "--n", "1", "--prompts", "scifact",
        "--llm", "local:smollm2-135m", "--max-tokens", "96",
        "--embeddings", "local:minilm",  # the embedder of the committed full run
        "--hypothesis-cache", str(tmp_path / "hyp.sqlite"),
        "--out", str(out),
    ]  # fmt: skip
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=1800,
        env={**os.environ, "HYDE_LC_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((out / "results.json").read_text())
    rows = report["results"]
    assert [r["label"] for r in rows] == [
        "standard",
        "bm25",
        "hybrid",
        "hybrid-hyde",
        "hyde(prompt=scifact)",
        "hyde(fusion=rrf,prompt=scifact)",
    ]
    assert [r["default"] for r in rows] == [False, False, True, False, False, False]
    assert [r["hyde_default"] for r in rows] == [False, False, False, True, False, False]
    assert report["meta"]["queries"] == 20 and report["meta"]["llm"] == "local:smollm2-135m"
    standard = rows[0]["per_query_ndcg"]
    full = json.loads(FULL_RUN.read_text())["results"][0]["per_query_ndcg"]
    assert standard == pytest.approx({q: full[q] for q in standard})  # same queries, same scores
    no_llm = max(rows[:3], key=lambda r: r["metrics"]["nDCG@10"])["label"]
    for row in rows[1:]:
        assert row["vs_dense"]["reference"] == "standard"
    for row in rows[3:]:
        assert row["fallbacks"] < 20 and row["vs_best_no_llm"]["reference"] == no_llm
        low, high = row["vs_dense"]["ci"]
        assert low <= row["vs_dense"]["delta"] <= high
    assert (out / "ndcg.png").read_bytes()[:4] == b"\x89PNG"
    assert "| standard |" in done.stdout and "| **hybrid-hyde** (HyDE default) |" in done.stdout
