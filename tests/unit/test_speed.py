"""The speed benchmark's pieces: percentiles, the simulated remote model, cost arithmetic."""

import asyncio

import numpy as np
import pytest

from hyde_lc.bench.speed import (
    SimulatedRemoteChat,
    SpeedReport,
    clustered_vectors,
    cost_per_query,
    percentiles,
)
from hyde_lc.evaluation.pricing import PricingTable
from hyde_lc.evaluation.usage import estimate_tokens


def test_percentiles_are_in_milliseconds():
    stats = percentiles([0.001 * i for i in range(1, 101)])
    assert stats["n"] == 100
    assert stats["p50_ms"] == pytest.approx(50.5)
    assert stats["p95_ms"] == pytest.approx(95.05)
    assert stats["mean_ms"] == pytest.approx(50.5)


def test_simulated_remote_model_waits_without_blocking_the_event_loop(monkeypatch):
    model = SimulatedRemoteChat(latency=0.2, reply="passage")
    waiting, most = 0, 0
    real_sleep = asyncio.sleep

    async def counted_sleep(delay: float, *args, **kwargs):
        nonlocal waiting, most
        waiting += 1
        most = max(most, waiting)
        try:
            return await real_sleep(delay, *args, **kwargs)
        finally:
            waiting -= 1

    monkeypatch.setattr(asyncio, "sleep", counted_sleep)

    async def eight() -> list[str]:
        replies = await asyncio.gather(*(model.ainvoke("q") for _ in range(8)))
        return [r.content for r in replies]

    assert asyncio.run(eight()) == ["passage"] * 8
    assert most == 8  # all eight waited at once: overlapped, not one after another


def test_cost_per_query_prices_each_stage_with_the_table():
    table = PricingTable.load()
    hypothesis = ("Write a passage about lighthouses.", "Lighthouses guide ships.")
    answer = ("Context: ... Question: what do lighthouses do?", "They guide ships.")
    run = [{"question": "what do lighthouses do?", "hypotheses": [hypothesis],
            "answer": answer, "embedded": ["what do lighthouses do?", hypothesis[1]]}]  # fmt: skip
    (row,) = cost_per_query(run, ["gpt-4o-mini"], pricing=table)["models"]
    price, embed = table.price("gpt-4o-mini"), table.price("text-embedding-3-small")
    assert price is not None and embed is not None

    def usd(text_in: str, text_out: str, p) -> float:
        tokens_in, tokens_out = estimate_tokens(text_in), estimate_tokens(text_out)
        return (tokens_in * p.input_per_million + tokens_out * p.output_per_million) / 1e6

    assert row["hypothesis"] == pytest.approx(1000 * usd(*hypothesis, price))
    assert row["answer"] == pytest.approx(1000 * usd(*answer, price))
    both = usd(run[0]["question"], "", embed) + usd(hypothesis[1], "", embed)
    assert row["embedding"] == pytest.approx(1000 * both)
    standard = row["answer"] + 1000 * usd(run[0]["question"], "", embed)
    assert row["standard_total"] == pytest.approx(standard)
    assert row["hyde_extra"] == pytest.approx(row["hyde_total"] / standard - 1)


def test_unknown_model_in_cost_is_refused():
    with pytest.raises(ValueError, match="no price for 'not-a-model'"):
        cost_per_query([], ["not-a-model"])


def test_clustered_vectors_are_unit_length_and_clustered():
    vectors = clustered_vectors(2000, 32, np.random.default_rng(0), clusters=10)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    nearest = np.sort(vectors @ vectors[0])[-2]  # best match other than itself
    assert nearest > 0.5  # a cluster-mate, far closer than random 32-d directions


def test_report_markdown_has_one_table_per_section():
    report = SpeedReport(meta={}, sections={
        "concurrency": {"queries": 4, "latency_s": 0.5, "max_concurrency": 8,
                        "sequential_s": 4.0, "sequential_qps": 1.0, "abatch_s": 1.0,
                        "abatch_qps": 4.0, "speedup": 4.0, "same_documents": True},
    })  # fmt: skip
    text = report.markdown()
    assert "| **speed-up** | | **4.0x** |" in text and "Ingest" not in text
