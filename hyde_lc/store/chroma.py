"""The Chroma collection: where it lives, which embedding model built it, what it holds.

A hyde_lc collection records the embedding model id and dimension in its Chroma
metadata. Opening it with another embedding model is refused before anything is read or
written: vectors from two models in one index make every search silently wrong. An
empty collection takes the model of its first write.

Opening never writes: nothing is created (no folder, no collection) until the first
write, and a read-only store folder can be searched. Location, in order: the arguments,
then ``HYDE_LC_CHROMA_URL`` (a Chroma server) or ``HYDE_LC_STORE`` (a folder), then
``./.hyde_lc`` in the current working directory. The collection name is
``HYDE_LC_COLLECTION`` or ``hyde_lc``. Every request to a Chroma server waits at most
``HYDE_LC_CHROMA_TIMEOUT`` seconds (default 30).

A document too large for one Chroma write is written in several, and searches must not
see it until it is whole: its *version* (`DOC_VERSION` in each chunk's metadata) is
listed as pending in the collection's metadata (`set_pending`, one atomic metadata
write) while it is written. Every read through `open_store`'s store (searches, MMR,
``get``), `visible_where`, `search_filter` or `collection_info` reads that list fresh
(one request, about 0.2 ms embedded) and leaves pending versions out: searches by asking
for a few more results and dropping pending ones (`query_visible`), since a metadata
filter makes embedded Chroma scan every record's metadata on each query.

Example:
    >>> from hyde_lc import open_store
    >>> store = open_store()  # doctest: +SKIP
    >>> store.similarity_search("Who invented the Fresnel lens?", k=2)  # doctest: +SKIP

"""

from __future__ import annotations

import logging
import math
import os
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from chromadb.errors import NotFoundError
from langchain_chroma import Chroma
from langchain_chroma.vectorstores import maximal_marginal_relevance
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from hyde_lc.core.locks import file_lock
from hyde_lc.errors import (
    EmbeddingMismatchError,
    InvalidSettingError,
    StoreError,
)
from hyde_lc.models.loading import EMBEDDINGS_ENV, embedding_model_id
from hyde_lc.store.location import (
    DEFAULT_COLLECTION as DEFAULT_COLLECTION,
)
from hyde_lc.store.location import (
    DEFAULT_STORE_DIR as DEFAULT_STORE_DIR,
)
from hyde_lc.store.location import (
    DEFAULT_TIMEOUT_S as DEFAULT_TIMEOUT_S,
)
from hyde_lc.store.location import (
    LOCK_FILE as LOCK_FILE,
)
from hyde_lc.store.location import (
    SQLITE_FILE as SQLITE_FILE,
)
from hyde_lc.store.location import (
    TIMEOUT_ENV as TIMEOUT_ENV,
)
from hyde_lc.store.location import (
    StoreLocation as StoreLocation,
)
from hyde_lc.store.location import _is_read_only, _read_only_copy
from hyde_lc.store.location import (
    check_collection_name as check_collection_name,
)
from hyde_lc.store.location import (
    lost_server as lost_server,
)
from hyde_lc.store.location import (
    server_lost_as_error as server_lost_as_error,
)
from hyde_lc.store.location import (
    server_url as server_url,
)
from hyde_lc.store.reads import (
    SCRIPT_NOT_RECORDED as SCRIPT_NOT_RECORDED,
)
from hyde_lc.store.reads import (
    chunks_around as chunks_around,
)
from hyde_lc.store.reads import (
    collection_info as collection_info,
)
from hyde_lc.store.reads import (
    collection_pages as collection_pages,
)
from hyde_lc.store.reads import (
    documents_by_id as documents_by_id,
)
from hyde_lc.store.reads import (
    iter_chunks as iter_chunks,
)
from hyde_lc.store.reads import (
    iter_metadatas as iter_metadatas,
)
from hyde_lc.store.reads import (
    iter_pages as iter_pages,
)
from hyde_lc.store.reads import (
    mmr_search as mmr_search,
)
from hyde_lc.store.reads import (
    scored_search as scored_search,
)
from hyde_lc.store.reads import (
    vector_hits as vector_hits,
)
from hyde_lc.store.reads import (
    visible_count as visible_count,
)
from hyde_lc.store.state import (
    DOC_VERSION as DOC_VERSION,
)
from hyde_lc.store.state import (
    META_DIMENSION as META_DIMENSION,
)
from hyde_lc.store.state import (
    META_HEAD as META_HEAD,
)
from hyde_lc.store.state import (
    META_MODEL as META_MODEL,
)
from hyde_lc.store.state import (
    META_PENDING as META_PENDING,
)
from hyde_lc.store.state import (
    META_WRITING as META_WRITING,
)
from hyde_lc.store.state import (
    SEQ as SEQ,
)
from hyde_lc.store.state import (
    _store_collection as _store_collection,
)
from hyde_lc.store.state import (
    client_of as client_of,
)
from hyde_lc.store.state import (
    collection_name as collection_name,
)
from hyde_lc.store.state import (
    existing_collection as existing_collection,
)
from hyde_lc.store.state import (
    fresh_metadata as fresh_metadata,
)
from hyde_lc.store.state import (
    has_collection as has_collection,
)
from hyde_lc.store.state import (
    has_records as has_records,
)
from hyde_lc.store.state import (
    pending_in as pending_in,
)
from hyde_lc.store.state import (
    pending_versions as pending_versions,
)
from hyde_lc.store.state import (
    query_visible as query_visible,
)
from hyde_lc.store.state import (
    raw_get as raw_get,
)
from hyde_lc.store.state import (
    search_filter as search_filter,
)
from hyde_lc.store.state import (
    user_metadata as user_metadata,
)
from hyde_lc.store.state import (
    visible_where as visible_where,
)
from hyde_lc.store.state import (
    without_bookkeeping as without_bookkeeping,
)

