"""Retrieval quality of standard and HyDE modes on a BEIR dataset.

Every mode runs through `HyDERetriever` itself (the code users run), over an exact
cosine index of the corpus. Hypotheses are cached on disk (SQLite, keyed per prompt and
sample), so a rerun, or a new fusion mode over the same prompts, writes none again; a
mode with n = 4 reuses n = 1's first sample. Metrics come from ir-measures (nDCG@10,
Recall@100, MRR@10); each mode's nDCG@10 is compared with standard retrieval by a paired
bootstrap over queries.

Example:
    >>> from hyde_lc.bench import run_benchmark
    >>> report = run_benchmark("../shared/data/scifact", limit=20,
    ...                        llm_spec="local:smollm2-135m")  # doctest: +SKIP
    >>> print(report.markdown())  # doctest: +SKIP

"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import statistics
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore
from tqdm.auto import tqdm

from hyde_lc.bench.beir import BeirDataset, load_beir
from hyde_lc.errors import MissingDependencyError
from hyde_lc.models import (
    embedding_model_id,
    llm_model_name,
    load_embeddings,
    load_llm,
    resolve_llm_spec,
)
from hyde_lc.retriever import Fusion, HyDERetriever
from hyde_lc.weights import cache_dir

DEPTH = 100


class ExactIndex(VectorStore):
    """Exact cosine search over an in-memory matrix of unit vectors (read-only).

    Hand-written because LangChain's ``InMemoryVectorStore`` rebuilds its matrix on every
    query (~50 ms on 5k documents), and a benchmark runs thousands of searches.

    Example:
        >>> index = ExactIndex(["a", "b"], np.eye(2, dtype=np.float32), embeddings=None)
        >>> [d.id for d in index.similarity_search_by_vector([0.0, 1.0], k=1)]
        ['b']

    """

    def __init__(self, ids: Sequence[str], matrix: np.ndarray, embeddings: Embeddings | None):
        self.ids = list(ids)
        self.matrix = matrix
        self._embeddings = embeddings

    @property
    def embeddings(self) -> Embeddings | None:
        """The model that embedded the corpus."""
        return self._embeddings

    def similarity_search_by_vector(
        self, embedding: list[float], k: int = 4, **kwargs: Any
    ) -> list[Document]:
        """The ``k`` nearest documents; ``metadata["score"]`` is the cosine similarity."""
        query = np.asarray(embedding, dtype=np.float32)
        scores = self.matrix @ (query / max(float(np.linalg.norm(query)), 1e-12))
        top = np.argpartition(-scores, min(k, len(scores) - 1))[:k]
        top = top[np.argsort(-scores[top], kind="stable")]
        return [Document("", id=self.ids[i], metadata={"score": float(scores[i])}) for i in top]

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        """Embed ``query`` and search."""
        assert self._embeddings is not None
        return self.similarity_search_by_vector(self._embeddings.embed_query(query), k)

    def add_texts(self, texts: Iterable[str], metadatas: Any = None, **kwargs: Any) -> list[str]:
        """Not supported: the index is built once from a corpus."""
        raise NotImplementedError("ExactIndex is read-only")

    @classmethod
    def from_texts(
        cls, texts: list[str], embedding: Embeddings, metadatas: Any = None, **kwargs: Any
    ) -> ExactIndex:
        """Embed texts (ids: their positions) into a new index."""
        vectors = np.asarray(embedding.embed_documents(list(texts)), dtype=np.float32)
        return cls([str(i) for i in range(len(texts))], vectors, embedding)


def corpus_index(data: BeirDataset, embeddings: Embeddings, batch: int = 64) -> ExactIndex:
    """Embed the corpus once per (corpus, model); later runs load the cached matrix."""
    model = embedding_model_id(embeddings).replace(":", "_").replace("/", "_")
    path = cache_dir() / "bench" / f"{data.name}-{data.fingerprint()}-{model}.npy"
    ids = sorted(data.corpus)
    if path.is_file():
        return ExactIndex(ids, np.load(path), embeddings)
    rows = []
    for start in tqdm(range(0, len(ids), batch), desc=f"embedding {data.name}", unit="batch"):
        rows.extend(
            embeddings.embed_documents([data.corpus[i] for i in ids[start : start + batch]])
        )
    matrix = np.asarray(rows, dtype=np.float32)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, matrix)
    os.replace(tmp, path)
    return ExactIndex(ids, matrix, embeddings)


@dataclass(frozen=True)
class BenchMode:
    """One retrieval configuration to measure."""

    n_hypotheses: int = 0
    fusion: Fusion = "mean"
    include_query: bool = True
    prompt: str = "scifact"
    query_weight: float | None = None
    min_similarity: float | None = None

    @property
    def kind(self) -> str:
        """The fusion's label alone: ``standard``, ``mean+q``, ``mean (hyp only)``, ..."""
        if self.n_hypotheses == 0:
            return "standard"
        return {"mean": "mean+q" if self.include_query else "mean (hyp only)"}.get(
            self.fusion, self.fusion + ("" if self.include_query else " (hyp only)")
        )

    @property
    def name(self) -> str:
        """Short label, e.g. ``mean+q n=4 scifact``, ``rrf w=0.7 gate=0.5 n=4 scifact``."""
        if self.n_hypotheses == 0:
            return "standard"
        weight = "" if self.query_weight is None else f" w={self.query_weight:g}"
        gate = "" if self.min_similarity is None else f" gate={self.min_similarity:g}"
        return f"{self.kind}{weight}{gate} n={self.n_hypotheses} {self.prompt}"


