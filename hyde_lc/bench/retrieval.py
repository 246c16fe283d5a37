"""Retrieval quality of retriever configurations on a BEIR dataset.

A configuration (`BenchMode`) is a set of `HyDERetriever` fields, named by the same label
everything else uses (`hyde_lc.retrievers.hyde.configuration_label`): ``standard``, ``hybrid``,
``hyde``, ``hybrid-hyde``, with non-default settings in parentheses. Every configuration
runs through `HyDERetriever` itself (the code users run) over an exact cosine index of
the corpus (`ExactIndex`), with the lexical side a BM25 index of the same texts
(``title + " " + text``; `hyde_lc.search.lexical.LexicalSearch.from_documents`).

What runs: the no-LLM baselines always (``standard``: dense; ``bm25``: the lexical list
alone, a bench-only configuration; ``hybrid``: both, fused) since every row is compared
with them, then the package's default configuration (``HyDERetriever()``'s defaults,
marked ``default`` in the results) unless a selection leaves it out, then any HyDE
variants asked for (`select_modes`). Hypotheses are cached on disk
(`hyde_lc.hyde.hypothesis_cache.HypothesisCache`, keyed per prompt and sample; it also reads
the committed ``SQLiteCache`` files, as data, never by unpickling), so a rerun, or a new
fusion over the same prompts, writes none again; a configuration with n = 4 reuses
n = 1's first sample. Metrics come from ir-measures (nDCG@10, Recall@100, MRR@10); each
row's nDCG@10 is compared by a paired bootstrap over queries with the dense baseline and
with the best no-LLM row.

Example:
    >>> from hyde_lc.bench import run_benchmark
    >>> report = run_benchmark("scifact", limit=20,
    ...                        llm_spec="local:smollm2-135m")  # doctest: +SKIP
    >>> print(report.markdown())  # doctest: +SKIP

"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore
from tqdm.auto import tqdm

from hyde_lc.bench.beir import BeirDataset, load_beir
from hyde_lc.errors import InvalidSettingError, MissingDependencyError
from hyde_lc.models.loading import (
    embedding_model_id,
    llm_model_name,
    load_embeddings,
    load_llm,
    resolve_llm_spec,
)
from hyde_lc.models.weights import cache_dir
from hyde_lc.retrievers.hyde import HyDERetriever
from hyde_lc.retrievers.label import configuration_label
from hyde_lc.search.lexical import LexicalSearch

DEPTH = 100
"""Documents ranked per query (the depth of Recall@100), and candidates per list."""


class ExactIndex(VectorStore):
    """Exact cosine search over an in-memory matrix of unit vectors (read-only).

    Hand-written because LangChain's ``InMemoryVectorStore`` rebuilds its matrix on every
    query (~50 ms on 5k documents), and a benchmark runs thousands of searches. It returns
    cosine scores (``similarity_search_with_score_by_vector``) so hybrid search fuses the
    scores, as it does over Chroma, and reads documents back by id (``get_by_ids``) for the
    hits only the lexical list found.

    Example:
        >>> index = ExactIndex(["a", "b"], np.eye(2, dtype=np.float32), embeddings=None)
        >>> [d.id for d in index.similarity_search_by_vector([0.0, 1.0], k=1)]
        ['b']

    """

    def __init__(
        self,
        ids: Sequence[str],
        matrix: np.ndarray,
        embeddings: Embeddings | None,
        texts: Mapping[str, str] | None = None,
    ):
        self.ids = list(ids)
        self.matrix = matrix
        self._embeddings = embeddings
        self.texts = dict(texts or {})
        self._position = {doc_id: i for i, doc_id in enumerate(self.ids)}

    @property
    def embeddings(self) -> Embeddings | None:
        """The model that embedded the corpus."""
        return self._embeddings

    def _document(self, i: int, score: float | None = None) -> Document:
        doc_id = self.ids[i]
        metadata = {} if score is None else {"score": score}
        return Document(self.texts.get(doc_id, ""), id=doc_id, metadata=metadata)

    def _top(self, embedding: Sequence[float], k: int) -> list[tuple[int, float]]:
        query = np.asarray(embedding, dtype=np.float32)
        return top_k(self.matrix @ (query / max(float(np.linalg.norm(query)), 1e-12)), k)

    def similarity_search_with_score_by_vector(
        self, embedding: list[float], k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """The ``k`` nearest documents with their cosine similarity."""
        return [(self._document(i), score) for i, score in self._top(embedding, k)]

    def similarity_search_by_vector(
        self, embedding: list[float], k: int = 4, **kwargs: Any
    ) -> list[Document]:
        """The ``k`` nearest documents; ``metadata["score"]`` is the cosine similarity."""
        return [self._document(i, score) for i, score in self._top(embedding, k)]

    def _select_relevance_score_fn(self) -> Callable[[float], float]:
        return lambda score: score  # cosine similarity is already a relevance

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        """Embed ``query`` and search."""
        assert self._embeddings is not None
        return self.similarity_search_by_vector(self._embeddings.embed_query(query), k)

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The documents with these ids (unknown ids are skipped)."""
        return [self._document(self._position[i]) for i in ids if i in self._position]

    def vectors_by_id(self, ids: Sequence[str]) -> list[np.ndarray | None]:
        """The stored vectors of these ids (None for an unknown id): for dense feedback."""
        return [self.matrix[self._position[i]] if i in self._position else None for i in ids]

    def add_texts(self, texts: Iterable[str], metadatas: Any = None, **kwargs: Any) -> list[str]:
        """Not supported: the index is built once from a corpus."""
        raise NotImplementedError("ExactIndex is read-only")

    @classmethod
    def from_texts(
        cls, texts: list[str], embedding: Embeddings, metadatas: Any = None, **kwargs: Any
    ) -> ExactIndex:
        """Embed texts (ids: their positions) into a new index."""
        vectors = np.asarray(embedding.embed_documents(list(texts)), dtype=np.float32)
        ids = [str(i) for i in range(len(texts))]
        return cls(ids, vectors, embedding, dict(zip(ids, texts, strict=True)))


