"""A test set made from a collection: questions a writer LLM wrote on chunks spread across it.

`make_testset` walks the collection's chunks in a spread order (`spread_order`: every
source before any source's second chunk, positions spread over each source, not the
first chunks), asks a writer LLM (the local hypothesis writer by default, greedy; any
LangChain chat model) for a question the chunk answers and a short answer
(`hyde_lc.evaluation.question_writer`), holds each draft to the checks of
`hyde_lc.evaluation.question_checks` (rewritten once when it copies the chunk or leans on
it, dropped when the chunk does not support its answer or when other chunks answer it as
well), and appends each question to a JSON Lines file that
`hyde-lc evaluate` reads as it is::

    {"question": "...", "reference": "<short answer>",
     "reference_contexts": ["<chunk text>"], "reference_context_ids": ["<chunk id>"],
     "id": "t0001", "source": "...", "page": 3,
     "testset": {"collection": "<fingerprint>", "chunk_digests": {...}, "writer": "...",
                 "overlap": 0.5, "copied": 2.0, "first_draft": null, ...}}

Drafts that were dropped go to ``<out>.rejected.jsonl`` with the reason, so a user can see
what the checks removed.

Resuming: lines are appended and flushed one by one; the same call again skips the chunks
already tried (kept or dropped) and goes on until ``n`` questions are kept. A collection
that changed since the file was started is refused (`ReferenceCheck` says which
references are gone), as is another writer; ``resume=False`` starts afresh.

`check_references` tells whether a test set still fits a collection (for
`hyde_lc.bench.tune`), and `to_ragas_dataset` turns the file into a Ragas
``EvaluationDataset`` (``user_input``, ``reference``, ``reference_contexts``).

Example:
    >>> from hyde_lc import open_store
    >>> from hyde_lc.evaluation.testset import ChunkSource, make_testset
    >>> source = ChunkSource.of_store(open_store())  # doctest: +SKIP
    >>> make_testset(source, "my_questions.jsonl", n=100)  # doctest: +SKIP
    TestsetSummary(kept=100, resumed=0, rejected={'copies': 4, ...}, ...)

"""

from __future__ import annotations

import hashlib
import os
import random
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from langchain_core.documents import Document
from langchain_core.language_models.chat_models import BaseChatModel
from tqdm.auto import tqdm

from hyde_lc.errors import HydeLcError
from hyde_lc.evaluation.question_checks import (
    QuestionRules,
)
from hyde_lc.evaluation.question_writer import (
    Draft,
    SearchFn,
    default_rephraser,
    default_writer,
    write_question,
)
from hyde_lc.evaluation.results_file import encode, exclusive, replace_lines, scan
from hyde_lc.store.lexical_index import analyze

REJECTED_SUFFIX = ".rejected.jsonl"
"""Drafts the checks dropped go to ``<out stem>.rejected.jsonl``."""
MIN_CHUNK_TERMS = 25
"""Chunks with fewer search terms (title pages, captions) are passed over."""
# -- the chunks ---------------------------------------------------------------------------


def chunk_digest(text: str) -> str:
    """A short hash of a chunk's text: a reference whose text changed is not the same one."""
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


@dataclass
class ChunkSource:
    """The chunks a test set is made from, their collection's fingerprint, and its search.

    Any list of Documents with ids will do (`of_store` reads a hyde_lc collection);
    ``search`` (the collection's dense search) lets `make_testset` drop questions that
    other chunks answer as well, and is skipped when None.

    Example:
        >>> source = ChunkSource("notes", [Document("Keepers lit the lamps.", id="c1")])
        >>> len(source.fingerprint), source.by_id["c1"].page_content
        (16, 'Keepers lit the lamps.')

    """

    name: str
    chunks: list[Document]
    search: SearchFn | None = None
    fingerprint: str = ""
    """Of the chunks' ids and texts; computed when left empty."""
    by_id: dict[str, Document] = field(init=False, repr=False)
    """The chunks by id."""

    def __post_init__(self) -> None:
        missing = sum(1 for doc in self.chunks if not doc.id)
        if missing:
            raise HydeLcError(
                f"{missing} chunk(s) of {self.name} have no id: a test set names its "
                "reference chunks by id, so give every Document an id"
            )
        if not self.fingerprint:
            digest = hashlib.sha256()
            for doc in sorted(self.chunks, key=lambda d: str(d.id)):
                digest.update(f"{doc.id}\0{chunk_digest(doc.page_content)}\0".encode())
            self.fingerprint = digest.hexdigest()[:16]
        self.by_id = {str(doc.id): doc for doc in self.chunks}

    @classmethod
    def of_store(cls, store: Any) -> ChunkSource:
        """Every chunk searches can see in a hyde_lc collection (`hyde_lc.open_store`)."""
        from hyde_lc.store.collection import HybridCollection

        hybrid = HybridCollection.of(store)
        chunks = list(hybrid.chroma.iter_chunks())
        if not chunks:
            raise HydeLcError(
                "the collection is empty: ingest documents first (hyde-lc ingest PATH...)"
            )

        def search(question: str, k: int) -> list[Document]:
            return list(store.similarity_search(question, k=k))

        return cls(hybrid.chroma.location.describe(), chunks, search)


