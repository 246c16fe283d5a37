"""`HyDERetriever`: Hypothetical Document Embeddings (Gao et al. 2022) as a LangChain retriever.

The pipeline, one step per method::

    question --prompt--> hypothesis LLM --N passages--> embed (query + passages)
             --fuse (mean | concat | rrf)--> vector store search --> Documents

By default the mean weights the query 0.8 and the hypotheses share 0.2
(`DEFAULT_QUERY_WEIGHT`, measured on SciFact with the local writers); ``query_weight=None``
is the paper's equal weighting.

``n_hypotheses=0`` skips generation: plain dense retrieval with the query embedding,
through the same code path (what ``--mode standard`` and the benchmarks compare with).
If the hypothesis LLM fails (raises, times out, returns nothing or a refusal) the
search falls back to the query alone and every Document says so in
``metadata["hyde_fallback"]``.

The query is data: it is placed in the prompt as-is (braces, control characters and
instructions included), never interpreted. An empty query is refused
(`InvalidQueryError`); one longer than ``max_query_chars`` is cut to that length, so
that it fits the models' context windows, and every Document says so in
``metadata["hyde_query_truncated"]``.

Example:
    >>> from hyde_lc import HyDERetriever, load_llm, open_store
    >>> retriever = HyDERetriever(
    ...     vectorstore=open_store(), hypothesis_llm=load_llm(role="hypothesis"), k=4
    ... )  # doctest: +SKIP
    >>> details = retriever.retrieve_with_details("Who made the Fresnel lens?")  # doctest: +SKIP
    >>> details.hypotheses[0][:60], details.documents[0].metadata["score"]  # doctest: +SKIP

"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from langchain_chroma import Chroma
from langchain_core.caches import BaseCache
from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseLanguageModel
from langchain_core.messages import BaseMessage
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.runnables.config import run_in_executor
from langchain_core.vectorstores import VectorStore
from pydantic import ConfigDict, Field, field_validator, model_validator

from hyde_lc.errors import InvalidQueryError, InvalidSettingError
from hyde_lc.fusion import (
    FUSION_MODES,
    concat_text,
    fuse_mean,
    reciprocal_rank_fusion,
    similar_enough,
)
from hyde_lc.hypotheses import Hypotheses, awrite_hypotheses, write_hypotheses
from hyde_lc.prompts import DEFAULT_PROMPT, get_prompt
from hyde_lc.store import check_dimension, check_embeddings, search_filter

Fusion = Literal["mean", "concat", "rrf"]
_DETAILS_KEY = "_hyde_details"

DEFAULT_QUERY_WEIGHT = 0.8
"""The query's share of the fusion by default, chosen on SciFact train and confirmed once
on test with the default local writer (BENCHMARKS.md, "Making HyDE pay off"): the paper's
equal weighting (``query_weight=None``) lets a small writer's hypothesis pull the search
off the question."""

MAX_QUERY_CHARS = 4000
"""Longest query used as-is: about 1,000 tokens of English, so the hypothesis prompt and
the answer prompt (with four 1,000-character chunks) stay well inside a 4,096-token local
context window. The embedding model reads fewer still (MiniLM: 256 tokens)."""


def clip_query(query: str, max_chars: int | None = MAX_QUERY_CHARS) -> tuple[str, str | None]:
    """Check a query and cut it to ``max_chars``; returns the query and a note if it was cut.

    Raises `InvalidQueryError` for an empty or whitespace-only query.

    Example:
        >>> clip_query("x" * 5000)[1]
        "query truncated from 5000 to 4000 characters to fit the models' context windows"

    """
    if not isinstance(query, str) or not query.strip():
        raise InvalidQueryError(
            f"the query is empty ({query!r}): pass the text of a question to search for"
        )
    if max_chars is None or len(query) <= max_chars:
        return query, None
    note = (
        f"query truncated from {len(query)} to {max_chars} characters to fit the models' "
        "context windows"
    )
    return query[:max_chars], note


@dataclass
class HyDEResult:
    """Everything one retrieval produced, for inspection, evaluation and display."""

    query: str
    """The query searched with (cut to ``max_query_chars`` if it was longer)."""
    hypotheses: list[str]
    documents: list[Document]
    mode: str
    fallback: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    hypothesis_messages: list[BaseMessage] = field(default_factory=list)
    """The hypothesis LLM's fresh outputs, with token usage (cache hits have none)."""
    prompts: list[str] = field(default_factory=list)
    """The rendered hypothesis prompts."""
    cache_hits: int = 0
    """Hypotheses served from ``hypothesis_cache``."""
    search_vectors: list[list[float]] = field(default_factory=list)
    """The vector(s) searched: one fused vector, or one per ranking for ``rrf``."""
    query_note: str | None = None
    """Set when the query was truncated: from how many characters to how many."""
    hypotheses_dropped: int = 0
    """Hypotheses left out by ``min_hypothesis_similarity`` (adaptive HyDE)."""


