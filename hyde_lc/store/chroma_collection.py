"""One Chroma collection: what it records, opened creating nothing, read as searches see it.

A collection's metadata records the embedding model (`META_MODEL`, `META_DIMENSION`), the
last finished write (`META_HEAD`), a write under way (`META_WRITING`) and the document
versions being written in parts or removed (`META_PENDING`); each chunk records its
document version (`DOC_VERSION`) and the write that wrote it (`SEQ`).

`ChromaCollection` holds the chromadb client and collection of one `StoreLocation`, opened
when first needed: nothing is created (no folder, no collection) until the first write
(`create`, `prepare_write`). Its reads leave out the chunks of document versions still
being written (`pending`), reading the collection's metadata fresh (one request, about
0.2 ms embedded): searches by asking for a few more results and dropping pending ones
(`query_visible`), since a metadata filter makes embedded Chroma scan every record's
metadata on each query; ``get``-style reads through `visible_where`.

The embedding model a collection records is checked here too: opening or writing it with
another model is refused before anything is read or written (`check_embeddings`,
`prepare_write`), since vectors from two models in one index make every search silently
wrong. An empty collection takes the model of its first write.

Example:
    >>> from hyde_lc.store.location import StoreLocation
    >>> chroma = ChromaCollection(StoreLocation.resolve(path="/tmp/new-store"))
    >>> chroma.existing() is None, chroma.visible_count()  # nothing created
    (True, 0)

"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from chromadb.errors import NotFoundError
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from hyde_lc.errors import EmbeddingMismatchError, StoreError
from hyde_lc.models.loading import embedding_model_id
from hyde_lc.store.location import StoreLocation, _is_read_only, _read_only_copy

logger = logging.getLogger(__name__)

META_MODEL = "hyde_lc_embedding_model"
"""Collection metadata: the id of the embedding model the vectors were made with."""
META_DIMENSION = "hyde_lc_embedding_dimension"
"""Collection metadata: the vectors' length."""
META_WRITING = "hyde_lc_writing"
"""Collection metadata: the number of a write under way (removed when the head reaches it)."""
META_PENDING = "hyde_lc_pending"
"""Collection metadata: the document versions being written or removed, comma-separated.
Searches leave their chunks out."""
META_HEAD = "hyde_lc_head"
"""Collection metadata: the sequence number of the last finished write (the change feed's
head, `hyde_lc.store.collection`)."""
META_FEED_FLOOR = "hyde_lc_feed_floor"
"""Collection metadata: deletions are logged for every write after this one (an index whose
cursor is older is rebuilt)."""
SEQ = "hyde_lc_seq"
"""Chunk metadata: the sequence number of the write that wrote the chunk."""
DOC_VERSION = "doc_version"
"""Chunk metadata: which version of a document (file, content, chunking) a chunk is of."""

RESULT_KEYS = ("embeddings", "documents", "metadatas", "uris", "data")
"""The fields of a Chroma result besides ``ids`` (and ``distances`` for a query)."""
DEFAULT_GET = ("metadatas", "documents")
DEFAULT_QUERY = ("metadatas", "documents", "distances")


def pending_in(metadata: dict[str, Any]) -> list[str]:
    """The pending versions listed in collection metadata."""
    raw = metadata.get(META_PENDING) or ""
    return [version for version in str(raw).split(",") if version]


def head_of(metadata: dict[str, Any]) -> int:
    """The last finished write recorded in collection metadata (0: none)."""
    return int(metadata.get(META_HEAD) or 0)


def seq_of(metadata: dict[str, Any]) -> int:
    """The write that wrote a chunk, from its metadata (0: not recorded)."""
    seq = metadata.get(SEQ)
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else 0


def user_metadata(metadata: Any) -> dict[str, Any]:
    """A chunk's metadata as handed to users: without the number of its write.

    That number is the change feed's bookkeeping, not a property of the chunk.
    """
    return {key: value for key, value in (metadata or {}).items() if key != SEQ}


def without_bookkeeping(result: dict[str, Any]) -> dict[str, Any]:
    """A Chroma ``get`` or ``query`` result whose metadatas are `user_metadata`."""
    metas = result.get("metadatas")
    if metas:
        nested = isinstance(metas[0], list)
        result = {
            **result,
            "metadatas": [
                [user_metadata(m) for m in row] if nested else user_metadata(row) for row in metas
            ],
        }
    return result


