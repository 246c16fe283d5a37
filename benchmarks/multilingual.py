"""Multilingual retrieval: all-MiniLM-L6-v2 (English-only) against multilingual-e5-small.

Sections (``--section``, repeatable; all three by default):

* ``cmrc``: CMRC 2018 as passage retrieval (``shared/data/cmrc2018_zh``, Simplified
  Chinese, 1,104 passages, 300 questions), standard retrieval with each model;
* ``scifact``: SciFact test (English, 5,183 abstracts, 300 claims), the same two models;
* ``speed``: passage-embedding speed of both models on the same SciFact abstracts, the
  models alternating round by round so that both see the same machine load.

Each row gives nDCG@10 and hit@10 (a relevant passage among the first ten) with 95%
bootstrap intervals over queries, and the paired difference to the first row. Corpus
matrices are cached per (corpus, model) in ``~/.cache/hyde_lc/bench`` (as ``hyde-lc
bench`` does): only the first run embeds a corpus.

HyDE rows: ``--hypothesis-cache FILE --llm SPEC`` adds, per ``--prompt``, HyDE (mean
fusion, one hypothesis, query weight ``--query-weight``) with each model, through
`HyDERetriever` as users run it, reading hypotheses from the hypothesis cache file
keyed as ``hyde-lc bench`` keys them (prompt text + sample, LLM parameters); missing
hypotheses are written by the LLM and added to that file, and each row counts them. For
e5 both hypothesis prefixes are measured (``passage: ``, the default, and ``query: ``).

    python -m benchmarks.multilingual --section cmrc --out benchmarks/results/multilingual/cmrc.json
    python -m benchmarks.multilingual --section scifact \\
        --hypothesis-cache /tmp/scifact-hyp.sqlite --llm local:qwen2.5-coder-1.5b \\
        --prompt generic --prompt scifact
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

from hyde_lc.bench.beir import BeirDataset, load_beir
from hyde_lc.bench.retrieval import DEPTH, ExactIndex, corpus_index, ir_metrics, paired_bootstrap
from hyde_lc.hyde.hypothesis_cache import HypothesisCache
from hyde_lc.models.loading import embedding_model_id, load_embeddings, load_llm, resolve_llm_spec
from hyde_lc.models.multilingual_embeddings import MultilingualE5Embeddings
from hyde_lc.retrievers.hyde import HyDERetriever

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@dataclass
class Row:
    """One retrieval configuration's figures (x100), per-query values kept for deltas."""

    name: str
    ndcg10: float
    ndcg10_ci: tuple[float, float]
    hit10: float
    hit10_ci: tuple[float, float]
    per_query_ndcg: dict[str, float] = field(repr=False)
    per_query_hit: dict[str, float] = field(repr=False)
    delta_ndcg10: float | None = None
    delta_ndcg10_ci: tuple[float, float] | None = None
    generated: int = 0
    """Hypotheses written by the LLM during the run (not found in the cache)."""


