"""The search backend of a hyde_lc collection: its own BM25 index, its state, its model check.

A collection opened by `hyde_lc.open_store` is searched through its `HybridCollection`:
the dense side reads ids and scores only (`HybridCollection.dense_hits`), the lexical side
searches the collection's persistent BM25 index (kept current from the collection's change
feed), and the winners' texts are read under the state the search used, so a document
still being written is never returned in part. The state (the last finished write and the
versions being written) is read at most every ``HYDE_LC_REFRESH_INTERVAL`` seconds, as of
when the backend was made. Searching with another embedding model than the collection
records is refused before anything is searched.

Example:
    >>> from hyde_lc import open_store
    >>> backend = CollectionBackend(open_store())  # doctest: +SKIP
    >>> backend.lexical_hits(lexical_query("Fresnel"), k=3)  # doctest: +SKIP

"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from hyde_lc.errors import StoreUnavailableError
from hyde_lc.search.chroma_backend import ChromaBackend
from hyde_lc.search.vectorstore_backend import LexicalSide, Where, warn_no_lexical_index
from hyde_lc.store.collection import HybridCollection, refresh_interval
from hyde_lc.store.location import lost_server
from hyde_lc.store.vectorstore import HydeChroma

logger = logging.getLogger(__name__)


class CollectionBackend(ChromaBackend):
    """A hyde_lc collection (a `HydeChroma` store), searched through its `HybridCollection`.

    ``lexical`` is ``"auto"`` (the collection's own BM25 index, when it has one: looked up
    at the first search) or a lexical side the caller brings (None: dense only).

    Example:
        >>> backend = CollectionBackend(open_store(), lexical=None)  # doctest: +SKIP
        >>> backend.size()  # doctest: +SKIP
        120

    """

    def __init__(
        self,
        vectorstore: HydeChroma,
        lexical: LexicalSide | str | None = "auto",
        *,
        quiet: bool = False,
    ) -> None:
        super().__init__(vectorstore, None if isinstance(lexical, str) else lexical)
        self.hybrid = HybridCollection.of(vectorstore)
        self.max_age = refresh_interval()
        """How old (seconds) the collection's state a search uses may be."""
        self._own_index = lexical == "auto"
        self._resolved = not self._own_index
        self._quiet = quiet

    @property
    def own_lexical(self) -> bool:
        """Whether the lexical side is the collection's own index (looked up once).

        Looked up at the first search: a collection that does not exist yet (or was not
        built by hyde_lc) has no index, and is then searched dense only, said once.
        """
        if not self._resolved:
            self._own_index = self.hybrid.base is not None
            self._resolved = True
            if not self._own_index:
                warn_no_lexical_index(self.vectorstore, self._quiet)
        return self._own_index

    @property
    def lexical_side(self) -> LexicalSide | None:
        """The lexical side in force: the collection's index, one brought, or None."""
        return self.hybrid if self.own_lexical else self.lexical

    def dense_candidates(
        self, vector: list[float], k: int, search_kwargs: dict[str, Any]
    ) -> tuple[list[tuple[str, float | None]], dict[str, Document]]:
        """A hybrid search's dense side: ids and scores of visible chunks, texts read later.

        Under the state this search uses; a search with options besides ``filter`` reads
        its candidates' texts through the store's own search, as any Chroma store's.
        """
        if set(search_kwargs) - {"filter"}:
            return super().dense_candidates(vector, k, search_kwargs)
        where = search_kwargs.get("filter")
        return list(self.hybrid.dense_hits(vector, k, where, max_age=self.max_age)), {}

    def lexical_note(self) -> str | None:
        """What the results say of the lexical side, if anything; a brought one may be stale.

        The collection's own index is left out when it cannot be used (its disk full, its
        folder not writable), and every result says so; on a Chroma server, another
        client's write under way is said too (`HybridCollection.lexical_note`).
        """
        if not self.own_lexical:
            return super().lexical_note()
        return self.hybrid.lexical_trouble or self.hybrid.lexical_note()

    def lexical_hits(
        self, weights: Counter[str], k: int, where: Where = None
    ) -> list[tuple[str, float]]:
        """BM25 hits among the chunks searches may see (the collection's index, or one brought)."""
        if self.own_lexical:
            return self.hybrid.search(weights, k, where, max_age=self.max_age)
        return super().lexical_hits(weights, k, where)

    def found_documents(self, ids: Sequence[str]) -> list[Document]:
        """The winners' texts, read under the state the search used (never part of a document)."""
        return self.hybrid.documents(ids)

    def documents(self, ids: Sequence[str], where: Where = None) -> list[Document]:
        """The chunks with these ids that searches may see now (matching ``where``)."""
        return self.hybrid.chroma.documents(ids, where)

    def chunks(self) -> list[Document]:
        """Every chunk searches may see, read a page at a time."""
        return list(self.hybrid.chroma.iter_chunks())

    def chunks_around(
        self, sources: Sequence[str], doc_ids: Sequence[str] | None, indexes: Sequence[int]
    ) -> list[Document]:
        """Visible chunks of these documents at these positions (a superset to narrow)."""
        return self.hybrid.chroma.chunks_around(sources, doc_ids, indexes)

    def _get_by_id(self, **kwargs: Any) -> dict[str, Any]:
        """Chunks by id as stored (the ids are of chunks a search found: visible ones)."""
        return self.hybrid.chroma.get(**kwargs)

    def size(self) -> int:
        """Chunks searches can see: all but those of document versions still being written."""
        return self.hybrid.chroma.visible_count()

    def check_embeddings(self, embeddings: Embeddings) -> None:
        """Refuse searching with another model than the collection records (reads only).

        A collection built by other tools records no model: its owner vouches for the
        embeddings they pass, so it is searched as it is.
        """
        if self.hybrid.chroma.records_model():
            self.hybrid.chroma.check_embeddings(embeddings)

    def check_dimension(self, dimension: int) -> None:
        """Refuse vectors of another length than the collection records."""
        self.hybrid.chroma.check_dimension(dimension)

    def describe(self) -> tuple[str | None, str]:
        """The collection's name and its folder or server URL."""
        location = self.hybrid.chroma.location
        return location.collection, str(location.path) if location.path else str(location.url)

    def exists(self) -> bool:
        """Whether the collection exists (opening a new store creates nothing)."""
        return self.hybrid.chroma.existing() is not None

    def lost_server(self, exc: BaseException, resume: str) -> StoreUnavailableError | None:
        """The error naming the server, when ``exc`` means the collection's server is gone."""
        return lost_server(self.hybrid.chroma.location, exc, resume)
