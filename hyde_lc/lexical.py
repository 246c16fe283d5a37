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
  processes. Tantivy was chosen over bm25s (no incremental update: a changed file would
  rebuild the whole index) and SQLite FTS5 (about 50x slower per query) by measurement
  (``shared/MODELS.md``). The index records which state of the collection it reflects (a
  *generation* token that writers renew in the collection), so an index that missed a
  write (a killed process, another client of a Chroma server) is detected and rebuilt
  from the collection, never silently used.
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

import json
import logging
import os
import re
import shutil
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from hyde_lc.errors import InvalidSettingError, MissingDependencyError

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
FORMAT = 2
"""Version of the on-disk layout; another version is rebuilt, never misread."""


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
    """What an index on disk reflects: its layout version and the collection's generation."""

    format: int
    generation: str | None
    chunks: int


class LexicalIndex:
    """A BM25 index of chunk texts by chunk id, persisted in a folder (or in memory).

    Writes (`add`, `delete`) are committed at once; searches see the last commit. One
    process writes at a time (tantivy holds a lock file while writing; hyde_lc's writers
    already take turns per store).

    Example:
        >>> index = LexicalIndex.in_memory()
        >>> index.add([("a", "tide tables"), ("b", "fog horns")])
        >>> index.search(lexical_query("fog"), k=5)[0][0]
        'b'

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
        builder.add_text_field("source", tokenizer_name="raw", index_option="basic")
        builder.add_text_field("terms", tokenizer_name="whitespace", index_option="freq")
        self._schema = builder.build()
        if path is not None:
            path.mkdir(parents=True, exist_ok=True)
        self._index = tantivy.Index(self._schema, path=None if path is None else str(path))
        self._lock = threading.Lock()

    @classmethod
    def in_memory(cls) -> LexicalIndex:
        """An index held in RAM (for stores without a folder, tests and benchmarks)."""
        return cls(None)

    @classmethod
    def open(cls, path: Path) -> LexicalIndex:
        """Open (or create) the index in ``path``; a folder of another layout is cleared.

        Under the folder's lock, and a new index records its layout at once: an index
        another thread or process has just created (and is filling) is never taken for
        one of another layout.
        """
        with _folder_lock(path):
            state = read_state(path)
            fresh = state is None or state.format != FORMAT
            if fresh and path.exists():
                shutil.rmtree(path)
            index = cls(path)
            if fresh:
                index.mark(None)  # no generation: stale until built from its collection
        return index

    # -- writing -----------------------------------------------------------------------

    def add(self, chunks: Iterable[tuple[str, str]], source: str | None = None) -> None:
        """Index ``(chunk id, text)`` pairs (an id indexed before is replaced) and commit.

        ``source`` names the document they belong to (for `delete_source`).
        """
        with self._lock:
            writer = self._writer()
            for chunk_id, text in chunks:
                writer.delete_documents_by_term("id", chunk_id)
                doc = self._tantivy.Document()
                doc.add_text("id", chunk_id)
                if source is not None:
                    doc.add_text("source", source)
                doc.add_text("terms", " ".join(analyze(text)))
                writer.add_document(doc)
            self._commit(writer)

    def delete_source(self, source: str) -> None:
        """Remove every chunk indexed with ``source`` and commit."""
        with self._lock:
            writer = self._writer()
            writer.delete_documents_by_term("source", source)
            self._commit(writer)

    def delete(self, ids: Iterable[str]) -> None:
        """Remove chunks by id (unknown ids are ignored) and commit."""
        with self._lock:
            writer = self._writer()
            for chunk_id in ids:
                writer.delete_documents_by_term("id", chunk_id)
            self._commit(writer)

    def clear(self) -> None:
        """Remove every chunk and commit."""
        with self._lock:
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

    def search(self, weights: Counter[str], k: int) -> list[tuple[str, float]]:
        """The ``k`` best chunks for weighted terms: ``(chunk id, BM25 score)``, best first.

        A term weighted ``w`` counts ``w`` times, as if repeated in the query (Lucene sums
        the scores of repeated query clauses).
        """
        if not weights or k < 1:
            return []
        tantivy = self._tantivy
        clauses = [
            (
                tantivy.Occur.Should,
                tantivy.Query.boost_query(
                    tantivy.Query.term_query(self._schema, "terms", term, index_option="freq"),
                    float(weight),
                ),
            )
            for term, weight in weights.items()
        ]
        searcher = self._index.searcher()
        result = searcher.search(tantivy.Query.boolean_query(clauses), limit=k, count=False)
        return [
            (str(searcher.doc(address)["id"][0]), float(score)) for score, address in result.hits
        ]

    def reload(self) -> None:
        """See the last commit (another process's writes included)."""
        self._index.reload()

    # -- state -------------------------------------------------------------------------

    def state(self) -> IndexState:
        """The layout version and collection generation recorded with the index."""
        recorded = read_state(self.path) if self.path is not None else None
        return IndexState(FORMAT, recorded.generation if recorded else None, len(self))

    def mark(self, generation: str | None) -> None:
        """Record that the index now reflects the collection at ``generation``."""
        if self.path is None:
            self._generation = generation
            return
        self._index.reload()
        payload = {"format": FORMAT, "generation": generation, "chunks": len(self)}
        target = self.path / self.STATE_FILE
        tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(payload), encoding="utf-8")
        os.replace(tmp, target)

    def generation(self) -> str | None:
        """The collection generation the index reflects (None: unknown, so stale)."""
        if self.path is None:
            return getattr(self, "_generation", None)
        state = read_state(self.path)
        return state.generation if state else None