def top_k(scores: np.ndarray, k: int) -> list[tuple[int, float]]:
    """Positions and scores of the ``k`` highest ``scores``, best first (ties: lower first)."""
    k = min(k, len(scores))
    top = np.argpartition(-scores, k - 1)[:k]
    top = top[np.argsort(-scores[top], kind="stable")]
    return [(int(i), float(scores[i])) for i in top]


def corpus_index(data: BeirDataset, embeddings: Embeddings, batch: int = 64) -> ExactIndex:
    """Embed the corpus once per (corpus, model); later runs load the cached matrix."""
    model = embedding_model_id(embeddings).replace(":", "_").replace("/", "_")
    path = (
        cache_dir() / "bench" / f"{data.name}-{data.fingerprint()}-{model}{_window(embeddings)}.npy"
    )
    ids = sorted(data.corpus)
    texts = [data.corpus[i] for i in ids]
    matrix = cached_matrix(path, texts, embeddings, batch, f"embedding {data.name}")
    return ExactIndex(ids, matrix, embeddings, data.corpus)


def cached_matrix(
    path: Path, texts: list[str], embeddings: Embeddings, batch: int, desc: str
) -> np.ndarray:
    """The vectors of ``texts`` from the ``.npy`` at ``path``, or embedded and saved there."""
    if path.is_file():
        saved: np.ndarray = np.load(path)
        return saved
    rows = []
    for start in tqdm(range(0, len(texts), batch), desc=desc, unit="batch"):
        rows.extend(embeddings.embed_documents(texts[start : start + batch]))
    matrix = np.asarray(rows, dtype=np.float32)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, matrix)
    os.replace(tmp, path)
    return matrix


def _window(embeddings: Embeddings) -> str:
    """``-max<N>`` when a model cuts texts at another window than its default, else ``""``.

    The model id stays the same at any window (the vectors share one space, so a
    collection may be searched at another window), but a cached corpus matrix may not.
    """
    fields = getattr(type(embeddings), "model_fields", {})
    window = getattr(embeddings, "max_tokens", None)
    if "max_tokens" not in fields or window == fields["max_tokens"].default:
        return ""
    return f"-max{window}"