def empty_result(include: Sequence[str], queries: int | None = None) -> dict[str, Any]:
    """What Chroma answers for an empty collection: a ``get`` (``queries`` None) or a query.

    Example:
        >>> empty_result(["documents"])["documents"], empty_result(["documents"], 1)["ids"]
        ([], [[]])

    """
    keys = RESULT_KEYS if queries is None else (*RESULT_KEYS, "distances")
    value: list[Any] = [] if queries is None else [[] for _ in range(queries)]
    fields = {key: (value if key in include else None) for key in keys}
    return {"ids": list(value), **fields, "included": list(include)}


def documents_of(got: dict[str, Any]) -> list[Document]:
    """The Documents of a ``get`` result, with `user_metadata` (records as Chroma holds them)."""
    texts = got.get("documents") or [""] * len(got["ids"])
    metas = got.get("metadatas") or [None] * len(got["ids"])
    return [
        Document(page_content=text or "", metadata=user_metadata(meta), id=id_)
        for id_, text, meta in zip(got["ids"], texts, metas, strict=True)
    ]


def query_documents(got: dict[str, Any]) -> list[Document]:
    """The Documents of a one-query result (its first row), as `Chroma` makes them."""
    ids = got["ids"][0]
    texts = (got.get("documents") or [[""] * len(ids)])[0]
    metas = (got.get("metadatas") or [[None] * len(ids)])[0]
    return [
        Document(page_content=text, metadata=dict(meta or {}), id=id_)
        for id_, text, meta in zip(ids, texts, metas, strict=True)
    ]


def query_vectors(got: dict[str, Any]) -> list[Any]:
    """The stored vectors of a one-query result (its first row)."""
    rows = got.get("embeddings")
    return list(rows[0]) if rows is not None and len(rows) else []


def result_rows(got: dict[str, Any], rows: list[int], include: list[str]) -> dict[str, Any]:
    """The given rows of a one-query result, with only the fields ``include`` asks for."""
    out: dict[str, Any] = {}
    for key, value in got.items():
        if key == "included":
            out[key] = include
        elif value is None or (key != "ids" and key not in include):
            out[key] = None
        else:
            out[key] = [[value[0][i] for i in rows]]
    return out


def _cosine_relevance(distance: float) -> float:
    return 1.0 - distance


def _inner_product_relevance(distance: float) -> float:
    return 1.0 - distance if distance > 0 else -distance


def _euclidean_relevance(distance: float) -> float:
    return 1.0 - distance / math.sqrt(2)


def relevance_for_space(space: str | None) -> Callable[[float], float]:
    """Distance to relevance for a Chroma distance space, as LangChain's `Chroma` maps it.

    The same formulas as LangChain's relevance functions (cosine, l2, ip), written here
    because LangChain keeps them private to its stores.

    Example:
        >>> relevance_for_space("cosine")(0.25)
        0.75

    """
    if space in (None, "cosine"):
        return _cosine_relevance
    if space == "l2":
        return _euclidean_relevance
    if space == "ip":
        return _inner_product_relevance
    raise StoreError(f"no relevance function for Chroma's distance space {space!r}")


def collection_space(collection: Any) -> str | None:
    """The distance space of a chromadb collection (its public ``configuration``)."""
    configuration = collection.configuration or {}
    for index in ("hnsw", "spann"):
        space = (configuration.get(index) or {}).get("space")
        if space:
            return str(space)
    return None


COSINE: dict[str, Any] = {"hnsw": {"space": "cosine"}}
PAGE = 5000
"""Records per page when reading metadata only."""
TEXT_PAGE = 1000
"""Records per page when reading texts too: a page of 5,000 large chunks would hold ~10 MB."""
POST_FILTER_LIMIT = 2048
"""Most results asked for when searching around pending chunks before filtering instead."""
SCRIPT_NOT_RECORDED = "unknown"
"""The script reported for chunks ingested before chunks recorded their script."""


