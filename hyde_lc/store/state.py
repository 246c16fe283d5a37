"""What a hyde_lc collection records, and which of its chunks searches may see.

A collection's metadata records the embedding model (`META_MODEL`, `META_DIMENSION`), the
last finished write (`META_HEAD`) and the document versions being written in parts or
removed (`META_PENDING`); each chunk records its document version (`DOC_VERSION`) and the
write that wrote it (`SEQ`). Searches leave pending versions out (`visible_where`,
`query_visible`).

Example:
    >>> pending_in({META_PENDING: "v1,v2"})
    ['v1', 'v2']

"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from chromadb.errors import NotFoundError
from langchain_chroma import Chroma

from hyde_lc.errors import StoreError

logger = logging.getLogger(__name__)

META_MODEL = "hyde_lc_embedding_model"


META_DIMENSION = "hyde_lc_embedding_dimension"


META_WRITING = "hyde_lc_writing"
"""Collection metadata: the number of a write under way (removed when the head reaches it)."""
META_PENDING = "hyde_lc_pending"
"""Collection metadata: the document versions being written or removed, comma-separated.
Searches leave their chunks out."""


META_HEAD = "hyde_lc_head"
"""Collection metadata: the sequence number of the last finished write (the change feed's
head, `hyde_lc.store.collection`)."""


SEQ = "hyde_lc_seq"
"""Chunk metadata: the sequence number of the write that wrote the chunk."""


DOC_VERSION = "doc_version"
"""Chunk metadata: which version of a document (file, content, chunking) a chunk is of."""


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


def _store_collection(store: Chroma) -> Any:
    """The chromadb collection of a store opened by `open_store` (None: not made yet).

    None too for a store made by langchain-chroma's `Chroma` itself, which gives no public
    access to its collection: hyde_lc reads those through their public methods.
    """
    existing = getattr(store, "existing_collection", None)  # a store opened by open_store
    return existing() if callable(existing) else None


def is_own_store(store: Chroma) -> bool:
    """Whether ``store`` was opened by `open_store` (it exposes its chromadb collection)."""
    return callable(getattr(store, "existing_collection", None))


def existing_collection(store: Chroma) -> Any:
    """The chromadb collection behind ``store``, or None if it does not exist yet."""
    return _store_collection(store)


def client_of(store: Chroma) -> Any:
    """The chromadb client behind a store opened by `open_store`."""
    client = getattr(store, "chroma_client", None)
    if not callable(client):
        raise StoreError(
            "langchain-chroma's Chroma gives no public access to its client: open the "
            "collection with hyde_lc.open_store(...)"
        )
    return client()


def collection_name(store: Chroma) -> str | None:
    """The name of ``store``'s collection (None if the store does not say publicly)."""
    location = getattr(store, "location", None)
    name = getattr(location, "collection", None)
    return str(name) if name else None


def has_collection(store: Chroma) -> bool:
    """Whether ``store``'s collection exists (a store opened by `open_store` may not, yet).

    A langchain-chroma `Chroma` made its collection when it was made.
    """
    return _store_collection(store) is not None or not is_own_store(store)


def raw_get(store: Chroma, **kwargs: Any) -> dict[str, Any]:
    """``collection.get(**kwargs)``, pending versions included.

    On the chromadb collection of a store opened by `open_store` (nothing yet: empty);
    on another `Chroma` through its public ``get``, which takes the same arguments.
    """
    if not is_own_store(store):
        return dict(store.get(**kwargs))
    collection = _store_collection(store)
    if collection is None:
        include = list(kwargs.get("include") or ["metadatas", "documents"])
        empty: dict[str, Any] = {key: ([] if key in include else None) for key in _RESULT_KEYS}
        return {"ids": [], **empty, "included": include}
    return dict(collection.get(**kwargs))


_RESULT_KEYS = ("embeddings", "documents", "metadatas", "uris", "data")


def has_records(store: Chroma, where: dict) -> bool:
    """Whether any record matches ``where`` (visible or not)."""
    return bool(raw_get(store, where=where, limit=1, include=[])["ids"])


def fresh_metadata(store: Chroma) -> dict[str, Any]:
    """The collection's metadata as stored now (another process may have changed it).

    Empty for a store made by langchain-chroma's `Chroma` itself: it gives no public
    access to its collection's metadata.
    """
    collection = _store_collection(store)
    if collection is None:
        return {}
    try:
        return dict(client_of(store).get_collection(collection.name).metadata or {})
    except NotFoundError:
        return {}


