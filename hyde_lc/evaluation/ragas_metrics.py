"""Ragas metrics on evaluation records: offline by default, an LLM judge only when named.

Ragas' ``evaluate`` builds an OpenAI judge when it is given no metrics, so metrics are
always passed explicitly here. Offline metrics (no model at all):

===============================  ======================================================
``contained_context_precision``  rank-aware share of the retrieved chunks that hold a
                                 reference context (`hyde_lc.evaluation.containment`)
``contained_context_recall``     share of the reference contexts some retrieved chunk
                                 holds (normalised, fuzzy: 90% of it, in any script)
``context_precision``            Ragas' non-LLM context precision: each retrieved chunk
                                 vs each reference context as whole strings (Levenshtein
                                 similarity of at least 0.5)
``context_recall``               Ragas' non-LLM context recall: the same string
                                 comparison, reference contexts found among the chunks
``id_context_precision``         retrieved ids that are reference ids
``id_context_recall``            reference ids that were retrieved
``string_similarity``            response vs reference (Levenshtein)
``rouge``                        response vs reference (ROUGE-L F1)
``bleu`` / ``chrf``              response vs reference (sacrebleu)
===============================  ======================================================

Which context pair runs by default (`choose_context_metrics`): Ragas' string metrics
compare a reference with a chunk as whole strings, so a reference sentence inside a
1,000-character chunk scores as not retrieved (0.0 where the chunk holds it verbatim).
When the reference contexts are short next to the chunks (their median length under
half the retrieved chunks' median), the containment pair runs instead; otherwise (the
references are passages as long as the chunks, e.g. the chunks themselves) Ragas' pair
runs. Either pair can be named in ``metrics`` (``--metrics``). The result names the
pair that ran (its metric names) and ``Scores.chosen`` says why.

Each metric runs only on records that have its columns (a record without ``reference``
gets no answer metrics). With a judge (``judge_llm``, any LangChain chat model, local or
remote): ``faithfulness``, ``answer_relevancy`` (also needs ``judge_embeddings``) and
``llm_context_precision`` (needs ``reference``). Without a metric list, `choose_metrics`
picks every metric the given judges allow. What `score_records` returns is a list that
also says which metrics were left out (``left_out``) and which have no score where they
could have one, and why (``not_scored``: e.g. no question has ``reference_contexts``, or
the judge did not finish its output, Ragas' ``LLMDidNotFinishException``), so a None is
explained.

Example:
    >>> from hyde_lc.evaluation import score_records
    >>> scores = score_records(records)  # doctest: +SKIP
    >>> scores[0]["contained_context_recall"], scores.chosen  # doctest: +SKIP
    (1.0, {'contained_context_precision': 'the reference contexts (median 88 ...'})

"""

from __future__ import annotations

import importlib
import logging
import math
import os
import statistics
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseLanguageModel

from hyde_lc.errors import HydeLcError
from hyde_lc.evaluation.records import RAGAS_KEYS
from hyde_lc.evaluation.scoring_failures import JobFailures, failure_reason

logger = logging.getLogger(__name__)

OFFLINE_METRICS: dict[str, tuple[str, set[str]]] = {
    "contained_context_precision": ("ContainedContextPrecision", {"reference_contexts"}),
    "contained_context_recall": ("ContainedContextRecall", {"reference_contexts"}),
    "context_precision": ("NonLLMContextPrecisionWithReference", {"reference_contexts"}),
    "context_recall": ("NonLLMContextRecall", {"reference_contexts"}),
    "id_context_precision": ("IDBasedContextPrecision", {"reference_context_ids"}),
    "id_context_recall": ("IDBasedContextRecall", {"reference_context_ids"}),
    "string_similarity": ("NonLLMStringSimilarity", {"reference", "response"}),
    "rouge": ("RougeScore", {"reference", "response"}),
    "bleu": ("BleuScore", {"reference", "response"}),
    "chrf": ("ChrfScore", {"reference", "response"}),
}
"""Our name -> (Ragas class, record keys it needs besides the retrieved contexts); the
contained pair are our own Ragas metrics (`hyde_lc.evaluation.ragas_containment`)."""
CONTAINED_PAIR = ("contained_context_precision", "contained_context_recall")
"""Context precision and recall by containment: a reference found inside a chunk."""
STRING_PAIR = ("context_precision", "context_recall")
"""Ragas' non-LLM context precision and recall: whole strings by a string distance."""
OUR_METRICS = "hyde_lc.evaluation.ragas_containment"
"""Where the classes of the metrics that are not Ragas' own live."""
JUDGED_METRICS: dict[str, tuple[str, set[str]]] = {
    "faithfulness": ("Faithfulness", {"response"}),
    "answer_relevancy": ("ResponseRelevancy", {"response"}),
    "llm_context_precision": ("LLMContextPrecisionWithReference", {"reference"}),
}
"""Metrics that need ``judge_llm``."""


