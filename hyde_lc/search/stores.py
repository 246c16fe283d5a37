"""Any LangChain vector store, searched by vector with comparable scores.

`HyDERetriever` searches with vectors it made itself (a fused query and hypotheses), so
it needs a store that searches *by vector*, and for hybrid fusion a relevance score per
hit (higher is better). This module is the one seam between the retrievers and the
stores: a Chroma collection goes through `hyde_lc.store.chroma` (which owns every detail of
Chroma, and hides the chunks of documents still being written); any other store through
LangChain's public `VectorStore` API:

* ``similarity_search_with_score_by_vector`` when the store has it, its scores turned
  into relevance by the store's own relevance function (`relevance_fn`); a store without
  one (``InMemoryVectorStore``) already returns a similarity;
* else ``similarity_search_by_vector``: the hits come ranked, with no score (hybrid
  fusion then uses their ranks).

Nothing here imports chromadb: a program on another store never loads it.

Example:
    >>> from langchain_core.embeddings import DeterministicFakeEmbedding
    >>> from langchain_core.vectorstores import InMemoryVectorStore
    >>> emb = DeterministicFakeEmbedding(size=8)
    >>> store = InMemoryVectorStore(emb)
    >>> store.add_texts(["tides", "lamps"], ids=["a", "b"])
    ['a', 'b']
    >>> [d.id for d in vector_search(store, emb.embed_query("lamps"), k=1)]
    ['b']

"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from hyde_lc.errors import InvalidSettingError


def chunk_id(source: str, doc_id: str, chunk_size: int, chunk_overlap: int, index: int) -> str:
    """The stable id of chunk ``index`` of one document version split one way.

    Ingestion gives every chunk this id, and records what it derives from in the chunk's
    metadata; neighbour expansion derives the ids of a hit's neighbours from it.

    Example:
        >>> chunk_id("/docs/a.pdf", "9f0c", 1000, 200, 3)[:12]
        'f3c3cf9e0e60'

    """
    key = f"{source}\0{doc_id}\0{chunk_size}\0{chunk_overlap}\0{index}"
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


def is_chroma(vectorstore: Any) -> bool:
    """Whether ``vectorstore`` is a langchain-chroma store (without importing chromadb)."""
    module = sys.modules.get("langchain_chroma")
    return module is not None and isinstance(vectorstore, module.Chroma)


def vector_search(
    vectorstore: VectorStore, vector: list[float], k: int, search_kwargs: dict[str, Any]
) -> list[Document]:
    """The ``k`` nearest chunks; each copy's ``metadata["score"]`` is its relevance or None."""
    return [
        _with_score(doc, score)
        for doc, score in scored_search(vectorstore, vector, k, search_kwargs)
    ]


def scored_search(
    vectorstore: VectorStore, vector: list[float], k: int, search_kwargs: dict[str, Any]
) -> list[tuple[Document, float | None]]:
    """The ``k`` nearest chunks with their relevance (None: the store gives no score).

    The Documents are the store's own: copy one (`with_metadata`) before changing it. A
    hybrid search asks for 100 candidates and keeps about ten, so it copies only those.
    """
    if is_chroma(vectorstore):
        from hyde_lc.store import chroma as store

        return store.scored_search(vectorstore, vector, k, search_kwargs)  # type: ignore[arg-type]
    scored = getattr(vectorstore, "similarity_search_with_score_by_vector", None)
    if scored is None:
        docs = vectorstore.similarity_search_by_vector(vector, k=k, **search_kwargs)
        return [(doc, None) for doc in docs]
    to_relevance = relevance_fn(vectorstore)
    return [
        (doc, float(to_relevance(score))) for doc, score in scored(vector, k=k, **search_kwargs)
    ]