def corpus_lexical(index: ExactIndex, data: BeirDataset) -> LexicalSearch:
    """A BM25 index of the corpus texts the dense index embedded, by the same ids."""
    return LexicalSearch.from_documents(
        index, (Document(text, id=doc_id) for doc_id, text in data.corpus.items())
    )


# -- configurations ----------------------------------------------------------------------

_BENCH_SETS = frozenset({"k", "rrf_candidates", "timeout", "hypothesis_cache"})
"""Fields the bench sets itself: the depth of every ranking, no timeout, its cache."""
_OBJECTS = frozenset({"vectorstore", "hypothesis_llm", "embeddings", "name", "tags", "metadata"})


@dataclass(frozen=True, eq=True)
class BenchMode:
    """One retrieval configuration to measure: `HyDERetriever` fields, and its name.

    ``fields`` are set on the retriever (``n_hypotheses``, ``fusion``, ``query_weight``,
    ``lexical`` as ``"off"`` or ``"auto"``, ``dense_weight``, ...); every other field
    keeps the package default, so ``BenchMode()`` is the package's default configuration.
    The name is the configuration's label unless ``name`` is given (bench-only
    configurations, such as ``bm25``).

    Example:
        >>> BenchMode().label, BenchMode({"n_hypotheses": 0, "lexical": "off"}).label
        ('hybrid-hyde', 'standard')
        >>> BenchMode({"n_hypotheses": 4, "fusion": "rrf", "lexical": "off"}).label
        'hyde(fusion=rrf,n=4)'

    """

    fields: Mapping[str, Any] = field(default_factory=dict)
    name: str | None = None

    def __post_init__(self) -> None:
        known = set(HyDERetriever.model_fields) - _OBJECTS - _BENCH_SETS
        unknown = sorted(set(self.fields) - known)
        if unknown:
            raise InvalidSettingError(
                f"unknown retriever field(s) {', '.join(unknown)} in a bench configuration: "
                f"choose from {', '.join(sorted(known))}"
            )
        lexical = self.fields.get("lexical", "auto")
        if lexical not in ("auto", "off"):
            raise InvalidSettingError(
                f"a bench configuration's lexical is 'auto' (the corpus' BM25 index) or "
                f"'off', got {lexical!r}"
            )
        self.label  # noqa: B018  (the retriever checks every value now)

    def __hash__(self) -> int:
        return hash((self.name, json.dumps(dict(self.fields), sort_keys=True, default=str)))

    @property
    def n_hypotheses(self) -> int:
        """Hypotheses per query (0: no LLM)."""
        default = HyDERetriever.model_fields["n_hypotheses"].default
        return int(self.fields.get("n_hypotheses", default))

    @property
    def is_default(self) -> bool:
        """Whether this is the package's default configuration: the question alone, hybrid.

        `HyDERetriever` without a hypothesis model (the best configuration measured on
        SciFact); see `is_hyde_default` for its default with one.
        """
        return self.name is None and dict(self.fields) == {"n_hypotheses": 0}

    @property
    def is_hyde_default(self) -> bool:
        """Whether this is the package's default configuration given a hypothesis model."""
        return not self.fields and self.name is None

    @property
    def label(self) -> str:
        """The configuration's name in the results (`configuration_label`, or ``name``)."""
        return self.name or _label(json.dumps(dict(self.fields), sort_keys=True, default=str))

    def retriever(
        self,
        index: VectorStore,
        lexical: LexicalSearch | Literal["auto"],
        llm: Any = None,
        cache: Any = None,
    ) -> HyDERetriever:
        """The configuration as a retriever over ``index``.

        ``lexical`` is its BM25 side, or ``"auto"`` for a hyde_lc collection's own index.
        """
        fields = dict(self.fields)
        side: LexicalSearch | Literal["auto", "off"] = (
            lexical if fields.pop("lexical", "auto") == "auto" else "off"
        )
        return HyDERetriever(
            vectorstore=index,
            hypothesis_llm=llm if self.n_hypotheses else None,
            k=DEPTH,
            rrf_candidates=DEPTH,
            timeout=None,
            hypothesis_cache=cache,
            lexical=side,
            **fields,
        )


