"""The hybrid search: dense hits for the search vector(s), fused with BM25 hits.

The second unit of `hyde_lc.HyDERetriever`'s query path (the first is
`hyde_lc.hyde.transform.HyDETransform`)::

    search vector(s) --dense-->   the vector store's best chunks (one search, or the
                                  reciprocal rank fusion of several for ``rrf``)
    question + hypotheses --lexical-->  the BM25 index's best chunks (query2doc)
                     --fuse-->    one ranking (rescaled scores, or ranks)

The lexical search needs only texts, so `HybridSearch.start_lexical` starts it in the
background as soon as they are known, and `HybridSearch.search` joins it with the dense
side. Every read of the store goes through its search backend
(`hyde_lc.search.backend.backend_for`): over a Chroma collection the dense side reads ids
and scores only, and the texts of the chunks that make the final ranking are read
afterwards in one request.

Example:
    >>> from langchain_core.embeddings import DeterministicFakeEmbedding
    >>> from langchain_core.vectorstores import InMemoryVectorStore
    >>> from hyde_lc.core.fusion import Fused
    >>> from hyde_lc.search.backend import backend_for
    >>> emb = DeterministicFakeEmbedding(size=8)
    >>> store = InMemoryVectorStore.from_texts(["lenses", "towers"], emb)
    >>> docs = HybridSearch(backend_for(store, "off")).search(Fused([emb.embed_query("lenses")]), 1)
    >>> docs[0].page_content
    'lenses'

"""

from __future__ import annotations

import contextvars
import os
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from langchain_core.documents import Document

from hyde_lc.core.chunks import chunk_key, with_metadata
from hyde_lc.core.fusion import HYBRID_FUSIONS, Fused, reciprocal_rank_fusion, score_fusion
from hyde_lc.errors import InvalidSettingError
from hyde_lc.search.backend import SearchBackend
from hyde_lc.store.lexical_index import DEFAULT_QUERY_REPEATS, check_filter, lexical_query

HybridFusion = Literal["score", "rrf"]

DEFAULT_DENSE_WEIGHT = 0.5
"""The dense list's share of the hybrid fusion (the lexical list has the rest): chosen on
all 809 SciFact train queries (0.4 and 0.5 tied at 73.0 nDCG@10; BENCHMARKS.md)."""

HYBRID_CANDIDATES = 100
"""Candidates taken from each list before fusing: the rescaling of `score_fusion` needs a
list deep enough that its lowest score means "not relevant"."""

BACKGROUND = ThreadPoolExecutor(max_workers=8, thread_name_prefix="hyde-side")
"""Work that does not wait for the step before it: the query's embedding while the
hypotheses are written, and the lexical search while the dense side embeds and searches.
Its tasks never wait on each other, so a full pool only queues them."""


def _pool_of_its_own() -> None:
    """In a forked child: a new `BACKGROUND`. The parent's pool threads were not copied.

    (A pool copied by ``fork`` believes its idle threads are there and queues tasks
    nobody runs: a retriever in a ``multiprocessing`` worker would wait forever.)
    """
    global BACKGROUND
    BACKGROUND = ThreadPoolExecutor(max_workers=8, thread_name_prefix="hyde-side")


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_pool_of_its_own)


def in_background(fn: Any, *args: Any) -> Future[Any]:
    """Run ``fn(*args)`` on `BACKGROUND`, in the caller's context (callbacks, tracing)."""
    return BACKGROUND.submit(contextvars.copy_context().run, fn, *args)


def check_hybrid_fusion(value: Any) -> Any:
    """``value`` if it is a hybrid fusion, else `InvalidSettingError` naming them."""
    if value not in HYBRID_FUSIONS:
        raise InvalidSettingError(
            f"unknown hybrid_fusion {value!r}: choose one of {', '.join(HYBRID_FUSIONS)}"
        )
    return value