def pending_versions(store: Chroma) -> list[str]:
    """The document versions being written or removed: searches leave them out."""
    return pending_in(fresh_metadata(store))


def pending_in(metadata: dict[str, Any]) -> list[str]:
    """The pending versions listed in collection metadata."""
    raw = metadata.get(META_PENDING) or ""
    return [version for version in str(raw).split(",") if version]


def visible_where(store: Chroma, where: dict | None = None) -> dict | None:
    """``where`` narrowed to the chunks searches may see (none of a pending version).

    Reads the collection's metadata fresh (one request, about 0.25 ms embedded) and
    returns ``where`` unchanged when nothing is pending, which is the normal case.

    Example:
        >>> visible_where(store, {"source": "a.txt"})  # doctest: +SKIP
        {'$and': [{'source': 'a.txt'}, {'doc_version': {'$nin': ['9f0c...']}}]}

    """
    pending = pending_versions(store)
    if not pending:
        return where
    hide: dict[str, Any] = {DOC_VERSION: {"$nin": pending}}
    return {"$and": [where, hide]} if where else hide


def search_filter(store: Chroma, where: dict | None = None) -> dict | None:
    """The ``filter`` for a LangChain search on ``store`` that leaves pending versions out.

    A store from `open_store` leaves them out itself (``where`` comes back unchanged);
    any other `Chroma` over a hyde_lc collection gets `visible_where`.
    """
    return where if getattr(store, "hides_pending", False) else visible_where(store, where)


_POST_FILTER_LIMIT = 2048
"""Most results asked for when searching around pending chunks before filtering instead."""


def query_visible(
    store: Chroma, n_results: int, pending: Iterable[str] | None = None, **query: Any
) -> Any:
    """``collection.query(n_results=..., **query)`` without chunks of pending versions.

    For a store opened by `open_store` (see `_store_collection`).

    Nothing pending: the query as given (plus one metadata read). Otherwise, with no
    filter of the caller's, more results are asked for and pending ones dropped: a
    metadata filter (``$nin``) makes embedded Chroma 1.5 scan its metadata on every
    query (390 ms at 50,000 chunks, against 2 ms for 40 unfiltered results). Where
    pending chunks crowd the neighbourhood past `_POST_FILTER_LIMIT` results, or the
    caller filters anyway, the filter is used. ``pending`` is the list of pending
    versions when the caller has it (else it is read fresh).
    """
    collection = _store_collection(store)
    if collection is None:
        return _empty_query(query)
    pending = set(pending_versions(store) if pending is None else pending)
    if not pending:
        return collection.query(n_results=n_results, **query)
    queries = query.get("query_embeddings") or query.get("query_texts") or []
    include = list(query.pop("include", None) or ["metadatas", "documents", "distances"])
    hide: dict[str, Any] = {DOC_VERSION: {"$nin": sorted(pending)}}
    if query.get("where") or query.get("where_document") or len(queries) != 1:
        where = query.pop("where", None)
        where = {"$and": [where, hide]} if where else hide
        return collection.query(n_results=n_results, include=include, where=where, **query)
    fetch_include = include if "metadatas" in include else [*include, "metadatas"]
    fetch = 2 * n_results + 8
    while True:
        got: Any = collection.query(n_results=fetch, include=fetch_include, **query)
        metadatas = got["metadatas"][0] if got.get("metadatas") else []
        rows = [
            i for i, meta in enumerate(metadatas) if (meta or {}).get(DOC_VERSION) not in pending
        ]
        exhausted = len(got["ids"][0]) < fetch  # the collection has no more
        if len(rows) >= n_results or exhausted:
            return _rows(got, rows[:n_results], include)
        if fetch >= _POST_FILTER_LIMIT:
            query.pop("where", None)
            return collection.query(n_results=n_results, include=include, where=hide, **query)
        fetch *= 4


def _empty_query(query: dict[str, Any]) -> dict[str, Any]:
    """What a query of an empty collection answers."""
    include = list(query.get("include") or ["metadatas", "documents", "distances"])
    count = len(query.get("query_embeddings") or query.get("query_texts") or [None])
    rows: list[list[Any]] = [[] for _ in range(count)]
    kept = {key: (rows if key in include else None) for key in (*_RESULT_KEYS, "distances")}
    return {"ids": rows, **kept, "included": include}


def _rows(got: Any, rows: list[int], include: list[str]) -> dict[str, Any]:
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
