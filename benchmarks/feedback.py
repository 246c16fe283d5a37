"""Pseudo-relevance feedback on a BEIR set: Rocchio, RM3, both, with and without HyDE.

Every row runs through `HyDERetriever` itself (`hyde_lc.bench.run_benchmark`: the exact
cosine index of the corpus and its BM25 index), so a feedback row is the retriever's
``feedback=...`` option as users run it. Every row is compared with the hybrid default
(the question alone, dense + BM25) by a paired bootstrap over queries (95%).

A feedback configuration is ``MODE:DOCS:BETA:TERM_WEIGHT`` (``-`` where it does not
apply): ``dense:5:0.3:-`` moves the search vector 0.3 of the way toward the mean of the
first search's 5 best chunks; ``lexical:10:-:0.5`` gives the 10 expansion terms of the
10 best chunks half of the BM25 query's weight; ``both:5:0.3:0.5`` does both. ``--grid``
is the train grid (documents 3, 5, 10; two weights per side). With ``--hyde``, the HyDE
default (one hypothesis, hybrid) and the same with each feedback configuration run too,
from the hypothesis cache (nothing is generated when it holds every query's hypothesis).

    python -m benchmarks.feedback scifact --split train --grid \\
        --out benchmarks/results/feedback-scifact-train
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from hyde_lc.bench import BenchMode, run_benchmark
from hyde_lc.bench.retrieval import HYBRID, compare, paired_cell

GRID_DOCS = (3, 5, 10)
GRID_VECTOR_WEIGHTS = (0.3, 0.5)
GRID_TERM_WEIGHTS = (0.3, 0.5)


def parse_config(spec: str) -> dict[str, Any]:
    """``MODE:DOCS:BETA:TERM_WEIGHT`` -> the retriever's feedback fields."""
    mode, docs, beta, weight = spec.split(":")
    fields: dict[str, Any] = {"feedback": mode, "feedback_docs": int(docs)}
    if mode in ("dense", "both"):
        fields["feedback_vector_weight"] = float(beta)
    if mode in ("lexical", "both"):
        fields["feedback_term_weight"] = float(weight)
    return fields


def grid() -> list[str]:
    """The train grid: each side alone and both, per number of documents and weight."""
    specs = [f"dense:{m}:{b}:-" for m in GRID_DOCS for b in GRID_VECTOR_WEIGHTS]
    specs += [f"lexical:{m}:-:{w}" for m in GRID_DOCS for w in GRID_TERM_WEIGHTS]
    specs += [
        f"both:{m}:{b}:{w}"
        for m in GRID_DOCS
        for b, w in zip(GRID_VECTOR_WEIGHTS, GRID_TERM_WEIGHTS, strict=True)
    ]
    return specs


def modes(specs: list[str], hyde: bool, plain: bool, classic: bool) -> list[BenchMode]:
    """The configurations to run (the baselines are added by the harness)."""
    chosen: list[BenchMode] = []
    for spec in specs:
        fields = parse_config(spec)
        if plain:
            chosen.append(BenchMode({"n_hypotheses": 0, **fields}))
    if classic:  # feedback on one side alone, as in the literature: dense + Rocchio, BM25 + RM3
        chosen.append(
            BenchMode({"n_hypotheses": 0, "lexical": "off", **parse_config("dense:5:0.5:-")})
        )
        chosen.append(
            BenchMode(
                {
                    "n_hypotheses": 0,
                    "dense_weight": 0.0,
                    "hybrid_fusion": "rrf",
                    **parse_config("lexical:10:-:0.5"),
                },
                name="bm25 + RM3 (10 docs, 10 terms, 0.5)",
            )
        )
    if hyde:
        chosen.append(BenchMode())  # the HyDE default: one hypothesis, hybrid
        chosen += [BenchMode(parse_config(spec)) for spec in specs]
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--split", default="train")
    parser.add_argument("--limit", type=int, help="the first N judged queries")
    parser.add_argument("--grid", action="store_true", help="the train grid of feedback settings")
    parser.add_argument("--configs", nargs="*", default=[], help="MODE:DOCS:BETA:TERM_WEIGHT")
    parser.add_argument("--hyde", action="store_true", help="also the HyDE default, + feedback")
    parser.add_argument(
        "--no-plain", action="store_true", help="leave out the no-LLM feedback rows"
    )
    parser.add_argument(
        "--classic", action="store_true", help="also dense + Rocchio and BM25 + RM3 alone"
    )
    parser.add_argument("--llm", default="local:qwen2.5-coder-0.5b")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--hypothesis-cache", type=Path)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    specs = (grid() if args.grid else []) + list(args.configs)
    chosen = modes(specs, args.hyde, not args.no_plain, args.classic)
    started = time.perf_counter()
    report = run_benchmark(
        args.data,
        split=args.split,
        limit=args.limit,
        modes=chosen,
        llm_spec=args.llm if args.hyde else None,
        max_tokens=args.max_tokens if args.hyde else None,
        hypothesis_cache=args.hypothesis_cache,
        concurrency=args.concurrency,
    )
    reference = next(r for r in report.results if r.mode == HYBRID)
    rows = []
    for r in report.results:
        vs = None if r is reference else compare(reference, r)
        rows.append({**r.to_json(), "vs_hybrid": None if vs is None else vars(vs)})
    meta = {**report.meta, "command_seconds": round(time.perf_counter() - started, 1)}
    meta["configs"] = specs
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps({"meta": meta, "results": rows}, indent=1))
    lines = [
        "| configuration | nDCG@10 | Recall@100 | vs hybrid default (95% CI) | fallbacks |",
        "|---|---|---|---|---|",
    ]
    for r, row in zip(report.results, rows, strict=True):
        vs = row["vs_hybrid"]
        cell = paired_cell(vs)
        lines.append(
            f"| {r.mode.label} | {100 * r.metrics['nDCG@10']:.1f} | {100 * r.metrics['R@100']:.1f}"
            f" | {cell} | {r.fallbacks if r.mode.n_hypotheses else ''} |"
        )
    (args.out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
