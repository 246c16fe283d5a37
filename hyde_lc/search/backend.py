"""Which search backend a store gets: chosen once, when a retriever is built.

A retriever asks four things of the store it searches, whatever the store: dense hits
for a vector, lexical (BM25) hits for weighted terms, chunks by id (and around a hit, for
neighbour expansion), and how many chunks there are. `SearchBackend` is that protocol;
`backend_for` picks its implementation from the store:

* a hyde_lc collection (`hyde_lc.open_store`): `CollectionBackend`, with the collection's
  own BM25 index and its state (documents being written are never returned in part);
* langchain-chroma's `Chroma`: `ChromaBackend`, through its public API;
* any other LangChain `VectorStore`: `VectorStoreBackend`, with the lexical side a
  `hyde_lc.search.lexical.LexicalSearch` the caller brings.

A new kind of store is one new backend module and one line here.

Example:
    >>> from langchain_core.embeddings import DeterministicFakeEmbedding
    >>> from langchain_core.vectorstores import InMemoryVectorStore
    >>> backend = backend_for(InMemoryVectorStore(DeterministicFakeEmbedding(size=4)), "off")
    >>> type(backend).__name__, backend.lexical_side is None
    ('VectorStoreBackend', True)

"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from typing import Any, Literal, Protocol

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from hyde_lc.errors import StoreUnavailableError
from hyde_lc.search.vectorstore_backend import (
    LexicalSide,
    VectorStoreBackend,
    Where,
    warn_no_lexical_index,
)

LexicalChoice = Literal["auto", "off"] | LexicalSide
"""``auto`` (the store's own BM25 index, if it has one), ``off``, or a lexical side."""


class SearchBackend(Protocol):
    """What a retriever asks of the store it searches."""

    vectorstore: VectorStore
    count_interval: float

    @property
    def lexical_side(self) -> LexicalSide | None:
        """The lexical side in force (None: dense only)."""
        ...

    @property
    def reads_vectors(self) -> bool:
        """Whether `vectors` can read the stored vectors of chunks."""
        ...

    def dense_candidates(
        self, vector: list[float], k: int, search_kwargs: dict[str, Any]
    ) -> tuple[list[tuple[str, float | None]], dict[str, Document]]:
        """``(id, relevance)`` of the ``k`` nearest chunks, and those of them already read."""
        ...

    def scored(self, vector: list[float], k: int, search_kwargs: dict[str, Any]) -> list[Document]:
        """The ``k`` nearest chunks, each with ``metadata["score"]``."""
        ...

    def mmr(self, vector: list[float], k: int, search_kwargs: dict[str, Any]) -> list[Document]:
        """``k`` diverse chunks by maximal marginal relevance."""
        ...

    def lexical_hits(
        self, weights: Counter[str], k: int, where: Where = None
    ) -> list[tuple[str, float]]:
        """``(id, BM25 score)`` of the ``k`` best chunks for weighted terms."""
        ...

    def lexical_note(self) -> str | None:
        """What every Document says about the lexical side, if anything."""
        ...

    def documents(self, ids: Sequence[str], where: Where = None) -> list[Document]:
        """The chunks with these ids that searches may see now."""
        ...

    def found_documents(self, ids: Sequence[str]) -> list[Document]:
        """The chunks a search found, read under the state it searched."""
        ...

    def size(self) -> int | None:
        """How many chunks searches can reach (None: the store cannot tell)."""
        ...

    def chunks(self) -> list[Document] | None:
        """Every chunk (None: the store cannot list them)."""
        ...

    def source_chunks(self, source: str) -> list[Document] | None:
        """Every chunk of one source (None: the store cannot list them)."""
        ...

    def chunks_around(
        self, sources: Sequence[str], doc_ids: Sequence[str] | None, indexes: Sequence[int]
    ) -> list[Document] | None:
        """Chunks of these documents at these positions (None: the store cannot tell)."""
        ...

    def vectors(self, ids: Sequence[str]) -> list[list[float]] | None:
        """The stored vectors of these chunks (None: the store cannot give them)."""
        ...

    def check_embeddings(self, embeddings: Embeddings) -> None:
        """Refuse embeddings other than those the store records."""
        ...

    def check_dimension(self, dimension: int) -> None:
        """Refuse vectors of another length than the store records."""
        ...

    def describe(self) -> tuple[str | None, str]:
        """The collection's name (None: the store has none) and where it lives."""
        ...

    def exists(self) -> bool:
        """Whether there is something to search."""
        ...

    def lost_server(self, exc: BaseException, resume: str) -> StoreUnavailableError | None:
        """The error to raise when ``exc`` means the store's server is gone."""
        ...


def backend_for(
    vectorstore: VectorStore, lexical: LexicalChoice = "auto", *, quiet: bool = False
) -> SearchBackend:
    """The backend that searches ``vectorstore``, with its lexical side chosen by ``lexical``.

    ``auto`` takes the BM25 index a hyde_lc collection carries; a store without one is
    searched dense only, said once per kind of store in the log unless ``quiet``.
    """
    if _is_instance(vectorstore, "hyde_lc.store.vectorstore", "HydeChroma"):
        # Imported here: a program on another store never loads chromadb.
        from hyde_lc.search.collection_backend import CollectionBackend

        return CollectionBackend(vectorstore, lexical, quiet=quiet)  # type: ignore[arg-type]
    side = None if isinstance(lexical, str) else lexical
    if lexical == "auto":
        warn_no_lexical_index(vectorstore, quiet)
    if _is_instance(vectorstore, "langchain_chroma", "Chroma"):
        from hyde_lc.search.chroma_backend import ChromaBackend

        return ChromaBackend(vectorstore, side)
    return VectorStoreBackend(vectorstore, side)


def _is_instance(obj: Any, module: str, name: str) -> bool:
    """Whether ``obj`` is an instance of ``module.name``, without importing the module."""
    loaded = sys.modules.get(module)
    return loaded is not None and isinstance(obj, getattr(loaded, name))