def read_state(path: Path | None) -> IndexState | None:
    """The state file of an index folder, or None if missing or unreadable."""
    if path is None:
        return None
    try:
        raw = json.loads((path / LexicalIndex.STATE_FILE).read_text(encoding="utf-8"))
        return IndexState(int(raw["format"]), raw.get("generation"), int(raw.get("chunks", 0)))
    except (OSError, ValueError, KeyError, TypeError):
        return None


# -- the lexical side of a hybrid search ---------------------------------------------------


class LexicalSearch:
    """The lexical side of a hybrid search: BM25 hits among a store's chunks, by chunk id.

    `from_documents` indexes chunks you have in hand (any store, in memory);
    `from_store` indexes what a store holds (Chroma or ``InMemoryVectorStore``). A
    collection ingested by hyde_lc brings its own persistent index
    (`CollectionLexicalSearch`, found by `lexical_search_for`).

    Example:
        >>> from langchain_core.documents import Document
        >>> from langchain_core.embeddings import DeterministicFakeEmbedding
        >>> from langchain_core.vectorstores import InMemoryVectorStore
        >>> docs = [Document("Fresnel lenses", id="a"), Document("fog horns", id="b")]
        >>> store = InMemoryVectorStore(DeterministicFakeEmbedding(size=8))
        >>> _ = store.add_documents(docs)
        >>> LexicalSearch.from_documents(store, docs).search(lexical_query("horn"), k=1)
        [('b', ...)]

    """

    def __init__(self, vectorstore: Any, index: LexicalIndex) -> None:
        self.vectorstore = vectorstore
        self.index = index

    @classmethod
    def from_documents(cls, vectorstore: Any, documents: Iterable[Any]) -> LexicalSearch:
        """An in-memory index of ``documents`` (each with the ``id`` it has in the store)."""
        index = LexicalIndex.in_memory()
        chunks = []
        for doc in documents:
            if not doc.id:
                raise InvalidSettingError(
                    "LexicalSearch.from_documents needs each Document's id (the id it has in "
                    "the vector store), to fuse lexical and dense hits"
                )
            chunks.append((str(doc.id), doc.page_content))
        index.add(chunks)
        return cls(vectorstore, index)

    @classmethod
    def from_store(cls, vectorstore: Any) -> LexicalSearch:
        """An in-memory index of every chunk ``vectorstore`` holds (Chroma, InMemory).

        Raises `InvalidSettingError` for a store that cannot list its chunks: build it
        with `from_documents` from the documents you added.
        """
        from hyde_lc.vectorstore import is_chroma

        if is_chroma(vectorstore):
            from hyde_lc import store

            return cls.from_documents(vectorstore, store.iter_chunks(vectorstore))
        held = getattr(vectorstore, "store", None)  # InMemoryVectorStore's records
        if isinstance(held, dict):
            from langchain_core.documents import Document

            return cls.from_documents(
                vectorstore,
                (
                    Document(r["text"], id=i, metadata=r.get("metadata") or {})
                    for i, r in held.items()
                ),
            )
        raise InvalidSettingError(
            f"cannot list the chunks of a {type(vectorstore).__name__} to index them: use "
            "LexicalSearch.from_documents(store, documents) with the documents you added"
        )

    def search(self, weights: Counter[str], k: int, where: Any = None) -> list[tuple[str, float]]:
        """The ``k`` best chunks ``(id, BM25 score)`` that match the search filter ``where``."""
        hits = self.index.search(weights, k)
        if where is None or not hits:
            return hits
        from hyde_lc.vectorstore import documents_by_id

        allowed = {
            str(d.id) for d in documents_by_id(self.vectorstore, [i for i, _ in hits], where)
        }
        return [hit for hit in hits if hit[0] in allowed]

    def documents(self, ids: Sequence[str]) -> list[Any]:
        """The chunks with these ids that are in the store (and searchable) now."""
        from hyde_lc.vectorstore import documents_by_id

        return documents_by_id(self.vectorstore, ids)