@lru_cache(maxsize=256)
def _label(fields_json: str) -> str:
    """The label of a configuration, from a retriever built over a stand-in index."""
    from langchain_core.language_models import FakeListChatModel

    fields = json.loads(fields_json)
    index = ExactIndex(["x"], np.ones((1, 2), dtype=np.float32), None)
    lexical = LexicalSearch.from_documents(index, [Document("x", id="x")])
    n = fields.get("n_hypotheses", HyDERetriever.model_fields["n_hypotheses"].default)
    side: LexicalSearch | Literal["off"] = (
        lexical if fields.pop("lexical", "auto") == "auto" else "off"
    )
    retriever = HyDERetriever(
        vectorstore=index,
        embeddings=_StandIn(),
        hypothesis_llm=FakeListChatModel(responses=["x"]) if n else None,
        lexical=side,
        **fields,
    )
    return configuration_label(retriever)


class _StandIn(Embeddings):
    """Embeddings for the label probe (never called)."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[1.0, 0.0] for _ in texts]

    def embed_query(self, text: str) -> list[float]:
        return [1.0, 0.0]


STANDARD = BenchMode({"n_hypotheses": 0, "lexical": "off"})
BM25 = BenchMode({"n_hypotheses": 0, "dense_weight": 0.0, "hybrid_fusion": "rrf"}, name="bm25")
"""The lexical list alone: dense weight 0 under rank fusion ranks every BM25 hit by its
BM25 rank, above every hit only the dense list found (a bench-only configuration)."""
HYBRID = BenchMode({"n_hypotheses": 0})
DEFAULT = BenchMode()
BASELINES = (STANDARD, BM25, HYBRID)

VARIANT_KINDS = ("mean+q", "mean (hyp only)", "concat", "rrf")
"""HyDE variants `hyde_variants` can add, by their dense fusion."""
MODE_KINDS = ("standard", "bm25", "hybrid", "default", *VARIANT_KINDS)
"""What ``hyde-lc bench --modes`` selects (the no-LLM baselines run in any case)."""
_VARIANT_FIELDS: dict[str, dict[str, Any]] = {
    "mean+q": {"fusion": "mean"},
    "mean (hyp only)": {"fusion": "mean", "include_query": False},
    "concat": {"fusion": "concat"},
    "rrf": {"fusion": "rrf"},
}


def default_modes() -> list[BenchMode]:
    """The no-LLM baselines, then the package's default configuration."""
    return [*BASELINES, DEFAULT]


def hyde_variants(
    kinds: Sequence[str] = VARIANT_KINDS,
    ns: Sequence[int] = (1, 4),
    prompts: Sequence[str] = ("scifact", "generic"),
    query_weights: Sequence[float] = (),
    gates: Sequence[float] = (),
    lexical: Sequence[str] = ("off",),
) -> list[BenchMode]:
    """HyDE configurations: per lexical side, prompt and n, each kind of dense fusion.

    Unset fields keep the package defaults (query weight 0.8 where the query is fused);
    each of ``query_weights`` adds mean+q and rrf with that weight; each of ``gates`` adds
    mean+q (default and each query weight) keeping only hypotheses at least that similar
    to the query (adaptive HyDE). ``lexical``: ``off`` (dense HyDE, as in the paper) and/or
    ``auto`` (hybrid HyDE over the corpus' BM25 index).
    """
    unknown = sorted(set(kinds) - set(VARIANT_KINDS))
    if unknown:
        raise InvalidSettingError(
            f"unknown HyDE variant(s) {', '.join(unknown)}: choose from {', '.join(VARIANT_KINDS)}"
        )
    modes: list[BenchMode] = []
    for side in lexical:
        for prompt in prompts:
            for n in sorted(ns, reverse=True):  # the largest n first: its samples serve the rest
                base = {"n_hypotheses": n, "prompt": prompt, "lexical": side}
                modes += [BenchMode({**base, **_VARIANT_FIELDS[kind]}) for kind in kinds]
                for weight in query_weights:
                    modes += [
                        BenchMode({**base, **_VARIANT_FIELDS[kind], "query_weight": weight})
                        for kind in ("mean+q", "rrf")
                        if kind in kinds
                    ]
                if "mean+q" in kinds:
                    for gate in gates:
                        modes += [
                            BenchMode({**base, "min_hypothesis_similarity": gate, **weighting})
                            for weighting in ({}, *({"query_weight": w} for w in query_weights))
                        ]
    return unique(modes)


