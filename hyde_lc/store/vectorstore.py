"""The LangChain store over a hyde_lc collection: `open_store` and `HydeChroma`.

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

`HydeChroma` is LangChain's `Chroma` on top of the `HybridCollection` it is built with:
every search and ``get`` leaves out the chunks of documents still being written
(`hyde_lc.store.chroma_collection.ChromaCollection.query_visible`), and every write
(``add_texts``, ``add_documents``, ``update_documents``, ``delete``) goes through the
collection's one write path, which keeps the BM25 index in step.

Example:
    >>> from hyde_lc import open_store
    >>> store = open_store()  # doctest: +SKIP
    >>> store.similarity_search("Who invented the Fresnel lens?", k=2)  # doctest: +SKIP

"""

from __future__ import annotations

import functools
import logging
import os
import uuid
import weakref
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np
from langchain_chroma import Chroma
from langchain_chroma.vectorstores import maximal_marginal_relevance
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from hyde_lc.core.language import valid_unicode
from hyde_lc.core.settings import settings
from hyde_lc.errors import HydeLcError, InvalidSettingError, StoreError
from hyde_lc.store.chroma_collection import (
    COSINE,
    META_MODEL,
    ChromaCollection,
    empty_result,
    query_documents,
    query_vectors,
    without_bookkeeping,
)
from hyde_lc.store.collection import HybridCollection, Where, feed_name
from hyde_lc.store.location import StoreLocation, check_collection_name, server_lost_as_error

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])


def _says_lost_server(method: F) -> F:
    """``method``, raising `StoreUnavailableError` (naming the server) when it is gone.

    LangChain's store API would otherwise surface httpx's ``ConnectError``; the async
    variants LangChain derives from these methods go through them too.
    """

    @functools.wraps(method)
    def call(self: HydeChroma, *args: Any, **kwargs: Any) -> Any:
        with server_lost_as_error(self.location, "call it again once the server is back"):
            return method(self, *args, **kwargs)

    return cast(F, call)