def _ragas(module: str) -> Any:
    """A module of Ragas (``ragas.metrics``), imported with its usage tracking off.

    Ragas reports usage unless ``RAGAS_DO_NOT_TRACK`` is set; it is set before Ragas is
    first imported (a value the user chose is kept). Every import of Ragas here goes
    through this.
    """
    os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")
    return importlib.import_module(module)


def _ragas_class(name: str) -> Any:
    ours = name in {OFFLINE_METRICS[m][0] for m in CONTAINED_PAIR}
    with warnings.catch_warnings():
        # ragas 0.4 moves these to ragas.metrics.collections, whose classes `evaluate`
        # does not accept yet; the classic ones still work and warn on import.
        warnings.simplefilter("ignore", DeprecationWarning)
        return getattr(_ragas(OUR_METRICS if ours else "ragas.metrics"), name)


def to_ragas_sample(record: dict[str, Any]) -> dict[str, Any]:
    """The Ragas fields of a record (no ``metadata``, no empty values)."""
    return {key: record[key] for key in RAGAS_KEYS if record.get(key) is not None}


def usable(record: dict[str, Any]) -> bool:
    """Records that ran (failed questions carry ``metadata.error`` and are not scored)."""
    return not record.get("metadata", {}).get("error")


def _scores_of(result: Any) -> list[float | None]:
    """The one metric's score per sample (its column name may carry the metric's options)."""
    values = [next(iter(row.values()), None) for row in result.scores]
    return [
        None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v) for v in values
    ]


class Scores(list[dict[str, float | None]]):
    """`score_records`' per-record scores, and why a metric has no score.

    A list of ``{metric: value or None}``, one per record, plus ``left_out`` (metrics not
    run, with the reason: a judge they need was not given), ``not_scored`` (metrics that
    ran on no record, with the reason: the columns no record has; or that gave no score
    on records they ran on, with Ragas' reason: e.g. the judge did not finish its output)
    and ``chosen`` (metrics picked for these records, with why: the context pair,
    `choose_context_metrics`).

    Example:
        >>> scores = Scores([{"rouge": None}], not_scored={"rouge": "no record has reference"})
        >>> scores[0], scores.not_scored["rouge"]
        ({'rouge': None}, 'no record has reference')

    """

    def __init__(
        self,
        rows: Sequence[dict[str, float | None]] = (),
        *,
        left_out: dict[str, str] | None = None,
        not_scored: dict[str, str] | None = None,
        chosen: dict[str, str] | None = None,
    ) -> None:
        super().__init__(rows)
        self.left_out: dict[str, str] = dict(left_out or {})
        self.not_scored: dict[str, str] = dict(not_scored or {})
        self.chosen: dict[str, str] = dict(chosen or {})


def by_reason(reasons: Mapping[str, str]) -> dict[str, list[str]]:
    """The metrics of ``reasons`` (``Scores.chosen`` or ``not_scored``) grouped by reason.

    Example:
        >>> by_reason({"rouge": "no reference", "bleu": "no reference"})
        {'no reference': ['rouge', 'bleu']}

    """
    grouped: dict[str, list[str]] = {}
    for name, why in reasons.items():
        grouped.setdefault(why, []).append(name)
    return grouped


def _contexts(records: Sequence[dict[str, Any]], key: str) -> list[str]:
    """Every text under ``key`` of the records that ran with both kinds of contexts."""
    both = [
        r for r in records
        if usable(r) and r.get("retrieved_contexts") and r.get("reference_contexts")
    ]  # fmt: skip
    return [text for r in both for text in r[key] if isinstance(text, str)]


def choose_context_metrics(
    records: Sequence[dict[str, Any]] | None = None,
) -> tuple[tuple[str, str], str | None]:
    """The context precision and recall pair for ``records``, and why (None: no data).

    Containment (`CONTAINED_PAIR`) when the reference contexts are short next to the
    chunks: their median length (in characters) under half the retrieved chunks' median.
    Otherwise, or with no record holding both kinds of contexts, Ragas' string metrics
    (`STRING_PAIR`), which compare whole strings and suit references as long as chunks.

    Example:
        >>> record = {"retrieved_contexts": ["x" * 1000], "reference_contexts": ["y" * 90]}
        >>> choose_context_metrics([record])[0]
        ('contained_context_precision', 'contained_context_recall')
        >>> choose_context_metrics([])
        (('context_precision', 'context_recall'), None)

    """
    references = _contexts(records or [], "reference_contexts")
    chunks = _contexts(records or [], "retrieved_contexts")
    if not references or not chunks:
        return STRING_PAIR, None
    ref_len = statistics.median(len(t) for t in references)
    chunk_len = statistics.median(len(t) for t in chunks)
    lengths = (
        f"the reference contexts (median {ref_len:,.0f} characters) are "
        f"{'under' if ref_len < chunk_len / 2 else 'at least'} half as long as the "
        f"retrieved chunks (median {chunk_len:,.0f})"
    )
    if ref_len < chunk_len / 2:
        return CONTAINED_PAIR, (
            f"{lengths}: a reference counts as found when a chunk holds it; Ragas' "
            f"{' and '.join(STRING_PAIR)} compare whole strings and score a short reference "
            "inside a long chunk as missing (name them in metrics / --metrics to get them)"
        )
    return STRING_PAIR, (
        f"{lengths}: Ragas' string-similarity metrics (name "
        f"{' and '.join(CONTAINED_PAIR)} in metrics / --metrics for containment)"
    )


