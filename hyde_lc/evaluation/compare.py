"""Retrieval configurations on the same questions: metrics, tokens, cost, latency.

`compare_modes` runs each named `EvaluationPipeline` (standard, hybrid, HyDE, with or
without expansion: whatever its retriever is), or any LangChain retriever built in Python
(``store.as_retriever()``, an ``EnsembleRetriever``: answered by ``answer_llm``), over
the questions, each into its own
resumable ``<name>.jsonl`` (see `evaluate_questions`), scores the records with Ragas
(`score_records`), and writes a report directory a person can open.

The modes are measured alike, so that a difference between them comes from what they do,
not from when they ran. Before the first timed question every pipeline is warmed
(`EvaluationPipeline.warm_up`: models loaded and run once, indexes opened); the seconds
that took are reported apart (``load_time_s``, ``load_s``) and are in no latency. The
modes then take turns question by question, the first mode changing with each question
(`turns`), so neither always runs first or on a machine the other has just warmed. A
local answer model gives identical prompts identical answers
(`hyde_lc.models.local_llm.LocalChatModel`), so two modes that retrieve the same passages get
the same answer.

The report directory holds:

- ``report.html``: aggregate table, per-question table, which context metrics ran and
  why, why a metric has no score, and the plots below;
- ``metrics.png`` (metric bars per mode), ``latency.png`` (mean seconds per stage per
  question, loading excluded; each mode's load time in its legend), ``tokens.png``
  (mean tokens per stage);
- ``summary.json`` (everything in the tables, ``metrics_chosen``, ``not_scored``) and
  the per-mode ``*.jsonl`` records.

The context precision/recall pair (containment or Ragas' string metrics, see
`hyde_lc.evaluation.ragas_metrics`) is chosen once on every mode's records, so that all
modes are scored alike.

Optionally an LLM judge compares the two modes' answers question by question, asked in
both orders so position bias cancels (a split verdict counts as a tie).

Every mode's file is checked before the first question is asked: a file made with other
settings (``k``, window, hybrid weights, models...) or one that is not a results file is
refused, naming the differences, so a report never mixes runs; ``resume=False``
(``--restart``) starts them afresh. One compare writes a folder at a time (each file and
the report are locked). The plots are drawn on their own `matplotlib.figure.Figure`,
without pyplot, so the backend of a notebook that calls `compare_modes` stays as it was.

Example:
    >>> from hyde_lc.evaluation import EvaluationPipeline, compare_modes, read_questions
    >>> questions = read_questions("qa.jsonl")  # doctest: +SKIP
    >>> report = compare_modes(questions, {
    ...     "standard": EvaluationPipeline.from_settings(mode="standard", lexical="off"),
    ...     "hybrid-hyde": EvaluationPipeline.from_settings(mode="hyde"),
    ... }, "compare-out")  # doctest: +SKIP
    >>> report.aggregates["hybrid-hyde"]["contained_context_recall"]  # doctest: +SKIP
    >>> report.chosen  # which context metrics ran, and why  # doctest: +SKIP
    >>> report = compare_modes("qa.jsonl", {  # your own retriever beside hyde_lc's
    ...     "mine": my_store.as_retriever(search_kwargs={"k": 4}),
    ...     "hyde_lc": HyDERetriever(vectorstore=open_store(), k=4, n_hypotheses=0),
    ... }, "compare-out", answer_llm=load_llm(role="answer"))  # doctest: +SKIP

"""

from __future__ import annotations

import html
import json
import re
import statistics
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseLanguageModel
from langchain_core.retrievers import BaseRetriever
from tqdm.auto import tqdm

from hyde_lc.errors import HydeLcError
from hyde_lc.evaluation.ragas_metrics import by_reason, mean_scores, score_records, usable
from hyde_lc.evaluation.records import EvaluationPipeline
from hyde_lc.evaluation.results_file import exclusive
from hyde_lc.evaluation.runs import (
    Question,
    ResultsRun,
    check_output_file,
    check_pricing,
    check_resumable,
    check_unique_keys,
    open_run,
    read_questions,
    read_records,
    record_key,
)

