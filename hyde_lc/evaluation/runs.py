"""Evaluation runs over a question file: one record per line, resumable, failures kept.

Input (JSON Lines): ``question`` (or ``user_input``) on every line, optionally
``reference``, ``reference_contexts``, ``reference_context_ids`` and an ``id``.
Output (JSON Lines): one `EvaluationPipeline` record per question, in input order, each
with ``metadata.question_key`` (line number and a hash of the question).

Resuming: records are appended and flushed one by one, so an interrupted run keeps
everything it finished; running the same command again skips the questions already in
the output and continues. A half-written last line (the process was killed mid-write) is
dropped and redone. A question that fails (the LLM raises, a search errs) is
recorded with ``metadata.error`` and the run goes on; ``--retry-errors`` redoes those.
A Chroma server that stops answering ends the run instead (`StoreUnavailableError`, naming
the server): every later question would fail the same way. Start the server again and run
the same command to continue.

Example:
    >>> from hyde_lc.evaluation import EvaluationPipeline, evaluate_questions, read_questions
    >>> pipeline = EvaluationPipeline(mode="standard", retrieval_only=True)  # doctest: +SKIP
    >>> evaluate_questions(read_questions("qa.jsonl"), pipeline, "out.jsonl")  # doctest: +SKIP
    RunSummary(total=10, done=10, skipped=0, failed=0)

"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_chroma import Chroma
from tqdm.auto import tqdm

from hyde_lc.errors import HydeLcError
from hyde_lc.evaluation.records import EvaluationPipeline


@dataclass(frozen=True)
class Question:
    """One line of a question file."""

    question: str
    reference: str | None = None
    reference_contexts: list[str] | None = None
    reference_context_ids: list[str] | None = None
    key: str = ""
    """``<line>:<hash>``: identifies the question in an output file, for resuming."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Any other fields of the line (kept in ``metadata.input``)."""


@dataclass(frozen=True)
class RunSummary:
    """What one call of `evaluate_questions` did."""

    total: int
    done: int
    skipped: int
    failed: int


def question_key(line: int, question: str) -> str:
    """``<line>:<first 12 hex of sha1(question)>``."""
    return f"{line}:{hashlib.sha1(question.encode('utf-8')).hexdigest()[:12]}"


def read_questions(path: str | os.PathLike[str]) -> list[Question]:
    """Read a question file; a bad line is an error naming the line and the fix."""
    source = Path(path)
    if not source.is_file():
        raise HydeLcError(f"no question file at {source}: give a JSON Lines file of questions")
    questions = []
    for number, line in enumerate(source.read_text("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise HydeLcError(f"{source}:{number} is not valid JSON ({exc.msg})") from exc
        text = row.get("question", row.get("user_input")) if isinstance(row, dict) else None
        if not isinstance(text, str) or not text.strip():
            raise HydeLcError(
                f"{source}:{number} has no question: each line needs a non-empty "
                '"question" (or "user_input") string'
            )
        known = {"question", "user_input", "reference", "reference_contexts"}
        questions.append(
            Question(
                question=text,
                reference=row.get("reference"),
                reference_contexts=row.get("reference_contexts"),
                reference_context_ids=row.get("reference_context_ids"),
                key=question_key(number, text),
                extra={k: v for k, v in row.items() if k not in known | {"reference_context_ids"}},
            )
        )
    if not questions:
        raise HydeLcError(f"{source} holds no questions")
    return questions


def read_records(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The complete records of an output file (a half-written last line is ignored)."""
    target = Path(path)
    if not target.exists():
        return []
    records = []
    for line in target.read_text("utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break  # a write cut short by a kill: everything after it is redone
    return records


def _rewrite(path: Path, records: list[dict[str, Any]]) -> None:
    """Replace ``path`` atomically with exactly ``records``."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def _failure(question: Question, pipeline: EvaluationPipeline, exc: BaseException) -> dict:
    return {
        "user_input": question.question,
        "response": None,
        "retrieved_contexts": [],
        "retrieved_context_ids": [],
        "metadata": {
            "error": f"{type(exc).__name__}: {exc}",
            "retrieval_method": pipeline.retrieval_method,
        },
    }


def evaluate_questions(
    questions: Sequence[Question],
    pipeline: EvaluationPipeline,
    out: str | os.PathLike[str],
    *,
    resume: bool = True,
    retry_errors: bool = False,
    progress: bool = True,
) -> RunSummary:
    """Run every question not yet in ``out`` and append its record (see module docstring).

    ``resume=False`` starts ``out`` afresh. Records made with another retrieval method are
    refused rather than mixed into one file.
    """
    target = Path(out)
    target.parent.mkdir(parents=True, exist_ok=True)
    kept = read_records(target) if resume else []
    method = pipeline.retrieval_method
    others = {r.get("metadata", {}).get("retrieval_method") for r in kept} - {method}
    if others:
        raise HydeLcError(
            f"{target} holds records made with {', '.join(sorted(map(str, others)))}, and this "
            f"run uses {method}: choose another output file, or start afresh (--restart)"
        )
    if retry_errors:
        kept = [r for r in kept if not r["metadata"].get("error")]
    _rewrite(target, kept)  # drops a torn last line, and any errors being retried
    wanted = {q.key for q in questions}
    done_keys = {r["metadata"].get("question_key") for r in kept} & wanted
    todo = [q for q in questions if q.key not in done_keys]
    failed = 0
    with target.open("a", encoding="utf-8") as sink:
        for question in tqdm(todo, desc=f"evaluate ({method})", disable=not progress):
            try:
                record = pipeline.run(
                    question.question,
                    reference=question.reference,
                    reference_contexts=question.reference_contexts,
                    reference_context_ids=question.reference_context_ids,
                )
            except Exception as exc:  # recorded per question; the run goes on
                _stop_if_server_lost(pipeline, exc, target)
                record = _failure(question, pipeline, exc)
                failed += 1
            record["metadata"]["question_key"] = question.key
            if question.extra:
                record["metadata"]["input"] = question.extra
            sink.write(json.dumps(record, ensure_ascii=False) + "\n")
            sink.flush()
            os.fsync(sink.fileno())
    if len(done_keys) and todo:
        _rewrite(target, _in_input_order(read_records(target), questions))
    return RunSummary(
        total=len(questions), done=len(todo) - failed, skipped=len(done_keys), failed=failed
    )


def _stop_if_server_lost(pipeline: EvaluationPipeline, exc: Exception, out: Path) -> None:
    """Stop the run when the Chroma server is gone: every later question would fail too.

    The question is not recorded, so the rerun that resumes the run asks it again.
    """
    from hyde_lc.store import lost_server

    store = getattr(pipeline, "store", None)
    if not isinstance(store, Chroma):
        return
    kept = len(read_records(out))
    lost = lost_server(
        store,
        exc,
        f"rerun the same command: it keeps the {kept} record{'' if kept == 1 else 's'} in "
        f"{out} and continues with the questions not yet there",
    )
    if lost is not None:
        raise lost from exc


def _in_input_order(records: list[dict[str, Any]], questions: Sequence[Question]) -> list[dict]:
    """Records sorted by their question's position (retried errors land in place)."""
    position = {q.key: i for i, q in enumerate(questions)}
    return sorted(
        records, key=lambda r: position.get(r["metadata"].get("question_key"), len(position))
    )