class HyDERetriever(BaseRetriever):
    """Retrieve with hypothetical documents written by an LLM (HyDE).

    Example:
        >>> from langchain_core.language_models import FakeListChatModel
        >>> from hyde_lc import HyDERetriever, open_store
        >>> retriever = HyDERetriever(
        ...     vectorstore=open_store("/tmp/store"),
        ...     hypothesis_llm=FakeListChatModel(responses=["Lighthouses use lenses."]),
        ...     n_hypotheses=1, fusion="mean", k=3,
        ... )  # doctest: +SKIP
        >>> docs = retriever.invoke("How do lighthouses focus light?", k=2)  # doctest: +SKIP

    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    vectorstore: VectorStore
    """The store searched (a hyde_lc Chroma collection in practice)."""
    hypothesis_llm: BaseLanguageModel | None = None
    """Writes the hypothetical passages; required when ``n_hypotheses > 0``."""
    embeddings: Embeddings | None = None
    """Embeds query and hypotheses; defaults to the vector store's own embeddings."""
    k: int = 4
    """Documents returned (at least 1); ``invoke(q, k=N)`` overrides it per call. A ``k``
    larger than the collection returns every chunk there is (fewer than ``k``)."""
    n_hypotheses: int = 1
    """Passages generated per prompt; 0 means plain query retrieval (no LLM)."""
    fusion: Fusion = "mean"
    """How query and hypotheses are combined: ``mean``, ``concat`` or ``rrf``."""
    include_query: bool = True
    """Whether the query itself takes part in the fusion (the paper: yes)."""
    query_weight: float | None = DEFAULT_QUERY_WEIGHT
    """The query's share of the fusion, between 0 and 1; the hypotheses share the rest.

    The default, 0.8, measured best with small local writers (`DEFAULT_QUERY_WEIGHT`).
    ``None`` is the paper's equal weighting (1/(n+1) for ``mean``, equal rankings for
    ``rrf``). With ``mean`` this weights the vector average, which for unit vectors and
    cosine search ranks exactly as interpolating the query's and the hypotheses'
    similarity scores would. Used with ``mean`` and ``rrf`` when ``include_query``; the
    default does not apply to ``concat`` or to ``include_query=False``."""
    prompt: str | list[str] = DEFAULT_PROMPT
    """Prompt name or ``{question}`` template; a list gives hypotheses per prompt."""
    hypothesis_length: int | None = None
    """Optional hint to the writer: about this many characters."""
    search_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Passed to the search, e.g. ``{"filter": {"source": "/docs/a.pdf"}}``."""
    search_type: Literal["similarity", "mmr"] = "similarity"
    """Similarity search, or maximal marginal relevance for diverse results."""
    rrf_candidates: int = 20
    """With ``fusion="rrf"``: how deep each separate ranking goes."""
    timeout: float | None = 120.0
    """Seconds to wait for the hypotheses before falling back to the plain query."""
    hypothesis_cache: BaseCache | None = None
    """Optional cache of hypotheses (e.g. ``SQLiteCache(path)``), keyed per sample."""
    min_hypothesis_similarity: float | None = None
    """Adaptive HyDE: hypotheses whose cosine similarity to the query is below this are
    left out of the fusion (a small writer's off-topic passages); if none is left, the
    query alone is searched (``metadata["hyde_fallback"]`` says so). Each Document
    records how many were left out in ``metadata["hyde_hypotheses_dropped"]``. ``None``
    (the default) keeps every hypothesis, as the paper does. Works with ``mean`` and
    ``rrf``; see BENCHMARKS.md for what it measured on SciFact."""
    max_query_chars: int | None = MAX_QUERY_CHARS
    """Longer queries are cut to this many characters (noted in each Document's
    ``metadata["hyde_query_truncated"]``); None never cuts."""

    @field_validator("k")
    @classmethod
    def _check_k(cls, value: int) -> int:
        return _valid_k(value)

    @field_validator("max_query_chars")
    @classmethod
    def _check_max_query_chars(cls, value: int | None) -> int | None:
        if value is not None and value < 1:
            raise InvalidSettingError(
                f"max_query_chars must be at least 1 (or None for no limit), got {value}"
            )
        return value

    @field_validator("n_hypotheses")
    @classmethod
    def _check_n(cls, value: int) -> int:
        if value < 0:
            raise ValueError(f"n_hypotheses must be 0 (plain retrieval) or more, got {value}")
        return value

    @field_validator("fusion", mode="before")
    @classmethod
    def _check_fusion(cls, value: str) -> str:
        if value not in FUSION_MODES:
            raise ValueError(f"unknown fusion {value!r}: choose one of {', '.join(FUSION_MODES)}")
        return value

    @field_validator("prompt")
    @classmethod
    def _check_prompt(cls, value: str | list[str]) -> str | list[str]:
        items = [value] if isinstance(value, str) else value
        if not items:
            raise ValueError("prompt needs at least one prompt name or template")
        for item in items:
            get_prompt(item)  # raises with the list of valid names
        return value

    @model_validator(mode="after")
    def _check_combination(self) -> HyDERetriever:
        if self.n_hypotheses and self.hypothesis_llm is None:
            raise ValueError("n_hypotheses > 0 needs a hypothesis_llm (or set n_hypotheses=0)")
        if self.timeout is not None and self.timeout <= 0:
            raise ValueError(f"timeout must be positive seconds or None, got {self.timeout}")
        if self.query_weight is not None:
            if not 0 < self.query_weight < 1:
                raise ValueError(
                    f"query_weight must lie strictly between 0 and 1, got {self.query_weight} "
                    "(for 0 set include_query=False; for 1 set n_hypotheses=0)"
                )
            if self.fusion == "concat" or not self.include_query:
                if "query_weight" in self.model_fields_set:
                    raise ValueError(
                        "query_weight needs the query in a mean or rrf fusion: use "
                        "fusion='mean' or 'rrf' with include_query=True, or leave "
                        "query_weight unset"
                    )
                self.query_weight = None  # the default applies where the query is fused
        gate = self.min_hypothesis_similarity
        if gate is not None:
            if not -1 <= gate <= 1:
                raise InvalidSettingError(
                    f"min_hypothesis_similarity is a cosine similarity between -1 and 1, got {gate}"
                )
            if self.fusion == "concat":
                raise InvalidSettingError(
                    "min_hypothesis_similarity needs each hypothesis embedded on its own: use "
                    "fusion='mean' or 'rrf', or leave min_hypothesis_similarity=None"
                )
        if "k" in self.search_kwargs:  # the usual LangChain spelling: it sets the default k
            self.search_kwargs = dict(self.search_kwargs)
            self.k = int(self.search_kwargs.pop("k"))
        if self.embeddings is not None and isinstance(self.vectorstore, Chroma):
            check_embeddings(self.vectorstore, self.embeddings)
        return self

    # -- steps -------------------------------------------------------------------------

    @property
    def mode(self) -> str:
        """``standard`` without hypotheses, else ``hyde:<fusion>``."""
        return "standard" if self.n_hypotheses == 0 else f"hyde:{self.fusion}"

    def _embeddings(self) -> Embeddings:
        embeddings = self.embeddings or self.vectorstore.embeddings
        if embeddings is None:
            raise ValueError(
                "HyDERetriever needs embeddings: pass embeddings=... or a store that has them"
            )
        return embeddings

    def build_prompts(self, query: str) -> list[str]:
        """The rendered prompts: ``n_hypotheses`` per configured prompt."""
        names = [self.prompt] if isinstance(self.prompt, str) else list(self.prompt)
        rendered = [get_prompt(n).render(query, self.hypothesis_length) for n in names]
        return [p for p in rendered for _ in range(self.n_hypotheses)]

    def _hypothesis_config(self, run_manager: Any) -> RunnableConfig:
        return RunnableConfig(
            callbacks=run_manager.get_child("hyde.hypothesis"),
            tags=["hyde.hypothesis"],
            run_name="hyde.hypothesis",
        )

    def _check_llm(self) -> BaseLanguageModel:
        if self.hypothesis_llm is None:
            raise ValueError("n_hypotheses > 0 needs a hypothesis_llm (or set n_hypotheses=0)")
        return self.hypothesis_llm

    def generate_hypotheses(
        self, query: str, run_manager: CallbackManagerForRetrieverRun
    ) -> Hypotheses:
        """Write the hypotheses (concurrently, cache first) as children of this run."""
        return write_hypotheses(
            self._check_llm(),
            self.build_prompts(query),
            config=self._hypothesis_config(run_manager),
            timeout=self.timeout,
            cache=self.hypothesis_cache,
        )

    async def agenerate_hypotheses(
        self, query: str, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> Hypotheses:
        """Async `generate_hypotheses`: the N generations are awaited together."""
        return await awrite_hypotheses(
            self._check_llm(),
            self.build_prompts(query),
            config=self._hypothesis_config(run_manager),
            timeout=self.timeout,
            cache=self.hypothesis_cache,
        )

    def _embed_inputs(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Embed what the fusion mode searches with.

        Returns ``vectors`` (one per search) and ``dropped``, the number of hypotheses
        left out by ``min_hypothesis_similarity``.
        """
        embeddings = self._embeddings()
        query, hypotheses = payload["query"], payload["hypotheses"]
        if not hypotheses:
            return {"vectors": [embeddings.embed_query(query)], "dropped": 0}
        if self.fusion == "concat":
            text = concat_text(query if self.include_query else None, hypotheses)
            return {"vectors": [embeddings.embed_query(text)], "dropped": 0}
        vectors = embeddings.embed_documents(hypotheses)
        gate = self.min_hypothesis_similarity
        needs_query = self.include_query or gate is not None  # a gate of 0.0 is a gate too
        query_vector = embeddings.embed_query(query) if needs_query else None
        dropped = 0
        if gate is not None and query_vector is not None:
            kept = similar_enough(query_vector, vectors, gate)
            dropped = len(vectors) - len(kept)
            vectors = [vectors[i] for i in kept]
            if not vectors:
                return {"vectors": [query_vector], "dropped": dropped}
        if self.include_query and query_vector is not None:
            vectors = [query_vector, *vectors]
        if self.fusion == "mean":
            vectors = [fuse_mean(vectors, self._fusion_weights(len(vectors)))]
        return {"vectors": vectors, "dropped": dropped}

    def _fusion_weights(self, count: int) -> list[float] | None:
        """Weights of [query, *hypotheses] by ``query_weight`` (None: all equal)."""
        if self.query_weight is None or not self.include_query or count < 2:
            return None
        return [self.query_weight] + [(1 - self.query_weight) / (count - 1)] * (count - 1)

    def _search(self, vectors: list[list[float]], k: int) -> list[Document]:
        """Search with one vector, or fuse the rankings of several (``rrf``)."""
        if len(vectors) == 1:
            return self._search_one(vectors[0], k)
        depth = max(k, self.rrf_candidates)
        rankings = [self._search_one(v, depth) for v in vectors]
        by_key: dict[str, Document] = {}
        id_rankings = []
        for ranking in rankings:
            keys = []
            for doc in ranking:
                key = doc.id or doc.page_content
                by_key.setdefault(key, doc)
                keys.append(key)
            id_rankings.append(keys)
        fused = reciprocal_rank_fusion(id_rankings, weights=self._fusion_weights(len(vectors)))[:k]
        out = []
        for key, score in fused:
            doc = by_key[key].model_copy(deep=True)
            doc.metadata["similarity"] = doc.metadata.get("score")
            doc.metadata["score"] = score
            out.append(doc)
        return out

    def _search_one(self, vector: list[float], k: int) -> list[Document]:
        extra = dict(self.search_kwargs)
        if isinstance(self.vectorstore, Chroma):  # documents still being written stay out
            extra["filter"] = search_filter(self.vectorstore, extra.get("filter"))
        if self.search_type == "mmr":
            # MMR picks k from fetch_k candidates: fewer candidates than k would return
            # fewer than k documents although the collection has more.
            extra["fetch_k"] = max(int(extra.get("fetch_k", 20)), k)
            docs = self.vectorstore.max_marginal_relevance_search_by_vector(vector, k=k, **extra)
            return self._with_cosine([d.model_copy(deep=True) for d in docs], vector)
        if not isinstance(self.vectorstore, Chroma):
            docs = self.vectorstore.similarity_search_by_vector(vector, k=k, **extra)
            return [d.model_copy(deep=True) for d in docs]
        # langchain-chroma's "*_with_relevance_scores" by vector returns distances;
        # the collection's own function turns them into relevance (higher is better).
        to_relevance = self.vectorstore._select_relevance_score_fn()
        pairs = self.vectorstore.similarity_search_by_vector_with_relevance_scores(
            vector, k=k, **extra
        )
        out = []
        for doc, distance in pairs:
            doc = doc.model_copy(deep=True)
            doc.metadata["score"] = float(to_relevance(distance))
            out.append(doc)
        return out

    def _with_cosine(self, docs: list[Document], vector: list[float]) -> list[Document]:
        """Add the cosine similarity to the query vector (MMR itself returns no scores)."""
        if not isinstance(self.vectorstore, Chroma) or not docs:
            return docs
        ids = [str(d.id) for d in docs]
        got = self.vectorstore._collection.get(ids=ids, include=["embeddings"])
        vectors: list[Any] = list(got["embeddings"] if got["embeddings"] is not None else [])
        stored = dict(zip(got["ids"], vectors, strict=True))
        query = np.asarray(vector, dtype=float)
        query /= max(float(np.linalg.norm(query)), 1e-12)
        for doc in docs:
            if doc.id in stored:
                row = np.asarray(stored[doc.id], dtype=float)
                doc.metadata["score"] = float(row @ query / max(np.linalg.norm(row), 1e-12))
        return docs

    def _finish(self, result: HyDEResult) -> list[Document]:
        for doc in result.documents:
            doc.metadata["retrieval_mode"] = result.mode
            if result.fallback:
                doc.metadata["hyde_fallback"] = result.fallback
            if result.query_note:
                doc.metadata["hyde_query_truncated"] = result.query_note
            if self.min_hypothesis_similarity is not None and result.hypotheses:
                doc.metadata["hyde_hypotheses_dropped"] = result.hypotheses_dropped
        return result.documents

    def _prepare(self, query: str, kwargs: dict[str, Any]) -> tuple[str, str | None, int]:
        """Check the call's query and k before any model runs; cut a long query."""
        k = self._call_k(kwargs)
        query, note = clip_query(query, self.max_query_chars)
        return query, note, k

    def _check_vectors(self, vectors: list[list[float]]) -> None:
        if isinstance(self.vectorstore, Chroma) and vectors:
            check_dimension(self.vectorstore, len(vectors[0]))

    # -- LangChain hooks ---------------------------------------------------------------

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        query, note, k = self._prepare(query, kwargs)
        start = time.perf_counter()
        written = self.generate_hypotheses(query, run_manager) if self.n_hypotheses else None
        timings = {"hypothesis_s": time.perf_counter() - start}
        start = time.perf_counter()
        embedded = RunnableLambda(self._embed_inputs, name="hyde.embed").invoke(
            {"query": query, "hypotheses": written.texts if written else []},
            self._embed_config(run_manager),
        )
        timings["embedding_s"] = time.perf_counter() - start
        vectors = embedded["vectors"]
        self._check_vectors(vectors)
        start = time.perf_counter()
        docs = self._search(vectors, k)
        timings["search_s"] = time.perf_counter() - start
        return self._record(query, written, embedded, docs, timings, kwargs, note)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        query, note, k = self._prepare(query, kwargs)
        start = time.perf_counter()
        written = await self.agenerate_hypotheses(query, run_manager) if self.n_hypotheses else None
        timings = {"hypothesis_s": time.perf_counter() - start}
        start = time.perf_counter()

        async def aembed(payload: dict[str, Any]) -> dict[str, Any]:
            return await run_in_executor(None, self._embed_inputs, payload)

        embed = RunnableLambda(self._embed_inputs, afunc=aembed, name="hyde.embed")
        embedded = await embed.ainvoke(
            {"query": query, "hypotheses": written.texts if written else []},
            self._embed_config(run_manager),
        )
        timings["embedding_s"] = time.perf_counter() - start
        vectors = embedded["vectors"]
        self._check_vectors(vectors)
        start = time.perf_counter()
        docs = await run_in_executor(None, self._search, vectors, k)
        timings["search_s"] = time.perf_counter() - start
        return self._record(query, written, embedded, docs, timings, kwargs, note)

    def _fallback(self, written: Hypotheses | None, dropped: int) -> str | None:
        """Why the search used the query alone, if it did."""
        if written is None:
            return None
        if written.fallback or not written.texts or dropped < len(written.texts):
            return written.fallback
        return (
            f"no hypothesis reached min_hypothesis_similarity={self.min_hypothesis_similarity}"
            " (cosine to the query): searched with the query alone"
        )

    def _call_k(self, kwargs: dict[str, Any]) -> int:
        return _valid_k(kwargs.get("k", self.k))

    @staticmethod
    def _embed_config(run_manager: Any) -> RunnableConfig:
        return RunnableConfig(callbacks=run_manager.get_child("hyde.embed"), tags=["hyde.embed"])

    def _record(
        self,
        query: str,
        written: Hypotheses | None,
        embedded: dict[str, Any],
        docs: list[Document],
        timings: dict[str, float],
        kwargs: dict[str, Any],
        note: str | None = None,
    ) -> list[Document]:
        result = HyDEResult(
            query=query,
            hypotheses=written.texts if written else [],
            documents=docs,
            mode=self.mode,
            fallback=self._fallback(written, embedded["dropped"]),
            timings=timings,
            hypothesis_messages=written.messages if written else [],
            prompts=written.prompts if written else [],
            cache_hits=written.cache_hits if written else 0,
            search_vectors=embedded["vectors"],
            query_note=note,
            hypotheses_dropped=embedded["dropped"],
        )
        holder = kwargs.get(_DETAILS_KEY)
        if isinstance(holder, list):
            holder.append(result)
        return self._finish(result)

    # -- details API -------------------------------------------------------------------

    def retrieve_with_details(
        self, query: str, config: RunnableConfig | None = None, **kwargs: Any
    ) -> HyDEResult:
        """Like ``invoke`` (same run, same callbacks), but returns hypotheses and timings too."""
        holder: list[HyDEResult] = []
        self.invoke(query, config, **{_DETAILS_KEY: holder}, **kwargs)
        return holder[0]

    async def aretrieve_with_details(
        self, query: str, config: RunnableConfig | None = None, **kwargs: Any
    ) -> HyDEResult:
        """Async `retrieve_with_details`."""
        holder: list[HyDEResult] = []
        await self.ainvoke(query, config, **{_DETAILS_KEY: holder}, **kwargs)
        return holder[0]


def _valid_k(value: Any) -> int:
    """``k`` as an int of at least 1, or `InvalidSettingError` saying so."""
    try:
        k = int(value)
    except (TypeError, ValueError):
        raise InvalidSettingError(
            f"k must be a whole number of at least 1, got {value!r}"
        ) from None
    if k < 1:
        raise InvalidSettingError(
            f"k must be at least 1, got {value!r} (a k above the collection's size returns "
            "every chunk there is)"
        )
    return k
