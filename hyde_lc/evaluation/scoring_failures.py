"""Why Ragas gave a record no score: the exception each failed job raised, said plainly.

With ``raise_exceptions=False`` Ragas' ``evaluate`` scores a job (one metric on one
record) that raised as NaN and only logs the exception. `JobFailures` is a LangChain
callback handler given to ``evaluate``: Ragas opens a chain per record (its metadata
carries ``row_index``) and, inside it, one per metric, and reports a metric's exception
to that chain's ``on_chain_error``; the handler keeps each record's exception.
`failure_reason` turns them into the sentence ``Scores.not_scored`` gives, with what to
do: e.g. ``LLMDidNotFinishException`` is a judge that stopped before the end of its
reply (its token cap), so it needs more ``max_tokens`` or a larger model.

Example:
    >>> failures = JobFailures()
    >>> ragas.evaluate(dataset, metrics=[metric], callbacks=[failures])  # doctest: +SKIP
    >>> failure_reason(failures.errors, rows=1, unscored=1)  # doctest: +SKIP
    'the judge did not finish its output (LLMDidNotFinishException): ...'

"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler

ADVICE: dict[str, str] = {
    "LLMDidNotFinishException": "the judge did not finish its output "
    "(LLMDidNotFinishException: it stopped at its token cap): give it more max_tokens "
    "(load_llm(spec, max_tokens=2048)) or a larger model",
    "RagasOutputParserException": "the judge's reply was not the JSON Ragas asked for, even "
    "after retries (RagasOutputParserException): use a larger or instruction-tuned judge",
    "TimeoutError": "a job ran past the timeout (TimeoutError): pass a larger timeout to "
    "score_records, or use a faster judge",
}
"""Ragas' exceptions by class name -> what happened and what to do."""
NO_ERROR = (
    "Ragas gave no score and raised nothing (the judge's reply held nothing to score, "
    "e.g. no statements in the answer)"
)
"""The reason when a job scored NaN without an exception."""


class JobFailures(BaseCallbackHandler):
    """The exception of each record whose metric job raised, by the record's index.

    Give one to ``ragas.evaluate(..., callbacks=[handler])`` per metric evaluated (its
    ``errors`` are for that one metric).

    Example:
        >>> handler = JobFailures()
        >>> handler.errors
        {}

    """

    def __init__(self) -> None:
        self.rows: dict[UUID, int] = {}
        """Ragas' per-record chains: run id -> the record's index."""
        self.parents: dict[UUID, UUID] = {}
        """Every other chain's parent, to find a metric's record."""
        self.errors: dict[int, BaseException] = {}
        """The exception each failed record's job raised, by the record's index."""

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: dict[str, Any] | Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Note each record's chain (Ragas puts ``row_index`` in its metadata)."""
        row = (metadata or {}).get("row_index")
        if isinstance(row, int) and run_id not in self.parents:
            self.rows[run_id] = row
        elif parent_run_id is not None:
            self.parents[run_id] = parent_run_id

    def on_chain_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """Keep the exception of a metric's chain (a record chain's child) for its record."""
        parent = self.parents.get(run_id, parent_run_id)
        if parent in self.rows:
            self.errors.setdefault(self.rows[parent], error)


def describe(error: BaseException) -> str:
    """What an exception means for a score, and what to do about it.

    Example:
        >>> describe(ValueError("bad reply"))
        'Ragas raised ValueError: bad reply'

    """
    name = type(error).__name__
    if name in ADVICE:
        return ADVICE[name]
    return f"Ragas raised {name}: {error}".rstrip(": ")


def failure_reason(errors: Mapping[int, BaseException], *, rows: int, unscored: int) -> str:
    """Why ``unscored`` of ``rows`` records got no score: each kind of failure, counted.

    ``errors``: the exceptions of the records whose job raised (`JobFailures.errors`);
    the other unscored records scored NaN without one.

    Example:
        >>> failure_reason({0: TimeoutError()}, rows=3, unscored=1)
        '1 of 3 records: a job ran past the timeout (TimeoutError): pass a larger timeout \
to score_records, or use a faster judge'

    """
    kinds = Counter(describe(error) for error in errors.values())
    silent = unscored - len(errors)
    if silent > 0:
        kinds[NO_ERROR] = silent
    if len(kinds) == 1:
        kind = next(iter(kinds))
        return kind if unscored == rows else f"{unscored} of {rows} records: {kind}"
    who = "every record" if unscored == rows else f"{unscored} of {rows} records"
    return f"{who}: " + "; ".join(f"{kind} (on {count})" for kind, count in kinds.items())