ORDER_NOTE = (
    "Times exclude loading: every model and index was loaded and run once before the first "
    "timed question (load_time_s; a model shared by modes loads in the first one warmed). "
    "The modes took turns question by question, the first mode changing with each question."
)
"""How a comparison is timed and ordered, as the report says it."""
STAGES = ("hypothesis", "embedding", "answer")
TIME_KEYS = {
    "hypothesis": "hypothesis_time",
    "retrieval": "retrieval_time",
    "answer": "answer_time",
}


@dataclass
class ComparisonReport:
    """What `compare_modes` wrote and computed."""

    out_dir: Path
    modes: list[str]
    aggregates: dict[str, dict[str, Any]]
    """Per mode: mean metrics, latency, tokens, cost, failures."""
    per_question: list[dict[str, Any]]
    """Per question: the question and, per mode, its metrics, time, cost and answer."""
    pairwise: dict[str, int] | None = None
    """Judge verdict counts (``<mode a>``, ``<mode b>``, ``tie``) when a judge ran."""
    load_s: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per mode, seconds spent warming each stage before the first timed question
    (`EvaluationPipeline.warm_up`); empty when every question was answered already."""
    not_scored: dict[str, str] = field(default_factory=dict)
    """Metrics null in a mode, with why (`Scores.not_scored`), e.g. ``no record has
    reference_contexts`` or the judge did not finish its output; a reason that differs
    between modes names the mode."""
    chosen: dict[str, str] = field(default_factory=dict)
    """Metrics picked for these records, with why (`Scores.chosen`): which context
    precision/recall pair ran, chosen once on every mode's records."""

    @property
    def html_path(self) -> Path:
        """The page to open."""
        return self.out_dir / "report.html"


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def aggregate(
    records: Sequence[dict[str, Any]],
    scores: Sequence[dict[str, float | None]],
    load_time_s: float | None = None,
) -> dict[str, Any]:
    """Mean metrics, latency per stage, tokens per stage and total cost of one mode.

    ``load_time_s`` (the seconds its pipeline took to warm, None if it was not warmed)
    is reported beside the latencies, never in them.
    """
    ran = [r for r in records if usable(r)]
    metas = [r["metadata"] for r in ran]
    out: dict[str, Any] = {"questions": len(records), "failed": len(records) - len(ran)}
    out.update(mean_scores([s for r, s in zip(records, scores, strict=True) if usable(r)]))
    times = [m["execution_time"] for m in metas]
    out["latency_mean_s"] = _mean(times)
    out["latency_p50_s"] = statistics.median(times) if times else None
    out["load_time_s"] = load_time_s
    for stage, key in TIME_KEYS.items():
        out[f"{stage}_time_mean_s"] = _mean([m[key] for m in metas])
    for stage in STAGES:  # a stage that does not apply or was not measured is None, not 0
        used = [m["stages"].get(stage) for m in metas]
        out[f"{stage}_tokens_mean"] = _mean(
            [u["input_tokens"] + u["output_tokens"] if u else None for u in used]
        )
    costs = [m["total_cost"] for m in metas]
    out["total_cost"] = None if None in costs else sum(c for c in costs if c is not None)
    out["cost_source"] = "; ".join(dict.fromkeys(m["cost_source"] for m in metas))
    return out


JUDGE_PROMPT = (
    "You compare two answers to a question. Prefer the answer that is correct, answers the "
    "question, and does not invent facts.\n\nQuestion: {question}\n\nAnswer A:\n{a}\n\n"
    "Answer B:\n{b}\n\nReply with exactly one word: A, B, or TIE."
)


