"""The bench harness: BEIR reading, the exact index, configurations, comparisons, report."""

import hashlib
import json

import numpy as np
import pytest

from hyde_lc.bench import (
    BM25,
    DEFAULT,
    HYBRID,
    STANDARD,
    BenchMode,
    ExactIndex,
    default_modes,
    hyde_variants,
    load_beir,
    paired_bootstrap,
    run_benchmark,
    select_modes,
    write_report,
)
from hyde_lc.bench.retrieval import corpus_index, corpus_lexical, ir_metrics
from hyde_lc.errors import HydeLcError, InvalidSettingError
from hyde_lc.search.backend import backend_for
from hyde_lc.store.lexical_index import lexical_query
from tests.fakes import ScriptedChat

DOCS = {f"d{i}": (f"Title {i}", f"abstract number {i} about topic {i % 3}") for i in range(12)}
PNG = b"\x89PNG\r\n\x1a\n"


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


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HYDE_LC_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


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


def test_exact_index_ranks_by_cosine_through_the_retrievers_vector_search():
    matrix = np.array([[1, 0], [0.6, 0.8], [0, 1]], dtype=np.float32)
    index = ExactIndex(["a", "b", "c"], matrix, embeddings=None, texts={"b": "bees"})
    docs = index.similarity_search_by_vector([0.0, 2.0], k=2)
    assert [d.id for d in docs] == ["c", "b"]
    assert docs[0].metadata["score"] == pytest.approx(1.0)
    # The retrievers' seam gets cosine scores (hybrid fusion fuses scores, not ranks)...
    found = backend_for(index, "off").scored([0.0, 2.0], 3, {})
    assert [d.id for d in found] == ["c", "b", "a"]
    assert [d.metadata["score"] for d in found] == pytest.approx([1.0, 0.8, 0.0])
    # ...and reads back by id what only the lexical list found.
    assert [(d.id, d.page_content) for d in index.get_by_ids(["b", "zz"])] == [("b", "bees")]


def test_configurations_are_named_by_the_retrievers_label():
    assert [m.label for m in default_modes()] == ["standard", "bm25", "hybrid", "hybrid-hyde"]
    assert HYBRID.is_default and not STANDARD.is_default and not BM25.is_default
    assert DEFAULT.is_hyde_default and not DEFAULT.is_default and not HYBRID.is_hyde_default
    variants = hyde_variants(["mean+q", "rrf"], [4], ["scifact"], query_weights=[0.6])
    assert [m.label for m in variants] == [
        "hyde(n=4,prompt=scifact)",
        "hyde(fusion=rrf,n=4,prompt=scifact)",
        "hyde(w=0.6,n=4,prompt=scifact)",
        "hyde(fusion=rrf,w=0.6,n=4,prompt=scifact)",
    ]
    gated = hyde_variants(["mean+q"], [1], ["generic"], [0.8], [0.5], lexical=["auto"])
    assert [m.label for m in gated] == ["hybrid-hyde", "hybrid-hyde(gate=0.5)"]
    with pytest.raises(InvalidSettingError, match="unknown retriever field"):
        BenchMode({"n_hypothesis": 2})
    with pytest.raises(InvalidSettingError, match="dense_weight must lie between 0 and 1"):
        BenchMode({"dense_weight": 2.0})


def test_selection_always_keeps_the_no_llm_references():
    assert select_modes() == default_modes()
    assert [m.label for m in select_modes(["standard"])] == ["standard", "bm25", "hybrid"]
    picked = select_modes(["mean+q"], ns=[1], prompts=["generic"])
    assert [m.label for m in picked] == ["standard", "bm25", "hybrid", "hyde"]
    shaped = select_modes(ns=[1], prompts=["generic"])  # every kind, next to the default
    assert DEFAULT in shaped and len(shaped) == 4 + 4
    with pytest.raises(InvalidSettingError, match="choose from"):
        select_modes(["dense"])


def test_paired_bootstrap_interval_contains_the_mean():
    rng = np.random.default_rng(0)
    a = rng.uniform(0, 1, 200)
    b = a + 0.05 + rng.normal(0, 0.02, 200)
    mean, (low, high) = paired_bootstrap(a, b)
    assert mean == pytest.approx(0.05, abs=0.01) and low < mean < high and low > 0


def test_bm25_row_is_the_lexical_ranking_alone(beir, fake_embeddings, cache_home):
    report = run_benchmark(beir, modes=[BM25], embeddings=fake_embeddings)
    labels = [r.mode.label for r in report.results]
    assert labels == ["standard", "bm25", "hybrid"]  # the references always run
    data = load_beir(beir)
    lexical = corpus_lexical(corpus_index(data, fake_embeddings), data)
    runs = {
        q: [(doc, 100.0 - rank) for rank, (doc, _) in enumerate(
            lexical.search(lexical_query(text, [], 5), k=100)
        )]
        for q, text in data.queries.items()
    }  # fmt: skip
    _, direct = ir_metrics(data.qrels, runs)
    assert report.results[1].per_query_ndcg == pytest.approx(direct)


