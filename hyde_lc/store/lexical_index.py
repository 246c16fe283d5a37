"""BM25 over the same chunks as the vector index: a lexical index that lives with a collection.

Dense retrieval misses exact terms (gene names, numbers, rare words); BM25 finds them. The
two fused beat either alone by a wide margin on SciFact (BENCHMARKS.md), so every hyde_lc
collection carries a lexical index of its chunks, written by ingestion in the same step as
the vectors and searched by `HyDERetriever` next to them.

* `analyze` turns text into index terms, the same way for documents and queries: words of
  two or more letters, lower-cased, Lucene's English stop words removed, Snowball-stemmed
  (PyStemmer); runs of CJK characters (Chinese, Japanese, Korean) become their single
  characters and overlapping character pairs, since they are written without spaces and a
  word segmenter would need a dictionary per language.
* `LexicalIndex` keeps the terms in a tantivy index (Lucene-like, BM25 with k1 1.2 and
  b 0.75) on disk: added and deleted per chunk, committed atomically, read by many
  processes, with each chunk's metadata indexed so that a search filter narrows the BM25
  hits inside the index. Tantivy was chosen over bm25s (no incremental update: a changed
  file would rebuild the whole index) and SQLite FTS5 (about 50x slower per query) by
  measurement. A hyde_lc collection's index is kept current at write time by
  `hyde_lc.store.collection`, which records how far along the collection's change feed
  it is (its *cursor*).
* An index folder that cannot be written (its disk full, or read-only) is not damaged:
  tantivy's failures naming an operating system error are raised as that ``OSError``
  (`cannot_write` tells them apart), a write is refused before it starts naming the
  folder and the fix (`check_index_folder`), and the index is never rebuilt for it.
* `lexical_query` builds the query: the question's terms weighted ``query_weight`` times
  each, plus the hypotheses' terms (query2doc, Wang et al. 2023), so HyDE feeds both
  sides of a hybrid search.

Example:
    >>> analyze("Lighthouses used Fresnel lenses")
    ['lighthous', 'use', 'fresnel', 'lens']
    >>> analyze("灯塔的透镜")
    ['灯', '塔', '的', '透', '镜', '灯塔', '塔的', '的透', '透镜']
    >>> index = LexicalIndex.in_memory()
    >>> index.add([("c1", "Fresnel lenses focus light"), ("c2", "Keepers trimmed the wicks")])
    >>> [hit[0] for hit in index.search(lexical_query("Who made the Fresnel lens?"), k=1)]
    ['c1']

"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from hyde_lc.errors import (
    IndexNotWritableError,
    InvalidSettingError,
    MissingDependencyError,
    StoreError,
)
from hyde_lc.store import disk_space
from hyde_lc.store.disk_space import NoSpaceError, free_bytes, nearest_existing, no_space_text

logger = logging.getLogger(__name__)

ENGLISH_STOP_WORDS = frozenset(
    {
        "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into",
        "is", "it", "no", "not", "of", "on", "or", "such", "that", "the", "their", "then",
        "there", "these", "they", "this", "to", "was", "will", "with",
    }
)  # fmt: skip
"""Lucene's English stop set (33 words): what BM25 baselines such as Anserini and bm25s use."""

_CJK = (
    "\u1100-\u11ff\u2e80-\u2fdf\u3040-\u30ff\u3100-\u312f\u3130-\u318f"
    "\u31a0-\u31bf\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
    "\uf900-\ufaff\U00020000-\U0002fa1f"
)
"""Han, kana, Hangul and their punctuation-free blocks: scripts written without spaces."""
_TOKEN = re.compile(rf"[{_CJK}]+|(?:(?![{_CJK}])\w){{2,}}")
_IS_CJK = re.compile(rf"[{_CJK}]")
DEFAULT_QUERY_REPEATS = 5
"""The question's weight against one hypothesis in the lexical query (query2doc's 5)."""
FORMAT = 4
"""Version of the on-disk layout; another version is rebuilt, never misread."""
CANNOT_WRITE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS})
"""Error numbers that say an index folder cannot be written now (its disk is full, or it is
read-only): the index is not damaged, and rebuilding it would fail the same way."""
_OS_ERROR = re.compile(r"os error (\d+)|Os \{ code: (\d+)")
"""How tantivy names the operating system's error in its own (a ``ValueError``)."""