def default_modes(
    ns: Sequence[int] = (1, 4),
    prompts: Sequence[str] = ("scifact", "generic"),
    query_weights: Sequence[float] = (),
    gates: Sequence[float] = (),
) -> list[BenchMode]:
    """Standard, then per prompt and n: mean with and without the query, concat, rrf.

    Each of ``query_weights`` adds mean and rrf with that weight as the query's share;
    each of ``gates`` adds mean+q (paper weighting and each query weight) keeping only
    hypotheses at least that similar to the query (adaptive HyDE).
    """
    modes = [BenchMode()]
    for prompt in prompts:
        for n in sorted(ns, reverse=True):  # the largest n first: its samples serve the rest
            modes += [
                BenchMode(n, "mean", True, prompt),
                BenchMode(n, "mean", False, prompt),
                BenchMode(n, "concat", True, prompt),
                BenchMode(n, "rrf", True, prompt),
            ]
            for weight in query_weights:
                modes += [
                    BenchMode(n, "mean", True, prompt, weight),
                    BenchMode(n, "rrf", True, prompt, weight),
                ]
            for gate in gates:
                modes += [
                    BenchMode(n, "mean", True, prompt, weight, gate)
                    for weight in (None, *query_weights)
                ]
    return modes


@dataclass
class ModeResult:
    """Aggregate and per-query figures of one mode."""

    mode: BenchMode
    metrics: dict[str, float]
    per_query_ndcg: dict[str, float]
    fallbacks: int = 0
    hypothesis_seconds: list[float] = field(default_factory=list)
    delta_ndcg: float | None = None
    delta_ci: tuple[float, float] | None = None


