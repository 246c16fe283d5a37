"""The search backend of any LangChain vector store, through its public API.

`HyDERetriever` searches with vectors it made itself (a fused query and hypotheses), so
it needs a store that searches *by vector*, and for hybrid fusion a relevance score per
hit (higher is better):

* ``similarity_search_with_score_by_vector`` when the store has it, its scores turned
  into relevance by the store's own relevance function (`relevance_fn`); a store without
  one (``InMemoryVectorStore``) already returns a similarity;
* else ``similarity_search_by_vector``: the hits come ranked, with no score (hybrid
  fusion then uses their ranks).

What else a store can give is found by what it has: ``get_by_ids`` (documents by id),
an ``InMemoryVectorStore``'s records or a FAISS-like docstore (listing and counting its
chunks, reading their vectors), a ``vectors_by_id`` method. The lexical side is a
`hyde_lc.search.lexical.LexicalSearch` the caller brings, or none (dense only). Nothing
here imports chromadb: a program on another store never loads it.

Example:
    >>> from langchain_core.embeddings import DeterministicFakeEmbedding
    >>> from langchain_core.vectorstores import InMemoryVectorStore
    >>> emb = DeterministicFakeEmbedding(size=8)
    >>> store = InMemoryVectorStore(emb)
    >>> store.add_texts(["tides", "lamps"], ids=["a", "b"])
    ['a', 'b']
    >>> backend = VectorStoreBackend(store)
    >>> [d.id for d in backend.scored(emb.embed_query("lamps"), 1, {})], backend.size()
    (['b'], 2)

"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from hyde_lc.core.chunks import chunk_key, with_metadata
from hyde_lc.errors import InvalidSettingError, StoreUnavailableError

logger = logging.getLogger(__name__)

Where = Any
"""A search filter: a Chroma ``where`` dict, or for other stores a ``Document -> bool``."""


class LexicalSide(Protocol):
    """A BM25 search over the same chunks as a store's vectors."""

    def search(self, weights: Counter[str], k: int, where: Where = None) -> list[tuple[str, float]]:
        """The ``k`` best chunks ``(id, BM25 score)`` matching ``where``, best first."""
        ...