class CollectionLexicalSearch(LexicalSearch):
    """The persistent lexical index of a hyde_lc collection, kept in step with it.

    Before each search it compares the collection's *state* (a generation token that
    hyde_lc writers renew before and after every write, and the count of searchable
    chunks) with the state the index was built at. On any difference it rebuilds the
    index from the collection first, so a stale index is never searched: a write it
    missed (a killed process, another process, another client of a Chroma server) is
    caught. While a write is under way the index is searched as it is; the writer
    brings it up to date when it ends (`begin_write`, `finish_write`).

    Example:
        >>> from hyde_lc import open_store
        >>> search = lexical_search_for(open_store())  # doctest: +SKIP
        >>> search.search(lexical_query("Fresnel"), k=3)  # doctest: +SKIP

    """

    def __init__(self, vectorstore: Any, folder: Path) -> None:
        super().__init__(vectorstore, LexicalIndex.open(folder))
        self.folder = folder
        self._lock = threading.Lock()

    def search(self, weights: Counter[str], k: int, where: Any = None) -> list[tuple[str, float]]:
        """As `LexicalSearch.search`, after bringing the index up to date if needed."""
        self.ensure_current()
        return super().search(weights, k, where)

    def ensure_current(self) -> bool:
        """Rebuild the index if it does not reflect the collection; True if it rebuilt."""
        from hyde_lc import store

        state = store.collection_state(self.vectorstore)
        if self.matches(state):
            return False
        if store.write_under_way(self.vectorstore, state[0]) and read_state(self.folder):
            return False  # the writer updates the index when it is done
        with self._lock, _folder_lock(self.folder):
            self.index.reload()
            state = store.collection_state(self.vectorstore)
            if self.matches(state):  # another thread or process rebuilt it meanwhile
                return False
            self.rebuild(state)
        return True

    def matches(self, state: tuple[str | None, int]) -> bool:
        """Whether the index was built at ``state`` (and still holds that many chunks)."""
        generation, count = state
        recorded = read_state(self.folder)
        return (
            recorded is not None
            and recorded.format == FORMAT
            and recorded.generation == generation
            and recorded.chunks == count
            and len(self.index) == count
        )

    def rebuild(self, state: tuple[str | None, int] | None = None) -> None:
        """Index every searchable chunk of the collection afresh, then record ``state``."""
        from hyde_lc import store

        state = state or store.collection_state(self.vectorstore)
        logger.info("building the lexical index %s from its collection", self.folder)
        self.index.clear()
        by_source: dict[str, list[tuple[str, str]]] = {}
        for doc in store.iter_chunks(self.vectorstore):
            source = str(doc.metadata.get("source", ""))
            by_source.setdefault(source, []).append((str(doc.id), doc.page_content))
            if len(by_source[source]) >= 5000:
                self.index.add(by_source.pop(source), source)
        for source, chunks in by_source.items():
            self.index.add(chunks, source)
        self.index.mark(state[0])

    def refresh_sources(self, sources: Iterable[str]) -> None:
        """Re-index these documents' searchable chunks (after a write changed them)."""
        from hyde_lc import store

        for source in sources:
            self.index.delete_source(source)
            # Streamed page by page: a large document's text is never held whole.
            chunks = (
                (str(d.id), d.page_content)
                for d in store.iter_chunks(self.vectorstore, {"source": source})
            )
            self.index.add(chunks, source)


