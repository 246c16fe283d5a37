"""Beyond the default on a BEIR set: three-way score fusion, and HyDE with bge, from caches.

Three lists can be fused: BM25 (the corpus' index, `hyde_lc.search.lexical`), MiniLM dense and
bge-small-en-v1.5 dense (exact cosine search over each model's cached corpus matrix,
`hyde_lc.bench.retrieval.corpus_index`: nothing is embedded again). Each list gives its
100 best documents; `hyde_lc.core.fusion.score_fusion` (the package's min-max fusion) rescales
each over its own candidates and sums them with the row's weights, as the retriever's
hybrid search does for two lists. The package has no three-list path, so this one is
written here; with two lists it is the retriever's own fusion, and ``--check`` runs the
two-list rows through `HyDERetriever` (`hyde_lc.bench.run_benchmark`) and records how
far the two paths differ per query (they should not).

With ``--hyde``, every row also runs with one cached hypothesis per query in the
package's form: each dense list searches with 0.8 x the question's vector + 0.2 x the
hypothesis's (``embed_query`` for the question, ``embed_documents`` for the passage),
the BM25 query is the question 5 times plus the hypothesis (query2doc). Nothing is
generated: hypotheses come from ``--hypothesis-cache`` (the writer ``--llm`` at
``--max-tokens``, generic prompt) and a query without one is left out of every row
(the count is printed and recorded).

A row is ``BM25:MINILM:BGE`` weights, e.g. ``0.4:0.2:0.4`` (a zero weight leaves the
list out; ``0.5:0.5:0`` is the default hybrid). Every row's nDCG@10 is paired by query
(95% bootstrap, `hyde_lc.bench.paired_bootstrap`) with the default hybrid (MiniLM +
BM25, weight 0.5) and with bge hybrid at dense weight 0.5 and 0.6 (the weight bge's
train grid chose) of the same queries, and a HyDE row with the same row without HyDE;
the results file keeps per-query nDCG@10. ``scifact`` is the BEIR SciFact folder.
``--grid`` is the train grid (dense + dense, and BM25 0.3-0.5 with MiniLM taking a
quarter, a third or half of the dense weight); ``--hyde-only`` limits the HyDE rows.

    python -m benchmarks.ceiling scifact --split train --grid --check \\
        --out benchmarks/results/ceiling/train.json
    python -m benchmarks.ceiling scifact --split train --limit 120 --grid --hyde \\
        --llm local:qwen2.5-coder-1.5b --max-tokens 256 --check \\
        --hypothesis-cache benchmarks/results/hypotheses/scifact-qwen2.5-coder-1.5b.sqlite \\
        --out benchmarks/results/ceiling/train120-hyde-qwen1.5b.json
    python -m benchmarks.ceiling scifact --split test \\
        --rows 0.4:0.05:0.55 0.35:0.163:0.488 --hyde \\
        --hyde-only 0.5:0.5:0 0.4:0:0.6 0.35:0.163:0.488 \\
        --llm local:qwen2.5-coder-1.5b --max-tokens 256 \\
        --hypothesis-cache benchmarks/results/hypotheses/scifact-qwen2.5-coder-1.5b.sqlite \\
        --out benchmarks/results/ceiling/test-qwen1.5b.json
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.provenance import head_commit
from hyde_lc.bench.beir import BeirDataset, load_beir
from hyde_lc.bench.retrieval import (
    DEPTH,
    HYBRID,
    BenchMode,
    corpus_index,
    corpus_lexical,
    ir_metrics,
    paired_bootstrap,
    paired_cell,
    run_benchmark,
)
from hyde_lc.core.fusion import fuse_mean, reciprocal_rank_fusion, score_fusion
from hyde_lc.hyde.hypotheses import llm_identity
from hyde_lc.hyde.hypothesis_cache import HypothesisCache
from hyde_lc.hyde.transform import DEFAULT_QUERY_WEIGHT
from hyde_lc.models.loading import load_embeddings, load_llm
from hyde_lc.search.backend import backend_for
from hyde_lc.store.lexical_index import DEFAULT_QUERY_REPEATS, lexical_query

MODELS = {"minilm": "local:minilm", "bge": "local:bge-small-en-v1.5"}
LISTS = ("bm25", "minilm", "bge")
DEFAULT_ROW = (0.5, 0.5, 0.0)
BGE_ROW = (0.5, 0.0, 0.5)
BGE_TRAIN_ROW = (0.4, 0.0, 0.6)
"""bge hybrid at the dense weight its train grid chose (BENCHMARKS.md: bge section)."""
REFERENCES = {
    "vs_default": DEFAULT_ROW,
    "vs_bge_hybrid": BGE_ROW,
    "vs_bge_hybrid_0.6": BGE_TRAIN_ROW,
}
"""Every row is paired with these (all in every run), and a HyDE row with itself without."""


@dataclass(frozen=True)
class Row:
    """One fusion: a weight per list (BM25, MiniLM, bge), score or rank fusion, HyDE or not."""

    weights: tuple[float, float, float]
    hyde: bool = False
    fusion: str = "score"

    @property
    def name(self) -> str:
        parts = [f"{name} {w:g}" for name, w in zip(LISTS, self.weights, strict=True) if w]
        if len(parts) == 1:
            parts = [parts[0].split()[0]]
        text = " + ".join(parts)
        if self.fusion == "rrf":
            text += " (RRF)"
        return text + (", HyDE" if self.hyde else "")


def parse_row(spec: str) -> Row:
    """``B:M:G`` weights, optionally ``:rrf``."""
    parts = spec.split(":")
    weights = tuple(float(p) for p in parts[:3])
    if len(weights) != 3 or not sum(weights):
        raise SystemExit(f"a row is BM25:MINILM:BGE weights (not all 0), got {spec!r}")
    fusion = parts[3] if len(parts) > 3 else "score"
    return Row(weights, fusion=fusion)


def grid() -> list[Row]:
    """The train grid: the two-list references, dense + dense, and three-way weights."""
    rows = [Row(DEFAULT_ROW), Row(BGE_ROW), Row((0.4, 0.0, 0.6)), Row((1.0, 0.0, 0.0))]
    rows += [Row((0.0, 1.0, 0.0)), Row((0.0, 0.0, 1.0))]
    rows += [Row((0.0, m, round(1 - m, 2))) for m in (0.2, 0.3, 0.4, 0.5)]
    for bm25 in (0.3, 0.35, 0.4, 0.45, 0.5):
        dense = 1 - bm25
        for share in (0.25, 1 / 3, 0.5):  # MiniLM's share of the dense weight
            rows.append(Row((bm25, round(dense * share, 3), round(dense * (1 - share), 3))))
    rows.append(Row((1 / 3, 1 / 3, 1 / 3), fusion="rrf"))
    return rows


class Lists:
    """Each query's three candidate lists (question alone, or with its hypothesis)."""

    def __init__(self, data: BeirDataset, hypotheses: dict[str, str] | None):
        self.data = data
        self.hypotheses = hypotheses or {}
        self.indexes = {
            name: corpus_index(data, load_embeddings(spec)) for name, spec in MODELS.items()
        }
        self.lexical = corpus_lexical(self.indexes["minilm"], data)
        self.cache: dict[tuple[str, str, bool], list[tuple[str, float]]] = {}
        self.vectors: dict[tuple[str, str, bool], list[float]] = {}
        for name, index in self.indexes.items():
            embeddings = index.embeddings
            assert embeddings is not None
            for q, text in data.queries.items():
                question = embeddings.embed_query(text)
                self.vectors[name, q, False] = question
                if q in self.hypotheses:  # one batch per query, as the retriever embeds
                    [passage] = embeddings.embed_documents([self.hypotheses[q]])
                    weights = [DEFAULT_QUERY_WEIGHT, 1 - DEFAULT_QUERY_WEIGHT]
                    self.vectors[name, q, True] = fuse_mean([question, passage], weights)

    def get(self, name: str, q: str, hyde: bool) -> list[tuple[str, float]]:
        key = (name, q, hyde)
        if key not in self.cache:
            if name == "bm25":
                used = [self.hypotheses[q]] if hyde else []
                terms = lexical_query(self.data.queries[q], used, DEFAULT_QUERY_REPEATS)
                self.cache[key] = self.lexical.search(terms, DEPTH)
            else:
                pairs = backend_for(self.indexes[name], "off").scored_pairs(
                    self.vectors[key], DEPTH, {}
                )
                self.cache[key] = [(str(d.id), float(s or 0.0)) for d, s in pairs]
        return self.cache[key]

    def rank(self, row: Row, q: str) -> list[tuple[str, float]]:
        # dense lists first, as the retriever passes [dense, lexical]
        order = [1, 2, 0]
        lists = [self.get(LISTS[i], q, row.hyde) for i in order if row.weights[i]]
        weights = [row.weights[i] for i in order if row.weights[i]]
        if row.fusion == "rrf":
            ranked = reciprocal_rank_fusion([[d for d, _ in lst] for lst in lists], weights=weights)
        else:
            ranked = score_fusion(lists, weights)
        return [(doc, float(DEPTH - r)) for r, (doc, _) in enumerate(ranked[:DEPTH])]


