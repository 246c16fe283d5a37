"""A lexical (BM25) side for a store of your own: `LexicalSearch`.

A collection ingested by hyde_lc carries its own persistent BM25 index
(`hyde_lc.store.collection.HybridCollection`, found by `lexical_search_for`). Any other
LangChain store gets one from `LexicalSearch`: an in-memory `LexicalIndex` of the store's
chunks by id, built from the store (`LexicalSearch.from_store`, which follows the store as
it changes) or from the documents you added (`LexicalSearch.from_documents`). Pass it as
``HyDERetriever(..., lexical=LexicalSearch.from_store(store))``.

Example:
    >>> from langchain_core.embeddings import DeterministicFakeEmbedding
    >>> from langchain_core.vectorstores import InMemoryVectorStore
    >>> store = InMemoryVectorStore(DeterministicFakeEmbedding(size=8))
    >>> _ = store.add_texts(["Fresnel lenses", "fog horns"], ids=["a", "b"])
    >>> LexicalSearch.from_store(store).search(lexical_query("horn"), k=1)[0][0]
    'b'

"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from langchain_core.documents import Document

from hyde_lc.errors import InvalidSettingError, NotPortableError
from hyde_lc.search.backend import backend_for
from hyde_lc.search.vectorstore_backend import LexicalSide
from hyde_lc.store.lexical_index import LexicalIndex, lexical_query

__all__ = ["LexicalSearch", "lexical_query", "lexical_search_for"]

logger = logging.getLogger(__name__)


class LexicalSearch:
    """The lexical side of a hybrid search: BM25 hits among a store's chunks, by chunk id.

    `from_store` indexes what a store holds (Chroma, ``InMemoryVectorStore``, FAISS) and
    follows it: when the store's chunk count changes, the next search indexes it again.
    `from_documents` indexes chunks you have in hand; a Document without an ``id`` gets
    the id the store gave it (found by its text and metadata). An index over documents
    you chose does not follow the store: when the store's count changes under it, each
    new count is logged once (``hyde_lc.search.lexical`` logger) and `stale` turns True, since
    chunks added since are found by the dense side only; `refresh` indexes the store
    again. A collection ingested by hyde_lc brings its own persistent index
    (the `HybridCollection` itself, found by `lexical_search_for`).

    Example:
        >>> from langchain_core.documents import Document
        >>> from langchain_core.embeddings import DeterministicFakeEmbedding
        >>> from langchain_core.vectorstores import InMemoryVectorStore
        >>> docs = [Document("Fresnel lenses"), Document("fog horns")]
        >>> store = InMemoryVectorStore(DeterministicFakeEmbedding(size=8))
        >>> ids = store.add_documents(docs)  # the store gives the ids
        >>> lexical = LexicalSearch.from_documents(store, docs)
        >>> [hit[0] for hit in lexical.search(lexical_query("horn"), k=1)] == ids[1:]
        True

    """

    def __init__(
        self, vectorstore: Any, index: LexicalIndex, *, follow_store: bool = False
    ) -> None:
        self.vectorstore = vectorstore
        self.backend = backend_for(vectorstore, "off")
        """How the store is listed, counted and read (`hyde_lc.search.backend`)."""
        self.index = index
        self.follow_store = follow_store
        """Whether a search indexes the store again when its chunk count has changed."""
        self.stale = False
        """Whether the store's count changed since this index was built (and not followed)."""
        self._lock = threading.Lock()
        self._built_count = self.backend.size()
        self._counted_at = 0.0

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its store: another process (a worker) indexes the store again.

        An index that follows its store (`from_store`) is made there anew from the store,
        when it is unpickled. One built `from_documents` holds chunks the store may not
        list, and raises `NotPortableError` saying what to use instead.
        """
        if not self.follow_store:
            raise NotPortableError(
                "a LexicalSearch built from_documents holds its index in this process only, "
                "so it cannot be sent to another one: use LexicalSearch.from_store(store), "
                "which the other process builds again from the store, or a collection "
                "ingested by hyde_lc, which carries its own index"
            )
        return (type(self).from_store, (self.vectorstore,))

    @classmethod
    def from_documents(cls, vectorstore: Any, documents: Iterable[Any]) -> LexicalSearch:
        """An in-memory index of ``documents``, each under the id it has in ``vectorstore``.

        A Document's own ``id`` is used; one without an id is looked up in the store by
        its text and metadata (the store must be one `from_store` can list). Raises
        `InvalidSettingError` naming what to do when an id cannot be found.
        """
        docs = list(documents)
        missing = [d for d in docs if not d.id]
        found: dict[tuple[str, str], list[str]] = {}
        if missing:
            listed = backend_for(vectorstore, "off").chunks()
            if listed is None:
                raise InvalidSettingError(
                    f"{len(missing)} of the {len(docs)} Documents have no id, and a "
                    f"{type(vectorstore).__name__} cannot be listed to find the ids it gave "
                    "them. Pass the ids the store returned: ids = store.add_documents(docs); "
                    "then Document(text, metadata=..., id=the_id) for each, or add them with "
                    "ids=[...] of your own"
                )
            for held in listed:
                found.setdefault(_content_key(held), []).append(str(held.id))
        chunks: list[tuple[str, str, dict[str, Any]]] = []
        unknown = 0
        for doc in docs:
            ids = [str(doc.id)] if doc.id else found.get(_content_key(doc), [])
            unknown += not ids
            chunks.extend((i, doc.page_content, dict(doc.metadata or {})) for i in ids)
        if unknown:
            raise InvalidSettingError(
                f"{unknown} of the {len(docs)} Documents have no id and are not in the "
                f"{type(vectorstore).__name__} with the same text and metadata: add them to "
                "the store first (the lexical side indexes what the dense side can find), or "
                "give each Document the id the store holds it under"
            )
        index = LexicalIndex.in_memory()
        index.add(chunks)
        return cls(vectorstore, index)

    @classmethod
    def from_store(cls, vectorstore: Any) -> LexicalSearch:
        """An in-memory index of every chunk ``vectorstore`` holds, that follows the store.

        Chroma, ``InMemoryVectorStore`` and FAISS (any store with a docstore) can be
        listed. Raises `InvalidSettingError` for a store that cannot: build it with
        `from_documents` from the documents you added.
        """
        listed = backend_for(vectorstore, "off").chunks()
        if listed is None:
            raise InvalidSettingError(
                f"cannot list the chunks of a {type(vectorstore).__name__} to index them: use "
                "LexicalSearch.from_documents(store, documents) with the documents you added"
            )
        index = LexicalIndex.in_memory()
        index.add(_as_chunks(listed))
        return cls(vectorstore, index, follow_store=True)

    def refresh(self) -> None:
        """Index every chunk the store holds now (and nothing else), then follow the store."""
        listed = self.backend.chunks()
        if listed is None:
            raise InvalidSettingError(
                f"cannot list the chunks of a {type(self.vectorstore).__name__}: build a new "
                "index with LexicalSearch.from_documents(store, documents)"
            )
        count = self.backend.size()
        # Rebuilt whole (an in-memory store's listing costs what a diff would), in a new
        # index swapped in at once: a search running meanwhile uses the old one whole.
        index = LexicalIndex.in_memory()
        index.add(_as_chunks(listed))
        with self._lock:
            self.index = index
            self._built_count, self.stale, self.follow_store = count, False, True

    def _check_store(self) -> None:
        """Notice a store changed since the index was built: follow it, or say so once."""
        if self._built_count is None:
            return
        now = time.monotonic()
        if now - self._counted_at < self.backend.count_interval:
            return
        self._counted_at = now
        count = self.backend.size()
        if count is None or count == self._built_count:
            return
        if self.follow_store:
            logger.info(
                "%s changed (%s chunks, was %s): indexing it again for the lexical side",
                type(self.vectorstore).__name__,
                count,
                self._built_count,
            )
            self.refresh()
            return
        key = f"{id(self)}:{count}"
        if key not in _WARNED:
            _WARNED.add(key)
            logger.warning(
                "the %s holds %s chunks, %s when its lexical index was built from documents: "
                "chunks added since are found by the dense side only (and removed ones are "
                "skipped). Call .refresh() on the LexicalSearch, or build it with "
                "LexicalSearch.from_store(store), which follows the store",
                type(self.vectorstore).__name__,
                count,
                self._built_count,
            )
        self.stale = True

    def search(self, weights: Counter[str], k: int, where: Any = None) -> list[tuple[str, float]]:
        """The ``k`` best chunks ``(id, BM25 score)`` that match the search filter ``where``.

        A dict filter (Chroma's syntax, `LexicalIndex.filter_query`) is applied inside the
        index; a callable (``Document -> bool``, as ``InMemoryVectorStore`` takes) to the
        hits, read from the store.
        """
        self._check_store()
        if not callable(where):
            return self.index.search(weights, k, where=where or None)
        hits = self.index.search(weights, k)
        if not hits:
            return hits
        allowed = {str(d.id) for d in self.backend.documents([i for i, _ in hits], where)}
        return [hit for hit in hits if hit[0] in allowed]

    def documents(self, ids: Sequence[str]) -> list[Document]:
        """The chunks with these ids that are in the store (and searchable) now."""
        return self.backend.documents(ids)


def _as_chunks(docs: Iterable[Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(str(d.id), d.page_content, dict(d.metadata or {})) for d in docs]


def _content_key(doc: Any) -> tuple[str, str]:
    return doc.page_content, json.dumps(doc.metadata or {}, sort_keys=True, default=str)


_WARNED: set[str] = set()


def lexical_search_for(vectorstore: Any, *, quiet: bool = False) -> LexicalSide | None:
    """The lexical side a store brings: a hyde_lc collection's index, else None.

    None is logged once per kind of store unless ``quiet``: the retriever then searches
    dense only.
    """
    return backend_for(vectorstore, "auto", quiet=quiet).lexical_side