def _position(doc: Document) -> tuple[int, str]:
    meta = doc.metadata
    index = meta.get("chunk_index", meta.get("start_index"))
    return (int(index) if isinstance(index, int) else 0, str(doc.id))


def _spread(count: int) -> Iterator[int]:
    """Positions 0..count-1, each once, in van der Corput order: each prefix spread out."""
    seen: set[int] = set()
    i = 0
    while len(seen) < count:
        value, denominator, n = 0.0, 1.0, i
        while n:
            denominator *= 2
            n, bit = divmod(n, 2)
            value += bit / denominator
        position = int(value * count)
        if position not in seen:
            seen.add(position)
            yield position
        i += 1
        if i > 4 * count + 64:  # every bin is reached long before; a guard, not a path
            yield from (p for p in range(count) if p not in seen)
            return


def spread_order(chunks: Sequence[Document], seed: int = 0) -> list[Document]:
    """Every chunk once, in an order whose every prefix is spread over sources and positions.

    Sources (``metadata["source"]``, else each chunk its own) take turns by coverage: the
    source with the smallest share of its chunks taken goes next (ties in a seeded random
    order), so every source gives one chunk before any gives two and larger sources give
    more later. Within a source, positions follow a van der Corput sequence from a seeded
    offset: beginning, middle, quarters... not the first chunks.

    Example:
        >>> docs = [Document(str(i), id=f"{s}{i}", metadata={"source": s, "chunk_index": i})
        ...         for s in "ab" for i in range(4)]
        >>> sorted(d.metadata["source"] for d in spread_order(docs)[:2])
        ['a', 'b']

    """
    rng = random.Random(seed)
    by_source: dict[str, list[Document]] = {}
    for doc in chunks:
        by_source.setdefault(str(doc.metadata.get("source", doc.id)), []).append(doc)
    queues: list[tuple[list[Document], Iterator[int]]] = []
    names = sorted(by_source)
    rng.shuffle(names)
    for name in names:
        docs = sorted(by_source[name], key=_position)
        offset = rng.randrange(len(docs))
        queues.append((docs, ((p + offset) % len(docs) for p in _spread(len(docs)))))
    taken = [0] * len(queues)
    order: list[Document] = []
    live = list(range(len(queues)))
    while live:
        best = min(live, key=lambda i: (taken[i] / len(queues[i][0]), i))
        docs, positions = queues[best]
        order.append(docs[next(positions)])
        taken[best] += 1
        if taken[best] == len(docs):
            live.remove(best)
    return order


# -- making the set -----------------------------------------------------------------------


@dataclass
class TestsetSummary:
    """What `make_testset` did (counts over the whole file, earlier runs included)."""

    __test__ = False  # not a pytest test class

    kept: int
    resumed: int
    """Questions already in the file when this call began."""
    rejected: dict[str, int] = field(default_factory=dict)
    """Drafts dropped, by reason."""
    writer_calls: int = 0
    seconds: float = 0.0
    """Writing time (the writer's calls and the checks), loading the writer excluded."""
    out: Path | None = None
    rejected_file: Path | None = None

    @property
    def seconds_per_question(self) -> float | None:
        """Writing seconds per kept question (rejected drafts' time included)."""
        return self.seconds / self.kept if self.kept else None