class HypothesesAsQueries(Embeddings):
    """E5 embeddings whose `embed_documents` embeds HyDE hypotheses with the query prefix.

    Only for the searching side of `HyDERetriever` (``embeddings=``); the corpus keeps
    its passage vectors.
    """

    def __init__(self, e5: MultilingualE5Embeddings):
        self.e5 = e5.model_copy(update={"hypothesis_prefix": "query"})
        self.model_id = e5.model_id

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.e5.embed_hypotheses(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.e5.embed_query(text)


def mean_ci(values: list[float]) -> tuple[float, tuple[float, float]]:
    """Mean and 95% percentile bootstrap interval over queries."""
    from scipy.stats import bootstrap

    data = np.asarray(values, dtype=float)
    if np.allclose(data, data[0]):
        return float(data.mean()), (float(data[0]), float(data[0]))
    ci = bootstrap(
        (data,), np.mean, n_resamples=5000, confidence_level=0.95, method="percentile",
        random_state=0,
    ).confidence_interval  # fmt: skip
    return float(data.mean()), (float(ci.low), float(ci.high))


def score_runs(name: str, data: BeirDataset, runs: dict[str, list[str]], generated: int = 0) -> Row:
    """nDCG@10 (ir-measures) and hit@10 of ranked ids per query."""
    scored = {q: [(d, float(DEPTH - r)) for r, d in enumerate(ids)] for q, ids in runs.items()}
    _, per_ndcg = ir_metrics(data.qrels, scored)
    per_hit = {
        q: float(any(data.qrels[q].get(d, 0) > 0 for d in runs.get(q, [])[:10])) for q in data.qrels
    }
    order = sorted(data.qrels)
    ndcg, ndcg_ci = mean_ci([per_ndcg[q] for q in order])
    hit, hit_ci = mean_ci([per_hit[q] for q in order])
    return Row(
        name, 100 * ndcg, (100 * ndcg_ci[0], 100 * ndcg_ci[1]), 100 * hit,
        (100 * hit_ci[0], 100 * hit_ci[1]), per_ndcg, per_hit, generated=generated,
    )  # fmt: skip


def standard_runs(data: BeirDataset, index: ExactIndex) -> dict[str, list[str]]:
    """Plain query retrieval, embedding each query with the index's model."""
    assert index.embeddings is not None
    runs = {}
    for query_id, text in data.queries.items():
        vector = index.embeddings.embed_query(text)
        runs[query_id] = [str(d.id) for d in index.similarity_search_by_vector(vector, k=DEPTH)]
    return runs


async def hyde_runs(
    data: BeirDataset,
    index: ExactIndex,
    llm: Any,
    cache: Any,
    prompt: str,
    query_weight: float | None,
    embeddings: Embeddings | None = None,
    concurrency: int = 4,
) -> tuple[dict[str, list[str]], int]:
    """HyDE (mean fusion, one hypothesis) through `HyDERetriever`; also counts generations."""
    retriever = HyDERetriever(
        vectorstore=index, embeddings=embeddings, hypothesis_llm=llm, k=DEPTH, n_hypotheses=1,
        fusion="mean", include_query=True, query_weight=query_weight, prompt=prompt,
        hypothesis_cache=cache, timeout=None,
    )  # fmt: skip
    gate = asyncio.Semaphore(concurrency)
    runs: dict[str, list[str]] = {}
    generated = 0

    async def one(query_id: str, text: str) -> None:
        nonlocal generated
        async with gate:
            result = await retriever.aretrieve_with_details(text)
        runs[query_id] = [str(d.id) for d in result.documents]
        generated += len(result.prompts) - result.cache_hits

    await asyncio.gather(*(one(q, t) for q, t in data.queries.items()))
    return runs, generated


def timed_index(data: BeirDataset, embeddings: Embeddings) -> tuple[ExactIndex, float | None]:
    """The corpus index and the seconds its embedding took (None: read from the cache)."""
    from hyde_lc.models.weights import cache_dir

    model = embedding_model_id(embeddings).replace(":", "_").replace("/", "_")
    cached = (cache_dir() / "bench" / f"{data.name}-{data.fingerprint()}-{model}.npy").is_file()
    started = time.perf_counter()
    index = corpus_index(data, embeddings, batch=32)
    return index, None if cached else round(time.perf_counter() - started, 1)


def quality_section(
    folder: Path, models: dict[str, Embeddings], args: argparse.Namespace
) -> dict[str, Any]:
    """Standard (and optionally HyDE) rows for each model on one BEIR set."""
    data = load_beir(folder, split="test")
    rows: list[Row] = []
    embed_seconds = {}
    indexes = {}
    for label, embeddings in models.items():
        index, seconds = timed_index(data, embeddings)
        indexes[label] = index
        embed_seconds[label] = seconds
        rows.append(score_runs(f"{label} standard", data, standard_runs(data, index)))
        print(f"{data.name}: {rows[-1].name} nDCG@10 {rows[-1].ndcg10:.1f}", flush=True)
    if args.hypothesis_cache:
        caps = {} if args.max_tokens is None else {"max_tokens": args.max_tokens}
        llm = load_llm(args.llm, role="hypothesis", **caps)
        cache = HypothesisCache(args.hypothesis_cache)
        for prompt in args.prompt:
            for label, index in indexes.items():
                variants: list[tuple[str, Embeddings | None]] = [("", None)]
                embeddings = models[label]
                if isinstance(embeddings, MultilingualE5Embeddings):
                    variants = [
                        (" (hyp. passage: prefix)", None),
                        (" (hyp. query: prefix)", HypothesesAsQueries(embeddings)),
                    ]
                for suffix, searcher in variants:
                    runs, generated = asyncio.run(
                        hyde_runs(data, index, llm, cache, prompt, args.query_weight, searcher)
                    )
                    name = f"{label} HyDE {prompt} w={args.query_weight}{suffix}"
                    rows.append(score_runs(name, data, runs, generated))
                    print(f"{data.name}: {name} nDCG@10 {rows[-1].ndcg10:.1f}", flush=True)
    base = rows[0]
    order = sorted(data.qrels)
    for row in rows[1:]:
        delta, ci = paired_bootstrap(
            [base.per_query_ndcg[q] for q in order], [row.per_query_ndcg[q] for q in order]
        )
        row.delta_ndcg10, row.delta_ndcg10_ci = 100 * delta, (100 * ci[0], 100 * ci[1])
    return {
        "dataset": data.name,
        "queries": len(data.queries),
        "corpus": len(data.corpus),
        "corpus_embedding_seconds": embed_seconds,
        "llm": resolve_llm_spec(args.llm, "hypothesis") if args.hypothesis_cache else None,
        "rows": [
            {k: v for k, v in asdict(r).items() if not k.startswith("per_query")} for r in rows
        ],
        "per_query_ndcg": {r.name: r.per_query_ndcg for r in rows},
    }


def speed_section(
    folder: Path, models: dict[str, Embeddings], docs: int, rounds: int
) -> dict[str, Any]:
    """Docs/s of each model on the same abstracts, alternating models round by round."""
    data = load_beir(folder, split="test")
    texts = [data.corpus[i] for i in sorted(data.corpus)[:docs]]
    labels = list(models)
    for embeddings in models.values():  # load the models outside the timing
        embeddings.embed_documents(texts[:2])
    seconds: dict[str, list[float]] = {label: [] for label in labels}
    for r in range(rounds):
        for label in labels if r % 2 == 0 else labels[::-1]:
            started = time.perf_counter()
            models[label].embed_documents(texts)
            seconds[label].append(time.perf_counter() - started)
            print(f"speed round {r}: {label} {docs / seconds[label][-1]:.2f} docs/s", flush=True)
    first, second = labels
    ratios = [b / a for a, b in zip(seconds[first], seconds[second], strict=True)]
    return {
        "dataset": data.name,
        "docs": docs,
        "mean_chars": round(statistics.mean(len(t) for t in texts)),
        "rounds": rounds,
        "docs_per_s_median": {k: round(docs / statistics.median(v), 2) for k, v in seconds.items()},
        "slowdown_median": round(statistics.median(ratios), 2),
        "slowdown_per_round": [round(x, 2) for x in ratios],
        "slowdown_of": f"{second} seconds / {first} seconds, same texts, same round",
    }


def markdown(section: dict[str, Any]) -> str:
    """A quality section as a Markdown table."""
    lines = [
        f"{section['dataset']} ({section['queries']} queries, {section['corpus']} passages)",
        "",
        "| retrieval | nDCG@10 [95% CI] | hit@10 [95% CI] | nDCG@10 vs first row | generated |",
        "|---|---|---|---|---|",
    ]
    for r in section["rows"]:
        delta = ""
        if r["delta_ndcg10"] is not None:
            low, high = r["delta_ndcg10_ci"]
            delta = f"{r['delta_ndcg10']:+.1f} [{low:+.1f}, {high:+.1f}]"
        lines.append(
            f"| {r['name']} | {r['ndcg10']:.1f} [{r['ndcg10_ci'][0]:.1f}, {r['ndcg10_ci'][1]:.1f}]"
            f" | {r['hit10']:.1f} [{r['hit10_ci'][0]:.1f}, {r['hit10_ci'][1]:.1f}] | {delta} "
            f"| {r['generated'] if 'HyDE' in r['name'] else ''} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--section", action="append", choices=["cmrc", "scifact", "speed"])
    parser.add_argument("--cmrc", type=Path, default=SHARED / "cmrc2018_zh")
    parser.add_argument("--scifact", type=Path, default=SHARED / "scifact")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--hypothesis-cache", type=Path, help="hypothesis cache file")
    parser.add_argument("--llm", help="hypothesis writer (default: the package's)")
    parser.add_argument("--prompt", action="append", help="HyDE prompt (repeatable)")
    parser.add_argument("--query-weight", type=float, default=0.8)
    parser.add_argument("--max-tokens", type=int, help="writer's cap (default: its own)")
    parser.add_argument("--speed-docs", type=int, default=64)
    parser.add_argument("--speed-rounds", type=int, default=4)
    parser.add_argument("--out", type=Path, help="JSON file for the results")
    args = parser.parse_args()
    args.prompt = args.prompt or ["generic"]
    sections = args.section or ["cmrc", "scifact", "speed"]

    models: dict[str, Embeddings] = {
        "MiniLM": load_embeddings("local:minilm", threads=args.threads),
        "e5-small": MultilingualE5Embeddings(threads=args.threads),
    }
    out: dict[str, Any] = {
        "date": date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}",
        "threads": args.threads,
        "query_weight": args.query_weight,
    }
    for name in sections:
        started = time.perf_counter()
        if name == "speed":
            out[name] = speed_section(args.scifact, models, args.speed_docs, args.speed_rounds)
            print(json.dumps(out[name], indent=1))
        else:
            folder = args.cmrc if name == "cmrc" else args.scifact
            out[name] = quality_section(folder, models, args)
            print(markdown(out[name]), flush=True)
        out[name]["seconds"] = round(time.perf_counter() - started, 1)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