def unique(modes: Iterable[BenchMode]) -> list[BenchMode]:
    """The first of each label: two configurations of one label are one retriever."""
    first: dict[str, BenchMode] = {}
    for mode in modes:
        first.setdefault(mode.label, mode)
    return list(first.values())


def select_modes(
    kinds: Sequence[str] | None = None,
    ns: Sequence[int] | None = None,
    prompts: Sequence[str] | None = None,
    query_weights: Sequence[float] = (),
    gates: Sequence[float] = (),
    lexical: Sequence[str] | None = None,
) -> list[BenchMode]:
    """The configurations a bench run measures, from ``hyde-lc bench``'s options.

    With no option: `default_modes`. ``kinds`` (of `MODE_KINDS`) picks the default
    configuration (``default``) and the HyDE variants (``mean+q``...); the others
    (``ns``, ``prompts``, ``query_weights``, ``gates``, ``lexical``) shape the variants,
    and given without ``kinds`` they add every kind of variant next to the default. The
    no-LLM baselines always run: every row is compared with them.
    """
    unknown = sorted(set(kinds or ()) - set(MODE_KINDS))
    if unknown:
        raise InvalidSettingError(
            f"unknown configuration(s) {', '.join(unknown)}: choose from {', '.join(MODE_KINDS)}"
        )
    shaping = any((ns, prompts, query_weights, gates, lexical))
    if kinds is None:
        kinds = ("default", *(VARIANT_KINDS if shaping else ()))
    variants = [k for k in kinds if k in VARIANT_KINDS]
    modes = [*BASELINES, *([DEFAULT] if "default" in kinds else [])]
    if variants:
        modes += hyde_variants(
            variants,
            ns or (1, 4),
            prompts or ("scifact", "generic"),
            query_weights,
            gates,
            lexical or ("off",),
        )
    return unique(modes)


# -- results -----------------------------------------------------------------------------


@dataclass
class Comparison:
    """A row's nDCG@10 against a reference row: mean difference and its 95% interval."""

    reference: str
    delta: float
    ci: tuple[float, float]

    def cell(self) -> str:
        """``+1.1 [+0.3, +2.0]`` (points of nDCG@10 x 100)."""
        low, high = self.ci
        return f"{100 * self.delta:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}]"