def rejected_path(out: Path) -> Path:
    """``<out stem>.rejected.jsonl`` beside ``out``."""
    return out.with_name(out.stem + REJECTED_SUFFIX)


def _read_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of ``path``; a last line cut short by a kill is dropped from it."""
    contents = scan(path, accept=lambda value: isinstance(value, dict))
    if contents.damaged:
        raise HydeLcError(
            f"{path}:{contents.damaged[0].number} is not a JSON line of a test set: give --out "
            "a new file, or pass --restart (resume=False) to start it afresh"
        )
    if contents.torn is not None:  # cut short: rewrite the file without it
        replace_lines(path, [line.raw for line in contents.records])
    return [line.record for line in contents.records if line.record is not None]


def _check_resume(
    rows: list[dict[str, Any]], source: ChunkSource, writers: tuple[str, str | None], out: Path
) -> None:
    """Refuse to add to a file made from another collection or by another writer."""
    writer, rephraser = writers
    for row in rows:
        meta = row.get("testset")
        if not isinstance(meta, dict):
            raise HydeLcError(
                f"{out} holds lines that are not test-set questions: give --out a new file, "
                "or pass --restart (resume=False) to replace it"
            )
        if meta.get("collection") != source.fingerprint:
            check = check_references([row_question(r) for r in rows], source)
            raise HydeLcError(
                f"{out} was started on another state of the collection ({check.describe()}): "
                "its questions and new ones would not be one test set. Pass --restart "
                "(resume=False) to start afresh on the collection as it is now"
            )
        if meta.get("writer") != writer:
            raise HydeLcError(
                f"{out} was started with the writer {meta.get('writer')}, not {writer}: "
                "continue with that writer, or pass --restart (resume=False)"
            )
        if meta.get("rephraser") != rephraser:
            started = meta.get("rephraser") or "no rephraser"
            raise HydeLcError(
                f"{out} was started with {started}, not {rephraser or 'none'}: continue "
                "with the same --rephraser, or pass --restart (resume=False)"
            )


def row_question(row: dict[str, Any]) -> Any:
    """A test-set line as a `hyde_lc.evaluation.runs.Question`."""
    from hyde_lc.evaluation.runs import Question

    known = {"question", "reference", "reference_contexts", "reference_context_ids"}
    return Question(
        question=row["question"],
        reference=row.get("reference"),
        reference_contexts=row.get("reference_contexts"),
        reference_context_ids=row.get("reference_context_ids"),
        extra={k: v for k, v in row.items() if k not in known},
    )


def _norm(question: str) -> str:
    return " ".join(analyze(question))


def _kept_row(
    draft: Draft, number: int, source: ChunkSource, writers: tuple[str, str | None]
) -> dict[str, Any]:
    chunk = draft.chunk
    ids = [str(chunk.id), *draft.others]
    texts = [source.by_id[i].page_content for i in ids]
    assert draft.verdict is not None
    meta = chunk.metadata
    return {
        "question": draft.question,
        "reference": draft.answer,
        "reference_contexts": texts,
        "reference_context_ids": ids,
        "id": f"t{number:04d}",
        **{key: meta[key] for key in ("source", "page", "doc_id", "chunk_index") if key in meta},
        "testset": {
            "collection": source.fingerprint,
            "chunk_digests": {i: chunk_digest(t) for i, t in zip(ids, texts, strict=True)},
            "writer": writers[0],
            "rephraser": writers[1],
            "overlap": draft.verdict.overlap,
            "copied": draft.verdict.copied,
            "first_draft": draft.first_draft,
            "writer_calls": draft.calls,
            "seconds": round(draft.seconds, 3),
        },
    }


def _rejected_row(
    draft: Draft, source: ChunkSource, writers: tuple[str, str | None]
) -> dict[str, Any]:
    return {
        "chunk_id": str(draft.chunk.id),
        "reason": draft.problem,
        "question": draft.question,
        "first_draft": draft.first_draft,
        "reference": draft.answer,
        "other_answers": draft.others,
        "collection": source.fingerprint,
        "writer": writers[0],
        "rephraser": writers[1],
        "writer_calls": draft.calls,
        "seconds": round(draft.seconds, 3),
    }


def _append(handle: Any, row: dict[str, Any]) -> None:
    handle.write(encode(row))
    handle.flush()
    os.fsync(handle.fileno())


def make_testset(
    source: ChunkSource,
    out: str | os.PathLike[str],
    n: int = 100,
    *,
    writer: BaseChatModel | None = None,
    rephraser: BaseChatModel | Literal["default"] | None = "default",
    rules: QuestionRules | None = None,
    seed: int = 0,
    resume: bool = True,
    progress: bool = True,
    min_chunk_terms: int = MIN_CHUNK_TERMS,
    max_drafts: int | None = None,
) -> TestsetSummary:
    """Write ``n`` checked questions on chunks spread across ``source`` to ``out``.

    ``writer`` is any LangChain chat model (default: `default_writer`); ``rephraser``, a
    second one that puts every draft in everyday words from the question alone (default:
    `default_rephraser`, the answer model in force; see `hyde_lc.evaluation.question_writer`;
    None: the writer rewrites copied drafts with the chunk in view). Chunks with fewer
    than ``min_chunk_terms`` search terms are passed over. ``max_drafts`` caps the drafts
    this call writes (kept or dropped): a budget for a writer the checks reject often.
    Resumable: see the module docstring. Returns what was kept and dropped, and the writing time.
    """
    if n < 1:
        raise HydeLcError(f"a test set needs at least one question, not {n}")
    path = Path(out)
    rules = rules or QuestionRules()
    writer_model = writer if writer is not None else default_writer()
    from hyde_lc.models.loading import llm_model_name

    if rephraser == "default":
        rephraser = default_rephraser()
    writers = (
        llm_model_name(writer_model),
        llm_model_name(rephraser) if rephraser is not None else None,
    )
    rejected_file = rejected_path(path)
    with exclusive(path, "--out"):
        if not resume:
            path.unlink(missing_ok=True)
            rejected_file.unlink(missing_ok=True)
        kept_rows, dropped_rows = _read_lines(path), _read_lines(rejected_file)
        _check_resume(kept_rows, source, writers, path)
        tried = {i for r in kept_rows for i in r["reference_context_ids"][:1]}
        tried |= {r["chunk_id"] for r in dropped_rows}
        seen = {_norm(r["question"]) for r in kept_rows}
        summary = TestsetSummary(
            kept=len(kept_rows),
            resumed=len(kept_rows),
            rejected=dict(Counter(str(r["reason"]) for r in dropped_rows)),
            writer_calls=sum(int(r["testset"].get("writer_calls", 0)) for r in kept_rows)
            + sum(int(r.get("writer_calls", 0)) for r in dropped_rows),
            seconds=sum(float(r["testset"].get("seconds", 0)) for r in kept_rows)
            + sum(float(r.get("seconds", 0)) for r in dropped_rows),
            out=path,
            rejected_file=rejected_file,
        )
        candidates = [
            doc
            for doc in spread_order(source.chunks, seed)
            if str(doc.id) not in tried and len(analyze(doc.page_content)) >= min_chunk_terms
        ]
        bar = tqdm(
            total=n, initial=min(summary.kept, n), desc="questions", unit="q", disable=not progress
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        with (
            path.open("ab") as kept,
            rejected_file.open("ab") as dropped,
        ):
            drafts = 0

            def done() -> bool:
                return summary.kept >= n or (max_drafts is not None and drafts >= max_drafts)

            for chunk in _until(candidates, done):
                drafts += 1
                draft = write_question(chunk, writer_model, rules, source.search, rephraser)
                summary.writer_calls += draft.calls
                summary.seconds += draft.seconds
                if draft.problem is None and _norm(str(draft.question)) in seen:
                    draft.problem = "duplicate"
                if draft.problem is not None:
                    _append(dropped, _rejected_row(draft, source, writers))
                    summary.rejected[draft.problem] = summary.rejected.get(draft.problem, 0) + 1
                    continue
                seen.add(_norm(str(draft.question)))
                summary.kept += 1
                _append(kept, _kept_row(draft, summary.kept, source, writers))
                bar.update()
                bar.set_postfix(dropped=sum(summary.rejected.values()))
        bar.close()
    return summary


def _until(items: Iterable[Document], done: Callable[[], bool]) -> Iterator[Document]:
    for item in items:
        if done():
            return
        yield item


# -- using the set ------------------------------------------------------------------------


@dataclass
class ReferenceCheck:
    """How a test set's references stand in a collection."""

    same_collection: bool
    """The collection is as it was when the set was made (same chunks, same texts)."""
    gone: list[tuple[str, str]] = field(default_factory=list)
    """(question, chunk id) of references no longer in the collection."""
    changed: list[tuple[str, str]] = field(default_factory=list)
    """(question, chunk id) of references whose text changed."""
    questions: int = 0

    @property
    def broken_questions(self) -> set[str]:
        """Questions with a reference gone or changed."""
        return {q for q, _ in self.gone} | {q for q, _ in self.changed}

    def describe(self) -> str:
        """``the collection changed; 3 of 100 questions lost a reference (...)``."""
        if self.same_collection:
            return "the collection is unchanged"
        broken = self.broken_questions
        if not broken:
            return (
                f"the collection changed, but all {self.questions} questions' references are "
                "still there, unchanged"
            )
        shown = "; ".join(
            f"{q[:60]!r}: {i[:12]} {what}"
            for what, pairs in (("gone", self.gone), ("changed", self.changed))
            for q, i in pairs[:3]
        )
        return (
            f"the collection changed: {len(broken)} of {self.questions} questions lost a "
            f"reference ({len(self.gone)} gone, {len(self.changed)} changed; {shown})"
        )


