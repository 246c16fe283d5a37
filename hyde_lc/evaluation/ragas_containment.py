"""Context precision and recall by containment, as Ragas metrics (`ragas.evaluate` runs them).

They subclass Ragas' ``SingleTurnMetric`` as its own offline metrics do (required columns,
``_single_turn_ascore``), so they score inside ``ragas.evaluate`` beside the others and
take its run configuration, progress bar and error handling; the scoring itself is
`hyde_lc.evaluation.containment`. Imported only when they are used (this module imports
Ragas): `hyde_lc.evaluation.ragas_metrics` builds them by name, after turning Ragas' usage
tracking off.

Example:
    >>> from ragas import EvaluationDataset, evaluate  # doctest: +SKIP
    >>> evaluate(EvaluationDataset.from_list(records),
    ...          metrics=[ContainedContextRecall()])  # doctest: +SKIP

"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from langchain_core.callbacks import Callbacks
from ragas.dataset_schema import SingleTurnSample
from ragas.metrics.base import MetricType, SingleTurnMetric
from ragas.run_config import RunConfig

from hyde_lc.evaluation.containment import (
    FOUND_AT,
    contained_precision,
    contained_recall,
)


def _needs() -> dict[MetricType, set[str]]:
    return {MetricType.SINGLE_TURN: {"retrieved_contexts", "reference_contexts"}}


@dataclass
class _Containment(SingleTurnMetric):
    """What both metrics share: the columns, the threshold, no model to set up."""

    _required_columns: dict[MetricType, set[str]] = field(default_factory=_needs)
    threshold: float = FOUND_AT
    """The share of a reference a chunk must hold (`hyde_lc.evaluation.containment`)."""

    def init(self, run_config: RunConfig) -> None:
        """Nothing to set up: no model."""

    def _score(self, retrieved: list[str], references: list[str]) -> float:
        raise NotImplementedError

    async def _single_turn_ascore(self, sample: SingleTurnSample, callbacks: Callbacks) -> float:
        return self._score(sample.retrieved_contexts or [], sample.reference_contexts or [])

    async def _ascore(self, row: dict[str, Any], callbacks: Callbacks) -> float:
        return await self._single_turn_ascore(SingleTurnSample(**row), callbacks)


@dataclass
class ContainedContextPrecision(_Containment):
    """Rank-aware share of the retrieved chunks that hold a reference context.

    `hyde_lc.evaluation.containment.contained_precision` on a Ragas sample.

    Example:
        >>> from ragas.dataset_schema import SingleTurnSample
        >>> metric = ContainedContextPrecision()
        >>> metric.single_turn_score(SingleTurnSample(
        ...     retrieved_contexts=["Ships. The lens was lit in 1823.", "Keepers."],
        ...     reference_contexts=["the lens was lit in 1823"]))
        1.0

    """

    name: str = "contained_context_precision"

    def _score(self, retrieved: list[str], references: list[str]) -> float:
        return contained_precision(retrieved, references, self.threshold)


@dataclass
class ContainedContextRecall(_Containment):
    """Share of the reference contexts that some retrieved chunk holds.

    `hyde_lc.evaluation.containment.contained_recall` on a Ragas sample.

    Example:
        >>> from ragas.dataset_schema import SingleTurnSample
        >>> metric = ContainedContextRecall()
        >>> metric.single_turn_score(SingleTurnSample(
        ...     retrieved_contexts=["Ships. The lens was lit in 1823."],
        ...     reference_contexts=["the lens was lit in 1823", "Pharos"]))
        0.5

    """

    name: str = "contained_context_recall"

    def _score(self, retrieved: list[str], references: list[str]) -> float:
        return contained_recall(retrieved, references, self.threshold)
