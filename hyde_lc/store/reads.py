"""Reading a collection: searches by vector, chunks by id or position, everything in pages.

What `hyde_lc.search.stores`, the lexical index and neighbour expansion ask of a Chroma
store. Every read leaves out the chunks of documents still being written.

Example:
    >>> from hyde_lc import open_store
    >>> [page["ids"] for page in iter_pages(open_store())]  # doctest: +SKIP

"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
from langchain_chroma import Chroma
from langchain_core.documents import Document

from hyde_lc.search.stores import relevance_fn
from hyde_lc.store.state import (
    DOC_VERSION,
    META_DIMENSION,
    META_MODEL,
    _store_collection,
    collection_name,
    fresh_metadata,
    is_own_store,
    pending_in,
    pending_versions,
    query_visible,
    raw_get,
    search_filter,
    user_metadata,
    visible_where,
)

logger = logging.getLogger(__name__)

_PAGE = 5000


_TEXT_PAGE = 1000


def scored_search(
    store: Chroma, vector: list[float], k: int, search_kwargs: dict[str, Any]
) -> list[tuple[Document, float | None]]:
    """The ``k`` nearest visible chunks with their relevance, higher is better.

    The relevance comes from the collection's own distance function (cosine for hyde_lc
    collections).
    """
    extra = dict(search_kwargs)
    extra["filter"] = search_filter(store, extra.get("filter"))
    to_relevance = relevance_fn(store)
    return [
        (doc, float(to_relevance(distance)))
        for doc, distance in store.similarity_search_by_vector_with_relevance_scores(
            vector, k=k, **extra
        )
    ]


def vector_hits(
    store: Chroma, vector: list[float], k: int, where: Any = None
) -> list[tuple[str, float]]:
    """The ``k`` nearest visible chunks as ``(id, relevance)``, without reading their texts.

    The dense candidates of a hybrid search: most of them are never returned, so only the
    ones that make the fused ranking are read afterwards (`documents_by_id`). ``where`` is
    the caller's filter only: `query_visible` leaves pending versions out for any store.
    """
    to_relevance = relevance_fn(store)
    if not is_own_store(store):  # langchain-chroma's own Chroma: its public search
        found = store.similarity_search_by_vector_with_relevance_scores(
            vector, k=k, filter=where or None
        )
        return [(str(doc.id), float(to_relevance(distance))) for doc, distance in found]
    extra: dict[str, Any] = {"where": where} if where else {}
    pending = None
    collection = _store_collection(store)
    if collection is not None and META_MODEL in (collection.metadata or {}):
        from hyde_lc.store.collection import HybridCollection

        pending = HybridCollection.of(store).snapshot().pending  # refreshed at most once a second
    got = query_visible(
        store, k, pending, query_embeddings=[vector], include=["distances"], **extra
    )
    ids, distances = got["ids"][0], got["distances"][0]
    return [(str(i), float(to_relevance(d))) for i, d in zip(ids, distances, strict=True)]


def mmr_search(
    store: Chroma, vector: list[float], k: int, search_kwargs: dict[str, Any]
) -> list[Document]:
    """MMR among visible chunks, as copies with ``metadata["score"]``: cosine to ``vector``.

    LangChain's MMR returns no scores; the cosine is computed from the stored vectors.
    """
    extra = dict(search_kwargs)
    extra["filter"] = search_filter(store, extra.get("filter"))
    docs = [
        d.model_copy(deep=True)
        for d in store.max_marginal_relevance_search_by_vector(vector, k=k, **extra)
    ]
    if not docs:
        return docs
    got = raw_get(store, ids=[str(d.id) for d in docs], include=["embeddings"])
    vectors: list[Any] = list(got["embeddings"] if got["embeddings"] is not None else [])
    stored = dict(zip(got["ids"], vectors, strict=True))
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


def documents_by_id(store: Chroma, ids: Sequence[str], where: Any = None) -> list[Document]:
    """The visible chunks with these ids (matching ``where``, a Chroma filter), unordered."""
    if not ids:
        return []
    hide = visible_where(store, where)
    extra: dict[str, Any] = {"where": hide} if hide else {}
    got = raw_get(store, ids=list(ids), include=["documents", "metadatas"], **extra)
    texts, metas = got["documents"] or [], got["metadatas"] or []
    return [
        Document(page_content=text or "", metadata=user_metadata(meta), id=id_)
        for id_, text, meta in zip(got["ids"], texts, metas, strict=True)
    ]


def iter_pages(
    store: Chroma,
    where: dict | None = None,
    include: Sequence[str] = ("metadatas",),
    page_size: int = _PAGE,
) -> Iterator[dict[str, Any]]:
    """The collection's records matching ``where``, ``page_size`` at a time (memory bounded).

    ``where`` is used as given: pass it through `visible_where` to see what searches see.
    """
    return _paged(lambda **kwargs: raw_get(store, **kwargs), where, include, page_size)


def collection_pages(
    collection: Any,
    where: dict | None = None,
    include: Sequence[str] = ("metadatas",),
    page_size: int = _PAGE,
) -> Iterator[dict[str, Any]]:
    """`iter_pages` over a chromadb collection itself (e.g. a companion collection)."""
    return _paged(collection.get, where, include, page_size)


def _paged(
    get: Callable[..., Any], where: dict | None, include: Sequence[str], page_size: int
) -> Iterator[dict[str, Any]]:
    """``get``'s records matching ``where``, ``page_size`` at a time, until a short page."""
    offset = 0
    while True:
        page = get(where=where, include=list(include), limit=page_size, offset=offset)
        if page["ids"]:
            yield page
        if len(page["ids"]) < page_size:
            return
        offset += page_size