def choose_metrics(
    judge_llm: BaseLanguageModel[Any] | None = None,
    judge_embeddings: Embeddings | None = None,
    records: Sequence[dict[str, Any]] | None = None,
) -> tuple[list[str], dict[str, str]]:
    """Every metric the given judges allow, and the others with what they would need.

    Of the two context precision/recall pairs, the one `choose_context_metrics` picks for
    ``records`` (Ragas' string metrics without records).

    Example:
        >>> chosen, left_out = choose_metrics()
        >>> "rouge" in chosen, left_out["faithfulness"]
        (True, 'needs a judge LLM (judge_llm, or --judge SPEC)')

    """
    pair, _ = choose_context_metrics(records)
    return _metrics_with(pair, judge_llm, judge_embeddings)


def _metrics_with(
    pair: tuple[str, str],
    judge_llm: BaseLanguageModel[Any] | None,
    judge_embeddings: Embeddings | None,
) -> tuple[list[str], dict[str, str]]:
    """`choose_metrics` with the context ``pair`` already chosen."""
    other = STRING_PAIR if pair == CONTAINED_PAIR else CONTAINED_PAIR
    chosen = [name for name in OFFLINE_METRICS if name not in other]
    left_out: dict[str, str] = {}
    for name in JUDGED_METRICS:
        if judge_llm is None:
            left_out[name] = "needs a judge LLM (judge_llm, or --judge SPEC)"
        elif name == "answer_relevancy" and judge_embeddings is None:
            left_out[name] = "needs judge_embeddings too (e.g. load_embeddings())"
        else:
            chosen.append(name)
    return chosen, left_out


def _missing(records: Sequence[dict[str, Any]], needs: set[str]) -> str | None:
    """Why no record can be scored on a metric needing ``needs``; None if one can."""
    ran = [r for r in records if usable(r)]
    if not ran:
        return "no record to score (every question failed)" if records else "no records"
    if not any(r.get("retrieved_contexts") for r in ran):
        return "no record has retrieved_contexts"
    absent = [k for k in sorted(needs) if not any(r.get(k) for r in ran)]
    if absent:
        return f"no record has {' or '.join(absent)}"
    if not any(all(r.get(k) for k in needs) for r in ran if r.get("retrieved_contexts")):
        return f"no record has all of {', '.join(sorted(needs))}"
    return None


