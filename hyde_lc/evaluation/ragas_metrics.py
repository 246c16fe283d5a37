"""Ragas metrics on evaluation records: offline by default, an LLM judge only when named.

Ragas' ``evaluate`` builds an OpenAI judge when it is given no metrics, so metrics are
always passed explicitly here. Offline metrics (no model at all):

==============================  =======================================================
``context_precision``           non-LLM, retrieved vs reference contexts (string match)
``context_recall``              non-LLM, reference contexts found among the retrieved
``id_context_precision``        retrieved ids that are reference ids
``id_context_recall``           reference ids that were retrieved
``string_similarity``           response vs reference (Levenshtein)
``rouge``                       response vs reference (ROUGE-L F1)
``bleu`` / ``chrf``             response vs reference (sacrebleu)
==============================  =======================================================

Each metric runs only on records that have its columns (a record without ``reference``
gets no answer metrics). With a judge (``judge_llm``, any LangChain chat model, local or
remote): ``faithfulness``, ``answer_relevancy`` (also needs ``judge_embeddings``) and
``llm_context_precision`` (needs ``reference``). Without a metric list, `choose_metrics`
picks every metric the given judges allow. What `score_records` returns is a list that
also says which metrics were left out (``left_out``) and which scored no record and why
(``not_scored``: e.g. no question has ``reference_contexts``), so a None is explained.

Example:
    >>> from hyde_lc.evaluation import score_records
    >>> scores = score_records(records)  # doctest: +SKIP
    >>> scores[0]["context_recall"]  # doctest: +SKIP
    1.0

"""

from __future__ import annotations

import logging
import math
import os
import warnings
from collections.abc import Sequence
from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseLanguageModel

from hyde_lc.errors import HydeLcError
from hyde_lc.evaluation.records import RAGAS_KEYS

os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")
logger = logging.getLogger(__name__)

OFFLINE_METRICS: dict[str, tuple[str, set[str]]] = {
    "context_precision": ("NonLLMContextPrecisionWithReference", {"reference_contexts"}),
    "context_recall": ("NonLLMContextRecall", {"reference_contexts"}),
    "id_context_precision": ("IDBasedContextPrecision", {"reference_context_ids"}),
    "id_context_recall": ("IDBasedContextRecall", {"reference_context_ids"}),
    "string_similarity": ("NonLLMStringSimilarity", {"reference", "response"}),
    "rouge": ("RougeScore", {"reference", "response"}),
    "bleu": ("BleuScore", {"reference", "response"}),
    "chrf": ("ChrfScore", {"reference", "response"}),
}
"""Our name -> (Ragas class, record keys it needs besides the retrieved contexts)."""
JUDGED_METRICS: dict[str, tuple[str, set[str]]] = {
    "faithfulness": ("Faithfulness", {"response"}),
    "answer_relevancy": ("ResponseRelevancy", {"response"}),
    "llm_context_precision": ("LLMContextPrecisionWithReference", {"reference"}),
}
"""Metrics that need ``judge_llm``."""


def _ragas_class(name: str) -> Any:
    with warnings.catch_warnings():
        # ragas 0.4 moves these to ragas.metrics.collections, whose classes `evaluate`
        # does not accept yet; the classic ones still work and warn on import.
        warnings.simplefilter("ignore", DeprecationWarning)
        import ragas.metrics

        return getattr(ragas.metrics, name)


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
    run, with the reason: a judge they need was not given) and ``not_scored`` (metrics
    that ran on no record, with the reason: the columns no record has).

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
    ) -> None:
        super().__init__(rows)
        self.left_out: dict[str, str] = dict(left_out or {})
        self.not_scored: dict[str, str] = dict(not_scored or {})


def choose_metrics(
    judge_llm: BaseLanguageModel[Any] | None = None, judge_embeddings: Embeddings | None = None
) -> tuple[list[str], dict[str, str]]:
    """Every metric the given judges allow, and the others with what they would need.

    Example:
        >>> chosen, left_out = choose_metrics()
        >>> "rouge" in chosen, left_out["faithfulness"]
        (True, 'needs a judge LLM (judge_llm, or --judge SPEC)')

    """
    chosen = list(OFFLINE_METRICS)
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
) -> Scores:
    """Per-record scores ``{metric: value or None}``, in the order of ``records``.

    ``metrics`` defaults to every metric the given judges allow (`choose_metrics`): the
    offline ones, plus the judged ones with ``judge_llm`` (``answer_relevancy`` only with
    ``judge_embeddings`` too); those left out are logged and listed in the result's
    ``left_out``. A metric a record lacks the columns for scores ``None`` for that record;
    a metric no record can be scored on is in the result's ``not_scored``, with why.
    ``timeout`` bounds one Ragas job (one metric on one record, several judge calls); by
    default 180 s as in Ragas, and 1,800 s for a local judge, whose calls run one at a time
    on the CPU (with Ragas' default, a 1.5B local judge timed out on every job).
    """
    left_out: dict[str, str] = {}
    if metrics is None:
        chosen, left_out = choose_metrics(judge_llm, judge_embeddings)
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
    scores = Scores([dict.fromkeys(chosen) for _ in records], left_out=left_out)
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
        result = _evaluate(samples, metric, show_progress, _run_config(judge_llm, timeout))
        for i, value in zip(rows, _scores_of(result), strict=True):
            scores[i][name] = value
    return scores


def _build(
    class_name: str, llm: BaseLanguageModel[Any] | None, embeddings: Embeddings | None
) -> Any:
    metric = _ragas_class(class_name)()
    if llm is not None and hasattr(metric, "llm"):
        from ragas.llms import LangchainLLMWrapper

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            metric.llm = LangchainLLMWrapper(llm)
    if embeddings is not None and hasattr(metric, "embeddings"):
        from ragas.embeddings import LangchainEmbeddingsWrapper

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            metric.embeddings = LangchainEmbeddingsWrapper(embeddings)
    return metric


def _run_config(judge_llm: BaseLanguageModel[Any] | None, timeout: float | None) -> Any:
    """Ragas' run settings: a local judge gets one worker and a long timeout."""
    from ragas.run_config import RunConfig

    local = type(judge_llm).__name__ == "LocalChatModel"
    chosen = timeout if timeout is not None else (1800.0 if local else 180.0)
    return RunConfig(
        timeout=int(chosen), max_workers=1 if local else 16, max_retries=2 if local else 10
    )


def _evaluate(
    samples: list[dict[str, Any]], metric: Any, show_progress: bool, run_config: Any
) -> Any:
    from ragas import EvaluationDataset, evaluate

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # evaluate() -> @experiment
        return evaluate(
            EvaluationDataset.from_list(samples),
            metrics=[metric],
            show_progress=show_progress,
            run_config=run_config,
            raise_exceptions=False,  # a judge's unparsable reply scores NaN (None), not a crash
        )


def mean_scores(scores: Sequence[dict[str, float | None]]) -> dict[str, float | None]:
    """Mean of each metric over the records that have it (None when none have it)."""
    names = dict.fromkeys(name for row in scores for name in row)
    out: dict[str, float | None] = {}
    for name in names:
        values = [row[name] for row in scores if row.get(name) is not None]
        out[name] = sum(v for v in values if v is not None) / len(values) if values else None
    return out
