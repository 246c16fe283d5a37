"""Evaluation: per-stage usage and cost, Ragas-ready records, runs and comparisons.

Example:
    >>> from hyde_lc.evaluation import query_for_evaluation, score_records
    >>> record = query_for_evaluation("Who built the Pharos?", mode="hyde")  # doctest: +SKIP
    >>> score_records([record])  # doctest: +SKIP

"""

from hyde_lc.evaluation.compare import ComparisonReport, compare_modes
from hyde_lc.evaluation.pricing import PricingTable, stage_cost
from hyde_lc.evaluation.ragas_metrics import (
    JUDGED_METRICS,
    OFFLINE_METRICS,
    mean_scores,
    score_records,
)
from hyde_lc.evaluation.records import (
    EvaluationPipeline,
    aquery_for_evaluation,
    process_hyde_query,
    query_for_evaluation,
)
from hyde_lc.evaluation.runs import (
    Question,
    RunSummary,
    evaluate_questions,
    read_questions,
    read_records,
)
from hyde_lc.evaluation.usage import StageUsage, UsageRecorder

__all__ = [
    "JUDGED_METRICS",
    "OFFLINE_METRICS",
    "ComparisonReport",
    "EvaluationPipeline",
    "PricingTable",
    "Question",
    "RunSummary",
    "StageUsage",
    "UsageRecorder",
    "aquery_for_evaluation",
    "compare_modes",
    "evaluate_questions",
    "mean_scores",
    "process_hyde_query",
    "query_for_evaluation",
    "read_questions",
    "read_records",
    "score_records",
    "stage_cost",
]