def _verdict(judge: BaseLanguageModel[Any], question: str, a: str, b: str) -> str:
    reply = judge.invoke(JUDGE_PROMPT.format(question=question, a=a, b=b))
    text = str(getattr(reply, "content", reply)).strip().upper()
    return next((v for v in ("TIE", "A", "B") if text.startswith(v)), "TIE")


def judge_pair(judge: BaseLanguageModel[Any], question: str, first: str, second: str) -> str:
    """``first``, ``second`` or ``tie``: the judge is asked in both orders."""
    forward = _verdict(judge, question, first, second)
    backward = {"A": "B", "B": "A", "TIE": "TIE"}[_verdict(judge, question, second, first)]
    if forward == backward != "TIE":
        return "first" if forward == "A" else "second"
    return "tie"


MODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
"""A mode's name: it names its records file, ``<name>.jsonl``."""


def compare_modes(
    questions: Sequence[Question] | str | PathLike[str],
    pipelines: Mapping[str, EvaluationPipeline | BaseRetriever],
    out_dir: str | Path,
    *,
    answer_llm: BaseLanguageModel[Any] | None = None,
    metrics: Sequence[str] | None = None,
    judge_llm: BaseLanguageModel[Any] | None = None,
    judge_embeddings: Embeddings | None = None,
    pairwise_judge: BaseLanguageModel[Any] | None = None,
    resume: bool = True,
    set_aside_others: bool = False,
    progress: bool = True,
) -> ComparisonReport:
    """Run, score and report every pipeline on the same questions (see module docstring).

    ``questions``: `Question` objects, or the path of a question file (`read_questions`).
    ``pipelines`` maps each mode's name (which names its ``<name>.jsonl``) to an
    `EvaluationPipeline` or to any LangChain retriever; a retriever is answered by
    ``answer_llm`` (retrieval only without one) and recorded under its mode's name.
    Give every mode the same answer model, so that only the retrieval differs.
    ``resume=False`` starts every mode's file afresh; a file holding records of questions
    not in ``questions`` is refused, or with ``set_aside_others`` those records are moved
    to ``<mode>.jsonl.other``.
    """
    if isinstance(questions, str | PathLike):
        questions = read_questions(questions)
    pipelines = as_pipelines(pipelines, answer_llm)
    check_unique_keys(questions)
    folder = Path(out_dir)
    check_out_dir(
        folder, list(pipelines), resume=resume, questions=questions,
        set_aside_others=set_aside_others,
    )  # fmt: skip
    for pipeline in pipelines.values():
        check_pricing(pipeline)
    folder.mkdir(parents=True, exist_ok=True)
    files = {name: folder / f"{name}.jsonl" for name in pipelines}
    with ExitStack() as held:
        for path in [folder / "report.html", *files.values()]:
            held.enter_context(exclusive(path, "--out-dir"))
        if resume:  # every file, before any file is changed or any question is asked
            for name, pipeline in pipelines.items():
                check_resumable(
                    files[name], pipeline, flag="--out-dir", questions=questions,
                    set_aside_others=set_aside_others,
                )  # fmt: skip
        with ExitStack() as running:
            runs = {
                name: running.enter_context(
                    open_run(
                        questions,
                        pipeline,
                        files[name],
                        resume=resume,
                        flag="--out-dir",
                        set_aside_others=set_aside_others,
                    )
                )
                for name, pipeline in pipelines.items()
            }
            load_s = {}
            if any(run.todo for run in runs.values()):
                load_s = {name: pipeline.warm_up() for name, pipeline in pipelines.items()}
            ask_in_turns(questions, runs, progress=progress)
        records: dict[str, list[dict[str, Any]]] = {}
        for name in pipelines:
            by_key = {record_key(r): r for r in read_records(files[name])}
            records[name] = [by_key[q.key] for q in questions]  # the file may hold others too
        every_mode = [r for rows in records.values() for r in rows]
        scores = {
            name: score_records(
                rows,
                metrics,
                judge_llm=judge_llm,
                judge_embeddings=judge_embeddings,
                choose_on=every_mode,  # one context pair for all modes
            )
            for name, rows in records.items()
        }
        return _report(questions, folder, records, scores, list(pipelines), pairwise_judge, load_s)


