"""Evaluation: usage and cost, Ragas-ready records, runs, comparisons, and test sets.

The names below are imported on first use, so importing a submodule (or this package)
does not load Ragas, LangChain or the models until something needs them.

Example:
    >>> from hyde_lc.evaluation import query_for_evaluation, results_table, score_records
    >>> record = query_for_evaluation("Who built the Pharos?", mode="hyde")  # doctest: +SKIP
    >>> score_records([record])  # doctest: +SKIP
    >>> results_table(score_records([record]), [record])  # scores beside tokens and cost
    ... # doctest: +SKIP

"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hyde_lc.core.lazy import lazy_exports

if TYPE_CHECKING:
    from hyde_lc.evaluation.compare import ComparisonReport, compare_modes
    from hyde_lc.evaluation.compat import legacy_view, process_hyde_query
    from hyde_lc.evaluation.pricing import PricingTable, stage_cost
    from hyde_lc.evaluation.question_checks import QuestionRules
    from hyde_lc.evaluation.ragas_metrics import (
        JUDGED_METRICS,
        OFFLINE_METRICS,
        Scores,
        choose_context_metrics,
        choose_metrics,
        mean_scores,
        score_records,
    )
    from hyde_lc.evaluation.records import (
        EvaluationPipeline,
        aquery_for_evaluation,
        query_for_evaluation,
    )
    from hyde_lc.evaluation.runs import (
        Question,
        RunSummary,
        evaluate_questions,
        read_questions,
        read_records,
    )
    from hyde_lc.evaluation.table import results_table
    from hyde_lc.evaluation.testset import (
        ChunkSource,
        check_references,
        make_testset,
        read_testset,
        to_ragas_dataset,
    )
    from hyde_lc.evaluation.usage import StageUsage, UsageRecorder

_EXPORTS = {
    "JUDGED_METRICS": "hyde_lc.evaluation.ragas_metrics",
    "OFFLINE_METRICS": "hyde_lc.evaluation.ragas_metrics",
    "ChunkSource": "hyde_lc.evaluation.testset",
    "ComparisonReport": "hyde_lc.evaluation.compare",
    "QuestionRules": "hyde_lc.evaluation.question_checks",
    "check_references": "hyde_lc.evaluation.testset",
    "make_testset": "hyde_lc.evaluation.testset",
    "read_testset": "hyde_lc.evaluation.testset",
    "to_ragas_dataset": "hyde_lc.evaluation.testset",
    "EvaluationPipeline": "hyde_lc.evaluation.records",
    "PricingTable": "hyde_lc.evaluation.pricing",
    "Question": "hyde_lc.evaluation.runs",
    "RunSummary": "hyde_lc.evaluation.runs",
    "Scores": "hyde_lc.evaluation.ragas_metrics",
    "StageUsage": "hyde_lc.evaluation.usage",
    "UsageRecorder": "hyde_lc.evaluation.usage",
    "aquery_for_evaluation": "hyde_lc.evaluation.records",
    "choose_context_metrics": "hyde_lc.evaluation.ragas_metrics",
    "choose_metrics": "hyde_lc.evaluation.ragas_metrics",
    "compare_modes": "hyde_lc.evaluation.compare",
    "evaluate_questions": "hyde_lc.evaluation.runs",
    "legacy_view": "hyde_lc.evaluation.compat",
    "mean_scores": "hyde_lc.evaluation.ragas_metrics",
    "process_hyde_query": "hyde_lc.evaluation.compat",
    "query_for_evaluation": "hyde_lc.evaluation.records",
    "read_questions": "hyde_lc.evaluation.runs",
    "read_records": "hyde_lc.evaluation.runs",
    "results_table": "hyde_lc.evaluation.table",
    "score_records": "hyde_lc.evaluation.ragas_metrics",
    "stage_cost": "hyde_lc.evaluation.pricing",
}
"""Public name -> the module that defines it."""

__all__ = [
    "JUDGED_METRICS",
    "OFFLINE_METRICS",
    "ChunkSource",
    "ComparisonReport",
    "EvaluationPipeline",
    "PricingTable",
    "Question",
    "QuestionRules",
    "RunSummary",
    "Scores",
    "StageUsage",
    "UsageRecorder",
    "aquery_for_evaluation",
    "check_references",
    "choose_context_metrics",
    "choose_metrics",
    "compare_modes",
    "evaluate_questions",
    "legacy_view",
    "make_testset",
    "mean_scores",
    "process_hyde_query",
    "query_for_evaluation",
    "read_questions",
    "read_records",
    "read_testset",
    "results_table",
    "score_records",
    "stage_cost",
    "to_ragas_dataset",
]


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