def iter_metadatas(store: Chroma, where: dict | None = None) -> list[tuple[str, dict]]:
    """All (id, metadata) pairs of the collection matching ``where`` (no embeddings)."""
    out: list[tuple[str, dict]] = []
    for page in iter_pages(store, where):
        metadatas: list[Any] = list(page["metadatas"] or [{}] * len(page["ids"]))
        out.extend(
            (id_, dict(meta or {})) for id_, meta in zip(page["ids"], metadatas, strict=True)
        )
    return out


SCRIPT_NOT_RECORDED = "unknown"
"""The script reported for chunks ingested before chunks recorded their script."""


def collection_info(store: Chroma) -> dict[str, Any]:
    """Facts about a collection: chunks, documents, scripts, embedding model and dimension.

    Counts what searches see. ``scripts`` counts chunks per script of their document
    (``latin``, ``cjk``, ...; `SCRIPT_NOT_RECORDED` for chunks ingested before chunks
    recorded it), most chunks first; each document lists its own ``script``. Documents
    whose writing was interrupted are listed apart under ``incomplete`` (chunks written
    so far, of how many): searches do not see them until the same file is ingested
    again, which completes them.

    Example:
        >>> info = collection_info(open_store())  # doctest: +SKIP
        >>> info["scripts"]  # doctest: +SKIP
        {'latin': 41, 'cjk': 12}

    """
    metadata = fresh_metadata(store)
    pending = pending_in(metadata)
    documents: dict[str, dict[str, Any]] = {}
    scripts: dict[str, int] = {}
    visible = 0
    where = {DOC_VERSION: {"$nin": pending}} if pending else None
    for page in iter_pages(store, where):
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
        for page in iter_pages(store, {DOC_VERSION: {"$in": pending}}):
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
        "collection": collection_name(store),
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


def visible_count(store: Chroma) -> int:
    """Chunks searches can see: all of them but those of pending document versions."""
    if not is_own_store(store):  # langchain-chroma's own Chroma: no public count
        return sum(len(page["ids"]) for page in iter_pages(store, include=()))
    collection = _store_collection(store)
    if collection is None:
        return 0
    total = int(collection.count())
    pending = pending_versions(store)
    if not pending:
        return total
    hidden = collection.get(where={DOC_VERSION: {"$in": pending}}, include=[])["ids"]
    return total - len(hidden)


def iter_chunks(store: Chroma, where: dict | None = None) -> Iterator[Document]:
    """Every chunk searches can see (matching ``where``), as Documents, a page at a time.

    Pages of `_TEXT_PAGE` chunks: with their texts, a page of 5,000 large chunks alone
    would hold about 10 MB.
    """
    include = ("documents", "metadatas")
    for page in iter_pages(store, visible_where(store, where), include, page_size=_TEXT_PAGE):
        texts, metas = page["documents"] or [], page["metadatas"] or []
        for id_, text, meta in zip(page["ids"], texts, metas, strict=True):
            yield Document(page_content=text or "", metadata=user_metadata(meta), id=id_)


def chunks_around(
    store: Chroma, sources: Sequence[str], doc_ids: Sequence[str] | None, indexes: Sequence[int]
) -> list[Document]:
    """Visible chunks of these documents at these positions (a superset to narrow).

    For collections whose chunks carry no derivable ids: the documents (by doc id, else
    by source) and positions as two ``$in`` lists, 4-10x faster in Chroma than an
    ``$or`` of one range per window.
    """
    if doc_ids is not None:
        documents: Any = {"doc_id": {"$in": sorted(set(doc_ids))}}
    else:
        documents = {"source": {"$in": sorted(set(sources))}}
    where = visible_where(
        store, {"$and": [documents, {"chunk_index": {"$in": sorted(set(indexes))}}]}
    )
    got = raw_get(store, where=where, include=["documents", "metadatas"])
    texts, metas = got["documents"] or [], got["metadatas"] or []
    return [
        Document(page_content=text or "", metadata=user_metadata(meta), id=id_)
        for id_, text, meta in zip(got["ids"], texts, metas, strict=True)
    ]