def _chosen(scores: Mapping[str, Sequence[dict[str, float | None]]]) -> dict[str, str]:
    """Why each metric picked for the records was picked (the same in every mode)."""
    return {k: v for rows in scores.values() for k, v in getattr(rows, "chosen", {}).items()}


def _not_scored(scores: Mapping[str, Sequence[dict[str, float | None]]]) -> dict[str, str]:
    """Each null metric's reason; where modes differ, the reason of each mode by name."""
    reasons: dict[str, dict[str, str]] = {}
    for mode, rows in scores.items():
        for metric, why in getattr(rows, "not_scored", {}).items():
            reasons.setdefault(metric, {})[mode] = why
    out = {}
    for metric, by_mode in reasons.items():
        if len(by_mode) == len(scores) and len(set(by_mode.values())) == 1:
            out[metric] = next(iter(by_mode.values()))
        else:
            out[metric] = "; ".join(f"{mode}: {why}" for mode, why in by_mode.items())
    return out


def as_pipelines(
    modes: Mapping[str, EvaluationPipeline | BaseRetriever],
    answer_llm: BaseLanguageModel[Any] | None = None,
) -> dict[str, EvaluationPipeline]:
    """Each mode as a pipeline: a retriever gets ``answer_llm`` and its mode's name as label.

    Raises when there are fewer than two modes, a name cannot name a file, or a value is
    neither a pipeline nor a retriever.
    """
    if len(modes) < 2:
        raise HydeLcError("compare needs at least two modes, e.g. standard and hyde")
    out: dict[str, EvaluationPipeline] = {}
    for name, value in modes.items():
        if not isinstance(name, str) or not MODE_NAME.fullmatch(name):
            raise HydeLcError(
                f"mode name {name!r} cannot name its records file: use letters, digits, "
                "'.', '_', '+' or '-', e.g. 'my-ensemble'"
            )
        if isinstance(value, EvaluationPipeline):
            out[name] = value
        elif isinstance(value, BaseRetriever):
            out[name] = EvaluationPipeline(value, answer_llm=answer_llm, label=name)
        else:
            raise HydeLcError(
                f"mode {name!r} is a {type(value).__name__}: give an EvaluationPipeline or a "
                "LangChain retriever (e.g. store.as_retriever())"
            )
    return out


def turns(modes: Sequence[str], index: int) -> list[str]:
    """The order in which ``modes`` answer question ``index`` (from 0): rotated by one each.

    With two modes they alternate; with n, each goes first once every n questions.

    Example:
        >>> [turns(["standard", "hyde"], i) for i in range(3)]
        [['standard', 'hyde'], ['hyde', 'standard'], ['standard', 'hyde']]

    """
    shift = index % len(modes) if modes else 0
    return [*modes[shift:], *modes[:shift]]


def ask_in_turns(
    questions: Sequence[Question], runs: Mapping[str, ResultsRun], *, progress: bool = True
) -> None:
    """Ask each question of every run that still lacks it, the modes taking `turns`."""
    modes = list(runs)
    pending = [q for q in questions if any(run.pending(q) for run in runs.values())]
    # The modes' names, as the table, the records files and the report name them.
    shown = tqdm(pending, desc=f"compare ({', '.join(modes)})", disable=not progress)
    for index, question in enumerate(shown):
        for mode in turns(modes, index):
            if runs[mode].pending(question):
                runs[mode].ask(question)


