"""Ragas' scores next to each record's tokens, cost, times and models, in one table.

Ragas' ``EvaluationDataset.from_list(records)`` keeps only the sample fields, so the
``metadata`` of a record (tokens, cost, times, model ids) never reaches Ragas' result
table. `results_table` joins them back, row by row: the records must be given in the
order they were given to Ragas (each row's ``user_input`` is checked against its record).
It also takes `score_records`' per-record scores, or a DataFrame of Ragas' results.

Example:
    >>> from ragas import EvaluationDataset, evaluate  # doctest: +SKIP
    >>> from ragas.metrics import RougeScore  # doctest: +SKIP
    >>> records = read_records("results.jsonl")  # doctest: +SKIP
    >>> result = evaluate(EvaluationDataset.from_list(records), metrics=[RougeScore()])
    ... # doctest: +SKIP
    >>> table = results_table(result, records)  # doctest: +SKIP
    >>> table[["user_input", "rouge_score(mode=fmeasure)", "total_cost", "answer_model_id"]]
    ... # doctest: +SKIP

"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hyde_lc.errors import HydeLcError

if TYPE_CHECKING:
    import pandas as pd

METADATA_COLUMNS = (
    "retrieval_method",
    "k",
    "execution_time",
    "hypothesis_time",
    "retrieval_time",
    "answer_time",
    "input_tokens",
    "output_tokens",
    "embedding_tokens",
    "hyde_cost",
    "embedding_cost",
    "answer_cost",
    "total_cost",
    "usage_source",
    "cost_source",
    "hyde_model_id",
    "answer_model_id",
    "embedding_model",
    "error",
    "question_key",
)
"""Record ``metadata`` fields `results_table` adds, in this order (absent ones are None)."""
STAGE_TOKEN_COLUMNS = ("hypothesis", "embedding", "answer", "retriever_llm")
"""Stages whose ``<stage>_input_tokens`` / ``<stage>_output_tokens`` are added."""
_SAMPLE_COLUMNS = ("user_input", "response", "reference")


def results_table(
    scores: Any, records: Sequence[Mapping[str, Any]], *, stage_tokens: bool = True
) -> pd.DataFrame:
    """One row per record: Ragas' columns and scores, then its metadata (`METADATA_COLUMNS`).

    ``scores``: what Ragas' ``evaluate`` returned (an ``EvaluationResult``), its
    ``to_pandas()`` DataFrame, or the list `score_records` returned; ``records``: the
    records scored, in the same order. With ``stage_tokens``, each stage's tokens get
    columns of their own (``answer_input_tokens``...), None where the stage is absent.
    Given `score_records`' list, the table's ``attrs`` carry its ``chosen`` (which context
    metrics ran, and why) and ``not_scored`` (why a metric is null).
    Raises `HydeLcError` when the rows and records do not pair up (count or question).
    """
    import pandas as pd

    frame = _scores_frame(scores, records, pd)
    rows = list(records)
    if len(frame) != len(rows):
        raise HydeLcError(
            f"the scores have {len(frame)} rows and there are {len(rows)} records: "
            "results_table joins them row by row, so pass the records in the order given to "
            "EvaluationDataset.from_list (all of them, and only them)"
        )
    if "user_input" in frame.columns:
        for index, (asked, record) in enumerate(zip(frame["user_input"], rows, strict=True)):
            if asked != record.get("user_input"):
                raise HydeLcError(
                    f"row {index} of the scores is the question {asked!r} but record {index} "
                    f"is {record.get('user_input')!r}: pass the records in the order given "
                    "to EvaluationDataset.from_list"
                )
    extra: dict[str, list[Any]] = {}
    for name in METADATA_COLUMNS:
        if name not in frame.columns:
            extra[name] = [_meta(r).get(name) for r in rows]
    if stage_tokens:
        for stage in STAGE_TOKEN_COLUMNS:
            used = [(_meta(r).get("stages") or {}).get(stage) for r in rows]
            if not any(u is not None for u in used) and stage == "retriever_llm":
                continue
            for side in ("input_tokens", "output_tokens"):
                extra[f"{stage}_{side}"] = [u.get(side) if u else None for u in used]
    added = pd.DataFrame(extra, index=frame.index)
    table = pd.concat([frame, added], axis=1)
    for note in ("chosen", "not_scored"):  # `Scores`' notes: why a metric ran, why it is null
        if isinstance(getattr(scores, note, None), dict):
            table.attrs[note] = dict(getattr(scores, note))
    return table


def _meta(record: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = record.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _scores_frame(scores: Any, records: Sequence[Mapping[str, Any]], pd: Any) -> Any:
    """Ragas' result as a DataFrame; `score_records`' list with the sample columns first."""
    if isinstance(scores, pd.DataFrame):
        return scores.reset_index(drop=True)
    to_pandas = getattr(scores, "to_pandas", None)
    if callable(to_pandas):
        return to_pandas().reset_index(drop=True)
    if isinstance(scores, Sequence) and all(isinstance(row, Mapping) for row in scores):
        if len(scores) != len(records):
            raise HydeLcError(
                f"{len(scores)} score rows for {len(records)} records: pass the records "
                "given to score_records, in the same order"
            )
        rows = [
            {**{k: record.get(k) for k in _SAMPLE_COLUMNS}, **row}
            for record, row in zip(records, scores, strict=True)
        ]
        return pd.DataFrame(rows)
    raise HydeLcError(
        f"results_table takes Ragas' evaluate() result, its to_pandas() DataFrame or "
        f"score_records' list; got a {type(scores).__name__}"
    )
