import json

import numpy as np
import pytest

from hyde_lc.bench import (
    BenchMode,
    ExactIndex,
    load_beir,
    paired_bootstrap,
    run_benchmark,
    write_report,
)
from hyde_lc.errors import HydeLcError
from tests.unit.test_retriever import ScriptedChat

DOCS = {f"d{i}": (f"Title {i}", f"abstract number {i} about topic {i % 3}") for i in range(12)}


@pytest.fixture
def beir(tmp_path):
    root = tmp_path / "tiny"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": d, "title": t, "text": x}) + "\n" for d, (t, x) in DOCS.items())
    )
    # queries are exactly a document's text, so hash embeddings retrieve it first
    queries = {str(q): f"Title {q} abstract number {q} about topic {q % 3}" for q in (3, 10, 7)}
    queries["99"] = "an unjudged query"
    (root / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items())
    )
    (root / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n3\td3\t1\n10\td10\t1\n7\td7\t1\n7\td1\t1\n"
    )
    return root


def test_load_beir_keeps_judged_queries_sorted_by_id(beir):
    data = load_beir(beir)
    assert list(data.queries) == ["3", "7", "10"]
    assert data.corpus["d3"] == "Title 3 abstract number 3 about topic 0"
    assert data.qrels["7"] == {"d7": 1, "d1": 1}
    assert list(load_beir(beir, limit=2).queries) == ["3", "7"]
    assert load_beir(beir).fingerprint() == data.fingerprint()


def test_load_beir_names_what_is_missing(tmp_path):
    with pytest.raises(HydeLcError, match=r"qrels/test.tsv"):
        load_beir(tmp_path)


def test_exact_index_ranks_by_cosine():
    matrix = np.array([[1, 0], [0.6, 0.8], [0, 1]], dtype=np.float32)
    index = ExactIndex(["a", "b", "c"], matrix, embeddings=None)
    docs = index.similarity_search_by_vector([0.0, 2.0], k=2)
    assert [d.id for d in docs] == ["c", "b"]
    assert docs[0].metadata["score"] == pytest.approx(1.0)


def test_paired_bootstrap_interval_contains_the_mean():
    rng = np.random.default_rng(0)
    a = rng.uniform(0, 1, 200)
    b = a + 0.05 + rng.normal(0, 0.02, 200)
    mean, (low, high) = paired_bootstrap(a, b)
    assert mean == pytest.approx(0.05, abs=0.01) and low < mean < high and low > 0


def test_benchmark_measures_modes_and_reuses_cached_hypotheses(
    beir, tmp_path, fake_embeddings, monkeypatch
):
    monkeypatch.setenv("HYDE_LC_CACHE_DIR", str(tmp_path / "cache"))
    # The writer "knows" the answer: its passage is the relevant document's text.
    writer = ScriptedChat(replies=["Title 3 abstract number 3 about topic 0"])
    modes = [BenchMode(), BenchMode(1, "mean", False, "scifact"), BenchMode(1, "rrf")]
    kwargs = {
        "modes": modes,
        "embeddings": fake_embeddings,
        "llm": writer,
        "hypothesis_cache": tmp_path / "hyp.sqlite",
    }
    report = run_benchmark(beir, **kwargs)
    standard, hyp_only, rrf = report.results
    assert standard.per_query_ndcg["3"] == standard.per_query_ndcg["10"] == pytest.approx(1.0)
    # query 7 has two relevant documents; one of them (its own text) is at rank 1
    assert 1 / (1 + 1 / np.log2(3)) <= standard.per_query_ndcg["7"] <= 1.0
    assert standard.metrics["nDCG@10"] == pytest.approx(sum(standard.per_query_ndcg.values()) / 3)
    assert standard.metrics["R@100"] == pytest.approx(1.0)  # 12 docs: all retrieved
    assert hyp_only.per_query_ndcg["3"] == pytest.approx(1.0)  # hypothesis = d3 itself
    assert hyp_only.per_query_ndcg["10"] < 1.0  # same passage for every query: wrong doc
    assert hyp_only.delta_ndcg < 0 and rrf.delta_ci is not None
    calls = len(writer.log)
    assert calls == 3  # one sample per query, shared by both HyDE modes
    again = run_benchmark(beir, **kwargs)
    assert len(writer.log) == calls  # the rerun wrote no hypothesis
    assert [r.metrics for r in again.results] == [r.metrics for r in report.results]
    paths = write_report(report, tmp_path / "out")
    assert paths["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    saved = json.loads(paths["json"].read_text())
    assert saved["meta"]["queries"] == 3 and len(saved["results"]) == 3
    assert "| standard |" in paths["markdown"].read_text()