def check_out_dir(
    folder: Path,
    modes: Sequence[str],
    *,
    resume: bool,
    questions: Sequence[Question] | None = None,
    set_aside_others: bool = False,
) -> None:
    """What can be told about a report folder before any model loads; raises if unusable.

    The folder must not be a file; each mode's ``<mode>.jsonl`` must pass
    `check_output_file` (not a folder, not held by another run, a results file).
    """
    if folder.exists() and not folder.is_dir():
        raise HydeLcError(f"--out-dir {folder} is a file: give a folder for the report")
    for mode in modes:
        check_output_file(
            folder / f"{mode}.jsonl", resume=resume, flag="--out-dir", questions=questions,
            set_aside_others=set_aside_others,
        )  # fmt: skip


def _report(
    questions: Sequence[Question],
    folder: Path,
    records: dict[str, list[dict[str, Any]]],
    scores: Mapping[str, Sequence[dict[str, float | None]]],
    modes: list[str],
    pairwise_judge: BaseLanguageModel[Any] | None,
    load_s: dict[str, dict[str, float]],
) -> ComparisonReport:
    """Aggregate, per-question rows and the judge's verdicts, written to ``folder``."""
    aggregates = {
        m: aggregate(records[m], scores[m], sum(load_s[m].values()) if m in load_s else None)
        for m in modes
    }
    per_question = []
    for i, question in enumerate(questions):
        row: dict[str, Any] = {"question": question.question}
        for m in modes:
            meta = records[m][i]["metadata"]
            row[m] = {
                **scores[m][i],
                "time_s": meta.get("execution_time"),
                "cost": meta.get("total_cost"),
                "answer": records[m][i].get("response"),
                "error": meta.get("error"),
            }
        per_question.append(row)
    pairwise = None
    if pairwise_judge is not None:
        first, second = modes[:2]
        pairwise = {first: 0, second: 0, "tie": 0}
        for row in per_question:
            a, b = row[first]["answer"], row[second]["answer"]
            if a and b:
                verdict = judge_pair(pairwise_judge, row["question"], a, b)
                winner = {"first": first, "second": second}.get(verdict, "tie")
                row["judge_prefers"] = winner
                pairwise[winner] += 1
    report = ComparisonReport(
        folder, modes, aggregates, per_question, pairwise, load_s,
        not_scored=_not_scored(scores), chosen=_chosen(scores),
    )  # fmt: skip
    write_report(report)
    return report


def _fmt(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)


def _plots(report: ComparisonReport) -> list[str]:
    # A Figure of its own (no pyplot): no global backend is chosen or changed, and nothing
    # is left open in a notebook's figure manager. savefig renders PNG with Agg.
    import numpy as np
    from matplotlib.figure import Figure

    modes, agg = report.modes, report.aggregates
    metric_names = [
        k for k, v in agg[modes[0]].items()
        if isinstance(v, float) and not k.endswith(("_s", "_mean", "cost"))
    ]  # fmt: skip
    files = []
    charts = [
        ("metrics.png", "Ragas metrics (higher is better)", metric_names, metric_names),
        ("latency.png", "Mean seconds per stage per question (model loading excluded)",
         [f"{s}_time_mean_s" for s in TIME_KEYS], list(TIME_KEYS)),
        ("tokens.png", "Mean tokens per stage", [f"{s}_tokens_mean" for s in STAGES],
         list(STAGES)),
    ]  # fmt: skip
    for filename, title, keys, labels in charts:
        if not keys:
            continue
        fig = Figure(figsize=(max(6, 1.2 * len(keys) * len(modes)), 4))
        ax = fig.subplots()
        width = 0.8 / len(modes)
        x = np.arange(len(keys))
        for j, mode in enumerate(modes):
            values = [agg[mode].get(k) or 0.0 for k in keys]
            ax.bar(x + j * width, values, width, label=_legend(mode, agg[mode], filename))
        ax.set_xticks(x + width * (len(modes) - 1) / 2, labels, rotation=20, ha="right")
        ax.set_title(title)
        ax.legend()
        fig.tight_layout()
        fig.savefig(report.out_dir / filename, dpi=100)
        files.append(filename)
    return files


