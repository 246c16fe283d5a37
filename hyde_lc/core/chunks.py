"""A chunk's identity: its stable id, its key in a ranking, and `RetrievedChunk`.

Ingestion gives every chunk a stable id (`chunk_id`) derived from its document version
and position, so neighbour expansion can derive the ids of a hit's neighbours. In a
ranking a chunk is known by its id, else its text (`chunk_key`).

hyde_lc's retrievers put each hit's scores in its metadata (``score``, ``dense_score``,
``lexical_score``, ``found_by``, ...). LangChain's wrappers deduplicate by Document
equality (``MultiQueryRetriever`` keeps a Document unless an equal one came before), and
two searches give one chunk different scores: plain Documents would come back twice.
A `RetrievedChunk` compares equal to another Document of the same chunk (same id, text
and stored metadata) whatever the scores of the search that found it. It serialises as
a plain ``Document`` (``dumpd``/``loads``) and is one everywhere else.

Example:
    >>> from langchain_core.documents import Document
    >>> a = RetrievedChunk.of(Document("Fresnel lenses", id="c1", metadata={"score": 0.9}))
    >>> b = RetrievedChunk.of(Document("Fresnel lenses", id="c1", metadata={"score": 0.4}))
    >>> a == b, a.metadata["score"]
    (True, 0.9)

"""

from __future__ import annotations

import hashlib
from typing import Any

from langchain_core.documents import Document

SEARCH_KEYS = frozenset(
    {
        "score",
        "similarity",
        "dense_score",
        "lexical_score",
        "found_by",
        "retrieval_mode",
        "hyde_fallback",
        "hyde_query_truncated",
        "hyde_hypotheses_dropped",
        "lexical_note",
        "hit_chunk_index",
        "hit_chunk_indexes",
    }
)
"""Metadata a search adds to a chunk (or to a window of chunks, `hyde_lc.retrievers.neighbors`):
what it found, not what the chunk is."""


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


def chunk_key(doc: Document) -> str:
    """A chunk's identity in a ranking: its id, else its text."""
    return str(doc.id) if doc.id else doc.page_content


def with_metadata(doc: Document, **values: Any) -> Document:
    """A copy of ``doc`` whose metadata has ``values`` set; the store's own is untouched.

    A shallow copy with a new metadata dict: a deep copy of every candidate cost about
    2 ms per hybrid search (100 candidates), and nothing here changes nested values.
    """
    return doc.model_copy(update={"metadata": {**doc.metadata, **values}})


def stored_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """``metadata`` without what a search added (`SEARCH_KEYS`)."""
    return {key: value for key, value in metadata.items() if key not in SEARCH_KEYS}


class RetrievedChunk(Document):
    """A Document found by a search: equal to the same chunk found by any other search.

    Example:
        >>> from langchain_core.documents import Document
        >>> RetrievedChunk.of(Document("x", metadata={"score": 1.0})) == Document("x")
        True

    """

    @classmethod
    def of(cls, doc: Document) -> RetrievedChunk:
        """``doc`` as a `RetrievedChunk` (the same fields; metadata copied)."""
        if isinstance(doc, cls):
            return doc
        return cls(page_content=doc.page_content, metadata=dict(doc.metadata), id=doc.id)

    @classmethod
    def lc_id(cls) -> list[str]:
        """Serialised as LangChain's own ``Document``: loading gives one back."""
        return Document.lc_id()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Document):
            return NotImplemented
        return (
            self.page_content == other.page_content
            and (self.id or None) == (other.id or None)
            and stored_metadata(self.metadata) == stored_metadata(other.metadata)
        )

    __hash__ = None  # type: ignore[assignment]  # mutable, as Document
