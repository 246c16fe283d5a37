"""``hyde-lc testset`` and ``hyde-lc tune``: a test set from your collection, then a choice.

``testset`` has a writer LLM write questions on chunks spread across the collection
(`hyde_lc.evaluation.testset.make_testset`); ``tune`` measures the configurations that
matter on that set and recommends one (`hyde_lc.bench.tune.tune`).

Example:
    $ hyde-lc ingest ./pdfs
    $ hyde-lc testset --n 100 --out my_questions.jsonl
    $ hyde-lc tune my_questions.jsonl --out-dir tune-report

"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from hyde_lc.cli.options import (
    add_store_options,
    given,
    given_path,
    model_spec,
    non_negative_int,
    open_collection,
    open_hypothesis_cache,
    positive_int,
)
from hyde_lc.cli.render import shown_line

TUNE_NAMES = ("dense", "bm25", "hybrid", "hybrid-hyde", "dense-hyde")
"""`hyde_lc.bench.tune.TUNE_CONFIGS` by name (pinned by tests/unit/test_cli_parser.py)."""


def cmd_testset(args: argparse.Namespace) -> int:
    """``hyde-lc testset``: write (or resume) a test set made from the collection."""
    from hyde_lc.evaluation.question_writer import default_rephraser, default_writer
    from hyde_lc.evaluation.testset import ChunkSource, make_testset

    store = open_collection(args, must_exist=True)
    source = ChunkSource.of_store(store)
    summary = make_testset(
        source,
        Path(args.out),
        n=args.n,
        writer=default_writer(args.writer),
        rephraser=None if args.rephraser == "none" else default_rephraser(args.rephraser),
        seed=args.seed,
        resume=not args.restart,
        max_drafts=args.max_drafts,
    )
    dropped = ", ".join(f"{k} {v}" for k, v in sorted(summary.rejected.items())) or "none"
    per_q = summary.seconds_per_question
    print(
        f"{summary.kept} questions in {shown_line(args.out)} ({summary.resumed} already there); "
        f"drafts dropped: {dropped}; {summary.writer_calls} writer calls"
        + (f", {per_q:.1f} s per question" if per_q is not None else "")
    )
    if summary.rejected:
        print(f"dropped drafts and why: {shown_line(str(summary.rejected_file))}")
    if summary.kept < args.n:
        why = (
            f"--max-drafts {args.max_drafts} reached; run again to go on"
            if args.max_drafts
            else "the collection has no more chunks whose questions pass the checks"
        )
        print(f"hyde-lc: only {summary.kept} of {args.n} questions: {why}", file=sys.stderr)
    print(f"next: hyde-lc tune {shown_line(args.out)}")
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    """``hyde-lc tune``: measure the configurations on a test set and recommend one."""
    from hyde_lc.bench.tune import by_name, tune, write_tune_report
    from hyde_lc.evaluation.testset import read_testset

    questions = read_testset(args.questions)
    store = open_collection(args, must_exist=True)
    configs = [by_name(name) for name in args.configs]
    llm: Any = None
    if any(c.llm_calls for c in configs):
        from hyde_lc.models.loading import load_llm

        llm = load_llm(args.hypothesis_llm, role="hypothesis")
    report = tune(
        questions,
        store,
        configs=configs,
        llm=llm,
        hypothesis_cache=open_hypothesis_cache(args.hypothesis_cache),
        windows=args.windows,
        allow_changed=args.allow_changed,
    )
    if report.meta.get("collection_note"):
        print(f"hyde-lc: {report.meta['collection_note']}", file=sys.stderr)
    print(report.markdown())
    print()
    print(report.choice())
    if args.out_dir:
        paths = write_tune_report(report, Path(args.out_dir))
        print("\nwrote " + ", ".join(shown_line(str(p)) for p in paths.values()))
    return 0


def add_commands(sub: Any) -> None:
    """Register ``testset`` and ``tune`` on the ``hyde-lc`` subparsers."""
    testset = sub.add_parser(
        "testset",
        help="write questions on your collection's chunks, for evaluate and tune",
        description="Have a writer LLM write a question (and a short answer) on chunks "
        "spread across the collection, check each (not copied from the chunk, answered by "
        "it, not answered as well by other chunks) and append it to --out, with its chunk "
        "as the reference; a rerun resumes. Dropped drafts go to <out>.rejected.jsonl.",
    )
    testset.add_argument(
        "--n", type=positive_int, default=100, help="questions to write (default 100)"
    )
    testset.add_argument("--out", required=True, type=given_path, help="JSON Lines test set")
    testset.add_argument(
        "--writer",
        type=model_spec,
        help="model spec of the writer (default: the hypothesis writer, "
        "$HYDE_LC_HYPOTHESIS_LLM or local:qwen2.5-coder-0.5b)",
    )
    testset.add_argument(
        "--rephraser",
        type=model_spec,
        help="model spec that puts every question in everyday words from the question "
        "alone (default: the answer model, $HYDE_LC_ANSWER_LLM or local:qwen2.5-coder-1.5b); "
        "none: the writer rewrites copied questions with the chunk in view",
    )
    testset.add_argument(
        "--seed", type=non_negative_int, default=0, help="which chunks (default 0)"
    )
    testset.add_argument(
        "--max-drafts",
        type=positive_int,
        metavar="N",
        help="stop after N drafts, kept or dropped (default: until --n are kept)",
    )
    testset.add_argument(
        "--restart", action="store_true", help="start --out afresh (its questions are lost)"
    )
    add_store_options(testset)
    testset.set_defaults(func=cmd_testset)

    tune = sub.add_parser(
        "tune",
        help="measure the configurations on a test set and recommend one",
        description="Run dense, BM25, hybrid, hybrid HyDE and dense HyDE on a test set "
        "(hyde-lc testset), score each by the reference chunk ids (hit@1, hit@5, MRR@10, "
        "nDCG@10) with paired bootstrap intervals against the default (hybrid), cost each "
        "(LLM calls and seconds per question), and recommend the cheapest configuration "
        "that no other beats with an interval above 0.",
    )
    tune.add_argument("questions", help="a test set (hyde-lc testset --out FILE)")
    tune.add_argument(
        "--out-dir",
        type=given("a folder", "--out-dir tune-report"),
        help="also write tune.json, tune.md and tune.png there",
    )
    tune.add_argument(
        "--configs",
        nargs="+",
        choices=TUNE_NAMES,
        default=list(TUNE_NAMES),
        metavar="NAME",
        help="configurations to measure (default all: " + ", ".join(TUNE_NAMES) + ")",
    )
    tune.add_argument(
        "--windows",
        nargs="*",
        type=non_negative_int,
        default=[0, 1, 2],
        metavar="N",
        help="neighbour windows measured around the recommended configuration (default "
        "0 1 2; none to skip)",
    )
    tune.add_argument(
        "--hypothesis-llm",
        type=model_spec,
        help="writer of the HyDE configurations' hypotheses ($HYDE_LC_HYPOTHESIS_LLM; "
        "default local:qwen2.5-coder-0.5b)",
    )
    tune.add_argument(
        "--hypothesis-cache",
        type=given("a file", "--hypothesis-cache hypotheses.sqlite"),
        metavar="FILE",
        help="SQLite file caching hypotheses (a rerun writes none; its seconds then "
        "count no writing)",
    )
    tune.add_argument(
        "--allow-changed",
        action="store_true",
        help="tune on a collection changed since the set was made, leaving out the "
        "questions whose reference chunks are gone or changed",
    )
    add_store_options(tune)
    tune.set_defaults(func=cmd_tune)