def _legend(mode: str, aggregates: dict[str, Any], filename: str) -> str:
    """A mode's name in a plot's legend; in the latency plot, with its load time apart."""
    load = aggregates.get("load_time_s")
    if filename != "latency.png" or load is None:
        return mode
    return f"{mode} (loading, once: {load:.1f} s)"


def _metric_notes(report: ComparisonReport) -> str:
    """The metrics chosen for these records and the null ones, each with why, as HTML."""
    esc = html.escape
    items = [
        *(f"<li>{esc(', '.join(names))}: chosen: {esc(why)}</li>"
          for why, names in by_reason(report.chosen).items()),
        *(f"<li>{esc(', '.join(names))}: no score: {esc(why)}</li>"
          for why, names in by_reason(report.not_scored).items()),
    ]  # fmt: skip
    return f"<h2>Metrics</h2><ul>{''.join(items)}</ul>" if items else ""


def write_report(report: ComparisonReport) -> None:
    """``summary.json``, the PNG plots and ``report.html`` into ``report.out_dir``."""
    summary = {
        "modes": report.modes,
        "aggregates": report.aggregates,
        "per_question": report.per_question,
        "pairwise": report.pairwise,
        "load_s": report.load_s,
        "order": ORDER_NOTE,
        "metrics_chosen": report.chosen,
        "not_scored": report.not_scored,
    }
    (report.out_dir / "summary.json").write_text(
        json.dumps(summary, indent=2, ensure_ascii=False), "utf-8"
    )
    images = _plots(report)
    esc = html.escape
    keys = list(dict.fromkeys(k for m in report.modes for k in report.aggregates[m]))
    agg_rows = "".join(
        f"<tr><th>{esc(k)}</th>"
        + "".join(f"<td>{esc(_fmt(report.aggregates[m].get(k)))}</td>" for m in report.modes)
        + "</tr>"
        for k in keys
    )
    metric_keys = [
        k for k in report.per_question[0][report.modes[0]] if k not in ("answer", "error")
    ]
    q_rows = "".join(
        f"<tr><td>{esc(row['question'])}</td>"
        + "".join(
            f"<td>{'<br>'.join(f'{esc(k)}: {esc(_fmt(row[m].get(k)))}' for k in metric_keys)}"
            f"<br><i>{esc(row[m].get('error') or row[m].get('answer') or '')}</i></td>"
            for m in report.modes
        )
        + "</tr>"
        for row in report.per_question
    )
    judge = (
        "<h2>LLM judge (both orders)</h2><p>"
        + ", ".join(f"{esc(k)}: {v}" for k, v in report.pairwise.items())
        + "</p>"
        if report.pairwise
        else ""
    )
    loading = "".join(
        f"<li>{esc(m)}: "
        + ", ".join(f"{esc(stage)} {seconds:.2f} s" for stage, seconds in report.load_s[m].items())
        + "</li>"
        for m in report.modes
        if m in report.load_s
    )
    method = f"<p>{esc(ORDER_NOTE)}</p>" + (
        f"<p>Loading before the first timed question:</p><ul>{loading}</ul>"
        if loading
        else "<p>Every question was answered by an earlier run: its loading is not known.</p>"
    )
    notes = _metric_notes(report)
    heads = "".join(f"<th>{esc(m)}</th>" for m in report.modes)
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>hyde_lc comparison</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;vertical-align:top;text-align:left}}</style>
</head><body><h1>hyde_lc: {esc(" vs ".join(report.modes))}</h1>
<h2>Aggregate</h2><table><tr><th></th>{heads}</tr>{agg_rows}</table>
{method}
{notes}
{"".join(f'<p><img src="{esc(i)}" alt="{esc(i)}"></p>' for i in images)}
{judge}
<h2>Per question</h2><table><tr><th>question</th>{heads}</tr>{q_rows}</table>
</body></html>
"""
    report.html_path.write_text(page, "utf-8")
