"""``hyde-lc bench`` and ``hyde-lc speed``: retrieval quality and speed on a BEIR dataset.

Example:
    $ hyde-lc bench scifact --limit 100 --n 1 4 --prompts scifact generic
    $ hyde-lc speed scifact --docs 5183 --queries 20 --out speed-results

"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from hyde_lc.cli.options import (
    LEXICAL_CHOICES,
    given,
    given_path,
    non_negative_int,
    positive_float,
    positive_int,
    unit_interval,
)

BENCH_MODES = (
    "standard",
    "bm25",
    "hybrid",
    "default",
    "mean+q",
    "mean (hyp only)",
    "concat",
    "rrf",
)
"""`hyde_lc.bench.retrieval.MODE_KINDS`: the configurations ``--modes`` selects."""
SPEED_SECTIONS = ("ingest", "query", "concurrency", "scale")
"""`hyde_lc.bench.speed.SECTIONS`."""
REMOTE_MODELS = ("gpt-4o-mini", "gpt-4.1-mini", "gpt-5-mini", "gpt-4o")
"""`hyde_lc.bench.speed.REMOTE_MODELS`: the models priced by default."""


def cmd_bench(args: argparse.Namespace) -> int:
    """``hyde-lc bench``: retrieval quality of retriever configurations on a BEIR dataset."""
    from hyde_lc.bench.retrieval import run_benchmark, select_modes, write_report

    lexical = (
        None if args.lexical is None else ["off" if s == "off" else "auto" for s in args.lexical]
    )
    modes = select_modes(args.modes, args.n, args.prompts, args.query_weights, args.gates, lexical)
    report = run_benchmark(
        args.data,
        split=args.split,
        limit=args.limit,
        modes=modes,
        llm_spec=args.llm,
        embeddings_spec=args.embeddings,
        max_tokens=args.max_tokens,
        concurrency=args.concurrency,
        hypothesis_cache=args.hypothesis_cache,
    )
    paths = write_report(report, Path(args.out))
    print(report.markdown())
    print(
        f"\n{report.meta['queries']} queries in {report.meta['seconds']} s; wrote "
        + ", ".join(str(p) for p in paths.values())
    )
    return 0


def cmd_speed(args: argparse.Namespace) -> int:
    """``hyde-lc speed``: run the chosen sections, print the tables, write JSON and Markdown."""
    from hyde_lc.bench.speed import run_speed, write_speed_report

    report = run_speed(
        args.data,
        sections=args.sections,
        docs=args.docs,
        queries=args.queries,
        llm_spec=args.llm,
        window=args.window,
        k=args.k,
        latency=args.latency,
        concurrency_queries=args.concurrency_queries,
        max_concurrency=args.max_concurrency,
        scale_sizes=args.scale,
        remote_models=args.remote_models,
    )
    paths = write_speed_report(report, Path(args.out))
    print(report.markdown())
    print(f"{report.meta['seconds']} s; wrote " + ", ".join(str(p) for p in paths.values()))
    return 0


def add_commands(sub: Any, prompts: list[str]) -> None:
    """Register ``bench`` and ``speed`` on the ``hyde-lc`` subparsers."""
    spec = given("a model spec", "--llm local:qwen2.5-coder-1.5b")
    bench = sub.add_parser(
        "bench",
        help="retrieval quality on a BEIR dataset",
        description="nDCG@10, Recall@100 and MRR@10 of standard and HyDE retrieval on a "
        "BEIR-layout folder, each mode against standard by a paired bootstrap; writes JSON, "
        "Markdown and a plot.",
    )
    bench.add_argument("data", help="BEIR folder (corpus.jsonl, queries.jsonl, qrels/)")
    bench.add_argument("--split", default="test", help="qrels split: test (default), train, dev")
    bench.add_argument("--limit", type=positive_int, help="first N judged queries only")
    bench.add_argument(
        "--modes",
        nargs="+",
        choices=BENCH_MODES,
        help="configurations to measure (default: 'default', the package's configuration "
        "with a hypothesis model: hybrid-hyde); standard, bm25 and hybrid (the default "
        "without one) always run, and every row is compared with them",
    )
    bench.add_argument(
        "--n", type=positive_int, nargs="+", help="HyDE variants: hypotheses per query (1 4)"
    )
    bench.add_argument(
        "--prompts", nargs="+", choices=prompts, help="HyDE variants: prompts (scifact generic)"
    )
    bench.add_argument(
        "--query-weights",
        type=unit_interval,
        nargs="+",
        default=[],
        metavar="W",
        help="also run mean+q and rrf with the query's share of the fusion set to W",
    )
    bench.add_argument(
        "--gates",
        type=unit_interval,
        nargs="+",
        default=[],
        metavar="T",
        help="also run mean+q keeping only hypotheses with cosine >= T to the query",
    )
    bench.add_argument(
        "--lexical",
        nargs="+",
        choices=LEXICAL_CHOICES,
        help="HyDE variants: dense only (off, the default) and/or hybrid (on)",
    )
    bench.add_argument("--llm", type=spec, help="hypothesis model spec ($HYDE_LC_HYPOTHESIS_LLM)")
    bench.add_argument(
        "--embeddings", type=spec, help="embedding model spec (default local:minilm-dq)"
    )
    bench.add_argument(
        "--max-tokens",
        type=positive_int,
        help="the hypothesis writer's token cap (default: the writer's own, 64 for local ones)",
    )
    bench.add_argument(
        "--concurrency", type=positive_int, default=4, help="queries in flight at once (default 4)"
    )
    bench.add_argument(
        "--hypothesis-cache",
        type=given_path,
        metavar="FILE",
        help="SQLite hypothesis cache (default in the hyde_lc cache dir)",
    )
    bench.add_argument(
        "--out", type=given_path, default="bench-results", help="folder for JSON, Markdown, PNG"
    )
    bench.set_defaults(func=cmd_bench)

    speed = sub.add_parser(
        "speed",
        help="ingest/query/concurrency/scale speed and query cost",
        description="Ingest speed, per-stage query latency, concurrency and search latency "
        "at growing collection sizes, each against a floor measured in the same run; the "
        "cost of a query on remote models.",
    )
    speed.add_argument("data", help="BEIR folder: its corpus is ingested, its queries asked")
    speed.add_argument(
        "--sections",
        nargs="+",
        choices=SPEED_SECTIONS,
        default=list(SPEED_SECTIONS),
        help="which parts to time (default all)",
    )
    speed.add_argument("--docs", type=positive_int, default=1000, help="corpus documents to ingest")
    speed.add_argument("--queries", type=positive_int, default=20, help="questions timed per stage")
    speed.add_argument(
        "--llm", type=spec, help="hypothesis and answer model spec (default: the local ones)"
    )
    speed.add_argument(
        "--window", type=non_negative_int, default=1, help="neighbour expansion window (default 1)"
    )
    speed.add_argument("--k", type=positive_int, default=4, help="chunks per query (default 4)")
    speed.add_argument(
        "--latency", type=positive_float, default=0.5, help="simulated remote LLM latency (s)"
    )
    speed.add_argument(
        "--concurrency-queries",
        type=positive_int,
        default=16,
        help="queries in the concurrency section (default 16)",
    )
    speed.add_argument(
        "--max-concurrency",
        type=positive_int,
        default=8,
        help="abatch's max_concurrency in the concurrency section (default 8)",
    )
    speed.add_argument(
        "--scale", nargs="+", type=positive_int, default=[5_000, 50_000, 500_000],
        metavar="N", help="collection sizes for the search-latency curve",
    )  # fmt: skip
    speed.add_argument(
        "--remote-models",
        nargs="+",
        default=list(REMOTE_MODELS),
        metavar="M",
        help="remote models whose cost per query is estimated (default: "
        + ", ".join(REMOTE_MODELS)
        + ")",
    )
    speed.add_argument(
        "--out", type=given_path, default="speed-results", help="folder for speed.json/.md"
    )
    speed.set_defaults(func=cmd_speed)
