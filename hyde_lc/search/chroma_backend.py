"""The search backend of a langchain-chroma `Chroma` store, through its public API.

A `Chroma` store searches by vector with distances (``similarity_search_by_vector_with_
relevance_scores``, turned into relevance by the store's relevance function), reads chunks
by id or by metadata filter (``get``), and gives their stored vectors (``get`` with
``include=["embeddings"]``): so it can be listed, counted, widened by position, and fed
back densely, and its MMR hits get a cosine score. A hybrid search reads the ids and scores
of its dense candidates only, and the texts of the winners afterwards.

This module does not import chromadb: the store passed in was made by a program that did.

Example:
    >>> from langchain_chroma import Chroma  # doctest: +SKIP
    >>> backend = ChromaBackend(Chroma("notes", embedding_function=emb))  # doctest: +SKIP
    >>> backend.size()  # doctest: +SKIP
    0

"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from langchain_core.documents import Document

from hyde_lc.search.vectorstore_backend import (
    VectorStoreBackend,
    Where,
    mmr_kwargs,
    relevance_fn,
)
from hyde_lc.store.chroma_collection import TEXT_PAGE, around, documents_of, paged


class ChromaBackend(VectorStoreBackend):
    """A langchain-chroma `Chroma` store: every read through its public methods.

    Example:
        >>> ChromaBackend(store).chunks_around(["a.txt"], None, [0, 1])  # doctest: +SKIP

    """

    count_interval = 1.0
    """A `LexicalSearch` following a Chroma collection counts it at most once a second
    (one Chroma call; other stores are counted at every search, a length read)."""

    @property
    def reads_vectors(self) -> bool:
        """A Chroma collection gives its stored vectors."""
        return True

    def scored_pairs(
        self, vector: list[float], k: int, search_kwargs: dict[str, Any]
    ) -> list[tuple[Document, float | None]]:
        """The ``k`` nearest chunks with their relevance, higher is better.

        The relevance comes from the collection's own distance function (cosine for hyde_lc
        collections).
        """
        to_relevance = relevance_fn(self.vectorstore)
        return [
            (doc, float(to_relevance(distance)))
            for doc, distance in self.vectorstore.similarity_search_by_vector_with_relevance_scores(  # type: ignore[attr-defined]
                vector, k=k, **search_kwargs
            )
        ]

    def dense_candidates(
        self, vector: list[float], k: int, search_kwargs: dict[str, Any]
    ) -> tuple[list[tuple[str, float | None]], dict[str, Document]]:
        """A hybrid search's dense side: ids and scores only, when the search is a plain one.

        Most candidates are never returned, so only the ones that make the fused ranking
        are read afterwards (`found_documents`). A search with options besides ``filter``
        reads its candidates' texts as any store's does.
        """
        if set(search_kwargs) - {"filter"}:
            return super().dense_candidates(vector, k, search_kwargs)
        return self.dense_hits(vector, k, search_kwargs.get("filter")), {}

    def dense_hits(
        self, vector: list[float], k: int, where: dict[str, Any] | None
    ) -> list[tuple[str, float | None]]:
        """The ``k`` nearest chunks as ``(id, relevance)``."""
        to_relevance = relevance_fn(self.vectorstore)
        found = self.vectorstore.similarity_search_by_vector_with_relevance_scores(  # type: ignore[attr-defined]
            vector, k=k, filter=where or None
        )
        return [(str(doc.id), float(to_relevance(distance))) for doc, distance in found]

    def mmr(self, vector: list[float], k: int, search_kwargs: dict[str, Any]) -> list[Document]:
        """MMR, as copies with ``metadata["score"]``: the cosine to ``vector``.

        LangChain's MMR returns no scores; the cosine is computed from the stored vectors.
        """
        docs = [
            d.model_copy(deep=True)
            for d in self.vectorstore.max_marginal_relevance_search_by_vector(
                vector, k=k, **mmr_kwargs(k, search_kwargs)
            )
        ]
        if not docs:
            return docs
        stored = self._vectors_by_id([str(d.id) for d in docs])
        query = np.asarray(vector, dtype=float)
        query /= max(float(np.linalg.norm(query)), 1e-12)
        for doc in docs:
            row = stored.get(str(doc.id))
            if row is None:
                doc.metadata["score"] = None
            else:
                row = np.asarray(row, dtype=float)
                doc.metadata["score"] = float(row @ query / max(float(np.linalg.norm(row)), 1e-12))
        return docs

    def documents(self, ids: Sequence[str], where: Where = None) -> list[Document]:
        """The chunks with these ids (matching ``where``, a Chroma filter), unordered."""
        if not ids:
            return []
        extra: dict[str, Any] = {"where": where} if where else {}
        return documents_of(self._get(ids=list(ids), include=["documents", "metadatas"], **extra))

    def size(self) -> int:
        """Chunks the collection holds, counted in pages of ids (`Chroma` has no public count)."""
        return sum(len(page["ids"]) for page in paged(self._get, None, ()))

    def chunks(self) -> list[Document]:
        """Every chunk, read a page at a time."""
        return list(self._iter_chunks())

    def _iter_chunks(self) -> Iterator[Document]:
        for page in paged(self._get, None, ("documents", "metadatas"), TEXT_PAGE):
            yield from documents_of(page)

    def source_chunks(self, source: str) -> list[Document]:
        """Every chunk of one ``source``, in one read."""
        return documents_of(self._get(where={"source": source}, include=["documents", "metadatas"]))

    def chunks_around(
        self, sources: Sequence[str], doc_ids: Sequence[str] | None, indexes: Sequence[int]
    ) -> list[Document]:
        """Chunks of these documents at these positions (a superset of the windows to narrow)."""
        where = around(lambda w: w, sources, doc_ids, indexes)
        return documents_of(self._get(where=where, include=["documents", "metadatas"]))

    def vectors(self, ids: Sequence[str]) -> list[list[float]]:
        """The stored vectors of these chunks (those found), in the order of ``ids``."""
        stored = self._vectors_by_id(ids)
        return [[float(x) for x in stored[i]] for i in ids if i in stored]

    def _vectors_by_id(self, ids: Sequence[str]) -> dict[str, Any]:
        if not ids:
            return {}
        got = self._get_by_id(ids=list(ids), include=["embeddings"])
        rows = got.get("embeddings")
        return dict(zip(got["ids"], list(rows) if rows is not None else [], strict=True))

    def _get(self, **kwargs: Any) -> dict[str, Any]:
        """The store's own ``get`` (which takes chromadb's arguments)."""
        return dict(self.vectorstore.get(**kwargs))  # type: ignore[attr-defined]

    def _get_by_id(self, **kwargs: Any) -> dict[str, Any]:
        """Chunks by id, for their stored vectors."""
        return self._get(**kwargs)

    def describe(self) -> tuple[str | None, str]:
        """A langchain-chroma store does not say publicly where it lives."""
        return None, UNKNOWN_CHROMA


UNKNOWN_CHROMA = "a langchain-chroma store"
"""Where a langchain-chroma ``Chroma`` store lives, as far as its public API says."""