def cannot_write(exc: BaseException) -> bool:
    """Whether ``exc`` says an index folder cannot be written (`CANNOT_WRITE`).

    Example:
        >>> cannot_write(OSError(errno.ENOSPC, "No space left on device")), cannot_write(OSError())
        (True, False)

    """
    return isinstance(exc, OSError) and exc.errno in CANNOT_WRITE


@contextmanager
def _os_errors(path: Path | None) -> Iterator[None]:
    """Raise tantivy's failures of a file operation as the `OSError` they report.

    Tantivy raises ``ValueError`` for everything; one naming an operating system error
    (``No space left on device (os error 28)``) becomes that ``OSError``, for ``path``.
    Other failures (a damaged segment) pass through as they are.
    """
    try:
        yield
    except ValueError as exc:
        found = _OS_ERROR.search(str(exc))
        if found is None or path is None:
            raise
        code = int(found.group(1) or found.group(2))
        raise OSError(code, os.strerror(code), str(path)) from exc


@lru_cache(maxsize=1)
def _stemmer() -> Any:
    try:
        import Stemmer
    except ImportError as exc:
        raise MissingDependencyError("lexical search", "pip install PyStemmer") from exc
    return Stemmer.Stemmer("english")


def analyze(text: str) -> list[str]:
    """Index terms of ``text`` (see the module docstring), in text order."""
    words: list[str] = []
    cjk: list[str] = []
    for match in _TOKEN.finditer(text.lower()):
        token = match.group()
        if _IS_CJK.match(token):
            cjk.extend(token)
            cjk.extend(token[i : i + 2] for i in range(len(token) - 1))
        elif token not in ENGLISH_STOP_WORDS:
            words.append(token)
    return [*_stemmer().stemWords(words), *cjk] if words else cjk


def lexical_query(
    query: str, hypotheses: Sequence[str] = (), query_repeats: int = DEFAULT_QUERY_REPEATS
) -> Counter[str]:
    """Term weights for a search: each question term ``query_repeats`` times, plus hypotheses.

    Without hypotheses the repeats change nothing (the ranking is the question's BM25).

    Example:
        >>> lexical_query("lens", ["A lens bends light."], query_repeats=5)
        Counter({'len': 6, 'bend': 1, 'light': 1})

    """
    weights: Counter[str] = Counter()
    for term in analyze(query):
        weights[term] += query_repeats if hypotheses else 1
    for hypothesis in hypotheses:
        weights.update(analyze(hypothesis))
    return weights


@dataclass(frozen=True)
class IndexState:
    """What an index folder reflects: its layout version, and how far along its collection.

    ``cursor`` is the last write of the collection's change feed the index holds
    (`hyde_lc.collection`); ``chunks`` how many chunks it held when that was recorded;
    ``audited_at`` when (``time.time()``) its contents were last compared with the
    collection's (`hyde_lc.store.collection.HybridCollection.audit`), or built from them.
    """

    format: int
    cursor: int | None
    chunks: int
    audited_at: float | None = None


_META_SEP = "\x1f"


def meta_term(key: str, value: Any) -> str | None:
    """The index term for one metadata value (None: not a value a filter can name).

    Numbers are written alike whatever their type (``3`` and ``3.0`` are one term), as
    Chroma's filters compare them.

    Example:
        >>> meta_term("page", 3) == meta_term("page", 3.0)
        True

    """
    if isinstance(value, bool):
        typed = f"b:{value}"
    elif isinstance(value, int | float):
        number = float(value)
        typed = f"n:{int(number)}" if number.is_integer() else f"n:{number!r}"
    elif isinstance(value, str):
        typed = f"s:{value}"
    else:
        return None
    return f"{key}{_META_SEP}{typed}"


def chunk_digest(text: str, metadata: dict[str, Any] | None = None) -> int:
    """A 64-bit fingerprint of what the index holds of a chunk: its text and filterable metadata.

    Two chunks with the same digest are indexed alike, so comparing digests tells which
    chunks of a collection the index no longer reflects (changed outside hyde_lc).

    Example:
        >>> chunk_digest("fog", {"page": 3}) == chunk_digest("fog", {"page": 3.0})
        True
        >>> chunk_digest("fog") == chunk_digest("fog horns")
        False

    """
    terms = sorted(
        term
        for key, value in (metadata or {}).items()
        if (term := meta_term(str(key), value)) is not None
    )
    hasher = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8)
    for term in terms:
        hasher.update(b"\x1e" + term.encode("utf-8", "surrogatepass"))
    return int.from_bytes(hasher.digest(), "big")