@dataclass
class BenchReport:
    """Everything one benchmark run measured."""

    meta: dict[str, Any]
    results: list[ModeResult]

    def markdown(self) -> str:
        """The results as a Markdown table (metrics x 100, as papers report them)."""
        lines = [
            "| mode | nDCG@10 | Recall@100 | MRR@10 | vs standard (95% CI) | fallbacks "
            "| hypothesis s (median) |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in self.results:
            delta = ""
            if r.delta_ndcg is not None and r.delta_ci is not None:
                low, high = r.delta_ci
                delta = f"{100 * r.delta_ndcg:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}]"
            seconds = (
                f"{statistics.median(r.hypothesis_seconds):.1f}" if r.hypothesis_seconds else ""
            )
            lines.append(
                f"| {r.mode.name} | {100 * r.metrics['nDCG@10']:.1f} "
                f"| {100 * r.metrics['R@100']:.1f} | {100 * r.metrics['RR@10']:.1f} | {delta} "
                f"| {r.fallbacks if r.mode.n_hypotheses else ''} | {seconds} |"
            )
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict, per-query nDCG@10 included."""
        return {
            "meta": self.meta,
            "results": [
                {**asdict(r), "mode": {**asdict(r.mode), "name": r.mode.name}} for r in self.results
            ],
        }

    def plot(self, path: Path) -> Path:
        """A bar chart of nDCG@10 per mode, as PNG."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError as exc:
            raise MissingDependencyError("plots", 'pip install "hyde-lc[eval]"') from exc
        names = [r.mode.name for r in self.results]
        values = [100 * r.metrics["nDCG@10"] for r in self.results]
        fig, ax = plt.subplots(figsize=(8, 0.35 * len(names) + 1.2))
        ax.barh(
            names[::-1],
            values[::-1],
            color=["#888" if n == "standard" else "#3a7" for n in names[::-1]],
        )
        ax.axvline(values[0], color="#444", linestyle="--", linewidth=1)
        ax.set_xlabel("nDCG@10 (x100)")
        ax.set_title(
            f"{self.meta['dataset']} ({self.meta['queries']} queries), writer {self.meta['llm']}"
        )
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)
        return path


def _metrics(
    qrels: dict[str, dict[str, int]], runs: dict[str, list[tuple[str, float]]]
) -> tuple[dict[str, float], dict[str, float]]:
    try:
        import ir_measures
        from ir_measures import RR, R, nDCG
    except ImportError as exc:
        raise MissingDependencyError("benchmark metrics", 'pip install "hyde-lc[eval]"') from exc
    qrel_list = [
        ir_measures.Qrel(q, d, rel) for q, docs in qrels.items() for d, rel in docs.items()
    ]
    run_list = [ir_measures.ScoredDoc(q, d, s) for q, docs in runs.items() for d, s in docs]
    aggregate = ir_measures.calc_aggregate([nDCG @ 10, R @ 100, RR @ 10], qrel_list, run_list)
    per_query = {q: 0.0 for q in qrels}
    for metric in ir_measures.iter_calc([nDCG @ 10], qrel_list, run_list):
        per_query[metric.query_id] = metric.value
    return {str(k): float(v) for k, v in aggregate.items()}, per_query


def paired_bootstrap(
    a: Sequence[float], b: Sequence[float], resamples: int = 5000
) -> tuple[float, tuple[float, float]]:
    """Mean of b - a over queries and its 95% percentile bootstrap interval."""
    from scipy.stats import bootstrap

    diffs = np.asarray(b, dtype=float) - np.asarray(a, dtype=float)
    if np.allclose(diffs, diffs[0]):
        return float(diffs.mean()), (float(diffs[0]), float(diffs[0]))
    ci = bootstrap(
        (diffs,),
        np.mean,
        n_resamples=resamples,
        confidence_level=0.95,
        method="percentile",
        random_state=0,
    ).confidence_interval
    return float(diffs.mean()), (float(ci.low), float(ci.high))


