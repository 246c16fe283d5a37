"""Pseudo-relevance feedback: the first search's best chunks refine the search, no LLM.

HyDE's oldest rival (Rocchio 1971; RM3, Lavrenko and Croft 2001): instead of a passage an
LLM wrote, the top ``m`` chunks of a first search stand in for the relevant documents,
and a second search runs with what they add. `hyde_lc.HyDERetriever` runs it as one more
step of its pipeline (``feedback=...``), on either side of a hybrid search:

* **dense** (Rocchio): the search vector moved toward the mean of the feedback chunks'
  stored vectors, ``alpha * q + beta * mean(d)`` with ``q`` and each ``d`` at unit length
  (`rocchio`); a cosine search depends only on the ratio, so the retriever takes one
  weight ``beta`` and uses ``alpha = 1 - beta``.
* **lexical** (RM3): the terms of the feedback chunks, analysed as the BM25 index analyses
  text (`hyde_lc.search.lexical.analyze`), weighted by how much of each chunk they make up
  (the relevance model, RM1; `expansion_terms`); the best ``n`` are added to the BM25
  query with a share ``weight`` of its total weight (`expand_query`), so the original
  terms keep theirs.

Both are pure functions of the first ranking; the chunks' vectors are read through the
store's search backend (`hyde_lc.search.backend.SearchBackend.vectors`: Chroma,
``InMemoryVectorStore``, or a store with a ``vectors_by_id`` method).

Example:
    >>> rocchio([1.0, 0.0], [[0.0, 1.0]], beta=0.5)
    [0.5, 0.5]
    >>> terms = expansion_terms(["Fresnel lenses focus light", "lenses of glass"], terms=2)
    >>> sorted(terms)
    ['glass', 'lens']
    >>> expand_query(Counter({"len": 2}), {"glass": 1.0}, weight=0.5)
    Counter({'len': 2.0, 'glass': 2.0})

"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from hyde_lc.errors import InvalidSettingError
from hyde_lc.store.lexical_index import analyze

FeedbackMode = Literal["off", "dense", "lexical", "both"]
FEEDBACK_MODES: tuple[str, ...] = ("off", "dense", "lexical", "both")

DEFAULT_FEEDBACK_DOCS = 5
"""Chunks of the first ranking fed back (``m``)."""
DEFAULT_FEEDBACK_VECTOR_WEIGHT = 0.5
"""Rocchio's ``beta``: the feedback mean's share of the moved search vector."""
DEFAULT_FEEDBACK_TERMS = 10
"""Expansion terms added to the BM25 query (RM3's ``fbTerms``; Anserini's default)."""
DEFAULT_FEEDBACK_TERM_WEIGHT = 0.5
"""The expansion terms' share of the BM25 query's weight (Anserini's RM3: 0.5)."""


def check_feedback_mode(mode: Any) -> Any:
    """``mode`` if it is a feedback mode, else `InvalidSettingError` naming them."""
    if mode not in FEEDBACK_MODES:
        raise InvalidSettingError(
            f"unknown feedback {mode!r}: choose one of {', '.join(FEEDBACK_MODES)}"
        )
    return mode


def check_feedback(
    mode: Any, docs: Any, vector_weight: Any, terms: Any, term_weight: Any
) -> FeedbackMode:
    """The feedback settings, checked; `InvalidSettingError` saying what to pass."""
    checked: FeedbackMode = check_feedback_mode(mode)
    for name, value in (("feedback_docs", docs), ("feedback_terms", terms)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidSettingError(f"{name} must be a whole number of at least 1, got {value!r}")
    for name, value in (
        ("feedback_vector_weight", vector_weight),
        ("feedback_term_weight", term_weight),
    ):
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
            raise InvalidSettingError(
                f"{name} must lie in [0, 1) (the feedback's share; 0 changes nothing), "
                f"got {value!r}"
            )
    return checked


def _unit(rows: Any) -> np.ndarray:
    matrix = np.atleast_2d(np.asarray(rows, dtype=float))
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return np.asarray(matrix / np.maximum(norms, 1e-12))


def rocchio(
    vector: Sequence[float], feedback: Sequence[Sequence[float]], beta: float
) -> list[float]:
    """``(1 - beta) * q + beta * mean(d)``, the query and each chunk vector at unit length.

    Without feedback vectors the query vector is returned as it is.

    Example:
        >>> rocchio([2.0, 0.0], [[0.0, 1.0], [0.0, 3.0]], beta=0.25)
        [0.75, 0.25]

    """
    if not len(feedback) or beta == 0:
        return [float(x) for x in vector]
    query = _unit(vector)[0]
    mean = _unit(feedback).mean(axis=0)
    return [float(x) for x in (1 - beta) * query + beta * mean]


def expansion_terms(
    texts: Sequence[str], terms: int, weights: Sequence[float] | None = None
) -> dict[str, float]:
    """The relevance model of the feedback chunks: its ``terms`` most likely terms.

    ``P(w|R) = sum_D weight(D) * tf(w, D) / |D|`` over the chunks (uniform weights unless
    given), the best ``terms`` kept and renormalised to sum to 1. Terms are the BM25
    index's own (`hyde_lc.search.lexical.analyze`: stemmed, stop words left out), so every one
    can match.

    Example:
        >>> expansion_terms(["lens lens glass", "lens"], terms=1)
        {'len': 1.0}

    """
    share = [1.0] * len(texts) if weights is None else [float(w) for w in weights]
    if len(share) != len(texts):
        raise ValueError("one weight per feedback text")
    total = sum(share)
    model: dict[str, float] = {}
    for text, w in zip(texts, share, strict=True):
        analysed = analyze(text)
        if not analysed or total <= 0:
            continue
        for term, count in Counter(analysed).items():
            model[term] = model.get(term, 0.0) + (w / total) * count / len(analysed)
    # ties broken by the term, so the expansion does not depend on the chunks' order
    best = sorted(model.items(), key=lambda item: (-item[1], item[0]))[:terms]
    mass = sum(p for _, p in best)
    return {t: p / mass for t, p in best} if mass > 0 else {}


def expand_query(
    original: Counter[str], expansion: Mapping[str, float], weight: float
) -> Counter[str]:
    """The BM25 query with the expansion terms given ``weight`` of its total weight (RM3).

    The original terms keep their weights; ``expansion`` (summing to 1) is scaled so that
    it makes ``weight`` of the result: ``weight / (1 - weight)`` times the original total.

    Example:
        >>> expand_query(Counter({"a": 3}), {"a": 0.5, "b": 0.5}, weight=0.25)
        Counter({'a': 3.5, 'b': 0.5})

    """
    if not expansion or weight == 0 or not original:
        return Counter(original)
    scale = weight / (1 - weight) * sum(original.values())
    # a Counter of float weights: the lexical index boosts each term by its weight
    out: dict[str, float] = {term: float(w) for term, w in original.items()}
    for term, p in expansion.items():
        out[term] = out.get(term, 0.0) + scale * p
    return Counter(out)


def feedback_needs_vectors(vectorstore: Any) -> str:
    """The message for a store dense feedback cannot read vectors from."""
    return (
        f"dense feedback reads the stored vectors of the first search's chunks, and a "
        f"{type(vectorstore).__name__} cannot return them: use a Chroma collection or an "
        "InMemoryVectorStore, or feedback='lexical'"
    )


@dataclass
class Feedback:
    """What the feedback step did (`hyde_lc.HyDEResult.feedback`).

    Example:
        >>> Feedback("lexical", ["c1", "c2"], expansion={"len": 0.6, "glass": 0.4}).chunk_ids
        ['c1', 'c2']

    """

    mode: FeedbackMode
    chunk_ids: list[str]
    """The chunks of the first ranking fed back, best first."""
    expansion: dict[str, float] = field(default_factory=dict)
    """Lexical: the expansion terms and their share of the expansion (summing to 1)."""
    first_ranking: list[str] = field(default_factory=list)
    """The first search's ranking (chunk ids), before the feedback."""
    vector_shift: float | None = None
    """Dense: cosine similarity of the moved search vector to the original one."""


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity of two vectors."""
    x, y = _unit(a)[0], _unit(b)[0]
    return float(x @ y)