def score_records(
    records: Sequence[dict[str, Any]],
    metrics: Sequence[str] | None = None,
    *,
    judge_llm: BaseLanguageModel[Any] | None = None,
    judge_embeddings: Embeddings | None = None,
    show_progress: bool = False,
    timeout: float | None = None,
    choose_on: Sequence[dict[str, Any]] | None = None,
) -> Scores:
    """Per-record scores ``{metric: value or None}``, in the order of ``records``.

    ``metrics`` defaults to every metric the given judges allow (`choose_metrics`): the
    offline ones, plus the judged ones with ``judge_llm`` (``answer_relevancy`` only with
    ``judge_embeddings`` too); those left out are logged and listed in the result's
    ``left_out``; the context pair picked for these records (`choose_context_metrics`; on
    ``choose_on`` when given: `compare_modes` gives every mode's records, so that all
    modes run the same pair) is in the result's ``chosen``, with why. A metric a record
    lacks the columns for scores ``None`` for that record; a metric no record can be
    scored on is in the result's ``not_scored``, with why, and so is one that gave no
    score on a record it ran on (the judge did not finish its output, its reply could not
    be parsed, a timeout...: the exception Ragas caught, with what to do, and on how many
    records).
    ``timeout`` bounds one Ragas job (one metric on one record, several judge calls); by
    default 180 s as in Ragas, and 1,800 s for a local judge, whose calls run one at a time
    on the CPU (with Ragas' default, a 1.5B local judge timed out on every job).
    """
    left_out: dict[str, str] = {}
    why_chosen: dict[str, str] = {}
    if metrics is None:
        pair, why = choose_context_metrics(records if choose_on is None else choose_on)
        chosen, left_out = _metrics_with(pair, judge_llm, judge_embeddings)
        if why is not None:
            why_chosen = dict.fromkeys(pair, why)
        if judge_llm is not None and left_out:
            logger.warning(
                "metrics left out: %s",
                "; ".join(f"{name} {why}" for name, why in left_out.items()),
            )
    else:
        chosen = list(metrics)
    unknown = [m for m in chosen if m not in OFFLINE_METRICS and m not in JUDGED_METRICS]
    if unknown:
        raise HydeLcError(
            f"unknown metric(s) {', '.join(unknown)}: choose from "
            f"{', '.join([*OFFLINE_METRICS, *JUDGED_METRICS])}"
        )
    judged = [m for m in chosen if m in JUDGED_METRICS]
    if judged and judge_llm is None:
        raise HydeLcError(
            f"{', '.join(judged)} need a judge LLM: pass judge_llm (e.g. --judge local:"
            "qwen2.5-coder-1.5b or --judge openai:gpt-4o-mini), or use offline metrics only"
        )
    if "answer_relevancy" in judged and judge_embeddings is None:
        raise HydeLcError("answer_relevancy needs judge_embeddings (e.g. load_embeddings())")
    scores = Scores([dict.fromkeys(chosen) for _ in records], left_out=left_out, chosen=why_chosen)
    for name in chosen:
        class_name, needs = {**OFFLINE_METRICS, **JUDGED_METRICS}[name]
        rows = [
            i
            for i, r in enumerate(records)
            if usable(r) and r.get("retrieved_contexts") and all(r.get(k) for k in needs)
        ]
        if not rows:
            scores.not_scored[name] = _missing(records, needs) or "no record to score"
            continue
        metric = _build(class_name, judge_llm, judge_embeddings)
        samples = [to_ragas_sample(records[i]) for i in rows]
        failures = JobFailures()
        run_config = _run_config(judge_llm, timeout)
        result = _evaluate(samples, metric, show_progress, run_config, failures)
        values = _scores_of(result)
        for i, value in zip(rows, values, strict=True):
            scores[i][name] = value
        unscored = sum(value is None for value in values)
        if unscored:
            errors = {j: e for j, e in failures.errors.items() if values[j] is None}
            scores.not_scored[name] = failure_reason(errors, rows=len(rows), unscored=unscored)
    return scores


def _build(
    class_name: str, llm: BaseLanguageModel[Any] | None, embeddings: Embeddings | None
) -> Any:
    metric = _ragas_class(class_name)()
    if llm is not None and hasattr(metric, "llm"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            metric.llm = _ragas("ragas.llms").LangchainLLMWrapper(llm)
    if embeddings is not None and hasattr(metric, "embeddings"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            metric.embeddings = _ragas("ragas.embeddings").LangchainEmbeddingsWrapper(embeddings)
    return metric


def _run_config(judge_llm: BaseLanguageModel[Any] | None, timeout: float | None) -> Any:
    """Ragas' run settings: a local judge gets one worker and a long timeout."""
    run_config = _ragas("ragas.run_config")
    local = type(judge_llm).__name__ == "LocalChatModel"
    chosen = timeout if timeout is not None else (1800.0 if local else 180.0)
    return run_config.RunConfig(
        timeout=int(chosen), max_workers=1 if local else 16, max_retries=2 if local else 10
    )


def _evaluate(
    samples: list[dict[str, Any]],
    metric: Any,
    show_progress: bool,
    run_config: Any,
    failures: JobFailures | None = None,
) -> Any:
    """Ragas' ``evaluate`` of one metric; each failed job's exception goes to ``failures``."""
    ragas = _ragas("ragas")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # evaluate() -> @experiment
        return ragas.evaluate(
            ragas.EvaluationDataset.from_list(samples),
            metrics=[metric],
            show_progress=show_progress,
            run_config=run_config,
            # A judge's unparsable or unfinished reply scores NaN (None), not a crash; Ragas
            # only logs the exception, so `failures` keeps it for `Scores.not_scored`.
            raise_exceptions=False,
            callbacks=[failures] if failures is not None else None,
        )


def mean_scores(scores: Sequence[dict[str, float | None]]) -> dict[str, float | None]:
    """Mean of each metric over the records that have it (None when none have it)."""
    names = dict.fromkeys(name for row in scores for name in row)
    out: dict[str, float | None] = {}
    for name in names:
        values = [row[name] for row in scores if row.get(name) is not None]
        out[name] = sum(v for v in values if v is not None) / len(values) if values else None
    return out