class HydeChroma(Chroma):
    """A hyde_lc collection as a LangChain `Chroma` store (what `open_store` returns).

    Opening creates nothing: the store folder and the collection are made by the first
    write, with the embedding model recorded; until then reads see an empty collection.
    Searches and ``get`` leave out the chunks of documents still being written. A
    read-only store folder is read through a temporary copy, and writing to it is refused.

    The store is built on its `HybridCollection` (``hybrid``) and fully set up when made:
    it implements every search, read and write of `Chroma` over chromadb's public API,
    and LangChain's own attributes (``_client``, ``_collection``, ``_embedding_function``,
    ...) answer as `Chroma`'s do, the collection being created (model recorded) when one
    of them needs it.

    Example:
        >>> from hyde_lc import open_store
        >>> store = open_store("/tmp/new-store")  # doctest: +SKIP
        >>> store.similarity_search("lamps")  # nothing created yet  # doctest: +SKIP
        []

    """

    def __init__(self, hybrid: HybridCollection) -> None:
        self.hybrid = hybrid
        """The collection with its BM25 index: the one write path, and both search sides."""
        self.override_relevance_score_fn = self.distance_to_relevance
        weakref.finalize(self, hybrid.release)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as where the collection lives and its embeddings, never its client.

        Unpickled (in a worker process, say), the store is opened again at the same
        folder or server (`reopen_store`) with a client of that process's own; the
        embeddings travel as their settings, their weights loaded at their first use. A
        store that cannot be opened there and then (a server not reachable, a folder that
        is not there) is unpickled all the same, and its first use says why: an error
        while unpickling would end a worker process without a word to its caller.
        """
        return (_unpickled_store, (self.location, self.embeddings))

    # -- what the store is ----------------------------------------------------------------

    @property
    def embeddings(self) -> Embeddings:
        """The embeddings queries and writes are embedded with."""
        return self.hybrid.embeddings

    @property
    def location(self) -> StoreLocation:
        """Where the collection lives."""
        return self.hybrid.chroma.location

    @property
    def read_only_source(self) -> Path | None:
        """The read-only folder this store reads through a temporary copy, if it does."""
        return self.hybrid.chroma.read_only_source

    def chroma_client(self) -> Any:
        """The chromadb client; opened on first use (for a new folder, that creates it)."""
        return self.hybrid.chroma.client()

    def has_open_client(self) -> bool:
        """Whether the chromadb client is open (a store never read or written has none)."""
        return self.hybrid.chroma.has_open_client()

    def existing_collection(self) -> Any:
        """The chromadb collection if it exists by now, else None (nothing is created)."""
        return self.hybrid.chroma.existing()

    def create_collection(self) -> Any:
        """The collection, created now (with the embedding model recorded) if missing."""
        return self.hybrid.chroma.create(self.embeddings)

    def reopen(self) -> None:
        """Read the store afresh from disk (`refresh_store`)."""
        self.hybrid.chroma.reopen()

    def distance_to_relevance(self, distance: float) -> float:
        """A distance of this collection's space as a relevance, higher is better."""
        return self.hybrid.chroma.relevance()(distance)

    # -- LangChain's Chroma attributes, answered from the collection ----------------------
    # `Chroma` sets these in its constructor, which this store does not run (it would create
    # the collection): read-only properties stand in for them (hence the override ignores).

    @property
    def _client(self) -> Any:
        """`Chroma`'s client attribute: the chromadb client (opened on first use)."""
        return self.chroma_client()

    @property
    def _chroma_collection(self) -> Any:  # type: ignore[override]
        """`Chroma`'s collection attribute: the collection, or None while it does not exist."""
        return self.existing_collection()

    @property
    def _collection(self) -> Any:
        """`Chroma`'s collection: the existing one, else created now (the model recorded)."""
        found = self.existing_collection()
        return self.create_collection() if found is None else found

    @property
    def _collection_name(self) -> str:  # type: ignore[override]
        return self.hybrid.chroma.name

    @property
    def _embedding_function(self) -> Embeddings:  # type: ignore[override]
        return self.embeddings

    @property
    def _collection_metadata(self) -> dict[str, Any] | None:  # type: ignore[override]
        found = self.existing_collection()
        return None if found is None else dict(found.metadata or {})

    @property
    def _collection_configuration(self) -> Any:  # type: ignore[override]
        return COSINE

    # -- reads leave pending document versions out -----------------------------------------

    def _query(
        self,
        vector: list[float],
        k: int,
        filter: Any = None,
        where_document: Any = None,
        include: Sequence[str] = ("documents", "metadatas", "distances"),
        **kwargs: Any,
    ) -> dict[str, Any]:
        """One query of the collection by ``vector``, without pending versions."""
        return without_bookkeeping(
            self.hybrid.chroma.query_visible(
                k,
                where=filter,
                where_document=where_document,
                query_embeddings=[vector],
                include=list(include),
                **kwargs,
            )
        )

    @_says_lost_server
    def similarity_search(
        self, query: str, k: int = 4, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[Document]:
        """The ``k`` chunks nearest to ``query`` (LangChain's ``similarity_search``)."""
        found = self.similarity_search_with_score(query, k, filter=filter, **kwargs)
        return [doc for doc, _ in found]

    @_says_lost_server
    def similarity_search_with_score(
        self, query: str, k: int = 4, filter: Where = None, where_document: Where = None, **kw: Any
    ) -> list[tuple[Document, float]]:
        """The ``k`` nearest chunks with their distance (lower is nearer)."""
        vector = self.embeddings.embed_query(query)
        return self.similarity_search_by_vector_with_relevance_scores(
            vector, k, filter, where_document, **kw
        )

    @_says_lost_server
    def similarity_search_by_vector(
        self, embedding: list[float], k: int = 4, *args: Any, **kwargs: Any
    ) -> list[Document]:
        """The ``k`` chunks nearest to ``embedding`` (``filter``, ``where_document``: as below)."""
        found = self.similarity_search_by_vector_with_relevance_scores(
            embedding, k, *args, **kwargs
        )
        return [doc for doc, _ in found]

    @_says_lost_server
    def similarity_search_by_vector_with_relevance_scores(
        self,
        embedding: list[float],
        k: int = 4,
        filter: Where = None,
        where_document: Where = None,
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
                query_documents(got), got["distances"][0], got["documents"][0], strict=True
            )
            if text is not None  # as Chroma: records without a text are no Documents
        ]

    @_says_lost_server
    def similarity_search_with_vectors(
        self, query: str, k: int = 4, filter: Where = None, where_document: Where = None, **kw: Any
    ) -> list[tuple[Document, Any]]:
        """The ``k`` chunks nearest to ``query`` with their stored vectors."""
        include = ("documents", "metadatas", "embeddings")
        vector = self.embeddings.embed_query(query)
        got = self._query(vector, k, filter, where_document, include=include, **kw)
        return list(zip(query_documents(got), query_vectors(got), strict=True))

    @_says_lost_server
    def max_marginal_relevance_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: dict[str, Any] | None = None,
        where_document: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """Maximal marginal relevance: ``k`` diverse chunks among the ``fetch_k`` nearest."""
        include = ("documents", "metadatas", "distances", "embeddings")
        got = self._query(embedding, fetch_k, filter, where_document, include=include, **kwargs)
        vectors = query_vectors(got)
        if not vectors:
            return []
        chosen = maximal_marginal_relevance(
            np.array(embedding, dtype=np.float32), vectors, k=k, lambda_mult=lambda_mult
        )
        docs = query_documents(got)
        return [docs[i] for i in chosen]

    @_says_lost_server
    def max_marginal_relevance_search(
        self,
        query: str,
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: Where = None,
        where_document: Where = None,
        **kwargs: Any,
    ) -> list[Document]:
        """Maximal marginal relevance search for ``query``."""
        vector = self.embeddings.embed_query(query)
        return self.max_marginal_relevance_search_by_vector(
            vector, k, fetch_k, lambda_mult, filter, where_document, **kwargs
        )

    @_says_lost_server
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
        chroma = self.hybrid.chroma
        if chroma.existing() is None:
            return empty_result(kept)
        got = chroma.get(
            ids=ids,
            where=chroma.visible_where(where),
            limit=limit,
            offset=offset,
            where_document=where_document,
            include=kept,
        )
        return without_bookkeeping(dict(got))

    @_says_lost_server
    def delete_collection(self) -> None:
        """Delete the collection (and everything in it, its change feed too)."""
        chroma = self.hybrid.chroma
        collection = chroma.existing()
        if collection is not None:
            # The feed first: a collection made again under the name starts a feed of its own
            if self.hybrid.feed(create=False) is not None:
                chroma.client().delete_collection(feed_name(collection.name))
            chroma.client().delete_collection(collection.name)
        chroma.forget()
        self.hybrid.forget_snapshot()

    @_says_lost_server
    def reset_collection(self) -> None:
        """Delete the collection; the next write creates it again, empty."""
        self.delete_collection()

    def hybrid_search(self, search: Any) -> list[Document]:
        """Not available: Chroma's own sparse search is not enabled on local Chroma.

        Use `HyDERetriever` (hybrid by default).
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

    @_says_lost_server
    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict[str, Any]] | None = None,
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
        cleaned, replaced = valid_unicode([texts, metas, ids])
        texts, metas, ids = (list(part) for part in cleaned)
        if replaced:
            logger.warning(
                "add_texts: %d lone surrogate(s) (not valid Unicode) in the texts, metadata or "
                "ids replaced with U+FFFD",
                replaced,
            )
        vectors = self.embeddings.embed_documents(texts)
        self._write("upsert", ids, vectors, metas, texts)
        return ids

    @_says_lost_server
    def update_documents(self, ids: list[str], documents: list[Document]) -> None:
        """LangChain's ``update_documents``: new texts, metadata and vectors for these ids."""
        if len(ids) != len(documents):
            raise StoreError(f"update_documents got {len(ids)} ids and {len(documents)} documents")
        if not ids:
            return
        texts = [d.page_content for d in documents]
        vectors = self.embeddings.embed_documents(texts)
        self._write("update", ids, vectors, [dict(d.metadata or {}) for d in documents], texts)

    @_says_lost_server
    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> None:
        """LangChain's ``delete``: by ``ids``, or by ``where=...`` (Chroma's filter)."""
        if self.hybrid.chroma.existing() is None:
            return
        where = kwargs.get("where")
        with self.hybrid.writing() as write:
            if ids:
                write.delete([str(i) for i in ids])
            if where:
                write.delete_where(where)

    def _write(
        self, how: str, ids: list[str], vectors: Any, metas: list[Any], texts: list[Any]
    ) -> None:
        batch = self.hybrid.chroma.max_write()
        with self.hybrid.writing() as write:
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