@dataclass
class ModeResult:
    """Aggregate and per-query figures of one configuration."""

    mode: BenchMode
    metrics: dict[str, float]
    per_query_ndcg: dict[str, float]
    fallbacks: int = 0
    hypothesis_seconds: list[float] = field(default_factory=list)
    runs: dict[str, list[tuple[str, float]]] = field(default_factory=dict)
    """Query id -> the ranking (document id, score), best first."""
    query_seconds: dict[str, float] = field(default_factory=dict)
    """Query id -> seconds its retrieval took, hypotheses included (written or cached)."""
    written: dict[str, float] = field(default_factory=dict)
    """Query id -> seconds spent writing its hypotheses, for queries the cache did not hold."""
    vs_dense: Comparison | None = None
    """Against the dense baseline (``standard``)."""
    vs_best_no_llm: Comparison | None = None
    """Against the best configuration that uses no LLM."""

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (configuration, metrics, comparisons, per-query nDCG@10)."""
        return {
            "label": self.mode.label,
            "configuration": dict(self.mode.fields),
            "default": self.mode.is_default,
            "hyde_default": self.mode.is_hyde_default,
            "metrics": self.metrics,
            "vs_dense": None if self.vs_dense is None else vars(self.vs_dense),
            "vs_best_no_llm": None if self.vs_best_no_llm is None else vars(self.vs_best_no_llm),
            "fallbacks": self.fallbacks,
            "hypothesis_seconds": self.hypothesis_seconds,
            "per_query_ndcg": self.per_query_ndcg,
        }


@dataclass
class BenchReport:
    """Everything one benchmark run measured."""

    meta: dict[str, Any]
    results: list[ModeResult]

    def markdown(self) -> str:
        """The results as a Markdown table (metrics x 100, as papers report them)."""
        lines = [
            "| configuration | nDCG@10 | Recall@100 | MRR@10 | vs dense (95% CI) "
            "| vs best no-LLM (95% CI) | fallbacks | hypothesis s (median) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in self.results:
            seconds = (
                f"{statistics.median(r.hypothesis_seconds):.1f}" if r.hypothesis_seconds else ""
            )
            name = r.mode.label
            if r.mode.is_default or r.mode.is_hyde_default:
                name = f"**{name}** ({'default' if r.mode.is_default else 'HyDE default'})"
            lines.append(
                f"| {name} | {100 * r.metrics['nDCG@10']:.1f} "
                f"| {100 * r.metrics['R@100']:.1f} | {100 * r.metrics['RR@10']:.1f} "
                f"| {r.vs_dense.cell() if r.vs_dense else ''} "
                f"| {r.vs_best_no_llm.cell() if r.vs_best_no_llm else ''} "
                f"| {r.fallbacks if r.mode.n_hypotheses else ''} | {seconds} |"
            )
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict, per-query nDCG@10 included."""
        return {"meta": self.meta, "results": [r.to_json() for r in self.results]}

    def plot(self, path: Path) -> Path:
        """A bar chart of nDCG@10 per configuration, as PNG.

        Drawn on a `matplotlib.figure.Figure` of its own (no pyplot): no backend is chosen
        or changed, and nothing is left open in a notebook's figure manager.
        """
        try:
            from matplotlib.figure import Figure
        except ImportError as exc:
            raise MissingDependencyError("plots", 'pip install "hyde-lc[eval]"') from exc
        names = [r.mode.label for r in self.results][::-1]
        values = [100 * r.metrics["nDCG@10"] for r in self.results][::-1]
        colours = [
            "#d62"
            if r.mode.is_default or r.mode.is_hyde_default
            else "#888"
            if not r.mode.n_hypotheses
            else "#3a7"
            for r in self.results
        ][::-1]
        fig = Figure(figsize=(8, 0.35 * len(names) + 1.2))
        ax = fig.subplots()
        ax.barh(names, values, color=colours)
        dense = next((r for r in self.results if r.mode == STANDARD), None)
        if dense is not None:
            ax.axvline(100 * dense.metrics["nDCG@10"], color="#444", linestyle="--", linewidth=1)
        ax.set_xlabel("nDCG@10 (x100); grey: no LLM, orange: the default")
        ax.set_title(
            f"{self.meta['dataset']} ({self.meta['queries']} queries), writer {self.meta['llm']}"
        )
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        return path


def ir_metrics(
    qrels: dict[str, dict[str, int]], runs: dict[str, list[tuple[str, float]]]
) -> tuple[dict[str, float], dict[str, float]]:
    """nDCG@10, R@100 and RR@10 of ``runs`` (ir-measures), and nDCG@10 per query.

    Queries the run does not cover score 0.

    Example:
        >>> ir_metrics({"q": {"d": 1}}, {"q": [("d", 1.0)]})[0]["nDCG@10"]
        1.0

    """
    try:
        import ir_measures
        from ir_measures import RR, R, nDCG
    except ImportError as exc:
        raise MissingDependencyError("benchmark metrics", 'pip install "hyde-lc[eval]"') from exc
    qrel_list = [
        ir_measures.Qrel(q, d, rel) for q, docs in qrels.items() for d, rel in docs.items()
    ]
    run_list = [ir_measures.ScoredDoc(q, d, s) for q, docs in runs.items() for d, s in docs]
    aggregate = ir_measures.calc_aggregate([nDCG @ 10, R @ 100, RR @ 10], qrel_list, run_list)
    per_query = {q: 0.0 for q in qrels}
    for metric in ir_measures.iter_calc([nDCG @ 10], qrel_list, run_list):
        per_query[metric.query_id] = metric.value
    return {str(k): float(v) for k, v in aggregate.items()}, per_query