def test_benchmark_measures_configurations_and_reuses_cached_hypotheses(
    beir, tmp_path, fake_embeddings, cache_home
):
    # The writer "knows" the answer: its passage is the relevant document's text.
    writer = ScriptedChat(replies=["Title 3 abstract number 3 about topic 0"])
    hyp_only = BenchMode({"n_hypotheses": 1, "include_query": False, "lexical": "off"})
    rrf = BenchMode({"n_hypotheses": 1, "fusion": "rrf", "lexical": "off"})
    kwargs = {
        "modes": [*default_modes(), hyp_only, rrf],
        "embeddings": fake_embeddings,
        "llm": writer,
        "hypothesis_cache": tmp_path / "hyp.sqlite",
    }
    report = run_benchmark(beir, **kwargs)
    standard, bm25, hybrid, default, hyp, _rrf = report.results
    assert default.mode.is_hyde_default and default.mode.label == "hybrid-hyde"
    assert hybrid.mode.is_default and hybrid.mode.label == "hybrid"
    assert standard.per_query_ndcg["3"] == standard.per_query_ndcg["10"] == pytest.approx(1.0)
    # query 7 has two relevant documents; one of them (its own text) is at rank 1
    assert 1 / (1 + 1 / np.log2(3)) <= standard.per_query_ndcg["7"] <= 1.0
    assert standard.metrics["nDCG@10"] == pytest.approx(sum(standard.per_query_ndcg.values()) / 3)
    assert standard.metrics["R@100"] == pytest.approx(1.0)  # 12 docs: all retrieved
    assert hyp.per_query_ndcg["3"] == pytest.approx(1.0)  # hypothesis = d3 itself
    assert hyp.per_query_ndcg["10"] < 1.0  # same passage for every query: wrong doc
    # Every row against the dense baseline and the best no-LLM row, never itself.
    best = max((standard, bm25, hybrid), key=lambda r: r.metrics["nDCG@10"])
    assert standard.vs_dense is None and best.vs_best_no_llm is None
    for row in report.results:
        if row is not standard:
            assert row.vs_dense is not None and row.vs_dense.reference == "standard"
        if row is not best:
            assert row.vs_best_no_llm is not None
            assert row.vs_best_no_llm.reference == best.mode.label
    assert hyp.vs_dense is not None and hyp.vs_dense.delta < 0
    calls = len(writer.log)
    assert calls == 3  # one sample per query, shared by the configurations that write
    again = run_benchmark(beir, **kwargs)
    assert len(writer.log) == calls  # the rerun wrote no hypothesis
    assert [r.metrics for r in again.results] == [r.metrics for r in report.results]

    paths = write_report(report, tmp_path / "out")
    assert paths["plot"].read_bytes()[:8] == PNG
    saved = json.loads(paths["json"].read_text())
    assert saved["meta"]["queries"] == 3 and len(saved["results"]) == 6
    assert [r["default"] for r in saved["results"]] == [False, False, True, False, False, False]
    assert [r["hyde_default"] for r in saved["results"]].index(True) == 3
    assert saved["results"][3]["label"] == "hybrid-hyde"
    assert saved["results"][4]["configuration"] == dict(hyp_only.fields)
    assert saved["results"][4]["vs_dense"]["reference"] == "standard"
    table = paths["markdown"].read_text()
    assert "| standard |" in table and "| **hybrid-hyde** (HyDE default) |" in table
    assert "| **hybrid** (default) |" in table


def test_a_langchain_sqlite_cache_is_read_and_left_as_it_was(
    beir, tmp_path, fake_embeddings, cache_home
):
    from langchain_community.cache import SQLiteCache
    from langchain_core.outputs import Generation

    from hyde_lc.hyde.hypotheses import llm_identity, sample_keys
    from hyde_lc.hyde.prompts import get_prompt

    writer = ScriptedChat(replies=["never written"])
    file = tmp_path / "published.sqlite"
    legacy = SQLiteCache(database_path=str(file))
    data = load_beir(beir)
    for text in data.queries.values():
        (key,) = sample_keys([get_prompt("generic").render(text)])
        legacy.update(key, llm_identity(writer), [Generation(text=text)])  # the answer itself
    del legacy
    digest = hashlib.sha256(file.read_bytes()).hexdigest()
    dense_hyde = BenchMode({"lexical": "off"})
    report = run_benchmark(
        beir, modes=[dense_hyde], embeddings=fake_embeddings, llm=writer, hypothesis_cache=file
    )
    assert writer.log == []  # every hypothesis came from the file
    (row,) = [r for r in report.results if r.mode == dense_hyde]
    assert row.fallbacks == 0 and row.metrics["nDCG@10"] > 0.9
    assert hashlib.sha256(file.read_bytes()).hexdigest() == digest


def test_the_plot_leaves_the_matplotlib_backend_alone(beir, tmp_path, fake_embeddings, cache_home):
    import matplotlib

    before = matplotlib.get_backend()
    matplotlib.use("svg")
    try:
        report = run_benchmark(beir, modes=[STANDARD], embeddings=fake_embeddings)
        paths = write_report(report, tmp_path / "out")
        assert matplotlib.get_backend() == "svg"
        assert paths["plot"].read_bytes()[:8] == PNG
    finally:
        matplotlib.use(before)
