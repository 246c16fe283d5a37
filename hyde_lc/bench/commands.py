"""``hyde-lc speed``: the speed, concurrency, scale and cost benchmark (issue 6).

Example:
    $ hyde-lc speed ../shared/data/scifact --docs 5183 --queries 20 --out benchmarks/results/speed

"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hyde_lc.bench.speed import REMOTE_MODELS, SECTIONS


def cmd_speed(args: argparse.Namespace) -> int:
    """Run the chosen sections, print the tables, write JSON and Markdown."""
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


def add_command(sub: Any, numbers: dict[str, Callable[[str], Any]]) -> None:
    """Register ``speed`` on the CLI's subparsers (``numbers``: the CLI's number parsers)."""
    positive_int, positive_float = numbers["positive_int"], numbers["positive_float"]
    speed = sub.add_parser("speed", help="ingest/query/concurrency/scale speed and query cost")
    speed.add_argument("data", help="BEIR folder: its corpus is ingested, its queries asked")
    speed.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    speed.add_argument("--docs", type=positive_int, default=1000, help="corpus documents to ingest")
    speed.add_argument("--queries", type=positive_int, default=20, help="questions timed per stage")
    speed.add_argument("--llm", help="hypothesis and answer model spec (default: the local ones)")
    speed.add_argument("--window", type=numbers["non_negative_int"], default=1)
    speed.add_argument("--k", type=positive_int, default=4)
    speed.add_argument(
        "--latency", type=positive_float, default=0.5, help="simulated remote LLM latency (s)"
    )
    speed.add_argument("--concurrency-queries", type=positive_int, default=16)
    speed.add_argument("--max-concurrency", type=positive_int, default=8)
    speed.add_argument(
        "--scale", nargs="+", type=positive_int, default=[5_000, 50_000, 500_000],
        metavar="N", help="collection sizes for the search-latency curve",
    )  # fmt: skip
    speed.add_argument("--remote-models", nargs="+", default=list(REMOTE_MODELS), metavar="M")
    speed.add_argument("--out", default="speed-results", help="folder for speed.json/.md")
    speed.set_defaults(func=cmd_speed)