def paired_bootstrap(
    a: Sequence[float],
    b: Sequence[float],
    resamples: int = 5000,
    statistic: Callable[..., Any] = np.mean,
) -> tuple[float, tuple[float, float]]:
    """Mean (or ``statistic``) of b - a over queries and its 95% percentile bootstrap interval."""
    from scipy.stats import bootstrap

    diffs = np.asarray(b, dtype=float) - np.asarray(a, dtype=float)
    if np.allclose(diffs, diffs[0]):
        return float(statistic(diffs)), (float(diffs[0]), float(diffs[0]))
    ci = bootstrap(
        (diffs,),
        statistic,
        n_resamples=resamples,
        confidence_level=0.95,
        method="percentile",
        random_state=0,
    ).confidence_interval
    return float(statistic(diffs)), (float(ci.low), float(ci.high))


def paired_cell(value: dict[str, Any] | None) -> str:
    """A paired difference ``{"delta", "ci"}`` (fractions) as a table cell, in points.

    Example:
        >>> paired_cell({"delta": 0.005, "ci": [0.0, 0.011]})
        '+0.5 [+0.0, +1.1]'

    """
    if not value:
        return ""
    low, high = value["ci"]
    return f"{100 * value['delta']:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}]"


def compare(reference: ModeResult, other: ModeResult) -> Comparison:
    """``other``'s nDCG@10 minus ``reference``'s, paired by query."""
    order = sorted(reference.per_query_ndcg)
    delta, ci = paired_bootstrap(
        [reference.per_query_ndcg[q] for q in order], [other.per_query_ndcg[q] for q in order]
    )
    return Comparison(reference.mode.label, delta, ci)


def add_comparisons(results: Sequence[ModeResult]) -> None:
    """Each row against the dense baseline and the best no-LLM row (not against itself)."""
    dense = next((r for r in results if r.mode == STANDARD), None)
    no_llm = [r for r in results if not r.mode.n_hypotheses]
    best = max(no_llm, key=lambda r: r.metrics["nDCG@10"], default=None)
    for r in results:
        if dense is not None and r is not dense:
            r.vs_dense = compare(dense, r)
        if best is not None and r is not best:
            r.vs_best_no_llm = compare(best, r)


async def _run_mode(
    data: BeirDataset,
    retriever: HyDERetriever,
    mode: BenchMode,
    concurrency: int,
) -> ModeResult:
    gate = asyncio.Semaphore(concurrency)
    runs: dict[str, list[tuple[str, float]]] = {}
    fallbacks, seconds = 0, []
    bar = tqdm(total=len(data.queries), desc=mode.label, unit="q")

    took: dict[str, float] = {}
    written: dict[str, float] = {}

    async def one(query_id: str, text: str) -> None:
        nonlocal fallbacks
        async with gate:
            started = time.perf_counter()
            result = await retriever.aretrieve_with_details(text)
            took[query_id] = time.perf_counter() - started
        ranked = [str(d.id) for d in result.documents]
        runs[query_id] = [(doc_id, float(DEPTH - rank)) for rank, doc_id in enumerate(ranked)]
        fallbacks += result.fallback is not None
        if mode.n_hypotheses and result.cache_hits < len(result.prompts):
            seconds.append(result.timings["hypothesis_s"])
            written[query_id] = result.timings["hypothesis_s"]
        bar.update()

    await asyncio.gather(*(one(q, t) for q, t in data.queries.items()))
    bar.close()
    metrics, per_query = ir_metrics(data.qrels, runs)
    return ModeResult(mode, metrics, per_query, fallbacks, seconds, runs, took, written)


def run_modes(
    data: BeirDataset,
    modes: Sequence[BenchMode],
    index: VectorStore,
    lexical: LexicalSearch | Literal["auto"],
    llm: Any = None,
    cache: Any = None,
    concurrency: int = 4,
) -> list[ModeResult]:
    """Each configuration over ``index`` on ``data``'s queries, in order (all built first)."""
    retrievers = [m.retriever(index, lexical, llm, cache) for m in modes]  # all checked first
    return [
        asyncio.run(_run_mode(data, r, m, concurrency))
        for m, r in zip(modes, retrievers, strict=True)
    ]