def paired(base: dict[str, float], other: dict[str, float], label: str) -> dict[str, Any]:
    order = sorted(base)
    delta, ci = paired_bootstrap([base[q] for q in order], [other[q] for q in order])
    return {"reference": label, "delta": delta, "ci": list(ci)}


def package_check(
    args: argparse.Namespace, data: BeirDataset, rows: list[dict[str, Any]]
) -> dict[str, Any]:
    """The two-list rows through `HyDERetriever`: largest per-query nDCG@10 difference."""
    out: dict[str, Any] = {}
    hybrid_rows = {
        (r["weights"][1] > 0, r["weights"][1] or r["weights"][2], r["hyde"]): r
        for r in rows
        if r["fusion"] == "score" and r["weights"][0] and sum(w > 0 for w in r["weights"]) == 2
    }
    for name, spec in MODELS.items():
        wanted = {
            (w, hyde): r
            for (is_minilm, w, hyde), r in hybrid_rows.items()
            if is_minilm == (name == "minilm")
        }
        modes: dict[tuple[float, bool], BenchMode] = {}
        for w, hyde in wanted:
            fields: dict[str, Any] = {"dense_weight": w} if w != 0.5 else {}
            if not hyde:
                fields["n_hypotheses"] = 0
            modes[w, hyde] = BenchMode(fields)
        if not modes:
            continue
        hyde = any(h for _, h in modes)
        report = run_benchmark(
            args.data,
            split=args.split,
            limit=args.limit,
            modes=list(modes.values()),
            embeddings=load_embeddings(spec),
            llm_spec=args.llm if hyde else None,
            max_tokens=args.max_tokens if hyde else None,
            hypothesis_cache=args.hypothesis_cache if hyde else None,
            concurrency=1,
        )
        by_mode = {r.mode: r for r in report.results}
        for key, mode in modes.items():
            result = by_mode.get(mode) or by_mode[HYBRID]
            mine = wanted[key]["per_query_ndcg"]
            diff = max(abs(result.per_query_ndcg[q] - mine[q]) for q in mine)
            out[f"{wanted[key]['name']} ({mode.label})"] = {
                "package_nDCG@10": result.metrics["nDCG@10"],
                "here_nDCG@10": wanted[key]["metrics"]["nDCG@10"],
                "max_per_query_difference": diff,
                "fallbacks": result.fallbacks,
            }
            print(
                f"check {wanted[key]['name']}: package {result.metrics['nDCG@10']:.4f}, "
                f"here {wanted[key]['metrics']['nDCG@10']:.4f}, max diff {diff:.4f}",
                flush=True,
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--split", default="train")
    parser.add_argument("--limit", type=int, help="the first N judged queries")
    parser.add_argument("--grid", action="store_true", help="the train grid of rows")
    parser.add_argument("--rows", nargs="*", default=[], help="BM25:MINILM:BGE[:rrf] weights")
    parser.add_argument("--hyde", action="store_true", help="also every row with HyDE")
    parser.add_argument(
        "--hyde-only",
        nargs="*",
        default=None,
        help="with --hyde: the HyDE rows for these specs only (default: all)",
    )
    parser.add_argument("--llm", default="local:qwen2.5-coder-1.5b")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--hypothesis-cache", type=Path)
    parser.add_argument(
        "--check",
        action="store_true",
        help="also run the two-list rows through HyDERetriever and compare",
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    started = time.perf_counter()
    data = load_beir(args.data, split=args.split, limit=args.limit)
    rows = unique([*(grid() if args.grid else []), *map(parse_row, args.rows)])
    rows = unique([Row(DEFAULT_ROW), Row(BGE_ROW), Row(BGE_TRAIN_ROW), *rows])
    hypotheses: dict[str, str] = {}
    left_out = 0
    if args.hyde:
        if args.hypothesis_cache is None:
            raise SystemExit("--hyde needs --hypothesis-cache (nothing is generated here)")
        from benchmarks.hybrid_sweep import cached_hypotheses

        cache = HypothesisCache(args.hypothesis_cache)
        identity = llm_identity(load_llm(args.llm, role="hypothesis", max_tokens=args.max_tokens))
        for q, text in data.queries.items():
            found = cached_hypotheses(cache, identity, "generic", text, 1)
            if found:
                hypotheses[q] = found[0]
        left_out = len(data.queries) - len(hypotheses)
        print(f"{len(hypotheses)} queries with a cached hypothesis, {left_out} left out")
        if left_out:
            data = BeirDataset(
                data.name,
                data.corpus,
                {q: t for q, t in data.queries.items() if q in hypotheses},
                {q: r for q, r in data.qrels.items() if q in hypotheses},
            )
        if left_out and args.check:
            raise SystemExit("--check with --hyde needs every query's hypothesis in the cache")
        chosen = None if args.hyde_only is None else set(map(parse_row, args.hyde_only))
        rows += [
            Row(r.weights, True, r.fusion) for r in list(rows) if chosen is None or r in chosen
        ]
    lists = Lists(data, hypotheses)
    print(f"query vectors ready in {time.perf_counter() - started:.0f} s", flush=True)

    results: list[dict[str, Any]] = []
    for row in rows:
        runs = {q: lists.rank(row, q) for q in data.queries}
        metrics, per_query = ir_metrics(data.qrels, runs)
        results.append(
            {
                "name": row.name,
                "weights": list(row.weights),
                "hyde": row.hyde,
                "fusion": row.fusion,
                "metrics": metrics,
                "per_query_ndcg": per_query,
            }
        )
        print(f"{row.name:55} nDCG@10 {100 * metrics['nDCG@10']:.1f}", flush=True)
    by_row = dict(zip(rows, results, strict=True))
    for row, r in by_row.items():
        others = {key: Row(weights) for key, weights in REFERENCES.items()}
        if row.hyde:
            others["vs_without_hyde"] = Row(row.weights, False, row.fusion)
        for key, other in others.items():
            if other != row:
                base = by_row[other]
                r[key] = paired(base["per_query_ndcg"], r["per_query_ndcg"], base["name"])

    check = package_check(args, data, results) if args.check else None
    commit = head_commit()
    meta = {
        "dataset": data.name,
        "split": args.split,
        "limit": args.limit,
        "queries": len(data.queries),
        "queries_left_out_without_hypothesis": left_out,
        "corpus": len(data.corpus),
        "embeddings": MODELS,
        "depth": DEPTH,
        "llm": args.llm if args.hyde else None,
        "max_tokens": args.max_tokens if args.hyde else None,
        "hypothesis_cache": str(args.hypothesis_cache) if args.hyde else None,
        "package_check": check,
        "date": date.today().isoformat(),
        "commit": commit,
        "machine": platform.machine(),
        "seconds": round(time.perf_counter() - started, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "rows": results}, indent=1))
    table = markdown(results)
    args.out.with_suffix(".md").write_text(table + "\n")
    print(table)


def unique(rows: list[Row]) -> list[Row]:
    """Rows in order, each once."""
    return list(dict.fromkeys(rows))


def markdown(results: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table (metrics x 100)."""
    lines = [
        "| row | nDCG@10 | R@100 | vs default hybrid (95% CI) | vs bge hybrid 0.5 "
        "| vs bge hybrid 0.6 | vs without HyDE |",
        "|---|---|---|---|---|---|---|",
    ]
    keys = [*REFERENCES, "vs_without_hyde"]
    for r in results:
        m = r["metrics"]
        cells = " | ".join(paired_cell(r.get(key)) for key in keys)
        lines.append(
            f"| {r['name']} | {100 * m['nDCG@10']:.1f} | {100 * m['R@100']:.1f} | {cells} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