class VectorStoreBackend:
    """What a retriever needs of a store: dense hits, lexical hits, chunks by id, size.

    See the module docstring for what each method asks of the store.

    Example:
        >>> from langchain_core.embeddings import DeterministicFakeEmbedding
        >>> from langchain_core.vectorstores import InMemoryVectorStore
        >>> VectorStoreBackend(InMemoryVectorStore(DeterministicFakeEmbedding(size=4))).size()
        0

    """

    count_interval = 0.0
    """How often (seconds) a `LexicalSearch` following the store may count its chunks."""

    def __init__(self, vectorstore: VectorStore, lexical: LexicalSide | None = None) -> None:
        self.vectorstore = vectorstore
        self.lexical = lexical
        """The lexical side (None: dense only)."""

    # -- the dense side ----------------------------------------------------------------

    def scored_pairs(
        self, vector: list[float], k: int, search_kwargs: dict[str, Any]
    ) -> list[tuple[Document, float | None]]:
        """The ``k`` nearest chunks with their relevance (None: the store gives no score).

        The Documents are the store's own: copy one (`with_metadata`) before changing it.
        A hybrid search asks for 100 candidates and keeps about ten, so it copies only those.
        """
        store = self.vectorstore
        scored = getattr(store, "similarity_search_with_score_by_vector", None)
        if scored is None:
            docs = store.similarity_search_by_vector(vector, k=k, **search_kwargs)
            return [(doc, None) for doc in docs]
        to_relevance = relevance_fn(store)
        return [
            (doc, float(to_relevance(score))) for doc, score in scored(vector, k=k, **search_kwargs)
        ]

    def scored(self, vector: list[float], k: int, search_kwargs: dict[str, Any]) -> list[Document]:
        """The ``k`` nearest chunks; each copy's ``metadata["score"]`` is its relevance or None."""
        return [
            with_metadata(doc, score=score)
            for doc, score in self.scored_pairs(vector, k, search_kwargs)
        ]

    def dense_candidates(
        self, vector: list[float], k: int, search_kwargs: dict[str, Any]
    ) -> tuple[list[tuple[str, float | None]], dict[str, Document]]:
        """A hybrid search's dense side: ``(id, score)`` best first, and the chunks read.

        The store's own Documents, which the fusion copies only when it returns them.
        """
        pairs = self.scored_pairs(vector, k, search_kwargs)
        return [(chunk_key(d), score) for d, score in pairs], {chunk_key(d): d for d, _ in pairs}

    def mmr(self, vector: list[float], k: int, search_kwargs: dict[str, Any]) -> list[Document]:
        """Maximal marginal relevance: ``k`` diverse chunks among ``fetch_k`` candidates."""
        docs = self.vectorstore.max_marginal_relevance_search_by_vector(
            vector, k=k, **mmr_kwargs(k, search_kwargs)
        )
        return [with_metadata(doc, score=doc.metadata.get("score")) for doc in docs]

    # -- the lexical side ----------------------------------------------------------------

    @property
    def lexical_side(self) -> LexicalSide | None:
        """The lexical side in force (None: dense only)."""
        return self.lexical

    def lexical_hits(
        self, weights: Counter[str], k: int, where: Where = None
    ) -> list[tuple[str, float]]:
        """The lexical side's ``k`` best chunks for ``weights`` (none without a lexical side)."""
        side = self.lexical_side
        return [] if side is None else side.search(weights, k, where)

    def lexical_note(self) -> str | None:
        """What every Document says when the lexical side searched an index behind its store."""
        if not getattr(self.lexical_side, "stale", False):
            return None
        return (
            "the lexical index was built from documents and the store has changed since: "
            "chunks added since were searched dense only (LexicalSearch.refresh() re-indexes)"
        )

    # -- chunks by id, by place, all of them -------------------------------------------------

    def documents(self, ids: Sequence[str], where: Where = None) -> list[Document]:
        """The chunks with these ids that exist (and match ``where``), in no fixed order.

        ``where`` is a callable ``Document -> bool`` (as ``InMemoryVectorStore`` takes) or a
        dict of metadata values that must be equal.
        """
        if not ids:
            return []
        keep = metadata_predicate(where)
        return [doc for doc in self.vectorstore.get_by_ids(list(ids)) if keep(doc)]

    def found_documents(self, ids: Sequence[str]) -> list[Document]:
        """The chunks a search found and has not read yet (the hybrid fusion's winners)."""
        return self.documents(ids)

    def size(self) -> int | None:
        """How many chunks the store holds, when it can tell cheaply (None: it cannot)."""
        held = getattr(self.vectorstore, "store", None)  # InMemoryVectorStore's records
        if isinstance(held, dict):
            return len(held)
        ids = self._docstore_ids()
        return None if ids is None else len(ids)

    def chunks(self) -> list[Document] | None:
        """Every chunk the store holds, as Documents with their ids (None: it cannot list).

        ``InMemoryVectorStore`` (its records) and FAISS-like stores (their docstore, by
        ``index_to_docstore_id``).
        """
        held = getattr(self.vectorstore, "store", None)
        if isinstance(held, dict):
            return [
                Document(r["text"], id=i, metadata=r.get("metadata") or {}) for i, r in held.items()
            ]
        ids = self._docstore_ids()
        if ids is None:
            return None
        out = []
        for id_ in ids:  # one by one: a docstore keeps Documents as added, not always with ids
            for doc in self.vectorstore.get_by_ids([id_]):
                out.append(Document(doc.page_content, id=id_, metadata=dict(doc.metadata or {})))
        return out

    def source_chunks(self, source: str) -> list[Document] | None:
        """Every chunk of one ``source`` (None: the store cannot list its chunks)."""
        listed = self.chunks()
        if listed is None:
            return None
        return [d for d in listed if str(d.metadata.get("source")) == source]

    def chunks_around(
        self, sources: Sequence[str], doc_ids: Sequence[str] | None, indexes: Sequence[int]
    ) -> list[Document] | None:
        """Chunks of these documents at these positions (None: the store cannot read by place)."""
        return None

    @property
    def reads_vectors(self) -> bool:
        """Whether `vectors` can read this store's stored vectors (dense feedback needs them)."""
        return callable(getattr(self.vectorstore, "vectors_by_id", None)) or isinstance(
            getattr(self.vectorstore, "store", None), dict
        )

    def vectors(self, ids: Sequence[str]) -> list[list[float]] | None:
        """The stored vectors of these chunks (those found); None: the store cannot give them.

        ``InMemoryVectorStore`` from its records, any other store through a
        ``vectors_by_id(ids)`` method.
        """
        if not ids:
            return []
        own = getattr(self.vectorstore, "vectors_by_id", None)
        if callable(own):
            return [list(map(float, row)) for row in own(list(ids)) if row is not None]
        held = getattr(self.vectorstore, "store", None)  # InMemoryVectorStore's records
        if isinstance(held, dict):
            return [list(map(float, held[i]["vector"])) for i in ids if i in held]
        return None

    def _docstore_ids(self) -> list[str] | None:
        """The ids of a FAISS-like store (an ``index_to_docstore_id`` map), else None."""
        mapping = getattr(self.vectorstore, "index_to_docstore_id", None)
        if isinstance(mapping, dict) and hasattr(self.vectorstore, "get_by_ids"):
            return [str(i) for i in mapping.values()]
        return None

    # -- what the store is ------------------------------------------------------------------

    def check_embeddings(self, embeddings: Embeddings) -> None:
        """Refuse embeddings other than those the store records (only hyde_lc's record any)."""

    def check_dimension(self, dimension: int) -> None:
        """Refuse vectors of another length than the store records (only hyde_lc's record one)."""

    def describe(self) -> tuple[str | None, str]:
        """The collection's name (None when the store has no such name) and where it lives."""
        return None, type(self.vectorstore).__name__

    def exists(self) -> bool:
        """Whether there is something to search (a collection not created yet is not)."""
        return True

    def lost_server(self, exc: BaseException, resume: str) -> StoreUnavailableError | None:
        """The error to raise when ``exc`` means the store's server is gone (None: it does not)."""
        return None


