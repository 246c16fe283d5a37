"""`HyDERetriever`: Hypothetical Document Embeddings (Gao et al. 2022), hybrid, for LangChain.

The pipeline, one public step per line::

    question --write_hypotheses--> N passages (hypothesis LLM; none with n_hypotheses=0)
             --embed-->            vectors of the texts the fusion needs
             --fuse-->             one search vector (mean | concat), or one per text (rrf)
                                   (these three: `hyde_lc.hyde.transform.HyDETransform`,
                                   shared with `hyde_lc.HyDEEmbeddings`)
             --search-->           dense hits (vector store) + lexical hits (BM25, fed the
                                   question and the passages), fused into one ranking
                                   (`hyde_lc.search.hybrid.HybridSearch`, over the store's
                                   `hyde_lc.search.backend.SearchBackend`)
             --feedback-->         optional (``feedback=...``): the first ranking's best
                                   chunks move the search vector (Rocchio) and/or add
                                   terms to the BM25 query (RM3), and the search runs
                                   again (`hyde_lc.search.feedback`; no LLM)

The retriever composes the two units, made from its fields when it is built and again
when a field is assigned (an invalid value is refused then, `InvalidSettingError`, and
the retriever stays as it was). Each step can be called on its own (`write_hypotheses`,
`embed`, `fuse`, `search`); ``invoke`` and ``ainvoke`` run them all in one LangChain run
(callbacks, tracing, tags) from one plan (`hyde_lc.retrievers.base`), and
`retrieve_with_details` returns what each produced (`HyDEResult`). The Documents returned
are `hyde_lc.core.chunks.RetrievedChunk`: one chunk found by two searches compares equal,
so LangChain's wrappers (``MultiQueryRetriever``, ``EnsembleRetriever``) keep it once.

**Dense side.** By default the mean weights the query 0.8 and the hypotheses share 0.2
(`DEFAULT_QUERY_WEIGHT`, measured on SciFact with the local writers); ``query_weight=None``
is the paper's equal weighting. The query's own embedding does not depend on the
hypotheses, so it is computed while they are being written.

**Lexical side.** A collection ingested by hyde_lc carries a BM25 index of its chunks
(`hyde_lc.store.lexical_index`); ``lexical="auto"`` (the default) searches it next to the
vectors and fuses the two lists (`hyde_lc.core.fusion.score_fusion`, dense weight
``dense_weight``). The lexical query is the question repeated ``lexical_query_repeats``
times plus the hypotheses (query2doc). Over a store without such an index the retriever
searches dense only and says so once in the log; pass ``lexical=LexicalSearch...`` to
bring one, or ``lexical="off"`` for dense only.

**Failures.** If the hypothesis LLM fails (times out, returns nothing or a refusal) the
search uses the query alone and every Document says so in ``metadata["hyde_fallback"]``.
The query is data: it is placed in the prompt as-is, never interpreted. An empty query
is refused (`InvalidQueryError`); one longer than ``max_query_chars`` is cut to that
length and every Document says so in ``metadata["hyde_query_truncated"]``, as it says
that lone surrogates (not valid Unicode) were replaced with U+FFFD.

Example:
    >>> from hyde_lc import HyDERetriever, load_llm, open_store
    >>> retriever = HyDERetriever(
    ...     vectorstore=open_store(), hypothesis_llm=load_llm(role="hypothesis"), k=4
    ... )  # doctest: +SKIP
    >>> details = retriever.retrieve_with_details("Who made the Fresnel lens?")  # doctest: +SKIP
    >>> details.hypotheses[0][:60], details.documents[0].metadata["found_by"]  # doctest: +SKIP

"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, ClassVar, Literal

from langchain_core.caches import BaseCache, InMemoryCache
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseLanguageModel
from langchain_core.prompts import BasePromptTemplate
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.vectorstores import VectorStore
from pydantic import AfterValidator, BeforeValidator, Field, PrivateAttr, model_validator

from hyde_lc.core.chunks import chunk_key
from hyde_lc.core.fusion import Fused
from hyde_lc.errors import InvalidSettingError
from hyde_lc.hyde.hypotheses import Hypotheses
from hyde_lc.hyde.prompts import DEFAULT_PROMPT
from hyde_lc.hyde.transform import (
    DEFAULT_QUERY_WEIGHT,
    MAX_HYPOTHESES,
    MAX_QUERY_CHARS,
    Embedded,
    Fusion,
    HyDETransform,
    check_fusion,
    check_max_query_chars,
    check_n_hypotheses,
    check_prompt,
    check_query_weight,
    clip_query,
)
from hyde_lc.retrievers.base import (
    DetailedRetriever,
    HyDEResult,
    Join,
    Plan,
    Start,
    Step,
    TopK,
    retrieved,
    valid_k,
)
from hyde_lc.retrievers.config import hyde_config, hyde_fields
from hyde_lc.retrievers.label import configuration_label
from hyde_lc.search.backend import SearchBackend, backend_for
from hyde_lc.search.feedback import (
    DEFAULT_FEEDBACK_DOCS,
    DEFAULT_FEEDBACK_TERM_WEIGHT,
    DEFAULT_FEEDBACK_TERMS,
    DEFAULT_FEEDBACK_VECTOR_WEIGHT,
    Feedback,
    FeedbackMode,
    check_feedback,
    check_feedback_mode,
    cosine,
    expand_query,
    expansion_terms,
    feedback_needs_vectors,
    rocchio,
)
from hyde_lc.search.hybrid import (
    DEFAULT_DENSE_WEIGHT,
    HYBRID_CANDIDATES,
    HybridFusion,
    HybridSearch,
    check_hybrid_fusion,
    settled,
)
from hyde_lc.search.lexical import LexicalSearch
from hyde_lc.store.lexical_index import DEFAULT_QUERY_REPEATS

__all__ = [
    "DEFAULT_DENSE_WEIGHT",
    "DEFAULT_QUERY_WEIGHT",
    "HYBRID_CANDIDATES",
    "MAX_HYPOTHESES",
    "MAX_QUERY_CHARS",
    "HyDEResult",
    "HyDERetriever",
]


def _check_lexical(value: Any) -> Any:
    """``value`` if it is ``auto``, ``off`` or a lexical side, else `InvalidSettingError`."""
    if isinstance(value, str) and value not in ("auto", "off"):
        raise InvalidSettingError(
            f"lexical must be 'auto', 'off' or a LexicalSearch, got {value!r}"
        )
    return value


class HyDERetriever(DetailedRetriever):
    """Retrieve with hypothetical documents written by an LLM (HyDE), dense + lexical.

    Example:
        >>> from langchain_core.language_models import FakeListChatModel
        >>> from hyde_lc import HyDERetriever, open_store
        >>> retriever = HyDERetriever(
        ...     vectorstore=open_store("/tmp/store"),
        ...     hypothesis_llm=FakeListChatModel(responses=["Lighthouses use lenses."]),
        ...     n_hypotheses=1, k=3,
        ... )  # doctest: +SKIP
        >>> docs = retriever.invoke("How do lighthouses focus light?", k=2)  # doctest: +SKIP

    """

    vectorstore: VectorStore
    """The store searched: a hyde_lc collection, any LangChain vector store that searches
    by vector (Chroma, InMemoryVectorStore, FAISS, ...)."""
    # unparametrised: pydantic checks instances against the class itself
    hypothesis_llm: BaseLanguageModel | None = None  # type: ignore[type-arg]
    """Writes the hypothetical passages; required when ``n_hypotheses > 0``."""
    embeddings: Embeddings | None = None
    """Embeds query and hypotheses; defaults to the vector store's own embeddings."""
    k: TopK = 4
    """Documents returned (at least 1); ``invoke(q, k=N)`` overrides it per call. A ``k``
    larger than the collection returns every chunk there is (fewer than ``k``)."""
    n_hypotheses: Annotated[int, AfterValidator(check_n_hypotheses)] = 1
    """Passages generated per prompt (0 to `MAX_HYPOTHESES`); 0 means no LLM at all.

    Without a ``hypothesis_llm`` the default is 0: the retriever then searches the
    question itself (hybrid where the store has a lexical index), which is what measured
    best on SciFact with the local writers (BENCHMARKS.md)."""
    fusion: Annotated[Fusion, BeforeValidator(check_fusion)] = "mean"
    """How query and hypotheses make the dense search: ``mean``, ``concat`` or ``rrf``."""
    include_query: bool = True
    """Whether the query itself takes part in the dense fusion (the paper: yes)."""
    query_weight: float | None = DEFAULT_QUERY_WEIGHT
    """The query's share of the dense fusion, between 0 and 1; the hypotheses share the rest.

    ``None`` is the paper's equal weighting (1/(n+1) for ``mean``, equal rankings for
    ``rrf``). Used with ``mean`` and ``rrf`` when ``include_query``; the default does not
    apply to ``concat`` or to ``include_query=False``."""
    prompt: Annotated[
        str | list[str] | BasePromptTemplate,  # type: ignore[type-arg]
        AfterValidator(check_prompt),
    ] = DEFAULT_PROMPT
    """Prompt name, ``{question}`` template or LangChain ``PromptTemplate`` (variable
    ``question``); a list of names/templates gives ``n_hypotheses`` passages per prompt."""
    hypothesis_length: int | None = None
    """Optional hint to the writer: about this many characters."""
    search_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Passed to the dense search, e.g. ``{"filter": {"source": "/docs/a.pdf"}}`` (the same
    filter narrows the lexical hits)."""
    search_type: Literal["similarity", "mmr"] = "similarity"
    """Similarity search, or maximal marginal relevance for diverse results (dense only)."""
    rrf_candidates: int = 20
    """With ``fusion="rrf"``: how deep each separate dense ranking goes."""
    timeout: float | None = 120.0
    """Seconds to wait for the hypotheses, loading the writer included, before falling back to
    the plain query (a llama.cpp load already under way runs to its end: see
    `hyde_lc.hyde.hypotheses`)."""
    hypothesis_cache: BaseCache | None = None
    """Optional cache of hypotheses (e.g. `hyde_lc.hyde.hypothesis_cache.HypothesisCache`)."""
    min_hypothesis_similarity: float | None = None
    """Adaptive HyDE: hypotheses whose cosine similarity to the query is below this are
    left out of the search (the dense fusion and the lexical query); if none is left, the
    query alone is searched. ``None``
    (the default) keeps every hypothesis, as the paper does."""
    max_query_chars: Annotated[int | None, AfterValidator(check_max_query_chars)] = MAX_QUERY_CHARS
    """Longer queries are cut to this many characters; None never cuts."""
    lexical: Annotated[Literal["auto", "off"] | LexicalSearch, BeforeValidator(_check_lexical)] = (
        "auto"
    )
    """The lexical (BM25) side: ``auto`` uses the collection's own index when it has one
    (collections ingested by hyde_lc), ``off`` searches dense only, or a `LexicalSearch`
    (e.g. ``LexicalSearch.from_documents(docs)`` for a store of your own)."""
    dense_weight: float = DEFAULT_DENSE_WEIGHT
    """The dense list's share of the hybrid fusion, between 0 and 1."""
    hybrid_fusion: Annotated[HybridFusion, BeforeValidator(check_hybrid_fusion)] = "score"
    """How dense and lexical lists fuse: rescaled scores (``score``) or ranks (``rrf``)."""
    lexical_query_repeats: int = DEFAULT_QUERY_REPEATS
    """The question's weight against each hypothesis in the lexical query."""
    hybrid_candidates: int = HYBRID_CANDIDATES
    """Candidates taken from each list before the hybrid fusion."""
    feedback: Annotated[FeedbackMode, BeforeValidator(check_feedback_mode)] = "off"
    """Pseudo-relevance feedback (`hyde_lc.search.feedback`, no LLM): the ``feedback_docs`` best
    chunks of a first search refine a second one. ``dense`` moves the search vector toward
    their stored vectors' mean (Rocchio; needs a store that returns vectors: Chroma,
    ``InMemoryVectorStore``), ``lexical`` adds their most frequent terms to the BM25 query
    (RM3; needs the lexical side), ``both`` does both, ``off`` searches once."""
    feedback_docs: int = DEFAULT_FEEDBACK_DOCS
    """Chunks of the first ranking fed back (at least 1)."""
    feedback_vector_weight: float = DEFAULT_FEEDBACK_VECTOR_WEIGHT
    """Rocchio's beta, in [0, 1): the feedback mean's share of the moved search vector."""
    feedback_terms: int = DEFAULT_FEEDBACK_TERMS
    """Expansion terms added to the BM25 query (at least 1)."""
    feedback_term_weight: float = DEFAULT_FEEDBACK_TERM_WEIGHT
    """The expansion terms' share of the BM25 query's weight, in [0, 1)."""

    _transform: HyDETransform = PrivateAttr()
    _search: HybridSearch = PrivateAttr()
    _label: str | None = PrivateAttr(default=None)
    _PER_PROCESS: ClassVar[tuple[str, ...]] = ("_transform", "_search", "_label")

    # -- validation ------------------------------------------------------------------

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any) -> Any:
        """Defaults that depend on other settings, for the settings given when it is made."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if "n_hypotheses" not in data and data.get("hypothesis_llm") is None:
            data["n_hypotheses"] = 0  # no writer given: search the question itself
        kwargs = data.get("search_kwargs")
        if isinstance(kwargs, dict) and "k" in kwargs:  # LangChain's spelling: the default k
            data["search_kwargs"] = {key: v for key, v in kwargs.items() if key != "k"}
            data["k"] = kwargs["k"]
        return data

    @model_validator(mode="after")
    def _check_combination(self) -> HyDERetriever:
        check_query_weight(self.query_weight)
        if self.query_weight is not None and (self.fusion == "concat" or not self.include_query):
            if "query_weight" in self.model_fields_set:
                raise InvalidSettingError(
                    "query_weight needs the query in a mean or rrf fusion: use "
                    "fusion='mean' or 'rrf' with include_query=True, or leave "
                    "query_weight unset"
                )
            self.__dict__["query_weight"] = None  # the default applies where the query is fused
        if self.embeddings is None and getattr(self.vectorstore, "embeddings", None) is None:
            raise InvalidSettingError(
                "HyDERetriever needs embeddings: pass embeddings=... (the model the store's "
                "vectors were made with), or a store that carries its embedding function"
            )
        self._build()
        return self

    def _build(self) -> None:
        """Make the units from the fields (each checks its own settings), then check the rest."""
        embeddings = self.embedding_model
        transform = HyDETransform.from_fields(
            self,
            embeddings,
            llm=self.hypothesis_llm,
            cache=self.hypothesis_cache,
            min_similarity=self.min_hypothesis_similarity,
        )
        backend = backend_for(self.vectorstore, self.lexical)
        search = HybridSearch.from_fields(self, backend, candidates=self.hybrid_candidates)
        mode = check_feedback(
            self.feedback,
            self.feedback_docs,
            self.feedback_vector_weight,
            self.feedback_terms,
            self.feedback_term_weight,
        )
        if mode in ("dense", "both") and not backend.reads_vectors:
            raise InvalidSettingError(feedback_needs_vectors(self.vectorstore))
        if mode in ("lexical", "both") and search.lexical_side is None:
            raise InvalidSettingError(
                f"feedback={mode!r} adds terms to the lexical (BM25) query, and this retriever "
                "has no lexical side (lexical='off', search_type='mmr', or a store without a "
                "BM25 index): use feedback='dense', or give it a lexical side "
                "(lexical=LexicalSearch.from_store(store))"
            )
        backend.check_embeddings(embeddings)
        self._transform, self._search, self._label = transform, search, None

    def _remake(self) -> None:
        self._build()

    # -- the configuration as plain data ----------------------------------------------

    def to_config(self) -> dict[str, Any]:
        """The retriever as JSON data: store location, model specs, settings; no secrets.

        `from_config` builds it again, in this process or another. See
        `hyde_lc.retrievers.config` for what it holds, and why it is not LangChain's
        ``Serializable``. A remote model's API key is never written. Raises
        `NotPortableError` for what cannot be written as a spec (a store other than a
        hyde_lc collection, a model of another class, a ``PromptTemplate`` object).
        """
        return hyde_config(self)

    @classmethod
    def from_config(cls, config: dict[str, Any], *, api_key: str | None = None) -> HyDERetriever:
        """The retriever `to_config` described: the store opened, the models made (not loaded).

        ``api_key`` is given to remote models; without it they read ``OPENAI_API_KEY``.
        """
        return cls(**hyde_fields(config, api_key))

    # -- the two units, made of the fields ---------------------------------------------

    @property
    def embedding_model(self) -> Embeddings:
        """The embeddings in force: ``embeddings``, else the vector store's own."""
        embeddings = self.embeddings or self.vectorstore.embeddings
        assert embeddings is not None  # checked when made
        return embeddings

    @property
    def hyde_transform(self) -> HyDETransform:
        """The HyDE transform these settings make (question -> search vector(s))."""
        return self._transform

    @property
    def hybrid_search(self) -> HybridSearch:
        """The hybrid search these settings make (search vector(s) + texts -> chunks)."""
        return self._search

    @property
    def backend(self) -> SearchBackend:
        """How the store is searched (`hyde_lc.search.backend.backend_for`)."""
        return self._search.backend

    def _store_backend(self) -> SearchBackend | None:
        return self.backend

    @property
    def lexical_search(self) -> Any:
        """The lexical side of the store in force (None: dense only)."""
        return self.backend.lexical_side

    @property
    def label(self) -> str:
        """The configuration in one name, used by the CLI, evaluation records and benchmarks.

        ``standard`` (dense, no LLM), ``hybrid`` (dense + BM25, no LLM), ``hyde`` and
        ``hybrid-hyde``, followed by every setting that differs from the defaults in
        parentheses, e.g. ``hyde(fusion=rrf,w=paper,n=4)``. Worked out once per set of
        settings (a field assigned makes it anew).
        """
        if self._label is None:
            self._label = configuration_label(self)
        return self._label

    def for_repeated_calls(self) -> HyDERetriever:
        """A copy whose later calls for the same query reuse its first hypotheses.

        (Unless a ``hypothesis_cache`` is set already: it reuses them anyway.)
        """
        if not self.n_hypotheses or self.hypothesis_cache is not None:
            return self
        copy = self.model_copy(update={"hypothesis_cache": InMemoryCache()})
        copy._build()  # its transform writes through the new cache
        return copy

    # -- the steps, each callable on its own -------------------------------------------

    def build_prompts(self, query: str) -> list[str]:
        """The rendered prompts: ``n_hypotheses`` per configured prompt."""
        return self.hyde_transform.build_prompts(query)

    def write_hypotheses(self, query: str, config: RunnableConfig | None = None) -> Hypotheses:
        """Step 1: write the hypotheses (concurrently, cache first, within ``timeout``)."""
        return self.hyde_transform.write(query, config)

    async def awrite_hypotheses(
        self, query: str, config: RunnableConfig | None = None
    ) -> Hypotheses:
        """Async `write_hypotheses`: the generations are awaited together."""
        return await self.hyde_transform.awrite(query, config)

    def embed(
        self,
        query: str,
        hypotheses: list[str] | tuple[str, ...],
        query_vector: list[float] | None = None,
    ) -> Embedded:
        """Step 2: embed what the fusion needs (hypotheses in one batch).

        ``query_vector``, when given, is the query's embedding computed earlier (the
        retriever computes it while the hypotheses are being written).
        """
        return self.hyde_transform.embed(query, hypotheses, query_vector)

    def fuse(self, embedded: Embedded) -> Fused:
        """Step 3: the dense search vector(s) made of `Embedded`.

        The weighted mean, the concat vector, or one vector per ranking for ``rrf``;
        hypotheses below ``min_hypothesis_similarity`` are left out first.
        """
        return self.hyde_transform.fuse(embedded)

    def search(
        self,
        fused: Fused,
        k: int,
        *,
        query: str = "",
        hypotheses: list[str] | tuple[str, ...] = (),
    ) -> list[Document]:
        """Step 4: dense hits for ``fused``, fused with lexical hits for query + hypotheses.

        Every Document's ``metadata["score"]`` is its score in the final ranking (cosine
        relevance when dense only); with a lexical side, ``dense_score`` and
        ``lexical_score`` give each list's own score (None where it did not find the
        chunk) and ``found_by`` the lists that found it.
        """
        return self.hybrid_search.search(fused, k, query=query, hypotheses=hypotheses)

    # -- the whole pipeline ------------------------------------------------------------

    def _first_depth(self, k: int) -> int:
        """How many chunks the first search returns: ``k``, or enough to feed back."""
        return k if self.feedback == "off" else max(k, self.feedback_docs)

    def feed_back(
        self,
        search: HybridSearch,
        fused: Fused,
        first: list[Document],
        k: int,
        lexical_hits: Any = None,
        *,
        query: str = "",
        hypotheses: list[str] | tuple[str, ...] = (),
    ) -> tuple[list[Document], Fused, Feedback | None]:
        """Step 5 (``feedback`` on): search again, refined by the first ranking's best chunks.

        ``first`` is the first search's ranking for ``fused`` and the lexical query of
        ``query`` + ``hypotheses``; ``lexical_hits`` that search's lexical hits, reused
        when the lexical side is not expanded. Returns the ``k`` documents, the vector(s)
        searched and what the feedback did (`hyde_lc.search.feedback.Feedback`); with
        ``feedback="off"``, ``first`` cut to ``k`` as it is.
        """
        if self.feedback == "off":
            return first[:k], fused, None
        top = first[: self.feedback_docs]
        ids = [chunk_key(d) for d in top]
        details = Feedback(self.feedback, ids, first_ranking=[chunk_key(d) for d in first])
        moved = fused
        if self.feedback in ("dense", "both"):
            vectors = search.backend.vectors(ids)
            if vectors is None:
                raise InvalidSettingError(feedback_needs_vectors(self.vectorstore))
            beta = self.feedback_vector_weight
            moved = Fused(
                [rocchio(v, vectors, beta) for v in fused.vectors],
                fused.weights,
                fused.dropped,
                fused.kept,
            )
            details.vector_shift = cosine(fused.vectors[0], moved.vectors[0])
        if self.feedback in ("lexical", "both"):
            expansion = expansion_terms([d.page_content for d in top], self.feedback_terms)
            details.expansion = dict(expansion)
            weights = expand_query(
                search.lexical_weights(query, hypotheses), expansion, self.feedback_term_weight
            )
            lexical_hits = search.start_lexical(query, hypotheses, k, weights=weights)
        elif lexical_hits is None:
            lexical_hits = search.start_lexical(query, hypotheses, k)
        return search.search(moved, k, lexical_hits), moved, details

    def _plan(
        self, query: str, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> Plan[HyDEResult]:
        """Write, embed, fuse, search (and feed back): the steps that wait are yielded."""
        k = valid_k(kwargs.get("k", self.k))
        query, note = clip_query(query, self.max_query_chars)
        transform, search = self._transform, self._search
        early = None
        if transform.embeds_query_early:  # the query's vector while the hypotheses are written
            embeddings = transform.embeddings
            early = yield Start(
                Step(lambda: embeddings.embed_query(query), lambda: embeddings.aembed_query(query))
            )
        lexical = None if transform.writes else search.start_lexical(query, (), k)
        start = time.perf_counter()
        config = self.child_config(run_manager, "hyde.hypothesis")
        try:
            written: Hypotheses = yield Step(
                lambda: transform.write(query, config), lambda: transform.awrite(query, config)
            )
        except BaseException:
            if early is not None:
                early.cancel()
            raise
        timings = {"hypothesis_s": time.perf_counter() - start}
        if written.load_s is not None:  # the writer loaded within the wait: its part of it
            timings["writer_load_s"] = written.load_s
        texts = written.texts
        if _lexical_before_embedding(transform):
            lexical = search.start_lexical(query, texts, k)
        start = time.perf_counter()
        with settled(lexical):
            vector = yield Join(early)
            embedded: Embedded = yield self._embed_step(
                transform, query, texts, vector, run_manager
            )
            fused = transform.fuse(embedded)
            search.backend.check_dimension(len(fused.vectors[0]))
        timings["embedding_s"] = time.perf_counter() - start
        start = time.perf_counter()
        kept = fused.kept_texts(texts)
        if transform.writes and not _lexical_before_embedding(transform):
            lexical = search.start_lexical(query, kept, k)
        depth = self._first_depth(k)
        docs = yield Step(lambda: search.search(fused, depth, lexical))
        timings["search_s"] = time.perf_counter() - start
        searched, feedback = fused, None
        if self.feedback != "off":
            start = time.perf_counter()
            first = docs
            docs, searched, feedback = yield Step(
                lambda: self.feed_back(
                    search, fused, first, k, lexical, query=query, hypotheses=kept
                )
            )
            timings["feedback_s"] = time.perf_counter() - start
        result = self._result(
            transform, search, query, note, written, embedded, fused, docs, timings
        )
        if feedback is not None:
            result.feedback = feedback
            result.search_vectors = searched.vectors
        return result

    @staticmethod
    def _embed_step(
        transform: HyDETransform,
        query: str,
        texts: list[str],
        vector: list[float] | None,
        run_manager: Any,
    ) -> Step[Embedded]:
        """Embedding, as a child run ``hyde.embed`` when a callback handler listens."""
        sync: Callable[[], Embedded] = lambda: transform.embed(query, texts, vector)  # noqa: E731
        async_: Callable[[], Awaitable[Embedded]] = lambda: transform.aembed(query, texts, vector)  # noqa: E731
        if not (run_manager.handlers or run_manager.inheritable_handlers):
            return Step(sync, async_)  # nobody listens: the child run would only cost time
        traced: RunnableLambda[Any, Embedded] = RunnableLambda(
            lambda _: sync(), afunc=lambda _: async_(), name="hyde.embed"
        )
        config = DetailedRetriever.child_config(run_manager, "hyde.embed")
        return Step(lambda: traced.invoke(vector, config), lambda: traced.ainvoke(vector, config))

    def _result(
        self,
        transform: HyDETransform,
        search: HybridSearch,
        query: str,
        note: str | None,
        written: Hypotheses,
        embedded: Embedded,
        fused: Fused,
        docs: list[Document],
        timings: dict[str, float],
    ) -> HyDEResult:
        result = HyDEResult(
            query=query,
            hypotheses=written.texts,
            documents=retrieved(docs),
            label=self.label,
            fallback=transform.fallback(written, fused),
            timings=timings,
            hypothesis_messages=written.messages,
            prompts=written.prompts,
            cache_hits=written.cache_hits,
            embedded_texts=embedded.read_texts(query),
            search_vectors=fused.vectors,
            query_note=note,
            hypotheses_dropped=fused.dropped,
            lexical=search.lexical_side is not None,
        )
        lexical_note = search.backend.lexical_note() if search.lexical_side is not None else None
        for doc in result.documents:
            doc.metadata["retrieval_mode"] = result.label
            if lexical_note:
                doc.metadata["lexical_note"] = lexical_note
            if result.fallback:
                doc.metadata["hyde_fallback"] = result.fallback
            if note:
                doc.metadata["hyde_query_truncated"] = note
            if self.min_hypothesis_similarity is not None and written.texts:
                doc.metadata["hyde_hypotheses_dropped"] = fused.dropped
        return result


def _lexical_before_embedding(transform: HyDETransform) -> bool:
    """Whether the lexical query is known once the hypotheses are written.

    It is unless ``min_hypothesis_similarity`` may leave some out: that needs their
    vectors first.
    """
    return transform.writes and transform.min_similarity is None