@dataclass
class WriteTicket:
    """What `begin_write` saw, for `finish_write`."""

    vectorstore: Any
    search: CollectionLexicalSearch | None
    current: bool
    """Whether the index reflected the collection when the write began."""


def begin_write(vectorstore: Any) -> WriteTicket:
    """Mark a write to a hyde_lc collection as under way (call holding the write lock).

    The collection's generation becomes a *writing* token: readers keep searching the
    index they have while the write is under way, and `finish_write` brings it up to
    date. The index is not marked with that token: if the writer fails or is killed
    before `finish_write`, the index no longer matches the collection and the next
    reader rebuilds it (searches may already see part of the write).
    """
    from hyde_lc import store

    search = lexical_search_for(vectorstore, quiet=True)
    before = store.collection_state(vectorstore)
    current = search is not None and search.matches(before)
    store.renew_generation(vectorstore, writing=True)
    if search is None:
        search = lexical_search_for(vectorstore, quiet=True)  # the write created the collection
        current = search is not None and before == (None, 0) and len(search.index) == 0
    return WriteTicket(vectorstore, search, current)


def finish_write(ticket: WriteTicket, sources: Iterable[str]) -> None:
    """End a write: bring the index up to date and renew the generation.

    Only the written ``sources`` are re-indexed when the index was current when the
    write began; otherwise it is rebuilt whole.
    """
    from hyde_lc import store

    search = ticket.search
    if search is None:
        store.renew_generation(ticket.vectorstore, writing=False)
        return
    with search._lock, _folder_lock(search.folder):
        if ticket.current:
            search.refresh_sources(sources)
        generation = store.renew_generation(search.vectorstore, writing=False)
        if ticket.current:
            search.index.mark(generation)
        else:
            search.rebuild(store.collection_state(search.vectorstore))


_WARNED: set[str] = set()


def lexical_search_for(vectorstore: Any, *, quiet: bool = False) -> CollectionLexicalSearch | None:
    """The lexical side a store brings: a hyde_lc collection's index, else None.

    None is logged once per kind of store (``hyde_lc.lexical`` logger) unless ``quiet``:
    the retriever then searches dense only.
    """
    from hyde_lc.vectorstore import is_chroma

    if is_chroma(vectorstore):
        from hyde_lc import store

        folder = store.lexical_folder(vectorstore)
        if folder is not None:
            return CollectionLexicalSearch(vectorstore, folder)
    kind = type(vectorstore).__name__
    if not quiet and kind not in _WARNED:
        _WARNED.add(kind)
        logger.warning(
            "%s has no lexical index (only collections ingested by hyde_lc carry one): "
            "searching dense only. For hybrid search pass "
            "lexical=LexicalSearch.from_store(store) or LexicalSearch.from_documents(...)",
            kind,
        )
    return None


@contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    """One writer of an index folder at a time, across processes (released if killed)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: tantivy's own writer lock only
        yield
        return
    # The lock file sits beside the folder: only the parent must exist. Creating the
    # folder here, outside the lock, raced with `LexicalIndex.open` clearing it inside.
    folder.parent.mkdir(parents=True, exist_ok=True)
    with (folder.parent / f"{folder.name}.lock").open("a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
