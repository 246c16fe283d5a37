"""Evaluation runs over a question file: one record per line, resumable, failures kept.

Input (JSON Lines, UTF-8): ``question`` (or ``user_input``) on every line, optionally
``reference`` (a string), ``reference_contexts`` and ``reference_context_ids`` (lists of
strings) and an ``id``; a line of another shape is refused at read time, naming the line.
Output (JSON Lines): one `EvaluationPipeline` record per question, in input order, each
with ``metadata.question_key`` (a hash of the question's content: its text, reference,
reference contexts and their ids; `content_key`) and ``metadata.settings``
(`run_settings`: the retrieval method and every retriever setting that shapes it,
hybrid weights included; the window, the models, the collection...).
Before the first question is asked the pipeline is warmed (`EvaluationPipeline.warm_up`:
models loaded and run once, indexes opened), so no record's times include loading;
`RunSummary.load_s` gives the seconds that took.

Resuming: records are appended and flushed one by one, so an interrupted run keeps
everything it finished; running the same command again skips the questions already in
the output and continues. Records are found by their question's content, not its line, so
questions added to the file (anywhere) are the only ones asked. A file holding records of
questions that are not in this question set (made from another question file, or from
questions since changed or removed) is refused before anything runs, naming the fix;
``set_aside_others=True`` (``--set-aside-others``) moves those records to
``<file>.other`` instead, so scores never mix two question sets. The output file is
handled by `hyde_lc.evaluation.results_file`:
a run made with other settings is refused (the message lists them: ``k: 4 -> 1``; a
setting the file's records do not record shows as ``not recorded``, so records made before
a setting existed are never mixed with new ones), as is a file that is not a results file;
a line that is not a record is moved to ``<file>.corrupt`` and reported, the records
around it kept; a half-written last line (the process was killed mid-write) goes there too
and its question is redone; a second run on the same file is refused while the first
holds it. ``resume=False`` (``--restart``)
starts the file afresh. A question that fails (the LLM raises, a search errs) is
recorded with ``metadata.error`` and the run goes on; ``--retry-errors`` redoes those.
A Chroma server that stops answering ends the run instead (`StoreUnavailableError`, naming
the server): every later question would fail the same way. Start the server again and run
the same command to continue.

Example:
    >>> from hyde_lc.evaluation import EvaluationPipeline, evaluate_questions, read_questions
    >>> pipeline = EvaluationPipeline.from_settings(mode="standard", retrieval_only=True)
    ... # doctest: +SKIP
    >>> evaluate_questions(read_questions("qa.jsonl"), pipeline, "out.jsonl")  # doctest: +SKIP
    RunSummary(total=10, done=10, skipped=0, failed=0, set_aside=(), corrupt_file=None)

"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypedDict, Unpack

from tqdm.auto import tqdm

from hyde_lc.errors import HydeLcError
from hyde_lc.evaluation.any_retriever import describe_retriever
from hyde_lc.evaluation.pricing import PricingTable
from hyde_lc.evaluation.records import EvaluationPipeline
from hyde_lc.evaluation.results_file import (
    OTHERS_SUFFIX,
    Contents,
    Line,
    check_unlocked,
    differences,
    encode,
    exclusive,
    refuse_foreign,
    replace_lines,
    scan,
    set_aside,
)
from hyde_lc.evaluation.searched_store import describe_store
from hyde_lc.evaluation.usage import describe_embeddings, describe_llm
from hyde_lc.retrievers.hyde import HyDERetriever
from hyde_lc.search.backend import backend_for

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Question:
    """One question to evaluate: a line of a question file, or built by hand.

    Example:
        >>> lamp = Question("What did lighthouse lamps burn?", reference="Oil")
        >>> lamp.key == Question("What did lighthouse lamps burn?", reference="Oil").key
        True
        >>> lamp.key == Question("Who kept lighthouses?").key
        False

    """

    question: str
    reference: str | None = None
    reference_contexts: list[str] | None = None
    reference_context_ids: list[str] | None = None
    key: str = ""
    """Identifies the question in an output file, for resuming; left empty, a hash of its
    content (`content_key`). `read_questions` adds ``#2``, ``#3``... to the key of a
    question that repeats an earlier line's content."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Any other fields of the line (kept in ``metadata.input``)."""

    def __post_init__(self) -> None:
        if not self.key:
            key = content_key(
                self.question, self.reference, self.reference_contexts, self.reference_context_ids
            )
            object.__setattr__(self, "key", key)