def check_references(questions: Sequence[Any], source: ChunkSource) -> ReferenceCheck:
    """Whether the collection is the one the set was made on, and which references are gone.

    ``questions`` are `hyde_lc.evaluation.runs.Question` objects of a test-set file.
    """
    stamps = {q.extra.get("testset", {}).get("collection") for q in questions}
    check = ReferenceCheck(stamps == {source.fingerprint}, questions=len(questions))
    for q in questions:
        digests = q.extra.get("testset", {}).get("chunk_digests", {})
        for chunk_id in q.reference_context_ids or ():
            doc = source.by_id.get(chunk_id)
            if doc is None:
                check.gone.append((q.question, chunk_id))
            elif chunk_id in digests and digests[chunk_id] != chunk_digest(doc.page_content):
                check.changed.append((q.question, chunk_id))
    return check


def read_testset(path: str | os.PathLike[str]) -> list[Any]:
    """The questions of a test-set file (each with reference chunk ids), checked."""
    from hyde_lc.evaluation.runs import read_questions

    questions = read_questions(path)
    missing = [i for i, q in enumerate(questions, start=1) if not q.reference_context_ids]
    if missing:
        raise HydeLcError(
            f"{path}: question {missing[0]} (and {len(missing) - 1} more) has no "
            "reference_context_ids: a test set names the chunks that answer each question "
            "(make one with hyde-lc testset)"
        )
    return questions


def to_ragas_dataset(questions: str | os.PathLike[str] | Sequence[Any]) -> Any:
    """A test set (its file, or its questions) as a Ragas ``EvaluationDataset``.

    Each sample has ``user_input``, ``reference`` and ``reference_contexts``, what
    Ragas' reference-based metrics read; add ``retrieved_contexts`` and ``response`` by
    running `hyde_lc.evaluation.evaluate_questions` (or your own chain).

    Example:
        >>> to_ragas_dataset("my_questions.jsonl").to_pandas().columns[:3].tolist()
        ... # doctest: +SKIP
        ['user_input', 'reference_contexts', 'reference']

    """
    try:
        from ragas import EvaluationDataset, SingleTurnSample
    except ImportError as exc:
        from hyde_lc.errors import MissingDependencyError

        raise MissingDependencyError("Ragas datasets", 'pip install "hyde-lc[eval]"') from exc
    items: Sequence[Any] = (
        read_testset(questions) if isinstance(questions, str | os.PathLike) else questions
    )
    return EvaluationDataset(
        samples=[
            SingleTurnSample(
                user_input=q.question,
                reference=q.reference,
                reference_contexts=list(q.reference_contexts or []),
            )
            for q in items
        ]
    )