class LexicalIndex:
    """A BM25 index of chunk texts by chunk id, persisted in a folder (or in memory).

    Each chunk's scalar metadata is indexed too, so a search filter (`filter_query`)
    narrows the BM25 hits inside the index. Writes (`add`, `delete`) are committed at
    once; searches see the last commit. One process writes a folder at a time (tantivy
    holds a lock file while writing; `hyde_lc.collection` takes turns per folder).

    Example:
        >>> index = LexicalIndex.in_memory()
        >>> index.add([("a", "tide tables"), ("b", "fog horns", {"file_name": "b.txt"})])
        >>> index.search(lexical_query("fog"), k=5)[0][0]
        'b'
        >>> index.search(lexical_query("fog"), k=5, where={"file_name": "a.txt"})
        []

    """

    STATE_FILE = "hyde_lc_lexical.json"

    def __init__(self, path: Path | None) -> None:
        try:
            import tantivy
        except ImportError as exc:
            raise MissingDependencyError("lexical search", 'pip install "hyde-lc"') from exc
        self._tantivy = tantivy
        self.path = path
        builder = tantivy.SchemaBuilder()
        builder.add_text_field("id", stored=True, tokenizer_name="raw", index_option="basic")
        builder.add_text_field("meta", tokenizer_name="raw", index_option="basic")
        builder.add_text_field("terms", tokenizer_name="whitespace", index_option="freq")
        builder.add_unsigned_field("digest", stored=True, indexed=False)  # `chunk_digest`
        self._schema = builder.build()
        if path is not None:
            path.mkdir(parents=True, exist_ok=True)
        with _os_errors(path):
            self._index = tantivy.Index(self._schema, path=None if path is None else str(path))
        self._lock = threading.Lock()
        self._cursor: int | None = None
        self._read_cursor()

    @classmethod
    def in_memory(cls) -> LexicalIndex:
        """An index held in RAM (for stores without a folder, tests and benchmarks)."""
        return cls(None)

    @classmethod
    def open(cls, path: Path) -> LexicalIndex:
        """Open the index in ``path``, which must hold one of this layout (`read_state`)."""
        return cls(path)

    @classmethod
    def create(cls, path: Path) -> LexicalIndex:
        """A new, empty index in ``path`` (a folder that must not exist), recording its layout."""
        path.mkdir(parents=True)
        index = cls(path)
        index.mark(None)
        return index

    # -- writing -----------------------------------------------------------------------

    def add(self, chunks: Iterable[tuple[str, str] | tuple[str, str, dict[str, Any]]]) -> None:
        """Index ``(chunk id, text[, metadata])`` (an id indexed before is replaced), commit."""
        self.apply(chunks, ())

    def delete(self, ids: Iterable[str]) -> None:
        """Remove chunks by id (unknown ids are ignored) and commit."""
        self.apply((), ids)

    def apply(
        self,
        added: Iterable[tuple[str, str] | tuple[str, str, dict[str, Any]]],
        deleted: Iterable[str],
    ) -> None:
        """Remove ``deleted`` ids, then index ``added`` chunks, in one commit.

        A folder that cannot be written (`cannot_write`) raises the ``OSError``, with the
        index as it was.
        """
        with self._lock, _os_errors(self.path):
            writer = self._writer()
            try:
                for chunk_id in deleted:
                    writer.delete_documents_by_term("id", chunk_id)
                for chunk in added:
                    writer.delete_documents_by_term("id", chunk[0])
                    writer.add_document(self._document(chunk))
                self._commit(writer)
            except BaseException as exc:
                # Let go of tantivy's writer lock at once: the traceback, kept by whoever
                # keeps the error, holds the writer in the frames it went through.
                with suppress(Exception):
                    writer.rollback()
                del writer
                traceback.clear_frames(exc.__traceback__)
                raise

    def _document(self, chunk: tuple[str, str] | tuple[str, str, dict[str, Any]]) -> Any:
        doc = self._tantivy.Document()
        doc.add_text("id", chunk[0])
        metadata = chunk[2] if len(chunk) > 2 else None
        for key, value in (metadata or {}).items():
            term = meta_term(str(key), value)
            if term is not None:
                doc.add_text("meta", term)
        doc.add_text("terms", " ".join(analyze(chunk[1])))
        doc.add_unsigned("digest", chunk_digest(chunk[1], metadata))
        return doc

    def clear(self) -> None:
        """Remove every chunk and commit."""
        with self._lock, _os_errors(self.path):
            writer = self._writer()
            writer.delete_all_documents()
            self._commit(writer)

    def _writer(self) -> Any:
        return self._index.writer(heap_size=50_000_000, num_threads=1)

    def _commit(self, writer: Any) -> None:
        writer.commit()
        writer.wait_merging_threads()
        self._index.reload()

    # -- reading -----------------------------------------------------------------------

    def __len__(self) -> int:
        self._index.reload()
        return int(self._index.searcher().num_docs)

    def contents(self) -> dict[str, int]:
        """Every chunk the index holds: ``{chunk id: chunk_digest}`` (one pass, no text)."""
        self._index.reload()
        searcher = self._index.searcher()
        if not searcher.num_docs:
            return {}
        hits = searcher.search(self._tantivy.Query.all_query(), limit=searcher.num_docs).hits
        return {
            str(doc["id"][0]): int(doc["digest"][0])
            for doc in (searcher.doc(address) for _, address in hits)
        }

    def search(
        self,
        weights: Counter[str],
        k: int,
        where: dict[str, Any] | None = None,
        hide: dict[str, Any] | None = None,
    ) -> list[tuple[str, float]]:
        """The ``k`` best chunks for weighted terms: ``(chunk id, BM25 score)``, best first.

        A term weighted ``w`` counts ``w`` times, as if repeated in the query (Lucene sums
        the scores of repeated query clauses). ``where`` is a Chroma-style metadata
        filter (`filter_query`) the chunks must match; ``hide`` one they must not.
        Neither changes the scores.
        """
        if not weights or k < 1:
            return []
        tantivy = self._tantivy
        terms = tantivy.Query.boolean_query(
            [
                (
                    tantivy.Occur.Should,
                    tantivy.Query.boost_query(
                        tantivy.Query.term_query(self._schema, "terms", term, index_option="freq"),
                        float(weight),
                    ),
                )
                for term, weight in weights.items()
            ]
        )
        clauses = [(tantivy.Occur.Must, terms)]
        if where:
            clauses.append(
                (tantivy.Occur.Must, tantivy.Query.const_score_query(self.filter_query(where), 0.0))
            )
        if hide:
            clauses.append((tantivy.Occur.MustNot, self.filter_query(hide)))
        query = tantivy.Query.boolean_query(clauses) if len(clauses) > 1 else terms
        searcher = self._index.searcher()
        result = searcher.search(query, limit=k, count=False)
        return [
            (str(searcher.doc(address)["id"][0]), float(score)) for score, address in result.hits
        ]

    def filter_query(self, where: dict[str, Any]) -> Any:
        """A Chroma ``where`` filter as an index query over the chunks' metadata.

        Supported: ``{key: value}``, ``$eq``, ``$ne``, ``$in``, ``$nin`` on string, number
        and boolean values, and ``$and`` / ``$or`` of those. Anything else raises
        `InvalidSettingError` naming what is supported (`check_filter` says the same
        without an index).
        """
        tantivy = self._tantivy
        query, occur = tantivy.Query, tantivy.Occur
        schema = self._schema

        def term(token: str) -> Any:
            return query.term_query(schema, "meta", token)

        def either(parts: list[Any]) -> Any:
            return query.boolean_query([(occur.Should, p) for p in parts])

        def every(parts: list[Any]) -> Any:
            return (
                parts[0]
                if len(parts) == 1
                else query.boolean_query([(occur.Must, p) for p in parts])
            )

        def negated(part: Any) -> Any:
            return query.boolean_query([(occur.Must, query.all_query()), (occur.MustNot, part)])

        return _compile_filter(where, term, either, every, negated)

    def reload(self) -> None:
        """See the last commit and cursor (another process's writes included)."""
        self._index.reload()
        self._read_cursor()

    def _read_cursor(self) -> None:
        if self.path is not None:
            state = read_state(self.path)
            self._cursor = state.cursor if state else None

    # -- state -------------------------------------------------------------------------

    def state(self) -> IndexState:
        """The layout version, feed cursor and last audit recorded with the index."""
        recorded = read_state(self.path) if self.path is not None else None
        cursor = recorded.cursor if recorded else self._cursor
        return IndexState(FORMAT, cursor, len(self), recorded.audited_at if recorded else None)

    def mark(self, cursor: int | None) -> None:
        """Record that the index now holds the collection's writes up to ``cursor``."""
        self._cursor = cursor
        if self.path is None:
            return
        recorded = read_state(self.path)
        audited = recorded.audited_at if recorded else time.time()  # new: built from them
        self._write_state(cursor, audited)

    def mark_audited(self, when: float | None = None) -> None:
        """Record that the index's contents were compared with the collection's at ``when``.

        Keeps the cursor recorded on disk (call it under the lock that orders the marks).
        """
        if self.path is not None:
            recorded = read_state(self.path)
            cursor = recorded.cursor if recorded else self._cursor
            self._write_state(cursor, time.time() if when is None else when)

    def _write_state(self, cursor: int | None, audited_at: float | None) -> None:
        assert self.path is not None
        self._index.reload()
        payload = {
            "format": FORMAT,
            "cursor": cursor,
            "chunks": len(self),
            "audited_at": audited_at,
        }
        target = self.path / self.STATE_FILE
        tmp = target.with_name(f"{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(payload), encoding="utf-8")
        os.replace(tmp, target)

    def cursor(self) -> int | None:
        """The last feed write the index holds (None: none recorded, so rebuild it).

        As of this object's last `mark` or `reload`: a search reads no file for it.
        """
        return self._cursor


def check_index_folder(
    base: Path, lock: Path, index: str | None, store_folder: Path | None = None
) -> None:
    """Refuse a write whose index folder ``base`` cannot take it, before it starts.

    Raises `IndexNotWritableError` when the folder (or the lock file ``lock``, the index
    in use ``index``, its tantivy locks, or the folder they will be made in) cannot be
    written, and `NoSpaceError` when the index has a device of its own (not
    ``store_folder``'s) without room (`disk_space.check_index_room`).
    """
    places = [lock if lock.exists() else lock.parent, base]
    if index:
        places += [base / index, *sorted((base / index).glob(".tantivy-*.lock"))]
    for place in places:
        path = nearest_existing(place)
        if not os.access(path, os.W_OK):
            denied = OSError(errno.EACCES, os.strerror(errno.EACCES), str(path))
            raise index_not_writable(base, denied)
    disk_space.check_index_room(base, store_folder)


def index_not_writable(base: Path, exc: OSError, stored: bool = False) -> StoreError:
    """The error for a write whose BM25 index folder ``base`` cannot take it (``exc``).

    ``stored``: the write's chunks are in the collection already (the index is behind
    them until the cause is fixed); otherwise nothing was written.
    """
    reason = exc.strerror or str(exc)
    if exc.filename and str(exc.filename) != str(base):
        reason = f"{exc.filename}: {reason}"
    if stored:
        after = (
            ": the chunks written are stored, and searches find them by their vectors only "
            "until the index takes them. {fix}; the next search or write brings the index "
            "up to date."
        )
    else:
        after = ". {fix}, then run the same command again; the collection is as before."
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        free = free_bytes(base)
        detail = f"{type(exc).__name__}: {exc}" if stored else ""
        text = no_space_text(base, free, detail, what="the BM25 index ")
        return NoSpaceError(text + after.format(fix="Free space there"))
    read_only = False
    with suppress(OSError):
        read_only = bool(os.statvfs(nearest_existing(base)).f_flag & os.ST_RDONLY)
    fix = (
        "Mount it read-write"
        if read_only
        else f"Make it writable (chmod -R u+w {base.parent}: the indexes and their locks)"
    )
    if read_only:
        reason = f"{reason}; a read-only file system"
    return IndexNotWritableError(
        f"the BM25 index folder {base} cannot be written ({reason}), and every write to "
        "the collection updates it" + after.format(fix=fix)
    )


def dense_only_note(base: Path | None, exc: OSError) -> str:
    """What a search says when its BM25 side could not be used (``exc``): dense only, and why."""
    fix = (
        "free space there"
        if exc.errno in (errno.ENOSPC, errno.EDQUOT)
        else "make it writable"
        if cannot_write(exc)
        else "see the log"
    )
    return (
        f"searched dense only: the BM25 index at {base} could not be brought up to date "
        f"({exc.strerror or exc}); {fix}, and the next search catches it up"
    )


def check_filter(where: Any) -> None:
    """Refuse a search filter the lexical (BM25) side cannot apply, before any search.

    The rules and the message of `LexicalIndex.filter_query`, without an index: a
    retriever refuses such a filter when it is made rather than at its first search.

    Example:
        >>> check_filter({"$and": [{"source": "a.pdf"}, {"page": {"$in": [1, 2]}}]})
        >>> check_filter({"page": {"$gt": 3}})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        hyde_lc.errors.InvalidSettingError: the search filter ... (operator $gt): ...

    """

    def none(*_: Any) -> None:
        return None

    _compile_filter(where, none, none, none, none)


def _compile_filter(
    where: Any,
    term: Callable[[str], Any],
    either: Callable[[list[Any]], Any],
    every: Callable[[list[Any]], Any],
    negated: Callable[[Any], Any],
) -> Any:
    """Walk a Chroma ``where`` filter, refusing what the index cannot apply.

    ``term`` makes the query of one metadata term (`meta_term`), ``either`` / ``every``
    combine queries (any / all), ``negated`` matches what a query does not.
    """

    def leaf(key: str, value: Any) -> Any:
        token = meta_term(key, value)
        if token is None:
            raise _unsupported(where, f"{key}: {value!r} is not a string, number or bool")
        return term(token)

    def any_of(key: str, values: Any) -> Any:
        if not isinstance(values, list | tuple):
            raise _unsupported(where, f"{key}: $in/$nin take a list")
        return either([leaf(key, v) for v in values])

    def build(node: Any) -> Any:
        if not isinstance(node, dict) or not node:
            raise _unsupported(where, f"{node!r} is not a filter")
        parts = []
        for key, value in node.items():
            if key in ("$and", "$or"):
                if not isinstance(value, list) or not value:
                    raise _unsupported(where, f"{key} takes a non-empty list")
                inner = [build(v) for v in value]
                parts.append(every(inner) if key == "$and" else either(inner))
            elif key.startswith("$"):
                raise _unsupported(where, f"operator {key}")
            elif not isinstance(value, dict):
                parts.append(leaf(key, value))
            else:
                if len(value) != 1:
                    raise _unsupported(where, f"{key}: one operator per field")
                ((op, operand),) = value.items()
                if op == "$eq":
                    parts.append(leaf(key, operand))
                elif op == "$in":
                    parts.append(any_of(key, operand))
                elif op in ("$ne", "$nin"):
                    parts.append(
                        negated(leaf(key, operand) if op == "$ne" else any_of(key, operand))
                    )
                else:
                    raise _unsupported(where, f"operator {op}")
        return every(parts)

    return build(where)


def _unsupported(where: Any, what: str) -> InvalidSettingError:
    return InvalidSettingError(
        f"the search filter {where!r} cannot narrow the lexical (BM25) hits ({what}): the "
        "lexical side supports {key: value}, $eq, $ne, $in and $nin on string, number or "
        "bool metadata, and $and/$or of those. Use such a filter, or search dense only "
        "with this one (lexical='off')."
    )


def read_state(path: Path | None) -> IndexState | None:
    """The state file of an index folder, or None if missing, unreadable or of another layout."""
    if path is None:
        return None
    try:
        raw = json.loads((path / LexicalIndex.STATE_FILE).read_text(encoding="utf-8"))
        cursor, audited = raw.get("cursor"), raw.get("audited_at")
        state = IndexState(
            int(raw["format"]),
            None if cursor is None else int(cursor),
            int(raw.get("chunks", 0)),
            None if audited is None else float(audited),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return state if state.format == FORMAT else None