class ChromaCollection:
    """The chromadb side of one hyde_lc collection: client, collection, metadata, visible reads.

    Made by `open`, which opens an existing store (a read-only folder through a private
    copy) and creates nothing.

    Example:
        >>> chroma = ChromaCollection.open(StoreLocation.resolve(path="/tmp/s"))  # doctest: +SKIP
        >>> chroma.pending(), chroma.visible_count()  # doctest: +SKIP
        ([], 120)

    """

    def __init__(
        self,
        location: StoreLocation,
        client: Any = None,
        collection: Any = None,
        copy_of: Path | None = None,
    ) -> None:
        self.location = location
        """Where the collection lives (for a read-only folder: that folder, not its copy)."""
        self.read_only_source = copy_of
        """The read-only folder read through a temporary copy, if it is one."""
        self._opened_client: Any = client
        self._found: Any = collection
        self._relevance: Callable[[float], float] | None = None

    @classmethod
    def open(cls, location: StoreLocation) -> ChromaCollection:
        """The collection at ``location`` with its client if the store exists; creates nothing."""
        if not location.has_store():
            return cls(location)
        copy_of = None
        reached = location
        if location.path is not None and _is_read_only(location.path):
            copy_of = location.path
            reached = StoreLocation(_read_only_copy(location.path), None, location.collection)
        client = reached.client()
        try:
            collection = client.get_collection(location.collection)
        except NotFoundError:
            collection = None
        return cls(location, client, collection, copy_of)

    # -- where -------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The collection's name."""
        return self.location.collection

    @property
    def folder(self) -> Path | None:
        """The folder of an embedded store; None for a Chroma server."""
        return self.location.path

    @property
    def server(self) -> str | None:
        """The server's address as ``scheme://host:port``; None for a folder."""
        return self.location.server

    @property
    def writable_folder(self) -> Path | None:
        """The folder writes go to: an embedded store's own, not a read-only one's copy."""
        return self.folder if self.read_only_source is None else None

    # -- the client and the collection ---------------------------------------------------

    def client(self) -> Any:
        """The chromadb client; opened on first use (for a new folder, that creates it)."""
        if self._opened_client is None:
            self._opened_client = self.location.client()
        return self._opened_client

    def has_open_client(self) -> bool:
        """Whether the chromadb client is open (a store never read or written has none)."""
        return self._opened_client is not None

    def existing(self) -> Any:
        """The chromadb collection if it exists by now, else None (nothing is created)."""
        if self._found is None:
            if self._opened_client is None and not self.location.has_store():
                return None
            try:
                self._found = self.client().get_collection(self.name)
            except NotFoundError:
                return None
        return self._found

    def create(self, embeddings: Embeddings) -> Any:
        """The collection, created now (with the embedding model recorded) if missing."""
        found = self.existing()
        if found is not None:
            return found
        self.ensure_writable()
        metadata = {
            META_MODEL: embedding_model_id(embeddings),
            META_DIMENSION: embedding_dimension(embeddings),
        }
        self._found = self.client().get_or_create_collection(
            name=self.name, embedding_function=None, metadata=metadata, configuration=COSINE
        )
        return self._found

    def forget(self) -> None:
        """Let go of the collection (it was deleted); the next write creates it again."""
        self._found = None
        self._relevance = None

    def reopen(self) -> None:
        """Read the store afresh from disk: a new client and collection (embedded stores).

        Embedded Chroma keeps each collection's vector index in memory, loaded once per
        system; chromadb shares one system per folder in a process. Clearing chromadb's
        system cache (``clear_system_cache``, public) makes the next client load a new
        one: calls already running finish on the old one. Other clients of the folder in
        this process keep their view until they reopen too. A no-op for a server, for a
        client not open yet and for a read-only folder's copy.
        """
        if self._opened_client is None or self.writable_folder is None:
            return
        self._opened_client.clear_system_cache()
        self._opened_client = self.location.client()
        self._found = None
        self._relevance = None
        self.existing()

    def relevance(self) -> Callable[[float], float]:
        """How this collection's distances become relevance (higher is better)."""
        if self._relevance is None:
            found = self.existing()
            if found is None:  # nothing to search yet: the space of the collection to come
                return relevance_for_space(None)
            self._relevance = relevance_for_space(collection_space(found))
        return self._relevance

    def ensure_writable(self) -> None:
        """Refuse to write a store that is read through a copy of a read-only folder."""
        if self.read_only_source is not None:
            raise StoreError(
                f"{self.read_only_source} is read-only: it can be searched but not written. "
                "Make it writable (chmod -R u+w), or ingest into another store (--store DIR)"
            )

    def max_write(self) -> int:
        """The most records Chroma takes in one call (5,461 for embedded Chroma 1.5)."""
        try:
            return max(1, int(self.client().get_max_batch_size()))
        except Exception:
            return 1000

    # -- the collection's metadata --------------------------------------------------------

    def fresh_metadata(self) -> dict[str, Any]:
        """The collection's metadata as stored now (another process may have changed it)."""
        if self.existing() is None:
            return {}
        try:
            return dict(self.client().get_collection(self.name).metadata or {})
        except NotFoundError:
            return {}

    def pending(self) -> list[str]:
        """The document versions being written or removed: searches leave them out."""
        return pending_in(self.fresh_metadata())

    def write_metadata(self, metadata: dict[str, Any]) -> None:
        """Replace the collection's metadata (one atomic write)."""
        metadata.pop("hnsw:space", None)  # set through the configuration, not metadata
        self.existing().modify(metadata=metadata or {META_PENDING: ""})

    def set_value(self, key: str, value: Any) -> None:
        """Set one value of the collection's metadata (one read, one write; under the lock)."""
        metadata = self.fresh_metadata()
        if metadata.get(key) == value:
            return
        metadata[key] = value
        self.write_metadata(metadata)

    def set_head(self, seq: int) -> None:
        """Record ``seq`` as the last finished write (one metadata write; under the write lock).

        The head never moves back: a second writer that took the same number (two writer
        processes on one server collection) cannot hide the first one's write from readers.
        """
        metadata = self.fresh_metadata()
        marked = metadata.pop(META_WRITING, None) is not None
        if int(metadata.get(META_HEAD) or 0) >= seq and not marked:
            return
        metadata[META_HEAD] = max(seq, int(metadata.get(META_HEAD) or 0))
        self.write_metadata(metadata)

    def set_pending(self, add: Iterable[str] = (), remove: Iterable[str] = ()) -> list[str]:
        """Change the pending versions in one metadata write (atomic); returns the new list.

        Writers of one embedded folder hold the store's write lock; on a Chroma server two
        writers changing the list at the same instant could lose one change (Chroma has no
        compare-and-set), so give each server collection one writer at a time.
        """
        metadata = self.fresh_metadata()
        before = pending_in(metadata)
        after = sorted((set(before) | set(add)) - set(remove))
        if after == sorted(before):
            return after
        if after:
            metadata[META_PENDING] = ",".join(after)
        else:
            metadata.pop(META_PENDING, None)
        self.write_metadata(metadata)
        return after

    # -- the embedding model ----------------------------------------------------------------

    def check_embeddings(self, embeddings: Embeddings, where: str = "") -> None:
        """Refuse an embedding model other than the one the collection was built with.

        Reads only: a collection that does not exist yet, or holds nothing, passes (its
        first write records the model); a non-empty one with no record (not built by
        hyde_lc) is refused, since its vectors cannot be vouched for.
        """
        collection = self.existing()
        if collection is None:
            return
        metadata = dict(collection.metadata or {})
        wanted = embedding_model_id(embeddings)
        if metadata.get(META_MODEL) == wanted:
            dimension = declared_dimension(embeddings)
            if dimension is not None:
                self.check_dimension(dimension, where)
            return
        _refuse_other_model(where or collection.name, metadata, wanted, collection.count())

    def records_model(self) -> bool:
        """Whether the collection exists and records its embedding model (built by hyde_lc)."""
        collection = self.existing()
        return collection is not None and META_MODEL in (collection.metadata or {})

    def check_dimension(self, dimension: int, where: str = "") -> None:
        """Refuse vectors of another length than the collection records (same model id).

        Raises `EmbeddingMismatchError` before anything is searched or written; Chroma's own
        error would come later and not say what to do. An empty collection passes.
        """
        collection = self.existing()
        if collection is None:
            return
        metadata = collection.metadata or {}
        recorded = metadata.get(META_DIMENSION)
        if recorded is None or int(recorded) == dimension or collection.count() == 0:
            return
        model = metadata.get(META_MODEL)
        raise EmbeddingMismatchError(
            f"{where or collection.name} holds {recorded}-dimensional vectors from "
            f"{model!r}, but these embeddings give {dimension} dimensions (same model name, "
            f"other settings?). Use the settings the collection was built with ({recorded} "
            "dimensions), or ingest into another collection (--collection NAME)."
        )

    def prepare_write(self, embeddings: Embeddings, dimension: int | None = None) -> Any:
        """Make the collection ready for a write of ``embeddings``' vectors; returns it.

        Creates a missing collection with the model recorded; an empty collection takes
        this model (whatever it recorded before); a non-empty one must have been built
        with it, at the same dimension (checked when ``dimension`` is given).
        """
        self.ensure_writable()
        collection = self.create(embeddings)
        metadata = self.fresh_metadata()
        wanted = embedding_model_id(embeddings)
        if metadata.get(META_MODEL) == wanted:
            if dimension is not None:
                self.check_dimension(dimension)
            return collection
        _refuse_other_model(collection.name, metadata, wanted, collection.count())
        metadata.pop(META_PENDING, None)  # an empty collection has nothing pending
        metadata.update(
            {META_MODEL: wanted, META_DIMENSION: dimension or embedding_dimension(embeddings)}
        )
        self.write_metadata(metadata)
        return collection

    # -- reads: everything, or what searches see ----------------------------------------------

    def get(self, **kwargs: Any) -> dict[str, Any]:
        """``collection.get(**kwargs)``, pending versions included (nothing yet: empty)."""
        collection = self.existing()
        if collection is None:
            return empty_result(list(kwargs.get("include") or DEFAULT_GET))
        return dict(collection.get(**kwargs))

    def count(self) -> int:
        """Every record the collection holds (pending versions included)."""
        collection = self.existing()
        return 0 if collection is None else int(collection.count())

    def has_records(self, where: dict[str, Any]) -> bool:
        """Whether any record matches ``where`` (visible or not)."""
        return bool(self.get(where=where, limit=1, include=[])["ids"])

    def present_ids(self, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` the collection holds (visible or not)."""
        if not ids:
            return set()
        return set(self.get(ids=list(ids), include=[])["ids"])

    def visible_where(self, where: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """``where`` narrowed to the chunks searches may see (none of a pending version).

        Reads the collection's metadata fresh and returns ``where`` unchanged when nothing
        is pending, which is the normal case.

        Example:
            >>> chroma.visible_where({"source": "a.txt"})  # doctest: +SKIP
            {'$and': [{'source': 'a.txt'}, {'doc_version': {'$nin': ['9f0c...']}}]}

        """
        pending = self.pending()
        if not pending:
            return where
        hide: dict[str, Any] = {DOC_VERSION: {"$nin": pending}}
        return {"$and": [where, hide]} if where else hide

    def query_visible(
        self, n_results: int, pending: Iterable[str] | None = None, **query: Any
    ) -> dict[str, Any]:
        """``collection.query(n_results=..., **query)`` without chunks of pending versions.

        Nothing pending: the query as given (plus one metadata read). Otherwise, with no
        filter of the caller's, more results are asked for and pending ones dropped: a
        metadata filter (``$nin``) makes embedded Chroma 1.5 scan its metadata on every
        query (390 ms at 50,000 chunks, against 2 ms for 40 unfiltered results). Where
        pending chunks crowd the neighbourhood past `POST_FILTER_LIMIT` results, or the
        caller filters anyway, the filter is used. ``pending`` is the list of pending
        versions when the caller has it (else it is read fresh).
        """
        collection = self.existing()
        queries = query.get("query_embeddings") or query.get("query_texts") or [None]
        if collection is None:
            return empty_result(list(query.get("include") or DEFAULT_QUERY), len(queries))
        hidden = set(self.pending() if pending is None else pending)
        if not hidden:
            return dict(collection.query(n_results=n_results, **query))
        include = list(query.pop("include", None) or DEFAULT_QUERY)
        hide: dict[str, Any] = {DOC_VERSION: {"$nin": sorted(hidden)}}
        if query.get("where") or query.get("where_document") or len(queries) != 1:
            where = query.pop("where", None)
            where = {"$and": [where, hide]} if where else hide
            return dict(
                collection.query(n_results=n_results, include=include, where=where, **query)
            )
        fetch_include = include if "metadatas" in include else [*include, "metadatas"]
        fetch = 2 * n_results + 8
        while True:
            got: Any = collection.query(n_results=fetch, include=fetch_include, **query)
            metadatas = got["metadatas"][0] if got.get("metadatas") else []
            rows = [
                i for i, meta in enumerate(metadatas) if (meta or {}).get(DOC_VERSION) not in hidden
            ]
            exhausted = len(got["ids"][0]) < fetch  # the collection has no more
            if len(rows) >= n_results or exhausted:
                return result_rows(got, rows[:n_results], include)
            if fetch >= POST_FILTER_LIMIT:
                query.pop("where", None)
                return dict(
                    collection.query(n_results=n_results, include=include, where=hide, **query)
                )
            fetch *= 4

    def pages(
        self,
        where: dict[str, Any] | None = None,
        include: Sequence[str] = ("metadatas",),
        page_size: int = PAGE,
    ) -> Iterator[dict[str, Any]]:
        """The records matching ``where``, ``page_size`` at a time (memory bounded).

        ``where`` is used as given: pass it through `visible_where` to see what searches see.
        """
        return paged(self.get, where, include, page_size)

    def metadatas(self, where: dict[str, Any] | None = None) -> list[tuple[str, dict[str, Any]]]:
        """Every ``(id, metadata)`` matching ``where`` (pending versions included), in pages."""
        out: list[tuple[str, dict[str, Any]]] = []
        for page in self.pages(where):
            metadatas: list[Any] = list(page["metadatas"] or [{}] * len(page["ids"]))
            out.extend(
                (id_, dict(meta or {})) for id_, meta in zip(page["ids"], metadatas, strict=True)
            )
        return out

    def documents(self, ids: Sequence[str], where: dict[str, Any] | None = None) -> list[Document]:
        """The visible chunks with these ids (matching ``where``, a Chroma filter), unordered."""
        if not ids:
            return []
        hide = self.visible_where(where)
        extra: dict[str, Any] = {"where": hide} if hide else {}
        return documents_of(self.get(ids=list(ids), include=list(DEFAULT_GET), **extra))

    def iter_chunks(self, where: dict[str, Any] | None = None) -> Iterator[Document]:
        """Every chunk searches can see (matching ``where``), as Documents, a page at a time."""
        include = ("documents", "metadatas")
        for page in self.pages(self.visible_where(where), include, page_size=TEXT_PAGE):
            yield from documents_of(page)

    def chunks_around(
        self, sources: Sequence[str], doc_ids: Sequence[str] | None, indexes: Sequence[int]
    ) -> list[Document]:
        """Visible chunks of these documents at these positions (a superset to narrow).

        For collections whose chunks carry no derivable ids: the documents (by doc id, else
        by source) and positions as two ``$in`` lists, 4-10x faster in Chroma than an
        ``$or`` of one range per window.
        """
        return documents_of(
            self.get(
                where=around(self.visible_where, sources, doc_ids, indexes),
                include=["documents", "metadatas"],
            )
        )

    def visible_count(self) -> int:
        """Chunks searches can see: all of them but those of pending document versions."""
        collection = self.existing()
        if collection is None:
            return 0
        total = int(collection.count())
        pending = self.pending()
        if not pending:
            return total
        hidden = collection.get(where={DOC_VERSION: {"$in": pending}}, include=[])["ids"]
        return total - len(hidden)

    def info(self) -> dict[str, Any]:
        """Facts about the collection: chunks, documents, scripts, embedding model, dimension.

        Counts what searches see. ``scripts`` counts chunks per script of their document
        (``latin``, ``cjk``, ...; `SCRIPT_NOT_RECORDED` for chunks ingested before chunks
        recorded it), most chunks first; each document lists its own ``script``. Documents
        whose writing was interrupted are listed apart under ``incomplete`` (chunks written
        so far, of how many): searches do not see them until the same file is ingested
        again, which completes them.
        """
        metadata = self.fresh_metadata()
        pending = pending_in(metadata)
        documents: dict[str, dict[str, Any]] = {}
        scripts: dict[str, int] = {}
        visible = 0
        where = {DOC_VERSION: {"$nin": pending}} if pending else None
        for page in self.pages(where):
            for meta in page["metadatas"] or []:
                meta = meta or {}
                visible += 1
                source = str(meta.get("source", "?"))
                script = str(meta.get("script") or SCRIPT_NOT_RECORDED)
                scripts[script] = scripts.get(script, 0) + 1
                entry = documents.setdefault(
                    source,
                    {
                        "source": source,
                        "doc_id": meta.get("doc_id"),
                        "chunks": 0,
                        "pages": set(),
                        "script": script,
                    },
                )
                entry["chunks"] += 1
                if "page" in meta:
                    last = int(meta.get("page_end", meta["page"]))
                    entry["pages"].update(range(int(meta["page"]), last + 1))
        incomplete: dict[str, dict[str, Any]] = {}
        if pending:
            for page in self.pages({DOC_VERSION: {"$in": pending}}):
                for meta in page["metadatas"] or []:
                    meta = meta or {}
                    entry = incomplete.setdefault(
                        str(meta.get(DOC_VERSION)),
                        {
                            "source": str(meta.get("source", "?")),
                            "doc_id": meta.get("doc_id"),
                            "chunks_written": 0,
                            "chunk_count": meta.get("chunk_count"),
                        },
                    )
                    entry["chunks_written"] += 1
        return {
            "collection": self.name,
            "chunks": visible,
            "documents": [
                {**doc, "pages": len(doc["pages"])}
                for doc in sorted(documents.values(), key=lambda d: d["source"])
            ],
            "incomplete": sorted(incomplete.values(), key=lambda d: d["source"]),
            "scripts": dict(sorted(scripts.items(), key=lambda item: (-item[1], item[0]))),
            "embedding_model": metadata.get(META_MODEL),
            "embedding_dimension": metadata.get(META_DIMENSION),
        }


def paged(
    get: Callable[..., Any],
    where: dict[str, Any] | None,
    include: Sequence[str],
    page_size: int = PAGE,
) -> Iterator[dict[str, Any]]:
    """``get``'s records matching ``where``, ``page_size`` at a time, until a short page.

    ``get`` is a chromadb collection's ``get``, or a LangChain `Chroma` store's (the same
    arguments).
    """
    offset = 0
    while True:
        page = get(where=where, include=list(include), limit=page_size, offset=offset)
        if page["ids"]:
            yield page
        if len(page["ids"]) < page_size:
            return
        offset += page_size


def around(
    visible: Callable[[dict[str, Any]], dict[str, Any] | None],
    sources: Sequence[str],
    doc_ids: Sequence[str] | None,
    indexes: Sequence[int],
) -> dict[str, Any] | None:
    """The filter of the chunks of these documents at these positions, through ``visible``."""
    if doc_ids is not None:
        documents: Any = {"doc_id": {"$in": sorted(set(doc_ids))}}
    else:
        documents = {"source": {"$in": sorted(set(sources))}}
    return visible({"$and": [documents, {"chunk_index": {"$in": sorted(set(indexes))}}]})


def declared_dimension(embeddings: Embeddings) -> int | None:
    """The vector length an embeddings object states (``dimension``/``dimensions``), if any."""
    for attr in ("dimension", "dimensions"):
        value = getattr(embeddings, attr, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def embedding_dimension(embeddings: Embeddings) -> int:
    """The vector length of ``embeddings``: declared, else measured on one short text."""
    return declared_dimension(embeddings) or len(embeddings.embed_query("dimension check"))


def _refuse_other_model(where: str, metadata: dict[str, Any], wanted: str, count: int) -> None:
    """Refuse writing or reading ``wanted``'s vectors in a non-empty collection of another."""
    built_with = metadata.get(META_MODEL)
    if count == 0 or built_with == wanted:
        return
    if built_with is None:
        raise StoreError(
            f"{where} holds {count} vectors but no record of their embedding "
            "model (it was not built by hyde_lc). Ingest into a new collection "
            "(--collection NAME) instead."
        )
    raise EmbeddingMismatchError(
        f"{where} was built with embedding model {built_with!r} "
        f"({metadata.get(META_DIMENSION)} dimensions); you asked for {wanted!r}. "
        f"Use --embeddings {built_with} (HYDE_LC_EMBEDDINGS={built_with}), or ingest "
        "into another collection (--collection NAME) to use the new model."
    )