def per_query_measures(
    qrels: dict[str, dict[str, int]],
    runs: dict[str, list[tuple[str, float]]],
    measures: Sequence[str],
) -> dict[str, dict[str, float]]:
    """Each measure (ir-measures' names: ``nDCG@10``, ``RR@10``, ``Success@5``) per query.

    Queries the run does not cover score 0.

    Example:
        >>> per_query_measures({"q": {"d": 1}}, {"q": [("x", 2.0), ("d", 1.0)]},
        ...                    ["RR@10", "Success@1"])
        {'RR@10': {'q': 0.5}, 'Success@1': {'q': 0.0}}

    """
    try:
        import ir_measures
    except ImportError as exc:
        raise MissingDependencyError("benchmark metrics", 'pip install "hyde-lc[eval]"') from exc
    parsed = {name: ir_measures.parse_measure(name) for name in measures}
    qrel_list = [
        ir_measures.Qrel(q, d, rel) for q, docs in qrels.items() for d, rel in docs.items()
    ]
    run_list = [ir_measures.ScoredDoc(q, d, s) for q, docs in runs.items() for d, s in docs]
    values = {name: dict.fromkeys(qrels, 0.0) for name in measures}
    by_measure = {measure: name for name, measure in parsed.items()}
    for metric in ir_measures.iter_calc(list(parsed.values()), qrel_list, run_list):
        values[by_measure[metric.measure]][metric.query_id] = float(metric.value)
    return values


def run_benchmark(
    folder: str | Path,
    *,
    split: str = "test",
    limit: int | None = None,
    modes: Sequence[BenchMode] | None = None,
    llm_spec: str | None = None,
    embeddings_spec: str | None = None,
    max_tokens: int | None = None,
    concurrency: int = 4,
    hypothesis_cache: str | Path | None = None,
    embeddings: Embeddings | None = None,
    llm: Any = None,
) -> BenchReport:
    """Measure each configuration on a BEIR dataset; see the module docstring.

    ``modes`` defaults to `default_modes`; the no-LLM baselines are added when missing.
    ``max_tokens`` caps the hypothesis writer (None: its role default, `hyde_lc.models.loading`).
    ``hypothesis_cache`` is the hypothesis cache file (default: ``bench/hypotheses.sqlite``
    in the hyde_lc cache folder). ``embeddings`` and ``llm`` take ready-made models
    instead of specs.
    """
    from hyde_lc.hyde.hypothesis_cache import HypothesisCache

    started = time.perf_counter()
    chosen = list(modes) if modes is not None else default_modes()
    chosen = unique([*BASELINES, *chosen])
    data = load_beir(folder, split=split, limit=limit)
    embeddings = embeddings or load_embeddings(embeddings_spec)
    index = corpus_index(data, embeddings)
    lexical = corpus_lexical(index, data)
    needs_llm = any(m.n_hypotheses for m in chosen)
    if needs_llm and llm is None:
        caps = {} if max_tokens is None else {"max_tokens": max_tokens}
        llm = load_llm(llm_spec, role="hypothesis", **caps)
    cache = None
    if needs_llm:
        cache_file = Path(hypothesis_cache or cache_dir() / "bench" / "hypotheses.sqlite")
        cache_file.expanduser().parent.mkdir(parents=True, exist_ok=True)
        cache = HypothesisCache(cache_file.expanduser())
    results = run_modes(data, chosen, index, lexical, llm, cache, concurrency)
    add_comparisons(results)
    meta = {
        "dataset": data.name,
        "split": split,
        "queries": len(data.queries),
        "corpus": len(data.corpus),
        "embeddings": embedding_model_id(embeddings),
        "llm": (
            llm_model_name(llm)
            if llm_spec is None and llm is not None
            else resolve_llm_spec(llm_spec, "hypothesis")
        )
        if needs_llm
        else None,
        "max_tokens": getattr(llm, "max_tokens", max_tokens) if needs_llm else None,
        "hypothesis_cache": str(cache.path) if cache is not None else None,
        "depth": DEPTH,
        "date": date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "seconds": round(time.perf_counter() - started, 1),
    }
    return BenchReport(meta, results)


def write_report(report: BenchReport, out: Path) -> dict[str, Path]:
    """Write ``results.json``, ``results.md`` and ``ndcg.png`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "results.json", "markdown": out / "results.md", "plot": out / "ndcg.png"}
    paths["json"].write_text(json.dumps(report.to_json(), indent=1))
    paths["markdown"].write_text(report.markdown() + "\n")
    report.plot(paths["plot"])
    return paths