@dataclass(frozen=True)
class RunSummary:
    """What one call of `evaluate_questions` did."""

    total: int
    done: int
    skipped: int
    failed: int
    set_aside: tuple[int, ...] = ()
    """Line numbers of the output file that were not records, moved to `corrupt_file`."""
    corrupt_file: Path | None = None
    """``<out>.corrupt``, when lines were moved there."""
    load_s: dict[str, float] = field(default_factory=dict)
    """Seconds spent loading the models and indexes before the first question, per stage
    (`EvaluationPipeline.warm_up`); in no record's times. Empty when nothing was asked."""
    others_set_aside: int = 0
    """Records of questions not in this question set, moved to `others_file`."""
    others_file: Path | None = None
    """``<out>.other``, when records were moved there."""


LEGACY_KEY = re.compile(r"\d+:[0-9a-f]{12}")
"""``<line>:<sha1 of the question>``: how records were keyed before content keys."""


def question_key(line: int, question: str) -> str:
    """``<line>:<first 12 hex of sha1(question)>``: the key of records in older files."""
    return f"{line}:{hashlib.sha1(question.encode('utf-8')).hexdigest()[:12]}"


def content_key(
    question: str,
    reference: str | None = None,
    reference_contexts: Sequence[str] | None = None,
    reference_context_ids: Sequence[str] | None = None,
) -> str:
    """``q:<first 12 hex of sha1>`` of the question and what it is scored against.

    Two questions with the same text but other references get other keys, so a record
    scored against one reference is never reused for another.

    Example:
        >>> content_key("Who?") == content_key("Who?", None, None, None)
        True
        >>> content_key("Who?", "Keepers") == content_key("Who?", "Keepers", ["a passage"])
        False

    """
    parts: list[Any] = [question, reference]
    if reference_contexts is not None or reference_context_ids is not None:
        parts += [reference_contexts, reference_context_ids]
    text = json.dumps(parts, ensure_ascii=False)
    return f"q:{hashlib.sha1(text.encode('utf-8')).hexdigest()[:12]}"


def record_key(record: dict[str, Any]) -> str:
    """The question key of a record; for a record of an older file, from its content.

    Older files keyed records by line number (`question_key`), which named another
    question once a line was inserted above; such a record is matched by its own
    question, reference and reference contexts instead.
    """
    meta = record.get("metadata") or {}
    key = str(meta.get("question_key", ""))
    if not LEGACY_KEY.fullmatch(key):
        return key
    return content_key(
        str(record.get("user_input", "")),
        record.get("reference"),
        record.get("reference_contexts"),
        record.get("reference_context_ids"),
    )


def check_unique_keys(questions: Sequence[Question]) -> None:
    """Refuse questions that share a key: their records could not be told apart."""
    first: dict[str, int] = {}
    for position, question in enumerate(questions, start=1):
        if question.key in first:
            before = first[question.key]
            raise HydeLcError(
                f"questions {before} and {position} share the key {question.key!r} "
                f"({_short(questions[before - 1].question)!r} and "
                f"{_short(question.question)!r}): each question needs its own key, so drop "
                "the repeat or give each Question a distinct key"
            )
        first[question.key] = position


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


_LIST_FIELDS = ("reference_contexts", "reference_context_ids")


def read_questions(path: str | os.PathLike[str]) -> list[Question]:
    """Read a question file; a bad line is an error naming the line and the fix."""
    source = Path(path)
    if not source.is_file():
        raise HydeLcError(f"no question file at {source}: give a JSON Lines file of questions")
    questions = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(source.read_bytes().split(b"\n"), start=1):
        line = _decoded(source, number, raw.removeprefix(b"\xef\xbb\xbf") if number == 1 else raw)
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise HydeLcError(f"{source}:{number} is not valid JSON ({exc.msg})") from exc
        except RecursionError:
            raise HydeLcError(
                f"{source}:{number} nests JSON arrays or objects deeper than can be read: "
                'each line must be one flat object, {"question": "...", "reference": "..."}'
            ) from None
        question = _question(source, number, row)
        count = seen[question.key] = seen.get(question.key, 0) + 1
        if count > 1:  # the same content again: a key of its own, still line-independent
            question = replace(question, key=f"{question.key}#{count}")
        questions.append(question)
    if not questions:
        raise HydeLcError(f"{source} holds no questions")
    return questions


