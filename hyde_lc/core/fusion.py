"""How the query and the hypotheses become one search: small pure functions.

* `fuse_mean`: the HyDE paper's query vector, the mean of the hypothesis embeddings
  and (by default) the query embedding: v = (f(q) + sum f(d_i)) / (N + 1).
* `concat_text`: query and hypotheses as one string, embedded once.
* `reciprocal_rank_fusion`: separate searches fused by rank (Cormack et al. 2009),
  robust to one misleading hypothesis.
* `score_fusion`: hybrid search's fusion of scored lists (dense cosine, lexical BM25),
  each rescaled to [0, 1] over its own candidates and then summed with weights: it keeps
  how far apart the candidates are, which RRF's ranks throw away.
* `similar_enough`: adaptive HyDE's gate, the hypotheses close enough to the query.

Example:
    >>> fuse_mean([[1.0, 0.0], [0.0, 1.0]])
    [0.5, 0.5]
    >>> reciprocal_rank_fusion([["a", "b"], ["b", "c"]], c=60)[0][0]
    'b'

"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

FUSION_MODES = ("mean", "concat", "rrf")
HYBRID_FUSIONS = ("score", "rrf")
"""How a hybrid search fuses its dense and lexical lists: `score_fusion` or RRF."""
RRF_C = 60


@dataclass
class Fused:
    """What `HyDETransform.fuse` made of `Embedded`: the dense search vector(s)."""

    vectors: list[list[float]]
    """One vector (mean, concat, no hypotheses), or one per ranking to fuse (rrf)."""
    weights: list[float] | None = None
    """The weights of the fused texts ([query, *hypotheses]; None: equal): of the mean,
    or of each ranking in reciprocal rank fusion."""
    dropped: int = 0
    """Hypotheses left out by ``min_similarity``."""
    kept: list[int] | None = None
    """Positions of the hypotheses the gate kept (None: no gate applied, all of them)."""

    def kept_texts(self, hypotheses: Sequence[str]) -> list[str]:
        """The hypotheses that took part: the lexical query uses these, as the dense one."""
        return list(hypotheses) if self.kept is None else [hypotheses[i] for i in self.kept]


def fuse_mean(
    vectors: Sequence[Sequence[float]], weights: Sequence[float] | None = None
) -> list[float]:
    """The (weighted) mean of equal-length vectors."""
    if not vectors:
        raise ValueError("fuse_mean needs at least one vector")
    matrix = np.asarray(vectors, dtype=np.float64)
    mean: list[float] = np.average(matrix, axis=0, weights=weights).tolist()
    return mean


def similar_enough(
    query: Sequence[float], hypotheses: Sequence[Sequence[float]], threshold: float
) -> list[int]:
    """Indexes of the hypotheses whose cosine similarity to the query is >= ``threshold``.

    A small writer sometimes drifts off the question (another topic, a refusal in
    disguise, repetition); such a passage lies far from the query in embedding space, and
    averaging it in moves the search away from what was asked.

    Example:
        >>> similar_enough([1.0, 0.0], [[1.0, 0.1], [0.0, 1.0]], 0.5)
        [0]

    """
    if not hypotheses:
        return []
    q = np.asarray(query, dtype=np.float64)
    h = np.asarray(hypotheses, dtype=np.float64)
    norms = np.linalg.norm(h, axis=1) * max(float(np.linalg.norm(q)), 1e-12)
    cosines = (h @ q) / np.maximum(norms, 1e-12)
    return [i for i, cos in enumerate(cosines) if cos >= threshold]


def concat_text(query: str | None, hypotheses: Sequence[str]) -> str:
    """The query (if given) and the hypotheses joined into one passage."""
    return "\n\n".join([*([query] if query else []), *hypotheses])


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[str]], c: int = RRF_C, weights: Sequence[float] | None = None
) -> list[tuple[str, float]]:
    """Fuse ranked id lists: score(d) = sum_i w_i / (c + rank_i(d)), ranks from 1.

    Ties keep the order of first appearance. Hand-written because it is four lines;
    the IR libraries that ship it (ranx) bring numba and a heavy stack.
    """
    weights = weights or [1.0] * len(rankings)
    scores: dict[str, float] = {}
    for ranking, weight in zip(rankings, weights, strict=True):
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + weight / (c + rank)
    return sorted(scores.items(), key=lambda pair: pair[1], reverse=True)


def score_fusion(
    scored: Sequence[Sequence[tuple[str, float]]], weights: Sequence[float] | None = None
) -> list[tuple[str, float]]:
    """Fuse scored lists: each min-max rescaled to [0, 1], weighted, summed; best first.

    An item missing from a list scores 0 there (below that list's every candidate). A
    list whose scores are all equal counts 1 for each of its items. Ties keep the order
    of first appearance. Hand-written because it is a few lines (as RRF above).

    Example:
        >>> score_fusion([[("a", 0.9), ("b", 0.7), ("c", 0.5)], [("b", 12.0), ("c", 3.0)]])
        [('b', 1.5), ('a', 1.0), ('c', 0.0)]

    """
    weights = weights or [1.0] * len(scored)
    fused: dict[str, float] = {}
    for items, weight in zip(scored, weights, strict=True):
        if not items:
            continue
        values = [score for _, score in items]
        low, span = min(values), max(values) - min(values)
        for item, score in items:
            scaled = (score - low) / span if span > 0 else 1.0
            fused[item] = fused.get(item, 0.0) + weight * scaled
    return sorted(fused.items(), key=lambda pair: pair[1], reverse=True)
