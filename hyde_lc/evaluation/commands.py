"""``hyde-lc evaluate`` and ``hyde-lc compare``: evaluation runs from the command line.

Example:
    $ hyde-lc evaluate questions.jsonl --out hyde.jsonl --mode hyde --n-hypotheses 4 --score
    $ hyde-lc evaluate questions.jsonl --out standard.jsonl --mode standard --retrieval-only
    $ hyde-lc compare questions.jsonl --out-dir report --window 1 --judge local:qwen2.5-coder-1.5b

"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from hyde_lc.errors import HydeLcError
from hyde_lc.fusion import FUSION_MODES
from hyde_lc.prompts import DEFAULT_PROMPT, PROMPTS


def _pipeline_options(parser: argparse.ArgumentParser, numbers: dict[str, Any]) -> None:
    group = parser.add_argument_group("retrieval and models")
    group.add_argument("--k", type=numbers["positive_int"], default=4, help="chunks per question")
    group.add_argument("--fusion", choices=FUSION_MODES, default="mean")
    group.add_argument("--n-hypotheses", type=numbers["positive_int"], default=1)
    group.add_argument("--prompt", choices=sorted(PROMPTS), default=DEFAULT_PROMPT)
    group.add_argument(
        "--hypotheses-only", action="store_true", help="leave the question out of the fusion"
    )
    group.add_argument(
        "--query-weight",
        type=_query_weight(numbers["unit_interval"]),
        default="default",
        metavar="W",
        help="the query's share of the mean or rrf fusion (default 0.8); 'paper' for the "
        "paper's equal weighting, 1/(n+1)",
    )
    group.add_argument("--timeout", type=numbers["positive_float"], default=120.0)
    group.add_argument("--hypothesis-cache", metavar="FILE", help="SQLite hypothesis cache")
    group.add_argument("--hypothesis-llm", help="model spec ($HYDE_LC_HYPOTHESIS_LLM)")
    group.add_argument("--answer-llm", help="model spec ($HYDE_LC_ANSWER_LLM)")
    group.add_argument("--retrieval-only", action="store_true", help="skip the answer LLM")


def _pipeline(
    args: argparse.Namespace, store: Any, mode: str, window: int, pricing: Any = None
) -> Any:
    from hyde_lc.cli import _hypothesis_cache
    from hyde_lc.evaluation.records import EvaluationPipeline

    return EvaluationPipeline(
        store=store,
        mode=mode,  # type: ignore[arg-type]
        hyde_model=args.hypothesis_llm,
        answer_model=args.answer_llm,
        k=args.k,
        n_hypotheses=args.n_hypotheses,
        fusion=args.fusion,
        include_query=not args.hypotheses_only,
        query_weight=args.query_weight,
        prompt=args.prompt,
        window=window,
        retrieval_only=args.retrieval_only,
        timeout=args.timeout,
        hypothesis_cache=_hypothesis_cache(args.hypothesis_cache),
        pricing=pricing,
    )


def _not_the_question_file(out: Path, questions: str, flag: str) -> None:
    """Refuse an output path that is the question file: even --restart must not empty it."""
    if out.exists() and out.resolve() == Path(questions).resolve():
        raise HydeLcError(
            f"{flag} {out} is the question file: the records go to a file of their own, e.g. "
            f"{flag} {out.with_name(out.stem + '-results.jsonl')}"
        )


def _judge(args: argparse.Namespace) -> tuple[Any, Any]:
    if not args.judge:
        return None, None
    from hyde_lc.models import load_embeddings, load_llm

    # Ragas discards a judge reply cut at max_tokens, and its JSON replies run long.
    return load_llm(args.judge, role="answer", max_tokens=1024), load_embeddings(args.embeddings)


def _metrics(args: argparse.Namespace) -> list[str] | None:
    from hyde_lc.evaluation.ragas_metrics import JUDGED_METRICS, OFFLINE_METRICS

    if args.metrics:
        return list(args.metrics)
    return [*OFFLINE_METRICS, *(JUDGED_METRICS if args.judge else ())]


def cmd_evaluate(args: argparse.Namespace) -> int:
    """``hyde-lc evaluate``: one Ragas-ready record per question, resumable.

    The question file, the pricing table and the output file are checked before the store
    or any model is opened; the settings of a resumed file once the pipeline is built,
    before any question is asked.
    """
    from hyde_lc.cli import _open
    from hyde_lc.evaluation.pricing import PricingTable
    from hyde_lc.evaluation.ragas_metrics import mean_scores, score_records
    from hyde_lc.evaluation.runs import (
        check_output_file,
        evaluate_questions,
        read_questions,
        read_records,
    )

    questions = read_questions(args.questions)
    out = Path(args.out)
    _not_the_question_file(out, args.questions, "--out")
    pricing = PricingTable.load()
    check_output_file(out, resume=not args.restart)
    store = _open(args, must_exist=True)
    pipeline = _pipeline(args, store, args.mode, args.window, pricing)
    summary = evaluate_questions(
        questions,
        pipeline,
        out,
        resume=not args.restart,
        retry_errors=args.retry_errors,
    )
    print(
        f"{pipeline.retrieval_method}: {summary.done} answered, {summary.skipped} already in "
        f"{out}, {summary.failed} failed (recorded with metadata.error)"
    )
    if summary.set_aside:
        print(
            f"hyde-lc: {len(summary.set_aside)} line(s) of {out} that were not records are "
            f"kept in {summary.corrupt_file}",
            file=sys.stderr,
        )
    if args.score:
        judge_llm, judge_embeddings = _judge(args)
        records = read_records(args.out)
        means = mean_scores(
            score_records(
                records, _metrics(args), judge_llm=judge_llm, judge_embeddings=judge_embeddings
            )
        )
        print(json.dumps({"retrieval_method": pipeline.retrieval_method, **means}, indent=2))
    return 1 if summary.failed else 0


def cmd_compare(args: argparse.Namespace) -> int:
    """``hyde-lc compare``: the same questions through each mode, one report directory."""
    from hyde_lc.cli import _open
    from hyde_lc.evaluation.compare import check_out_dir, compare_modes
    from hyde_lc.evaluation.pricing import PricingTable
    from hyde_lc.evaluation.runs import read_questions

    questions = read_questions(args.questions)
    modes = [*args.modes, *([f"hyde-window{args.window}"] if args.window else [])]
    if len(set(modes)) < 2:
        raise HydeLcError("compare needs two modes or more: --modes standard hyde, or --window N")
    folder = Path(args.out_dir)
    for mode in modes:
        _not_the_question_file(folder / f"{mode}.jsonl", args.questions, "--out-dir")
    pricing = PricingTable.load()
    check_out_dir(folder, modes, resume=not args.restart)
    store = _open(args, must_exist=True)
    pipelines = {mode: _pipeline(args, store, mode, 0, pricing) for mode in args.modes}
    if args.window:
        pipelines[f"hyde-window{args.window}"] = _pipeline(
            args, store, "hyde", args.window, pricing
        )
    judge_llm, judge_embeddings = _judge(args)
    if args.pairwise and judge_llm is None:
        raise HydeLcError("--pairwise needs a judge model: add --judge SPEC")
    report = compare_modes(
        questions,
        pipelines,
        folder,
        metrics=_metrics(args),
        judge_llm=judge_llm,
        judge_embeddings=judge_embeddings,
        pairwise_judge=judge_llm if args.pairwise else None,
        resume=not args.restart,
    )
    keys = [k for k, v in report.aggregates[report.modes[0]].items() if not isinstance(v, str)]
    width = max(len(k) for k in keys)
    print(f"{'':{width}}  " + "  ".join(f"{m:>14}" for m in report.modes))
    for key in keys:
        cells = [report.aggregates[m].get(key) for m in report.modes]
        print(
            f"{key:{width}}  "
            + "  ".join(f"{'n/a' if c is None else f'{c:.4g}':>14}" for c in cells)
        )
    if report.pairwise:
        print("judge: " + ", ".join(f"{k} {v}" for k, v in report.pairwise.items()))
    print(f"\nreport: {report.html_path}")
    return 0


def add_commands(sub: Any, store_args: Any, numbers: dict[str, Any]) -> None:
    """Register ``evaluate`` and ``compare`` on the ``hyde-lc`` subparsers."""
    from hyde_lc.evaluation.ragas_metrics import JUDGED_METRICS, OFFLINE_METRICS

    metric_names = [*OFFLINE_METRICS, *JUDGED_METRICS]
    evaluate = sub.add_parser(
        "evaluate", help="answer a question file into Ragas-ready records (resumable)"
    )
    evaluate.add_argument("questions", help="JSON Lines: question (or user_input), reference...")
    evaluate.add_argument("--out", required=True, help="JSON Lines records (appended, resumable)")
    evaluate.add_argument("--mode", choices=("hyde", "standard"), default="hyde")
    evaluate.add_argument(
        "--window",
        type=numbers["non_negative_int"],
        default=0,
        metavar="N",
        help="widen each hit with N neighbouring chunks on each side",
    )
    evaluate.add_argument(
        "--restart", action="store_true", help="start --out afresh (its records are lost)"
    )
    evaluate.add_argument(
        "--retry-errors", action="store_true", help="redo the questions that failed before"
    )
    evaluate.add_argument("--score", action="store_true", help="print mean Ragas metrics")
    evaluate.add_argument("--metrics", nargs="+", choices=metric_names)
    evaluate.add_argument("--judge", metavar="SPEC", help="judge model for LLM-judged metrics")
    _pipeline_options(evaluate, numbers)
    store_args(evaluate)
    evaluate.set_defaults(func=cmd_evaluate)

    compare = sub.add_parser("compare", help="standard vs HyDE (vs expansion): report with plots")
    compare.add_argument("questions", help="JSON Lines question file")
    compare.add_argument("--out-dir", required=True, help="report folder (resumable)")
    compare.add_argument(
        "--modes", nargs="+", choices=("standard", "hyde"), default=["standard", "hyde"]
    )
    compare.add_argument(
        "--window",
        type=numbers["non_negative_int"],
        default=0,
        metavar="N",
        help="also run HyDE with neighbour expansion of N chunks",
    )
    compare.add_argument("--metrics", nargs="+", choices=metric_names)
    compare.add_argument("--judge", metavar="SPEC", help="judge model for LLM-judged metrics")
    compare.add_argument(
        "--pairwise", action="store_true", help="the judge also compares the first two answers"
    )
    compare.add_argument(
        "--restart",
        action="store_true",
        help="start every mode's records in --out-dir afresh (they are lost)",
    )
    _pipeline_options(compare, numbers)
    store_args(compare)
    compare.set_defaults(func=cmd_compare)


def _query_weight(unit_interval: Any) -> Any:
    """An argparse type: ``paper`` (None: equal weighting), ``default`` or a number in (0, 1)."""

    def parse(text: str) -> Any:
        word = text.strip().lower()
        if word in ("paper", "default"):
            return None if word == "paper" else "default"
        return unit_interval(text)

    return parse