def mmr_kwargs(k: int, search_kwargs: dict[str, Any]) -> dict[str, Any]:
    """``search_kwargs`` for an MMR search of ``k``: at least ``k`` candidates to pick from.

    MMR picks k from fetch_k candidates: fewer candidates than k would return fewer than k
    documents although the store has more.
    """
    extra = dict(search_kwargs)
    extra["fetch_k"] = max(int(extra.get("fetch_k", 20)), k)
    return extra


def metadata_predicate(where: Where) -> Callable[[Document], bool]:
    """A filter as a predicate: None, a callable, or ``{key: value, ...}`` (all equal)."""
    if where is None:
        return lambda doc: True
    if callable(where):
        return where  # type: ignore[no-any-return]
    if isinstance(where, dict) and all(
        not str(key).startswith("$") and not isinstance(value, dict) for key, value in where.items()
    ):
        return lambda doc: all(doc.metadata.get(key) == value for key, value in where.items())
    raise InvalidSettingError(
        f"cannot apply the filter {where!r} to this store's lexical hits: give a function "
        "Document -> bool or a dict of metadata values, or search dense only (lexical='off')"
    )


def relevance_fn(vectorstore: VectorStore) -> Callable[[float], float]:
    """How ``vectorstore`` turns its distances into relevance (higher is better).

    The function given to the store (``relevance_score_fn``, langchain-chroma's public
    ``override_relevance_score_fn``; a store from `hyde_lc.open_store` always has one),
    else the store's own choice: ``_select_relevance_score_fn``, the hook LangChain's
    `VectorStore` defines for its subclasses and applies in its public
    ``similarity_search_with_relevance_scores``. It is called here, from outside,
    because LangChain offers no public by-vector search with relevance scores; for
    langchain-chroma's `Chroma` it maps the collection's distance space (cosine, l2,
    ip) as that public method would.
    """
    given = getattr(vectorstore, "override_relevance_score_fn", None)
    if callable(given):
        return given  # type: ignore[no-any-return]
    try:
        return vectorstore._select_relevance_score_fn()
    except NotImplementedError:  # the store returns similarities already
        return float


_WARNED: set[str] = set()


def warn_no_lexical_index(vectorstore: VectorStore, quiet: bool = False) -> None:
    """Say once per kind of store that it has no lexical index (the search is dense only)."""
    kind = type(vectorstore).__name__
    if not quiet and kind not in _WARNED:
        _WARNED.add(kind)
        logger.warning(
            "%s has no lexical index (only collections ingested by hyde_lc carry one): "
            "searching dense only. For hybrid search pass "
            "lexical=LexicalSearch.from_store(store) or LexicalSearch.from_documents(...)",
            kind,
        )