def collection_exists(location: StoreLocation) -> bool:
    """Whether the collection exists, without creating the store or the collection."""
    try:
        return ChromaCollection.open(location).existing() is not None
    except StoreError:
        raise
    except Exception as exc:
        raise StoreError(f"cannot open {location.describe()}: {exc}") from exc


def open_store(
    path: str | os.PathLike[str] | None = None,
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
    return reopen_store(location, embeddings)


def reopen_store(location: StoreLocation, embeddings: Embeddings | None = None) -> HydeChroma:
    """The collection at ``location`` opened again (how a pickled `HydeChroma` is restored).

    A store folder is opened with a client of this process's own (a read-only folder
    through a copy of its own); a Chroma server is reached at its address.
    ``embeddings`` are checked against the model the collection records, as by
    `open_store`.
    """
    try:
        chroma = ChromaCollection.open(location)
    except StoreError:
        raise
    except Exception as exc:  # chromadb's errors: damaged database, ...
        raise StoreError(f"cannot open {location.describe()}: {exc}") from exc
    embeddings = embeddings or _default_embeddings(chroma.existing())
    chroma.check_embeddings(embeddings, location.describe())
    return HydeChroma(HybridCollection(chroma, embeddings))


def _unpickled_store(location: StoreLocation, embeddings: Embeddings) -> HydeChroma:
    """A pickled `HydeChroma` restored: `reopen_store`, else opened at its first use."""
    try:
        return reopen_store(location, embeddings)
    except HydeLcError:  # said by its first use, where the caller sees it
        return HydeChroma(HybridCollection(ChromaCollection(location), embeddings))


def _default_embeddings(collection: Any) -> Embeddings:
    """The model an existing collection records, else ``$HYDE_LC_EMBEDDINGS`` or MiniLM.

    A collection built with the multilingual embedder is then opened with it without
    ``--embeddings``; a model named by the environment still wins (and a different one
    is refused by the model check, as before).
    """
    from hyde_lc.models import loading as models  # looked up at call time, as the CLI does

    recorded = None
    if collection is not None and not settings().embeddings:
        recorded = (collection.metadata or {}).get(META_MODEL)
    if isinstance(recorded, str) and recorded.startswith("local:"):
        try:
            return models.load_embeddings(recorded)
        except InvalidSettingError:  # a local model this version does not know
            pass
    return models.load_embeddings()


def refresh_store(store: Chroma) -> None:
    """Reload this process's view of an embedded store from disk.

    Embedded Chroma keeps each collection's vector index in memory, loaded once per
    process: writes made by another process since then are invisible to this one's
    searches (chroma-core/chroma#3792), and a write on top of such a stale index would
    drop the other process's vectors from the index. Every write reads the folder afresh
    once it holds the store's lock; a long-lived reader can call this to see what others
    ingested. Calls already running finish on the old view. A no-op for a Chroma server,
    for a store whose client is not open yet, for a read-only folder's copy, and for a
    store made by langchain-chroma's `Chroma` itself (it gives no public access to its
    client).
    """
    if isinstance(store, HydeChroma):
        store.reopen()


def visible_count(store: HydeChroma) -> int:
    """Chunks searches can see in a collection opened by `open_store` (none pending)."""
    return HybridCollection.of(store).chroma.visible_count()


def collection_info(store: HydeChroma) -> dict[str, Any]:
    """Facts about a collection: chunks, documents, scripts, embedding model and dimension.

    Counts what searches see (`ChromaCollection.info`).

    Example:
        >>> info = collection_info(open_store())  # doctest: +SKIP
        >>> info["scripts"]  # doctest: +SKIP
        {'latin': 41, 'cjk': 12}

    """
    return HybridCollection.of(store).chroma.info()
