"""``hyde-lc evaluate`` and ``hyde-lc compare``: evaluation runs from the command line.

The commands check their files first (question file, pricing table, output file or
folder), then build `hyde_lc.evaluation.EvaluationPipeline` objects from their options
and hand them to `hyde_lc.evaluation.evaluate_questions` / `compare_modes`.

Example:
    $ hyde-lc evaluate questions.jsonl --out hyde.jsonl --mode hyde --n-hypotheses 4 --score
    $ hyde-lc evaluate questions.jsonl --out standard.jsonl --mode standard --retrieval-only
    $ hyde-lc compare questions.jsonl --out-dir report --window 1 --judge local:qwen2.5-coder-1.5b

"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

from hyde_lc.cli.options import (
    LEXICAL_CHOICES,
    MODE_HELP,
    add_hypothesis_options,
    add_k_option,
    add_store_options,
    given,
    given_path,
    non_negative_int,
    open_collection,
    open_hypothesis_cache,
    positive_int,
    resolve_mode,
    unit_interval,
)
from hyde_lc.cli.render import WIDTH, json_text, shown_line, timings_line
from hyde_lc.errors import HydeLcError

OFFLINE_METRICS = (
    "contained_context_precision",
    "contained_context_recall",
    "context_precision",
    "context_recall",
    "id_context_precision",
    "id_context_recall",
    "string_similarity",
    "rouge",
    "bleu",
    "chrf",
)
"""`hyde_lc.evaluation.ragas_metrics.OFFLINE_METRICS` by name (no judge needed)."""
JUDGED_METRICS = ("faithfulness", "answer_relevancy", "llm_context_precision")
"""`hyde_lc.evaluation.ragas_metrics.JUDGED_METRICS` by name (they need ``--judge``)."""
METRICS = (*OFFLINE_METRICS, *JUDGED_METRICS)


def _query_weight(text: str) -> Any:
    """An argparse type: ``paper`` (None: equal weighting), ``default`` or a number in (0, 1)."""
    word = text.strip().lower()
    if word in ("paper", "default"):
        return None if word == "paper" else "default"
    return unit_interval(text)


def _pipeline(
    args: argparse.Namespace, store: Any, mode: str, window: int, pricing: Any = None
) -> Any:
    """The evaluation pipeline the options describe, for ``mode`` and ``window``."""
    from hyde_lc.evaluation.records import EvaluationPipeline

    fields: dict[str, Any] = {
        "k": args.k,
        "fusion": args.fusion,
        "prompt": args.prompt,
        "include_query": not args.hypotheses_only,
        "timeout": args.timeout,
        "hypothesis_cache": open_hypothesis_cache(args.hypothesis_cache),
        "lexical": "off" if args.lexical == "off" else "auto",
    }
    if mode == "hyde":
        fields["n_hypotheses"] = 1 if args.n_hypotheses is None else args.n_hypotheses
    if args.query_weight != "default":
        fields["query_weight"] = args.query_weight
    return EvaluationPipeline.from_settings(
        store=store,
        mode=mode,  # type: ignore[arg-type]
        window=window,
        hyde_model=args.hypothesis_llm,
        answer_model=args.answer_llm,
        retrieval_only=args.retrieval_only,
        pricing=pricing,
        **fields,
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
    from hyde_lc.models.loading import load_embeddings, load_llm

    # Ragas discards a judge reply cut at max_tokens, and its JSON replies run long.
    judge = load_llm(args.judge, role="answer", max_tokens=args.judge_max_tokens)
    return judge, load_embeddings(args.embeddings)


def _metrics(args: argparse.Namespace) -> list[str] | None:
    """The metrics named, or None: every metric the judge allows (`score_records` picks).

    Without names, the context pair is chosen on the records
    (`hyde_lc.evaluation.ragas_metrics.choose_context_metrics`).
    """
    return list(args.metrics) if args.metrics else None


_QUESTION_FIELDS = {
    "reference_contexts": '"reference_contexts": [the passages that answer it]',
    "reference_context_ids": '"reference_context_ids": [the ids of the chunks that answer it]',
    "reference": '"reference": "the expected answer"',
}
"""What a question line needs for the metrics that read each field."""


def chosen_notes(chosen: dict[str, str]) -> list[str]:
    """Which metrics were picked for the records and why, one line per reason.

    Example:
        >>> chosen_notes({"a": "short references", "b": "short references"})
        ['a, b: chosen: short references']

    """
    from hyde_lc.evaluation.ragas_metrics import by_reason

    return [f"{', '.join(names)}: chosen: {reason}" for reason, names in by_reason(chosen).items()]


def null_notes(not_scored: dict[str, str], questions: str) -> list[str]:
    """Why metrics are null, one line per reason, naming the question file and the fix.

    Example:
        >>> null_notes({"context_recall": "no record has reference_contexts"}, "q.jsonl")
        ['context_recall: null: no record has reference_contexts; give each question in \
q.jsonl "reference_contexts": [the passages that answer it]']

    """
    from hyde_lc.evaluation.ragas_metrics import by_reason

    lines = []
    for reason, names in by_reason(not_scored).items():
        fields = [f for f in _QUESTION_FIELDS if re.search(rf"\b{f}\b", reason)]
        line = f"{', '.join(names)}: null: {reason}"
        if fields:
            line += f"; give each question in {questions} " + " and ".join(
                _QUESTION_FIELDS[f] for f in fields
            )
        elif re.search(r"\bresponse\b", reason):
            line += " (answers are needed: run without --retrieval-only)"
        elif "LLMDidNotFinishException" in reason:
            line += " (from the command line: --judge-max-tokens, 1024 by default)"
        lines.append(line)
    return lines


def cmd_evaluate(args: argparse.Namespace) -> int:
    """``hyde-lc evaluate``: one Ragas-ready record per question, resumable.

    The question file, the pricing table and the output file are checked before the store
    or any model is opened; the settings of a resumed file once the pipeline is built,
    before any question is asked. Returns 1 when a question failed (it is recorded).
    """
    from hyde_lc.evaluation.pricing import PricingTable
    from hyde_lc.evaluation.ragas_metrics import mean_scores, score_records
    from hyde_lc.evaluation.runs import (
        check_output_file,
        evaluate_questions,
        read_questions,
        read_records,
    )

    resolve_mode(args)
    questions = read_questions(args.questions)
    out = Path(args.out)
    _not_the_question_file(out, args.questions, "--out")
    pricing = PricingTable.load()
    check_output_file(
        out, resume=not args.restart, questions=questions,
        set_aside_others=args.set_aside_others,
    )  # fmt: skip
    store = open_collection(args, must_exist=True)
    pipeline = _pipeline(args, store, args.mode, args.window, pricing)
    summary = evaluate_questions(
        questions, pipeline, out, resume=not args.restart, retry_errors=args.retry_errors,
        set_aside_others=args.set_aside_others,
    )  # fmt: skip
    print(
        f"{pipeline.retrieval_method}: {summary.done} answered, {summary.skipped} already in "
        f"{shown_line(str(out))}, {summary.failed} failed (recorded with metadata.error)"
    )
    if summary.load_s:
        print(f"loading, kept out of the records' times: {timings_line(summary.load_s)}")
    if summary.others_set_aside:
        print(
            f"hyde-lc: {summary.others_set_aside} record(s) of questions not in "
            f"{shown_line(args.questions)} moved to {shown_line(str(summary.others_file))}",
            file=sys.stderr,
        )
    if summary.set_aside:
        print(
            f"hyde-lc: {len(summary.set_aside)} line(s) of {shown_line(str(out))} that were "
            f"not records are kept in {shown_line(str(summary.corrupt_file))}",
            file=sys.stderr,
        )
    if args.score:
        judge_llm, judge_embeddings = _judge(args)
        scores = score_records(
            read_records(out),
            _metrics(args),
            judge_llm=judge_llm,
            judge_embeddings=judge_embeddings,
        )
        print(json_text({"retrieval_method": pipeline.retrieval_method, **mean_scores(scores)}))
        for note in [*chosen_notes(scores.chosen), *null_notes(scores.not_scored, args.questions)]:
            print(f"hyde-lc: {note}", file=sys.stderr)
    return 1 if summary.failed else 0


def cmd_compare(args: argparse.Namespace) -> int:
    """``hyde-lc compare``: the same questions through each mode, one report folder.

    The modes are warmed, then take turns question by question (`compare_modes`).
    """
    from hyde_lc.evaluation.compare import ORDER_NOTE, check_out_dir, compare_modes
    from hyde_lc.evaluation.pricing import PricingTable
    from hyde_lc.evaluation.runs import read_questions

    questions = read_questions(args.questions)
    window_mode = f"hyde-window{args.window}"
    modes = [*args.modes, *([window_mode] if args.window else [])]
    if len(set(modes)) < 2:
        raise HydeLcError("compare needs two modes or more: --modes standard hyde, or --window N")
    folder = Path(args.out_dir)
    for mode in modes:
        _not_the_question_file(folder / f"{mode}.jsonl", args.questions, "--out-dir")
    pricing = PricingTable.load()
    check_out_dir(
        folder, modes, resume=not args.restart, questions=questions,
        set_aside_others=args.set_aside_others,
    )  # fmt: skip
    store = open_collection(args, must_exist=True)
    pipelines = {mode: _pipeline(args, store, mode, 0, pricing) for mode in args.modes}
    if args.window:
        pipelines[window_mode] = _pipeline(args, store, "hyde", args.window, pricing)
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
        set_aside_others=args.set_aside_others,
    )
    print("\n".join(comparison_table(report.aggregates, report.modes)))
    print(textwrap.fill(ORDER_NOTE, WIDTH))
    if report.pairwise:
        print("judge: " + ", ".join(f"{k} {v}" for k, v in report.pairwise.items()))
    for note in [*chosen_notes(report.chosen), *null_notes(report.not_scored, args.questions)]:
        print(f"hyde-lc: {note}", file=sys.stderr)
    print(f"\nreport: {shown_line(str(report.html_path))}")
    return 0


def comparison_table(aggregates: dict[str, dict[str, Any]], modes: list[str]) -> list[str]:
    """One row per numeric aggregate, one column per mode (``n/a`` where there is none)."""
    keys = [k for k, v in aggregates[modes[0]].items() if not isinstance(v, str)]
    if not keys:
        return []
    width = max(len(k) for k in keys)
    lines = [f"{'':{width}}  " + "  ".join(f"{m:>14}" for m in modes)]
    for key in keys:
        cells = [aggregates[m].get(key) for m in modes]
        lines.append(
            f"{key:{width}}  "
            + "  ".join(f"{'n/a' if c is None else f'{c:.4g}':>14}" for c in cells)
        )
    return lines


def _pipeline_options(parser: argparse.ArgumentParser, prompts: list[str], default: str) -> None:
    group = parser.add_argument_group("retrieval and models")
    add_k_option(group)
    group.add_argument(
        "--lexical",
        choices=LEXICAL_CHOICES,
        default="on",
        help="on (default): BM25 next to the vectors, fused; off: vectors only",
    )
    add_hypothesis_options(group, prompts, default)
    group.add_argument(
        "--query-weight",
        type=_query_weight,
        default="default",
        metavar="W",
        help="the query's share of the mean or rrf fusion (default 0.8); 'paper' for the "
        "paper's equal weighting, 1/(n+1)",
    )
    group.add_argument("--retrieval-only", action="store_true", help="skip the answer LLM")


def _metric_options(parser: argparse.ArgumentParser, metrics_for: str) -> None:
    """``--metrics`` (``metrics_for``: what they are for) and ``--judge``."""
    parser.add_argument(
        "--metrics",
        nargs="+",
        choices=METRICS,
        help=f"metrics {metrics_for} (default: the offline ones, and the judged ones with "
        "--judge; of the two context precision/recall pairs, contained_* when the "
        "reference contexts are under half as long as the chunks, else Ragas' string ones)",
    )
    parser.add_argument(
        "--judge",
        metavar="SPEC",
        type=given("a model spec", "--judge local:qwen2.5-coder-1.5b"),
        help="judge model for LLM-judged metrics",
    )
    parser.add_argument(
        "--judge-max-tokens",
        type=positive_int,
        default=1024,
        metavar="N",
        help="the most tokens a judge reply may have (default 1024; Ragas gives no score "
        "for a reply cut at this cap)",
    )


def add_commands(sub: Any, prompts: list[str], default_prompt: str) -> None:
    """Register ``evaluate`` and ``compare`` on the ``hyde-lc`` subparsers."""
    evaluate = sub.add_parser(
        "evaluate",
        help="answer a question file into Ragas-ready records (resumable)",
        description="Answer every question of a JSON Lines file into Ragas-ready records, "
        "appended to --out; a rerun resumes. Exits 1 when a question failed (it is "
        "recorded with metadata.error; --retry-errors redoes it).",
    )
    evaluate.add_argument("questions", help="JSON Lines: question (or user_input), reference...")
    evaluate.add_argument(
        "--out",
        required=True,
        type=given_path,
        help="JSON Lines records (appended, resumable)",
    )
    evaluate.add_argument("--mode", choices=("hyde", "standard"), default=None, help=MODE_HELP)
    evaluate.add_argument(
        "--window",
        type=non_negative_int,
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
    evaluate.add_argument(
        "--set-aside-others",
        action="store_true",
        help="move records of questions not in this question file to <out>.other and go on "
        "(by default such a file is refused: its scores would mix two question sets)",
    )
    evaluate.add_argument("--score", action="store_true", help="print mean Ragas metrics")
    _metric_options(evaluate, "for --score")
    _pipeline_options(evaluate, prompts, default_prompt)
    add_store_options(evaluate)
    evaluate.set_defaults(func=cmd_evaluate)

    compare = sub.add_parser(
        "compare",
        help="standard vs HyDE (vs expansion): report with plots",
        description="Run the same questions through each mode and write a report folder "
        "(records per mode, scores, plots, HTML); a rerun resumes. Every model is loaded "
        "before the first question (its time reported apart, as load_time_s), and the modes "
        "take turns question by question.",
    )
    compare.add_argument("questions", help="JSON Lines question file")
    compare.add_argument(
        "--out-dir",
        required=True,
        type=given("a folder", "--out-dir report"),
        help="report folder (resumable)",
    )
    compare.add_argument(
        "--modes",
        nargs="+",
        choices=("standard", "hyde"),
        default=["standard", "hyde"],
        help="retrieval modes to compare, asked in turns question by question (default both)",
    )
    compare.add_argument(
        "--window",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="also run HyDE with neighbour expansion of N chunks",
    )
    _metric_options(compare, "to report")
    compare.add_argument(
        "--pairwise", action="store_true", help="the judge also compares the first two answers"
    )
    compare.add_argument(
        "--restart",
        action="store_true",
        help="start every mode's records in --out-dir afresh (they are lost)",
    )
    compare.add_argument(
        "--set-aside-others",
        action="store_true",
        help="move records of questions not in this question file to <mode>.jsonl.other",
    )
    _pipeline_options(compare, prompts, default_prompt)
    add_store_options(compare)
    compare.set_defaults(func=cmd_compare)