async def _run_mode(
    data: BeirDataset, index: ExactIndex, mode: BenchMode, llm: Any, cache: Any, concurrency: int
) -> ModeResult:
    retriever = HyDERetriever(
        vectorstore=index,
        hypothesis_llm=llm if mode.n_hypotheses else None,
        k=DEPTH,
        n_hypotheses=mode.n_hypotheses,
        fusion=mode.fusion,
        include_query=mode.include_query,
        query_weight=mode.query_weight,
        min_hypothesis_similarity=mode.min_similarity,
        prompt=mode.prompt,
        hypothesis_cache=cache,
        rrf_candidates=DEPTH,
        timeout=None,
    )
    gate = asyncio.Semaphore(concurrency)
    runs: dict[str, list[tuple[str, float]]] = {}
    fallbacks, seconds = 0, []
    bar = tqdm(total=len(data.queries), desc=mode.name, unit="q")

    async def one(query_id: str, text: str) -> None:
        nonlocal fallbacks
        async with gate:
            result = await retriever.aretrieve_with_details(text)
        ranked = [str(d.id) for d in result.documents]
        runs[query_id] = [(doc_id, float(DEPTH - rank)) for rank, doc_id in enumerate(ranked)]
        fallbacks += result.fallback is not None
        if mode.n_hypotheses and result.cache_hits < len(result.prompts):
            seconds.append(result.timings["hypothesis_s"])
        bar.update()

    await asyncio.gather(*(one(q, t) for q, t in data.queries.items()))
    bar.close()
    metrics, per_query = _metrics(data.qrels, runs)
    return ModeResult(mode, metrics, per_query, fallbacks, seconds)


def run_benchmark(
    folder: str | Path,
    *,
    split: str = "test",
    limit: int | None = None,
    modes: Sequence[BenchMode] | None = None,
    llm_spec: str | None = None,
    embeddings_spec: str | None = None,
    max_tokens: int = 256,
    concurrency: int = 4,
    hypothesis_cache: str | Path | None = None,
    embeddings: Embeddings | None = None,
    llm: Any = None,
) -> BenchReport:
    """Measure each mode on a BEIR dataset; see the module docstring.

    ``embeddings`` and ``llm`` take ready-made models instead of specs.
    """
    from langchain_community.cache import SQLiteCache

    started = time.perf_counter()
    data = load_beir(folder, split=split, limit=limit)
    embeddings = embeddings or load_embeddings(embeddings_spec)
    index = corpus_index(data, embeddings)
    modes = list(modes or default_modes())
    needs_llm = any(m.n_hypotheses for m in modes)
    if needs_llm and llm is None:
        llm = load_llm(llm_spec, role="hypothesis", max_tokens=max_tokens)
    cache_file = Path(hypothesis_cache or cache_dir() / "bench" / "hypotheses.sqlite")
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    cache = SQLiteCache(database_path=str(cache_file))
    results = [asyncio.run(_run_mode(data, index, m, llm, cache, concurrency)) for m in modes]
    base = next((r for r in results if r.mode.n_hypotheses == 0), None)
    if base is not None:
        order = sorted(base.per_query_ndcg)
        for r in results:
            if r is not base:
                r.delta_ndcg, r.delta_ci = paired_bootstrap(
                    [base.per_query_ndcg[q] for q in order], [r.per_query_ndcg[q] for q in order]
                )
    meta = {
        "dataset": data.name,
        "split": split,
        "queries": len(data.queries),
        "corpus": len(data.corpus),
        "embeddings": embedding_model_id(embeddings),
        "llm": (
            llm_model_name(llm)
            if llm_spec is None and llm is not None
            else resolve_llm_spec(llm_spec, "hypothesis")
        )
        if needs_llm
        else None,
        "max_tokens": max_tokens,
        "date": date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "seconds": round(time.perf_counter() - started, 1),
    }
    return BenchReport(meta, results)


def write_report(report: BenchReport, out: Path) -> dict[str, Path]:
    """Write ``results.json``, ``results.md`` and ``ndcg.png`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "results.json", "markdown": out / "results.md", "plot": out / "ndcg.png"}
    paths["json"].write_text(json.dumps(report.to_json(), indent=1))
    paths["markdown"].write_text(report.markdown() + "\n")
    report.plot(paths["plot"])
    return paths