def _decoded(source: Path, number: int, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HydeLcError(
            f"{source}:{number} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at column "
            f"{exc.start + 1}): save it as UTF-8"
        ) from exc


def _question(source: Path, number: int, row: Any) -> Question:
    where = f"{source}:{number}"
    if not isinstance(row, dict):
        raise HydeLcError(
            f'{where} is not a JSON object: each line needs {{"question": "...", ...}}'
        )
    text = row.get("question", row.get("user_input"))
    if not isinstance(text, str) or not text.strip():
        raise HydeLcError(
            f'{where} has no question: each line needs a non-empty "question" (or '
            '"user_input") string'
        )
    reference = row.get("reference")
    if reference is not None and not isinstance(reference, str):
        raise HydeLcError(
            f'{where} "reference" must be a string (the expected answer), got '
            f"{json.dumps(reference)}"
        )
    for name in _LIST_FIELDS:
        value = row.get(name)
        if value is not None and not (
            isinstance(value, list) and all(isinstance(item, str) for item in value)
        ):
            raise HydeLcError(
                f'{where} "{name}" must be a list of strings, got {json.dumps(value)[:80]}'
            )
    _check_encodable(where, row)
    known = {"question", "user_input", "reference", *_LIST_FIELDS}
    return Question(
        question=text,
        reference=reference,
        reference_contexts=row.get("reference_contexts"),
        reference_context_ids=row.get("reference_context_ids"),
        extra={k: v for k, v in row.items() if k not in known},
    )


def _check_encodable(where: str, row: dict[str, Any]) -> None:
    """Refuse a lone surrogate escape: JSON allows one, UTF-8 cannot hold it."""
    try:
        json.dumps(row, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise HydeLcError(
            f"{where} holds a lone surrogate escape ({exc.object[exc.start : exc.end]!r}), "
            "which is no character: fix that escape in the line"
        ) from None


def read_records(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records of a results file, in file order.

    Lines that are not records (a half-written last line, a damaged or foreign line) are
    left out; `evaluate_questions` reports them and moves them to ``<file>.corrupt``.
    """
    return [line.record for line in scan(path).records if line.record is not None]


_NOT_SETTINGS = frozenset(
    {"name", "tags", "metadata", "vectorstore", "hypothesis_llm", "embeddings", "timeout",
     "hypothesis_cache"}
)  # fmt: skip
"""HyDERetriever fields that are not settings of a record: the objects (store, models,
cache: recorded by what they are) and the hypothesis timeout (a fallback says when it hit)."""
_HYDE_ONLY = (
    "fusion", "include_query", "query_weight", "prompt", "hypothesis_length",
    "min_hypothesis_similarity", "rrf_candidates",
)  # fmt: skip
_HYBRID_ONLY = ("dense_weight", "hybrid_fusion", "lexical_query_repeats", "hybrid_candidates")
_EXPANSION = ("before", "after", "order", "max_chars", "candidates")


def _plain(value: Any) -> Any:
    """A setting as a JSON value: prompt templates by their text, objects by their kind."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    template = getattr(value, "template", None)
    if isinstance(template, str):
        return template
    return type(value).__name__


def retriever_settings(retriever: HyDERetriever) -> dict[str, Any]:
    """Every HyDERetriever field that shapes retrieval, as JSON values.

    Fields that cannot matter are ``None``: the hypothesis settings without hypotheses,
    the query weight where the query is not fused, the rrf depth without rrf, and the
    hybrid settings when no lexical list takes part.
    """
    settings = {
        name: _plain(getattr(retriever, name))
        for name in type(retriever).model_fields
        if name not in _NOT_SETTINGS
    }
    hyde = retriever.n_hypotheses > 0
    hybrid = retriever.lexical_search is not None and retriever.search_type == "similarity"
    fused = hyde and retriever.include_query and retriever.fusion != "concat"
    for name in _HYDE_ONLY if not hyde else ():
        settings[name] = None
    if fused and retriever.query_weight is None:
        settings["query_weight"] = "paper"
    elif not fused:
        settings["query_weight"] = None
    if retriever.fusion != "rrf":
        settings["rrf_candidates"] = None
    for name in _HYBRID_ONLY if not hybrid else ():
        settings[name] = None
    return settings


def run_settings(pipeline: EvaluationPipeline) -> dict[str, Any]:
    """Everything about ``pipeline`` that shapes its records, as plain JSON values.

    The retriever's label (``retrieval_method``) and fields (`retriever_settings`: k,
    hypotheses, fusion, the lexical side and its weights...), the neighbour expansion,
    the models and where the collection is; settings that cannot matter are ``None``.
    A retriever other than hyde_lc's is given by its class and fields, nested retrievers
    included (`hyde_lc.evaluation.any_retriever.describe_retriever`).
    """
    hyde = pipeline.hyde_retriever
    expander = pipeline.expander
    store = pipeline.store
    collection, location = describe_store(store) if store is not None else (None, None)
    embeddings = pipeline.embedding_model
    own: dict[str, Any]
    if hyde is None:
        own = {"retriever": describe_retriever(pipeline.retriever)}
    else:
        own = {
            **retriever_settings(hyde),
            "window": expander.window if expander else 0,
            **{name: _plain(getattr(expander, name)) if expander else None for name in _EXPANSION},
        }
    settings = {
        "retrieval_method": pipeline.retrieval_method,
        **own,
        "k": pipeline.k,
        "retrieval_only": pipeline.answer_llm is None,
        "hypothesis_model": (
            describe_llm(pipeline.hyde_llm).model_id if pipeline.hyde_llm else None
        ),
        "answer_model": (
            describe_llm(pipeline.answer_llm).model_id if pipeline.answer_llm else None
        ),
        "embedding_model": describe_embeddings(embeddings).model_id if embeddings else None,
        "collection": collection,
        "store": location,
    }
    read_back: dict[str, Any] = json.loads(json.dumps(settings))  # as it reads back from the file
    return read_back


def _record_fields(pipeline: EvaluationPipeline) -> dict[str, Any]:
    """The fields a record of ``pipeline`` has, for files written without settings."""
    embeddings = pipeline.embedding_model
    return {
        "retrieval_method": pipeline.retrieval_method,
        "k": pipeline.k,
        "llm_hyde_model": describe_llm(pipeline.hyde_llm).name if pipeline.hyde_llm else None,
        "llm_answer_model": (
            describe_llm(pipeline.answer_llm).name if pipeline.answer_llm else None
        ),
        "embedding_model": describe_embeddings(embeddings).model_id if embeddings else None,
    }


class FileChecks(TypedDict, total=False):
    """How `check_output_file` and `check_resumable` check a results file."""

    flag: str
    """The option that chose the path, for the messages (default ``--out``)."""
    questions: Sequence[Question] | None
    """The questions of this run: records of others are refused (unless set aside)."""
    set_aside_others: bool
    """Whether records of other questions are to be set aside rather than refused."""


def check_output_file(
    path: str | os.PathLike[str], *, resume: bool, **checks: Unpack[FileChecks]
) -> None:
    """What can be told about an output file before any model loads; raises if unusable.

    Refuses a folder, a path under a file, a file another run holds, a file that cannot be
    written, and (when resuming) a file that is not a results file or, given
    ``questions``, one holding records of other questions (`check_question_set`).
    ``flag`` names the option that chose the path, for the messages.
    """
    target = Path(path)
    _check_path(target, checks.get("flag", "--out"))
    if resume:
        _resumable_contents(target, checks)


def _resumable_contents(path: str | os.PathLike[str], checks: FileChecks) -> Contents:
    """What ``path`` holds; raises unless it is a results file of these questions.

    Records of other questions are refused only given ``questions`` and unless
    ``set_aside_others`` (`check_question_set`).
    """
    flag, questions = checks.get("flag", "--out"), checks.get("questions")
    contents = scan(path)
    refuse_foreign(contents, flag)
    if questions is not None and not checks.get("set_aside_others", False):
        check_question_set(contents, questions, flag)
    return contents


def other_questions(contents: Contents, questions: Sequence[Question]) -> list[Line]:
    """The records of ``contents`` whose question is not one of ``questions``."""
    wanted = {q.key for q in questions}
    return [
        line for line in contents.records if line.record and record_key(line.record) not in wanted
    ]


def check_question_set(contents: Contents, questions: Sequence[Question], flag: str) -> None:
    """Refuse a file holding records of questions not in ``questions``, naming the fixes.

    Such records come from another question file, or from questions since changed or
    removed; resuming would score them with this set's (the two sets would mix).
    """
    others = other_questions(contents, questions)
    if not others:
        return
    first = others[0].record or {}
    count = len(others)
    raise HydeLcError(
        f"{contents.path} holds {count} record{'' if count == 1 else 's'} of questions that "
        f"are not in this question set (line {others[0].number}: "
        f"{_short(str(first.get('user_input', '')))!r}): it was made from another question "
        "file, or those questions (or their references) were changed or removed since. "
        f"Nothing was run or changed. Choose another {flag}, pass --set-aside-others "
        f"(set_aside_others=True in Python) to move those records to "
        f"{contents.path.name}{OTHERS_SUFFIX} and continue, or --restart (resume=False) to "
        "start afresh."
    )


def _check_path(target: Path, flag: str) -> None:
    """A file can be written at ``target`` and no other run holds it."""
    if target.is_dir():
        raise HydeLcError(
            f"{flag} {target} is a folder: give a file, e.g. {flag} {target / 'results.jsonl'}"
        )
    blocking = next((p for p in target.parents if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise HydeLcError(f"cannot write {target}: {blocking} is a file, not a folder")
    if target.exists() and not os.access(target, os.W_OK):
        raise HydeLcError(f"cannot write {target}: permission denied; choose another {flag}")
    check_unlocked(target, flag)


def check_resumable(
    path: str | os.PathLike[str], pipeline: EvaluationPipeline, **checks: Unpack[FileChecks]
) -> Contents:
    """Refuse to resume ``path`` with ``pipeline`` if its records were made otherwise.

    Raises when the file is not a results file, when (given ``questions``, unless
    ``set_aside_others``) it holds records of other questions (`check_question_set`), or
    when a record's settings differ from the pipeline's; the message lists each
    difference as ``setting: stored -> asked``. Returns what the file holds.
    """
    contents = _resumable_contents(path, checks)
    flag = checks.get("flag", "--out")
    changed = differences(contents.records, run_settings(pipeline), _record_fields(pipeline))
    if changed:
        raise HydeLcError(
            f"{contents.path} holds records made with other settings than this run's "
            f"({'; '.join(changed)}); resuming would mix them in one file. Nothing was run "
            f"or changed. Choose another {flag}, or pass --restart (resume=False in Python) "
            "to start afresh; the records there are then lost."
        )
    return contents


def check_pricing(pipeline: EvaluationPipeline) -> None:
    """Load the pricing table the pipeline will use, so a bad one fails before any call."""
    if pipeline.pricing is None:
        PricingTable.load()


def _failure(
    question: Question, pipeline: EvaluationPipeline, exc: BaseException
) -> dict[str, Any]:
    return {
        "user_input": question.question,
        "response": None,
        "retrieved_contexts": [],
        "retrieved_context_ids": [],
        **{
            name: getattr(question, name)
            for name in ("reference", "reference_contexts", "reference_context_ids")
            if getattr(question, name) is not None
        },
        "metadata": {
            "error": f"{type(exc).__name__}: {exc}",
            "retrieval_method": pipeline.retrieval_method,
        },
    }


class RunOptions(TypedDict, total=False):
    """How `evaluate_questions` and `open_run` treat the results file."""

    resume: bool
    """Keep the records already there and ask the other questions (default); False
    starts the file afresh."""
    retry_errors: bool
    """Ask again the questions whose records are failures."""
    set_aside_others: bool
    """Move records of questions not in this run to ``<out>.other`` (else: refused)."""
    flag: str
    """The option that chose the file, for the messages (default ``--out``)."""


def evaluate_questions(
    questions: Sequence[Question],
    pipeline: EvaluationPipeline,
    out: str | os.PathLike[str],
    *,
    progress: bool = True,
    **options: Unpack[RunOptions],
) -> RunSummary:
    """Run every question not yet in ``out`` and append its record (see module docstring).

    ``resume=False`` starts ``out`` afresh. Records of questions not in ``questions`` are
    refused, or with ``set_aside_others`` moved to ``<out>.other``. Everything is checked
    before the first question is asked: distinct question keys, the pricing table, the
    output file (not a folder, not another kind of file, not held by another run) and,
    when resuming, that its records were made with this pipeline's settings. When there is
    a question to ask, the pipeline's models and indexes are loaded first
    (`EvaluationPipeline.warm_up`), so no record's times include loading; the summary
    gives the seconds that took.
    """
    with open_run(questions, pipeline, out, **options) as run:
        load_s = pipeline.warm_up() if run.todo else {}
        method = pipeline.retrieval_method
        for question in tqdm(run.todo, desc=f"evaluate ({method})", disable=not progress):
            run.ask(question)
    return run.summary(load_s)


class ResultsRun:
    """One pipeline answering into its results file, a question at a time (`open_run`).

    ``todo`` holds the questions not yet in the file, in order; `ask` answers one and
    appends its record, synced to disk. `evaluate_questions` asks them in turn;
    `hyde_lc.evaluation.compare.compare_modes` takes turns between the runs of several
    pipelines, question by question.
    """

    def __init__(
        self,
        pipeline: EvaluationPipeline,
        target: Path,
        questions: Sequence[Question],
        done_keys: set[str],
        sink: Any,
        set_aside: tuple[int, ...] = (),
        corrupt_file: Path | None = None,
        others: tuple[int, Path | None] = (0, None),
    ) -> None:
        self.pipeline = pipeline
        self.target = target
        self.total = len(questions)
        self.skipped = len(done_keys)
        self.todo = [q for q in questions if q.key not in done_keys]
        self.asked = 0
        self.failed = 0
        self.set_aside = set_aside
        self.corrupt_file = corrupt_file
        self.others = others
        self._pending = {q.key for q in self.todo}
        self._settings = run_settings(pipeline)
        self._sink = sink

    def pending(self, question: Question) -> bool:
        """Whether ``question`` is still to be asked in this run."""
        return question.key in self._pending

    def ask(self, question: Question) -> dict[str, Any]:
        """Answer ``question``, append its record and sync it; a failure is recorded too.

        Raises only when the Chroma server is gone (every later question would fail).
        """
        pipeline = self.pipeline
        try:
            record = pipeline.run(
                question.question,
                reference=question.reference,
                reference_contexts=question.reference_contexts,
                reference_context_ids=question.reference_context_ids,
            )
        except Exception as exc:  # recorded per question; the run goes on
            _stop_if_server_lost(pipeline, exc, self.target)
            record = _failure(question, pipeline, exc)
            self.failed += 1
        record["metadata"]["question_key"] = question.key
        record["metadata"]["settings"] = self._settings
        if question.extra:
            record["metadata"]["input"] = question.extra
        self._sink.write(encode(record))
        self._sink.flush()
        os.fsync(self._sink.fileno())
        self._pending.discard(question.key)
        self.asked += 1
        return record

    def summary(self, load_s: dict[str, float] | None = None) -> RunSummary:
        """What the run did so far."""
        return RunSummary(
            total=self.total,
            done=self.asked - self.failed,
            skipped=self.skipped,
            failed=self.failed,
            set_aside=self.set_aside,
            corrupt_file=self.corrupt_file,
            load_s=dict(load_s or {}),
            others_set_aside=self.others[0],
            others_file=self.others[1],
        )


@contextmanager
def open_run(
    questions: Sequence[Question],
    pipeline: EvaluationPipeline,
    out: str | os.PathLike[str],
    **options: Unpack[RunOptions],
) -> Iterator[ResultsRun]:
    """``out`` checked, held and tidied for ``pipeline``'s run over ``questions``.

    Checks what `evaluate_questions` checks (``flag`` names the option that chose the
    file in the messages), holds the file for the block (`exclusive`), moves lines that
    are not records aside and, with ``retry_errors``, drops failed records to ask them
    again; records of other questions are refused, or moved to ``<out>.other`` with
    ``set_aside_others``. When the block ends normally, records are put in question order.
    """
    flag, set_aside_others = options.get("flag", "--out"), options.get("set_aside_others", False)
    target = Path(out)
    check_unique_keys(questions)
    check_pricing(pipeline)
    _check_path(target, flag)
    target.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(target, flag):
        contents = (
            check_resumable(
                target, pipeline, flag=flag, questions=questions,
                set_aside_others=set_aside_others,
            )
            if options.get("resume", True)
            else None
        )  # fmt: skip
        others = _set_aside_others(target, contents, questions) if contents else (0, None)
        if others[0]:
            contents = scan(target)
        kept, moved, corrupt = _prepare(target, contents, options.get("retry_errors", False))
        done_keys = {record_key(line.record) for line in kept if line.record}
        done_keys &= {q.key for q in questions}
        with target.open("ab") as sink:
            run = ResultsRun(pipeline, target, questions, done_keys, sink, moved, corrupt, others)
            yield run
        if done_keys and run.asked:
            _reorder(target, questions)


def _set_aside_others(
    target: Path, contents: Contents, questions: Sequence[Question]
) -> tuple[int, Path | None]:
    """Move the records of questions not in ``questions`` to ``<target>.other``."""
    others = other_questions(contents, questions)
    if not others:
        return 0, None
    moved = set_aside(target, others, OTHERS_SUFFIX)
    gone = {line.number for line in others}
    replace_lines(target, [line.raw for line in contents.lines if line.number not in gone])
    logger.warning(
        "%s: %d record(s) of questions not in this question set moved to %s",
        target, len(others), moved,
    )  # fmt: skip
    return len(others), moved


def _prepare(
    target: Path, contents: Contents | None, retry_errors: bool
) -> tuple[list[Line], tuple[int, ...], Path | None]:
    """The records to keep; lines that are not records moved aside, the file tidied.

    ``contents`` is what the file holds, ``None`` to start it afresh. The file is only
    rewritten when something changes: lines moved aside, failures to retry dropped, a
    missing final newline added, or a fresh start.
    """
    if contents is None:
        replace_lines(target, [])
        return [], (), None
    aside = contents.damaged + ([contents.torn] if contents.torn else [])
    corrupt = set_aside(target, aside) if aside else None
    if contents.damaged:
        numbers = [line.number for line in contents.damaged]
        logger.warning(
            "%s: %s not %s (damaged, or added by hand); moved to %s, every record kept",
            target, _line_numbers(numbers), "a record" if len(numbers) == 1 else "records",
            corrupt,
        )  # fmt: skip
    if contents.torn:
        logger.warning(
            "%s: the last line was cut short (a run killed mid-write); moved it to %s and "
            "its question is asked again",
            target, corrupt,
        )  # fmt: skip
    kept = contents.records
    if retry_errors:
        kept = [line for line in kept if line.record and not line.record["metadata"].get("error")]
    if aside or len(kept) < len(contents.records) or not contents.ends_cleanly:
        replace_lines(target, [line.raw for line in kept])
    return kept, tuple(line.number for line in aside), corrupt


def _line_numbers(numbers: Sequence[int], shown: int = 10) -> str:
    """``line 3`` / ``lines 2, 4 and 7`` / ``lines 1, 2, ... and 40 more``."""
    if len(numbers) == 1:
        return f"line {numbers[0]} is"
    head = ", ".join(map(str, numbers[: min(shown, len(numbers) - 1)]))
    rest = len(numbers) - min(shown, len(numbers) - 1)
    tail = str(numbers[-1]) if rest == 1 else f"{rest} more"
    return f"lines {head} and {tail} are"


def _reorder(target: Path, questions: Sequence[Question]) -> None:
    """Records in their question's order (retried errors land in place).

    Records of questions not asked in this run go last, in file order; lines are moved as
    they are, never re-encoded. A file holding anything but records is left as it is.
    """
    contents = scan(target)
    if contents.damaged or contents.torn:
        return
    position = {q.key: i for i, q in enumerate(questions)}
    lines = contents.records
    ordered = sorted(
        lines,
        key=lambda line: position.get(
            record_key(line.record) if line.record else "", len(position)
        ),
    )
    if ordered != lines:
        replace_lines(target, [line.raw for line in ordered])


def _stop_if_server_lost(pipeline: EvaluationPipeline, exc: Exception, out: Path) -> None:
    """Stop the run when the Chroma server is gone: every later question would fail too.

    The question is not recorded, so the rerun that resumes the run asks it again.
    """
    store = pipeline.store
    if store is None:
        return
    backend = backend_for(store, "off", quiet=True)
    if backend.lost_server(exc, "") is None:
        return
    kept = len(read_records(out))
    lost = backend.lost_server(
        exc,
        f"rerun the same command: it keeps the {kept} record{'' if kept == 1 else 's'} in "
        f"{out} and continues with the questions not yet there",
    )
    if lost is not None:
        raise lost from exc
