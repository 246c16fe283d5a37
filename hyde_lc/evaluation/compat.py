"""The call shapes of the module this package grew from, on the package's own implementation.

`process_hyde_query` answers one question and returns ``answer``, ``contexts``,
``hypothetical_document`` and per-stage ``hyde_metrics`` / ``answer_metrics``, as that
module did; `legacy_view` turns any evaluation record into that shape. Both run
`hyde_lc.evaluation.query_for_evaluation` underneath, so the figures are the same as in
the Ragas-ready records. New code should use the records themselves.

Example:
    >>> from hyde_lc.evaluation.compat import process_hyde_query
    >>> out = process_hyde_query("Who invented the Fresnel lens?")  # doctest: +SKIP
    >>> out["hyde_metrics"]["output_tokens"], out["total_cost"]  # doctest: +SKIP
    (187, 0.0)

"""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseLanguageModel


def _stage_metrics(stage: dict[str, Any] | None) -> dict[str, Any] | None:
    """One stage's figures; None for a stage the retriever does not have or report."""
    if stage is None:
        return None
    keys = ("provider", "model", "model_id", "input_tokens", "output_tokens")
    return {
        **{key: stage[key] for key in keys},
        "total_tokens": stage["input_tokens"] + stage["output_tokens"],
        "cost": stage["cost"],
        "usage_source": stage["usage_source"],
        "cost_source": stage["cost_source"],
    }


def legacy_view(record: dict[str, Any]) -> dict[str, Any]:
    """An evaluation record in `process_hyde_query`'s shape.

    Example:
        >>> stage = {"provider": "local", "model": "m", "model_id": "local:m",
        ...          "input_tokens": 3, "output_tokens": 2, "cost": 0.0,
        ...          "usage_source": "reported by the model", "cost_source": "local"}
        >>> record = {"response": "Fresnel.", "retrieved_contexts": ["..."], "metadata": {
        ...     "hypothetical_document": None, "hypothetical_documents": [],
        ...     "stages": {"hypothesis": stage, "answer": stage, "embedding": stage},
        ...     "input_tokens": 6, "output_tokens": 4, "total_cost": 0.0,
        ...     "execution_time": 1.5, "retrieval_method": "hybrid"}}
        >>> legacy_view(record)["answer_metrics"]["total_tokens"]
        5
        >>> record["metadata"]["stages"]["hypothesis"] = None  # a retriever without one
        >>> legacy_view(record)["hyde_metrics"] is None
        True

    """
    meta = record["metadata"]
    return {
        "answer": record["response"],
        "contexts": record["retrieved_contexts"],
        "hypothetical_document": meta.get("hypothetical_document"),
        "hypothetical_documents": meta.get("hypothetical_documents"),
        "hyde_metrics": _stage_metrics(meta["stages"]["hypothesis"]),
        "answer_metrics": _stage_metrics(meta["stages"]["answer"]),
        "embedding_metrics": _stage_metrics(meta["stages"]["embedding"]),
        "total_input_tokens": meta["input_tokens"],
        "total_output_tokens": meta["output_tokens"],
        "total_cost": meta["total_cost"],
        "execution_time": meta["execution_time"],
        "retrieval_method": meta["retrieval_method"],
    }


def process_hyde_query(
    query: str,
    custom_hyde_llm: BaseLanguageModel[Any] | None = None,
    custom_answer_llm: BaseLanguageModel[Any] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Answer ``query`` and return ``answer``, ``contexts``, metrics and totals.

    ``options`` are those of `hyde_lc.evaluation.EvaluationPipeline.from_settings`
    (``store``, ``mode``, ``k``, ...). Returns ``answer``, ``contexts``,
    ``hypothetical_document``, and ``hyde_metrics`` / ``answer_metrics`` (tokens, cost,
    usage and cost source) with the totals.
    """
    # Imported here: hyde_lc.evaluation re-exports this function.
    from hyde_lc.evaluation.records import query_for_evaluation

    record = query_for_evaluation(
        query, custom_hyde_llm=custom_hyde_llm, custom_answer_llm=custom_answer_llm, **options
    )
    return legacy_view(record)