@dataclass(frozen=True)
class HybridSearch:
    """Dense search through ``backend``, fused with its lexical side (if it has one).

    Every Document's ``metadata["score"]`` is its score in the final ranking (cosine
    relevance when dense only); with a lexical side, ``dense_score`` and ``lexical_score``
    give each list's own score (None where it did not find the chunk) and ``found_by``
    the lists that found it.

    Example:
        >>> from langchain_core.embeddings import DeterministicFakeEmbedding
        >>> from langchain_core.vectorstores import InMemoryVectorStore
        >>> from hyde_lc.search.backend import backend_for
        >>> store = InMemoryVectorStore(DeterministicFakeEmbedding(size=4))
        >>> HybridSearch(backend_for(store, "off")).lexical_side is None
        True

    """

    backend: SearchBackend
    search_kwargs: dict[str, Any] = field(default_factory=dict)
    """Passed to the dense search; its ``filter`` also narrows the lexical search."""
    search_type: Literal["similarity", "mmr"] = "similarity"
    """MMR searches dense only (its diversity has no lexical counterpart)."""
    dense_weight: float = DEFAULT_DENSE_WEIGHT
    hybrid_fusion: HybridFusion = "score"
    lexical_query_repeats: int = DEFAULT_QUERY_REPEATS
    candidates: int = HYBRID_CANDIDATES
    """Candidates taken from each list before the hybrid fusion."""
    rrf_candidates: int = 20
    """With several search vectors: how deep each separate dense ranking goes."""

    @classmethod
    def from_fields(cls, owner: Any, backend: SearchBackend, **given: Any) -> HybridSearch:
        """A search with the settings ``owner`` has under the same names, and ``given``."""
        names = {f.name for f in fields(cls)} - {"backend", *given}
        found = {name: getattr(owner, name) for name in names if hasattr(owner, name)}
        return cls(backend, **found, **given)

    def __post_init__(self) -> None:
        check_hybrid_fusion(self.hybrid_fusion)
        if not 0 <= self.dense_weight <= 1:
            raise InvalidSettingError(
                f"dense_weight must lie between 0 and 1, got {self.dense_weight}"
            )
        for name in ("rrf_candidates", "candidates", "lexical_query_repeats"):
            if getattr(self, name) < 1:
                shown = "hybrid_candidates" if name == "candidates" else name
                raise InvalidSettingError(f"{shown} must be at least 1, got {getattr(self, name)}")
        where = self.search_kwargs.get("filter")
        if isinstance(where, dict) and self.lexical_side is not None:
            check_filter(where)  # refused now, with the message a search would give

    @property
    def lexical_side(self) -> Any:
        """The lexical search in force (None: dense only, also under MMR)."""
        return self.backend.lexical_side if self.search_type == "similarity" else None

    def lexical_weights(self, query: str, hypotheses: Sequence[str]) -> Counter[str]:
        """The BM25 query's term weights: the question repeated, plus the hypotheses."""
        return lexical_query(query, list(hypotheses), self.lexical_query_repeats)

    def start_lexical(
        self,
        query: str,
        hypotheses: Sequence[str],
        k: int,
        *,
        weights: Counter[str] | None = None,
    ) -> Future[list[tuple[str, float]]] | None:
        """Start the lexical search in the background (None: dense only).

        ``weights`` replaces the query's own term weights (`lexical_weights`), e.g. with
        feedback's expansion terms added (`hyde_lc.search.feedback.expand_query`).
        """
        if self.lexical_side is None:
            return None
        if weights is None:
            weights = self.lexical_weights(query, hypotheses)
        where = self.search_kwargs.get("filter")
        return in_background(self.backend.lexical_hits, weights, max(k, self.candidates), where)

    def search(
        self,
        fused: Fused,
        k: int,
        lexical_hits: Future[list[tuple[str, float]]] | None = None,
        *,
        query: str = "",
        hypotheses: Sequence[str] = (),
    ) -> list[Document]:
        """The ``k`` best chunks for ``fused``, fused with the lexical hits.

        ``lexical_hits`` is a search `start_lexical` started; without it, one is started
        here for ``query`` and ``hypotheses``.
        """
        if lexical_hits is None:
            lexical_hits = self.start_lexical(query, hypotheses, k)
        if lexical_hits is None or self.lexical_side is None:
            return self._dense(fused, k)
        with settled(lexical_hits):
            scored, docs = self._dense_candidates(fused, max(k, self.candidates))
        return self._fuse(scored, docs, lexical_hits.result(), k)

    # -- the dense side ----------------------------------------------------------------

    def _dense_candidates(
        self, fused: Fused, depth: int
    ) -> tuple[list[tuple[str, Any]], dict[str, Document]]:
        """A hybrid search's dense side: ``(id, score)`` best first, and the chunks read.

        A Chroma collection searched with one vector (and at most a ``filter``) gives ids
        and scores only: the texts of the candidates that make the fused ranking are read
        afterwards, in one request. Another store gives its own Documents, which `_fuse`
        copies only when it returns them; several vectors (``rrf``) give their fusion.
        """
        if len(fused.vectors) > 1:
            hits = self._dense(fused, depth)
            return [(chunk_key(d), d.metadata.get("score")) for d in hits], {
                chunk_key(d): d for d in hits
            }
        return self.backend.dense_candidates(fused.vectors[0], depth, self.search_kwargs)

    def _dense(self, fused: Fused, k: int) -> list[Document]:
        """One search, or the reciprocal rank fusion of several (``rrf``)."""
        if len(fused.vectors) == 1:
            return self._search_one(fused.vectors[0], k)
        depth = max(k, self.rrf_candidates)
        rankings = [self._search_one(v, depth) for v in fused.vectors]
        by_key: dict[str, Document] = {}
        for ranking in rankings:
            for doc in ranking:
                by_key.setdefault(chunk_key(doc), doc)
        fused_ids = reciprocal_rank_fusion(
            [[chunk_key(d) for d in r] for r in rankings], weights=fused.weights
        )[:k]
        out = []
        for key, score in fused_ids:
            found = by_key[key]
            out.append(with_metadata(found, similarity=found.metadata.get("score"), score=score))
        return out

    def _search_one(self, vector: list[float], k: int) -> list[Document]:
        if self.search_type == "mmr":
            return self.backend.mmr(vector, k, self.search_kwargs)
        return self.backend.scored(vector, k, self.search_kwargs)

    # -- the fusion --------------------------------------------------------------------

    def _fuse(
        self,
        dense_scored: list[tuple[str, Any]],
        dense_docs: dict[str, Document],
        lexical_hits: list[tuple[str, float]],
        k: int,
    ) -> list[Document]:
        """Fuse the two lists; chunks not already read are read now, best first.

        ``dense_docs`` holds the dense candidates already read (all of them, or none when
        the dense side returned ids only). A chunk read now may have gone (or be mid-write)
        since it was found: it is skipped, and the next ones in the ranking are read.
        """
        weights = [self.dense_weight, 1 - self.dense_weight]
        if self.hybrid_fusion == "rrf" or any(score is None for _, score in dense_scored):
            # a store that returns no scores: fuse by rank
            ranked = reciprocal_rank_fusion(
                [[i for i, _ in dense_scored], [i for i, _ in lexical_hits]], weights=weights
            )
        else:
            ranked = score_fusion([dense_scored, lexical_hits], weights)
        dense_scores = dict(dense_scored)
        lexical_scores = dict(lexical_hits)
        out: list[Document] = []
        start, width = 0, 2 * k
        while len(out) < k and start < len(ranked):
            batch = ranked[start : start + width]
            unread = [key for key, _ in batch if key not in dense_docs]
            read = {chunk_key(d): d for d in self.backend.found_documents(unread)} if unread else {}
            for key, score in batch:
                found = dense_docs.get(key) or read.get(key)
                if found is None:
                    continue
                found_by = [
                    name
                    for name, hit in (
                        ("dense", key in dense_scores),
                        ("lexical", key in lexical_scores),
                    )
                    if hit
                ]
                out.append(
                    with_metadata(
                        found,
                        dense_score=dense_scores.get(key),
                        lexical_score=lexical_scores.get(key),
                        found_by=found_by,
                        score=score,
                    )
                )
                if len(out) == k:
                    break
            start, width = start + width, 2 * width
        return out


@contextmanager
def settled(pending: Future[Any] | None) -> Iterator[None]:
    """Cancel ``pending`` if the block fails (a started search then runs out unread)."""
    try:
        yield
    except BaseException:
        if pending is not None:
            pending.cancel()
        raise