logger = logging.getLogger(__name__)

COSINE: dict[str, Any] = {"hnsw": {"space": "cosine"}}


@dataclass
class _Opened:
    client: Any = None
    collection: Any = None
    copy_of: Path | None = None


def _open_existing(location: StoreLocation) -> _Opened:
    """The client and collection if they exist; creates nothing."""
    if not location.has_store():
        return _Opened()
    opened = _Opened()
    if location.path is not None and _is_read_only(location.path):
        opened.copy_of = location.path
        location = StoreLocation(_read_only_copy(location.path), None, location.collection)
    opened.client = location.client()
    try:
        opened.collection = opened.client.get_collection(location.collection)
    except NotFoundError:
        opened.collection = None
    return opened


class HydeChroma(Chroma):
    """A hyde_lc collection as a LangChain `Chroma` store (what `open_store` returns).

    Opening creates nothing: the store folder and the collection are made by the first
    write, with the embedding model recorded; until then reads see an empty collection.
    Searches and ``get`` leave out the chunks of documents still being written
    (`visible_where`). A read-only store folder is read through a temporary copy, and
    writing to it is refused.

    The store keeps its own chromadb client and collection (`chroma_client`,
    `existing_collection`) and implements every search, read and write of `Chroma` over
    chromadb's public API. `Chroma`'s own constructor runs once the collection exists
    (it needs an existing collection, or creates one, and opening must create nothing),
    with the client and relevance function given through its public arguments.

    Example:
        >>> from hyde_lc import open_store
        >>> store = open_store("/tmp/new-store")  # doctest: +SKIP
        >>> store.similarity_search("lamps")  # nothing created yet  # doctest: +SKIP
        []

    """

    hides_pending = True
    """Its searches and ``get`` leave out pending document versions themselves."""

    def __init__(
        self,
        location: StoreLocation,
        embeddings: Embeddings,
        client: Any = None,
        collection: Any = None,
        copy_of: Path | None = None,
    ) -> None:
        self._location = location
        self._copy_of = copy_of
        self._hyde_lc_embeddings = embeddings
        self._hyde_lc_client: Any = client
        self._hyde_lc_collection: Any = None
        self.override_relevance_score_fn = self.distance_to_relevance
        if collection is not None:
            self._bind(client, collection)

    def _bind(self, client: Any, collection: Any) -> None:
        """Use ``client`` and its existing ``collection`` from now on (LangChain's too)."""
        self._hyde_lc_client = client
        self._hyde_lc_collection = collection
        self._hyde_lc_relevance = relevance_for_space(collection_space(collection))
        Chroma.__init__(
            self,
            collection_name=collection.name,
            embedding_function=self._hyde_lc_embeddings,
            client=client,
            relevance_score_fn=self.distance_to_relevance,
            create_collection_if_not_exists=False,
        )

    @property
    def embeddings(self) -> Embeddings:
        """The embeddings queries and writes are embedded with."""
        return self._hyde_lc_embeddings

    @property
    def location(self) -> StoreLocation:
        """Where the collection lives."""
        return self._location

    @property
    def read_only_source(self) -> Path | None:
        """The read-only folder this store reads through a temporary copy, if it does."""
        return self._copy_of

    def chroma_client(self) -> Any:
        """The chromadb client; opened on first use (for a new folder, that creates it)."""
        if self._hyde_lc_client is None:
            self._hyde_lc_client = self._location.client()
        return self._hyde_lc_client

    def has_open_client(self) -> bool:
        """Whether the chromadb client is open (a store never read or written has none)."""
        return self._hyde_lc_client is not None

    def existing_collection(self) -> Any:
        """The chromadb collection if it exists by now, else None (nothing is created)."""
        if self._hyde_lc_collection is None:
            if self._hyde_lc_client is None and not self._location.has_store():
                return None
            client = self.chroma_client()
            try:
                found = client.get_collection(self._location.collection)
            except NotFoundError:
                return None
            self._bind(client, found)
        return self._hyde_lc_collection

    def create_collection(self) -> Any:
        """The collection, created now (with the embedding model recorded) if missing."""
        found = self.existing_collection()
        if found is not None:
            return found
        embeddings = self.embeddings
        metadata = {
            META_MODEL: embedding_model_id(embeddings),
            META_DIMENSION: embedding_dimension(embeddings),
        }
        client = self.chroma_client()
        created = client.get_or_create_collection(
            name=self._location.collection,
            embedding_function=None,
            metadata=metadata,
            configuration=COSINE,
        )
        self._bind(client, created)
        return created

    def reopen(self) -> None:
        """Read the store afresh from disk: a new client and collection (embedded stores).

        Embedded Chroma keeps each collection's vector index in memory, loaded once per
        system; chromadb shares one system per folder in a process. Clearing chromadb's
        system cache (``clear_system_cache``, public) makes the next client load a new
        one: calls already running finish on the old one. Other clients of the folder in
        this process keep their view until they reopen too.
        """
        if self._hyde_lc_client is None or self._location.path is None:
            return
        self._hyde_lc_client.clear_system_cache()
        client = self._location.client()
        self._hyde_lc_client = client
        self._hyde_lc_collection = None
        try:
            found = client.get_collection(self._location.collection)
        except NotFoundError:
            return
        self._bind(client, found)

    def distance_to_relevance(self, distance: float) -> float:
        """A distance of this collection's space as a relevance, higher is better."""
        relevance = getattr(self, "_hyde_lc_relevance", None) or _cosine_relevance
        return relevance(distance)

    # -- reads leave pending document versions out -----------------------------------------

    def _query(
        self,
        vector: list[float],
        k: int,
        where: Any = None,
        where_document: Any = None,
        include: Sequence[str] = ("documents", "metadatas", "distances"),
        **kwargs: Any,
    ) -> dict[str, Any]:
        """One query of the collection by ``vector``, without pending versions."""
        return without_bookkeeping(
            query_visible(
                self,
                k,
                where=where,
                where_document=where_document,
                query_embeddings=[vector],
                include=list(include),
                **kwargs,
            )
        )

    def similarity_search(
        self, query: str, k: int = 4, filter: dict | None = None, **kwargs: Any
    ) -> list[Document]:
        """The ``k`` chunks nearest to ``query`` (LangChain's ``similarity_search``)."""
        return [doc for doc, _ in self.similarity_search_with_score(query, k, filter, **kwargs)]

    def similarity_search_with_score(
        self,
        query: str,
        k: int = 4,
        filter: dict | None = None,
        where_document: dict | None = None,
        **kwargs: Any,
    ) -> list[tuple[Document, float]]:
        """The ``k`` nearest chunks with their distance (lower is nearer)."""
        vector = self.embeddings.embed_query(query)
        return self.similarity_search_by_vector_with_relevance_scores(
            vector, k, filter, where_document, **kwargs
        )

    def similarity_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        filter: dict | None = None,
        where_document: dict | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """The ``k`` chunks nearest to ``embedding``."""
        return [
            doc
            for doc, _ in self.similarity_search_by_vector_with_relevance_scores(
                embedding, k, filter, where_document, **kwargs
            )
        ]

    def similarity_search_by_vector_with_relevance_scores(
        self,
        embedding: list[float],
        k: int = 4,
        filter: dict | None = None,
        where_document: dict | None = None,
        **kwargs: Any,
    ) -> list[tuple[Document, float]]:
        """The ``k`` chunks nearest to ``embedding`` with their distance, as `Chroma` gives.

        Despite its name (langchain-chroma's), the score is Chroma's distance: lower is
        nearer. `distance_to_relevance` turns it into a relevance.
        """
        got = self._query(embedding, k, filter, where_document, **kwargs)
        return [
            (doc, float(distance))
            for doc, distance, text in zip(
                _documents(got), got["distances"][0], got["documents"][0], strict=True
            )
            if text is not None  # as Chroma: records without a text are no Documents
        ]

    def similarity_search_with_vectors(
        self,
        query: str,
        k: int = 4,
        filter: dict | None = None,
        where_document: dict | None = None,
        **kwargs: Any,
    ) -> list[tuple[Document, Any]]:
        """The ``k`` chunks nearest to ``query`` with their stored vectors."""
        include = ("documents", "metadatas", "embeddings")
        vector = self.embeddings.embed_query(query)
        got = self._query(vector, k, filter, where_document, include=include, **kwargs)
        return list(zip(_documents(got), _vectors(got), strict=True))

    def max_marginal_relevance_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: dict | None = None,
        where_document: dict | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """Maximal marginal relevance: ``k`` diverse chunks among the ``fetch_k`` nearest."""
        include = ("documents", "metadatas", "distances", "embeddings")
        got = self._query(embedding, fetch_k, filter, where_document, include=include, **kwargs)
        vectors = _vectors(got)
        if not vectors:
            return []
        chosen = maximal_marginal_relevance(
            np.array(embedding, dtype=np.float32), vectors, k=k, lambda_mult=lambda_mult
        )
        docs = _documents(got)
        return [docs[i] for i in chosen]

    def max_marginal_relevance_search(
        self,
        query: str,
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: dict | None = None,
        where_document: dict | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """Maximal marginal relevance search for ``query``."""
        vector = self.embeddings.embed_query(query)
        return self.max_marginal_relevance_search_by_vector(
            vector, k, fetch_k, lambda_mult, filter, where_document, **kwargs
        )

    def get(
        self,
        ids: str | list[str] | None = None,
        where: Any = None,
        limit: int | None = None,
        offset: int | None = None,
        where_document: Any = None,
        include: list[str] | None = None,
    ) -> dict[str, Any]:
        """LangChain's ``get``, without chunks of pending versions."""
        kept = list(include) if include is not None else ["metadatas", "documents"]
        collection = self.existing_collection()
        if collection is None:
            return _empty_get(kept)
        got = collection.get(
            ids=ids,
            where=visible_where(self, where),
            limit=limit,
            offset=offset,
            where_document=where_document,
            include=kept,
        )
        return without_bookkeeping(dict(got))

    def delete_collection(self) -> None:
        """Delete the collection (and everything in it)."""
        collection = self.existing_collection()
        if collection is not None:
            self.chroma_client().delete_collection(collection.name)
        self._hyde_lc_collection = None

    def reset_collection(self) -> None:
        """Delete the collection; the next write creates it again, empty."""
        self.delete_collection()

    def hybrid_search(self, search: Any) -> list[Document]:
        """Not available: Chroma's own sparse search is not enabled on local Chroma.

        Use `HyDERetriever` (hybrid by default) or `hyde_lc.store.collection`.
        """
        raise NotImplementedError(
            "Chroma's hybrid_search needs Chroma Cloud; search hybrid with "
            "hyde_lc.HyDERetriever(vectorstore=store) instead"
        )

    def fork(self, new_name: str) -> Chroma:
        """Not available for a hyde_lc collection (its lexical index would not follow)."""
        raise NotImplementedError(
            "a hyde_lc collection cannot be forked; ingest the documents into another "
            "collection (--collection NAME)"
        )

    def add_images(self, *args: Any, **kwargs: Any) -> list[str]:
        """Not available: a hyde_lc collection holds text chunks."""
        raise NotImplementedError("a hyde_lc collection holds text; add_texts adds text")

    def similarity_search_by_image(self, *args: Any, **kwargs: Any) -> list[Document]:
        """Not available: a hyde_lc collection holds text chunks."""
        raise NotImplementedError("a hyde_lc collection holds text; search it by text")

    def similarity_search_by_image_with_relevance_score(
        self, *args: Any, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """Not available: a hyde_lc collection holds text chunks."""
        raise NotImplementedError("a hyde_lc collection holds text; search it by text")

    @classmethod
    def from_texts(cls, *args: Any, **kwargs: Any) -> HydeChroma:
        """Not available: open the store, then add texts to it.

        Example:
            >>> store = open_store("/tmp/store")  # doctest: +SKIP
            >>> store.add_texts(["The lamp was lit at dusk."])  # doctest: +SKIP

        """
        raise NotImplementedError(
            "open a hyde_lc store with hyde_lc.open_store(...), then call add_texts or "
            "add_documents on it"
        )

    # LangChain's writes go through the hybrid collection's one write path: stamped in the
    # change feed, indexed lexically at once, under the collection's lock.

    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict] | None = None,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """LangChain's ``add_texts``; the first write creates the collection (model recorded).

        Texts without an id get a new UUID; an id written before is replaced.
        """
        texts = list(texts)
        given = list(ids) if ids is not None else []
        if ids is not None and len(given) != len(texts):
            raise StoreError(f"add_texts got {len(texts)} texts and {len(given)} ids")
        ids = [str(i) if i is not None else str(uuid.uuid4()) for i in given] or [
            str(uuid.uuid4()) for _ in texts
        ]
        metas = list(metadatas or [])
        metas += [{}] * (len(texts) - len(metas))
        if not texts:
            return []
        vectors = self.embeddings.embed_documents(texts)
        self._write("upsert", ids, vectors, metas, texts)
        return ids

    def update_documents(self, ids: list[str], documents: list[Document]) -> None:
        """LangChain's ``update_documents``: new texts, metadata and vectors for these ids."""
        if len(ids) != len(documents):
            raise StoreError(f"update_documents got {len(ids)} ids and {len(documents)} documents")
        if not ids:
            return
        texts = [d.page_content for d in documents]
        vectors = self.embeddings.embed_documents(texts)
        self._write("update", ids, vectors, [dict(d.metadata or {}) for d in documents], texts)

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> None:
        """LangChain's ``delete``: by ``ids``, or by ``where=...`` (Chroma's filter)."""
        if self.existing_collection() is None:
            return
        from hyde_lc.store.collection import HybridCollection

        where = kwargs.get("where")
        with HybridCollection.of(self).writing() as write:
            if ids:
                write.delete([str(i) for i in ids])
            if where:
                write.delete_where(where)

    def _write(self, how: str, ids: list[str], vectors: Any, metas: list, texts: list) -> None:
        from hyde_lc.store.collection import HybridCollection

        batch = max_write(self)
        with HybridCollection.of(self).writing() as write:
            step = getattr(write, how)
            for start in range(0, len(ids), batch):
                end = start + batch
                try:
                    step(ids[start:end], vectors[start:end], metas[start:end], texts[start:end])
                except ValueError as exc:
                    if "metadata" in str(exc).lower():
                        raise ValueError(
                            f"{exc}\n\nChroma stores str, int, float and bool metadata values: "
                            "filter complex metadata from the documents (langchain_community."
                            "vectorstores.utils.filter_complex_metadata)."
                        ) from exc
                    raise


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


_RESULT_KEYS = ("embeddings", "documents", "metadatas", "uris", "data")


def _empty_get(include: Sequence[str]) -> dict[str, Any]:
    kept: dict[str, Any] = {key: ([] if key in include else None) for key in _RESULT_KEYS}
    return {"ids": [], **kept, "included": list(include)}


def _documents(got: dict[str, Any]) -> list[Document]:
    """The Documents of a one-query result (its first row), as `Chroma` makes them."""
    ids = got["ids"][0]
    texts = (got.get("documents") or [[""] * len(ids)])[0]
    metas = (got.get("metadatas") or [[None] * len(ids)])[0]
    return [
        Document(page_content=text, metadata=dict(meta or {}), id=id_)
        for id_, text, meta in zip(ids, texts, metas, strict=True)
    ]


def _vectors(got: dict[str, Any]) -> list[Any]:
    rows = got.get("embeddings")
    return list(rows[0]) if rows is not None and len(rows) else []


def set_head(store: Chroma, seq: int) -> None:
    """Record ``seq`` as the last finished write (one metadata write; under the write lock).

    The head never moves back: a second writer that took the same number (two writer
    processes on one server collection, which hyde_lc does not support) cannot hide
    the first one's write from readers.
    """
    collection = prepare_write(store)
    metadata = fresh_metadata(store)
    marked = metadata.pop(META_WRITING, None) is not None
    if int(metadata.get(META_HEAD) or 0) >= seq and not marked:
        return
    metadata[META_HEAD] = max(seq, int(metadata.get(META_HEAD) or 0))
    _write_metadata(collection, metadata)


def set_metadata_value(store: Chroma, key: str, value: Any) -> None:
    """Set one value of the collection's metadata (one read, one write; under the lock)."""
    collection = prepare_write(store)
    metadata = fresh_metadata(store)
    if metadata.get(key) == value:
        return
    metadata[key] = value
    _write_metadata(collection, metadata)


def set_pending(store: Chroma, add: Iterable[str] = (), remove: Iterable[str] = ()) -> list[str]:
    """Change the pending versions in one metadata write (atomic); returns the new list.

    Writers of one embedded folder hold `write_lock`; on a Chroma server two writers
    changing the list at the same instant could lose one change (Chroma has no
    compare-and-set), so give each server collection one writer at a time.
    """
    collection = prepare_write(store)
    metadata = fresh_metadata(store)
    before = pending_in(metadata)
    after = sorted((set(before) | set(add)) - set(remove))
    if after == sorted(before):
        return after
    if after:
        metadata[META_PENDING] = ",".join(after)
    else:
        metadata.pop(META_PENDING, None)
    _write_metadata(collection, metadata)
    return after


def _write_metadata(collection: Any, metadata: dict[str, Any]) -> None:
    metadata.pop("hnsw:space", None)  # set through the configuration, not metadata
    collection.modify(metadata=metadata or {META_PENDING: ""})


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


def check_embeddings(store: Chroma, embeddings: Embeddings, location: str = "") -> None:
    """Refuse an embedding model other than the one the collection was built with.

    Reads only: a collection that does not exist yet, or holds nothing, passes (its
    first write records the model); a non-empty one with no record (not built by
    hyde_lc) is refused, since its vectors cannot be vouched for.
    """
    collection = _store_collection(store)
    if collection is None:
        return
    metadata = dict(collection.metadata or {})
    wanted = embedding_model_id(embeddings)
    if metadata.get(META_MODEL) == wanted:
        dimension = declared_dimension(embeddings)
        if dimension is not None:
            check_dimension(store, dimension, location)
        return
    _refuse_other_model(location or collection.name, metadata, wanted, collection.count())


def check_embeddings_for_reading(store: Chroma, embeddings: Embeddings) -> None:
    """Refuse searching a hyde_lc collection with another model than it was built with.

    A collection built by other tools records no model: its owner vouches for the
    embeddings they pass, so it is searched as it is. Reads only.
    """
    collection = _store_collection(store)
    if collection is None or META_MODEL not in (collection.metadata or {}):
        return
    check_embeddings(store, embeddings)


def ensure_writable(store: Chroma) -> None:
    """Refuse to write a store that is read through a copy of a read-only folder."""
    source = store.read_only_source if isinstance(store, HydeChroma) else None
    if source is not None:
        raise StoreError(
            f"{source} is read-only: it can be searched but not written. Make it "
            "writable (chmod -R u+w), or ingest into another store (--store DIR)"
        )


def prepare_write(store: Chroma, dimension: int | None = None) -> Any:
    """Make the collection ready for a write of ``store``'s embeddings; returns it.

    Creates a missing collection with the model recorded; an empty collection takes
    this model (whatever it recorded before); a non-empty one must have been built with
    it, at the same dimension (checked when ``dimension`` is given).
    """
    if not isinstance(store, HydeChroma):
        raise StoreError(
            "hyde_lc writes through a store opened by hyde_lc.open_store(...) (for a "
            "collection on a Chroma server: open_store(url=..., collection=...)); "
            "langchain-chroma's Chroma gives no public access to the collection it writes"
        )
    ensure_writable(store)
    embeddings = store.embeddings
    if embeddings is None:
        raise StoreError("the store has no embedding function; open it with open_store()")
    collection = store.create_collection()
    metadata = fresh_metadata(store)
    wanted = embedding_model_id(embeddings)
    if metadata.get(META_MODEL) == wanted:
        if dimension is not None:
            check_dimension(store, dimension)
        return collection
    _refuse_other_model(collection.name, metadata, wanted, collection.count())
    metadata.pop(META_PENDING, None)  # an empty collection has nothing pending
    metadata.update(
        {META_MODEL: wanted, META_DIMENSION: dimension or embedding_dimension(embeddings)}
    )
    _write_metadata(collection, metadata)
    return collection


def declared_dimension(embeddings: Embeddings) -> int | None:
    """The vector length an embeddings object states (``dimension``/``dimensions``), if any."""
    for attr in ("dimension", "dimensions"):
        value = getattr(embeddings, attr, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def check_dimension(store: Chroma, dimension: int, location: str = "") -> None:
    """Refuse vectors of another length than the collection records (same model id).

    Raises `EmbeddingMismatchError` before anything is searched or written; Chroma's own
    error would come later and not say what to do. An empty collection passes.
    """
    collection = _store_collection(store)
    if collection is None:
        return
    metadata = collection.metadata or {}
    recorded = metadata.get(META_DIMENSION)
    if recorded is None or int(recorded) == dimension or collection.count() == 0:
        return
    model = metadata.get(META_MODEL)
    raise EmbeddingMismatchError(
        f"{location or collection.name} holds {recorded}-dimensional vectors from "
        f"{model!r}, but these embeddings give {dimension} dimensions (same model name, "
        f"other settings?). Use the settings the collection was built with ({recorded} "
        "dimensions), or ingest into another collection (--collection NAME)."
    )


def collection_exists(location: StoreLocation) -> bool:
    """Whether the collection exists, without creating the store or the collection."""
    try:
        return _open_existing(location).collection is not None
    except StoreError:
        raise
    except Exception as exc:
        raise StoreError(f"cannot open {location.describe()}: {exc}") from exc


def open_store(
    path: str | os.PathLike | None = None,
    *,
    url: str | None = None,
    collection: str | None = None,
    embeddings: Embeddings | None = None,
    timeout: float | None = None,
) -> HydeChroma:
    """Open a hyde_lc collection as a LangChain `Chroma` store; creates nothing.

    With no arguments: the collection ``hyde_lc`` in ``./.hyde_lc`` with the default
    embeddings. The embedding model is checked against the one the collection was
    built with (`EmbeddingMismatchError` when they differ). A missing folder or
    collection is created by the first write; ``timeout`` (seconds, default
    ``$HYDE_LC_CHROMA_TIMEOUT`` or 30) bounds each request to a Chroma server.
    """
    location = StoreLocation.resolve(path, url, collection, timeout)
    check_collection_name(location.collection)
    try:
        opened = _open_existing(location)
    except StoreError:
        raise
    except Exception as exc:  # chromadb's errors: damaged database, ...
        raise StoreError(f"cannot open {location.describe()}: {exc}") from exc
    embeddings = embeddings or _default_embeddings(opened.collection)
    store = HydeChroma(location, embeddings, opened.client, opened.collection, opened.copy_of)
    check_embeddings(store, embeddings, location.describe())
    return store


def _default_embeddings(collection: Any) -> Embeddings:
    """The model an existing collection records, else ``$HYDE_LC_EMBEDDINGS`` or MiniLM.

    A collection built with the multilingual embedder is then opened with it without
    ``--embeddings``; a model named by the environment still wins (and a different one
    is refused by the model check, as before).
    """
    from hyde_lc.models import loading as models  # looked up at call time, as the CLI does

    recorded = None
    if collection is not None and not os.environ.get(EMBEDDINGS_ENV):
        recorded = (collection.metadata or {}).get(META_MODEL)
    if isinstance(recorded, str) and recorded.startswith("local:"):
        try:
            return models.load_embeddings(recorded)
        except InvalidSettingError:  # a local model this version does not know
            pass
    return models.load_embeddings()


def max_write(store: Chroma) -> int:
    """The most records Chroma takes in one call (5,461 for embedded Chroma 1.5)."""
    if not isinstance(store, HydeChroma):
        return 1000  # langchain-chroma gives no public access to its client
    try:
        return max(1, int(store.chroma_client().get_max_batch_size()))
    except Exception:
        return 1000


def present_ids(store: Chroma, ids: Sequence[str]) -> set[str]:
    """Which of ``ids`` the collection holds (visible or not)."""
    if not ids:
        return set()
    return set(raw_get(store, ids=list(ids), include=[])["ids"])


def store_folder(store: Chroma) -> Path | None:
    """The folder of an embedded (persistent) Chroma store; None for a server or in memory."""
    if isinstance(store, HydeChroma):
        return store.location.path
    return None  # langchain-chroma's Chroma does not say publicly where it lives


def refresh_store(store: Chroma) -> None:
    """Reload this process's view of an embedded store from disk.

    Embedded Chroma keeps each collection's vector index in memory, loaded once per
    process: writes made by another process since then are invisible to this one's
    searches (chroma-core/chroma#3792), and a write on top of such a stale index would
    drop the other process's vectors from the index. `write_lock` calls this once it
    holds the lock; a long-lived reader can call it to see what others ingested. Calls
    already running finish on the old view. A no-op for a Chroma server, for a store
    whose client is not open yet, for a read-only folder's copy, and for a store made
    by langchain-chroma's `Chroma` itself (it gives no public access to its client).
    """
    if (
        isinstance(store, HydeChroma)
        and store.location.path is not None
        and store.read_only_source is None
    ):
        store.reopen()


@contextmanager
def write_lock(store: Chroma) -> Iterator[None]:
    """Be the only writer of an embedded store while the block runs (processes and threads).

    Embedded Chroma is not process-safe: two processes writing one folder at once
    corrupt its vector index. So writers take an exclusive lock on ``hyde_lc.lock`` in
    the folder (creating the folder: call this only to write), and anyone else waits for
    it; the operating system releases it when its holder exits or is killed, so a crash
    never leaves it stuck. Once the lock is held, the store is refreshed
    (`refresh_store`) so the write builds on what other processes wrote. A Chroma server
    orders concurrent writes itself: no lock there.
    """
    folder = store_folder(store)
    if folder is None:
        yield
        return
    ensure_writable(store)
    folder.mkdir(parents=True, exist_ok=True)
    with file_lock(folder / LOCK_FILE, waiting_note=f"{folder} is being written"):
        refresh_store(store)
        yield


LEXICAL_FOLDER = "hyde_lc_lexical"
"""In an embedded store's folder: one lexical index per collection."""


def lexical_folder(store: Chroma) -> Path | None:
    """Where a hyde_lc collection's lexical index lives; None for other collections.

    Beside the collection in a writable store folder; for a Chroma server or a read-only
    folder, in this machine's cache (``$HYDE_LC_CACHE_DIR/lexical``), keyed by where the
    collection lives, and kept current from the collection like any other.
    """
    import hashlib

    from hyde_lc.models.weights import cache_dir

    collection = _store_collection(store)
    if collection is None or META_MODEL not in (collection.metadata or {}):
        return None
    name = f"{collection.name}-{collection.id}"
    folder = store_folder(store)
    read_only = isinstance(store, HydeChroma) and store.read_only_source is not None
    if folder is not None and not read_only:
        return folder / LEXICAL_FOLDER / name
    where = server_url(store) or str(folder)
    key = hashlib.sha256(where.encode("utf-8")).hexdigest()[:12]
    return cache_dir() / "lexical" / f"{key}-{name}"