def mmr_search(
    vectorstore: VectorStore, vector: list[float], k: int, search_kwargs: dict[str, Any]
) -> list[Document]:
    """Maximal marginal relevance: ``k`` diverse chunks among ``fetch_k`` candidates."""
    # MMR picks k from fetch_k candidates: fewer candidates than k would return fewer
    # than k documents although the store has more.
    extra = dict(search_kwargs)
    extra["fetch_k"] = max(int(extra.get("fetch_k", 20)), k)
    if is_chroma(vectorstore):
        from hyde_lc.store import chroma as store

        return store.mmr_search(vectorstore, vector, k, extra)  # type: ignore[arg-type]
    docs = vectorstore.max_marginal_relevance_search_by_vector(vector, k=k, **extra)
    return [_with_score(doc, doc.metadata.get("score")) for doc in docs]


def documents_by_id(
    vectorstore: VectorStore, ids: Sequence[str], where: Any = None
) -> list[Document]:
    """The chunks with these ids that exist (and match ``where``), in no fixed order.

    ``where`` is the search filter: a Chroma ``where`` for Chroma; for other stores a
    callable ``Document -> bool`` (as ``InMemoryVectorStore`` takes) or a dict of
    metadata values that must be equal.
    """
    if not ids:
        return []
    if is_chroma(vectorstore):
        from hyde_lc.store import chroma as store

        return store.documents_by_id(vectorstore, list(ids), where)  # type: ignore[arg-type]
    keep = metadata_predicate(where)
    return [doc for doc in vectorstore.get_by_ids(list(ids)) if keep(doc)]


def chunks_around(
    vectorstore: VectorStore,
    sources: Sequence[str],
    doc_ids: Sequence[str] | None,
    indexes: Sequence[int],
) -> list[Document]:
    """Chunks of these documents at these positions, from a Chroma collection.

    A superset of the windows (callers narrow it), for collections whose chunks carry no
    derivable ids.
    """
    from hyde_lc.store import chroma as store

    return store.chunks_around(vectorstore, sources, doc_ids, indexes)  # type: ignore[arg-type]


def store_size(vectorstore: VectorStore) -> int | None:
    """How many chunks a search can reach, when the store can tell (Chroma, InMemory)."""
    if is_chroma(vectorstore):
        from hyde_lc.store import chroma as store

        return store.visible_count(vectorstore)  # type: ignore[arg-type]
    held = getattr(vectorstore, "store", None)
    return len(held) if isinstance(held, dict) else None


def metadata_predicate(where: Any) -> Callable[[Document], bool]:
    """A filter as a predicate: None, a callable, or ``{key: value, ...}`` (all equal)."""
    if where is None:
        return lambda doc: True
    if callable(where):
        return where
    if isinstance(where, dict) and all(
        not str(key).startswith("$") and not isinstance(value, dict) for key, value in where.items()
    ):
        return lambda doc: all(doc.metadata.get(key) == value for key, value in where.items())
    raise InvalidSettingError(
        f"cannot apply the filter {where!r} to this store's lexical hits: give a function "
        "Document -> bool or a dict of metadata values, or search dense only (lexical='off')"
    )


def check_embeddings(vectorstore: VectorStore, embeddings: Embeddings) -> None:
    """Refuse embeddings other than those a hyde_lc collection records (reads only)."""
    if is_chroma(vectorstore):
        from hyde_lc.store import chroma as store

        store.check_embeddings_for_reading(vectorstore, embeddings)  # type: ignore[arg-type]


def check_dimension(vectorstore: VectorStore, dimension: int) -> None:
    """Refuse vectors of another length than a hyde_lc collection records."""
    if is_chroma(vectorstore):
        from hyde_lc.store import chroma as store

        store.check_dimension(vectorstore, dimension)  # type: ignore[arg-type]


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
        return given
    try:
        return vectorstore._select_relevance_score_fn()
    except NotImplementedError:  # the store returns similarities already
        return float


def with_metadata(doc: Document, **values: Any) -> Document:
    """A copy of ``doc`` whose metadata has ``values`` set; the store's own is untouched.

    A shallow copy with a new metadata dict: a deep copy of every candidate cost about
    2 ms per hybrid search (100 candidates), and nothing here changes nested values.
    """
    return doc.model_copy(update={"metadata": {**doc.metadata, **values}})


def _with_score(doc: Document, score: float | None) -> Document:
    return with_metadata(doc, score=score)
