"""`HyDERetriever`: Hypothetical Document Embeddings (Gao et al. 2022), hybrid, for LangChain.

The pipeline, one public step per line, in three files::

    question --write_hypotheses--> N passages (hypothesis LLM; none with n_hypotheses=0)
             --embed-->            vectors of the texts the fusion needs
             --fuse-->             one search vector (mean | concat), or one per text (rrf)
                                   (these three: `hyde_lc.hyde.transform.HyDETransform`,
                                   shared with `hyde_lc.HyDEEmbeddings`)
             --search-->           dense hits (vector store) + lexical hits (BM25, fed the
                                   question and the passages), fused into one ranking
                                   (`hyde_lc.search.hybrid.HybridSearch`)
             --feedback-->         optional (``feedback=...``): the first ranking's best
                                   chunks move the search vector (Rocchio) and/or add
                                   terms to the BM25 query (RM3), and the search runs
                                   again (`hyde_lc.search.feedback`; no LLM)

This module composes the two: each step can be called on its own (`write_hypotheses`,
`embed`, `fuse`, `search`), and `retrieve_with_details` runs them all and returns what
each produced (`HyDEResult`). ``invoke`` runs the same steps in the same LangChain run
(callbacks, tracing, tags). The settings are the retriever's fields; the two units are
made from them at each call, so a field changed after construction is checked again
(`InvalidSettingError`) before any model runs. The Documents returned are
`hyde_lc.core.chunks.RetrievedChunk`: one chunk found by two searches compares equal, so
LangChain's wrappers (``MultiQueryRetriever``, ``EnsembleRetriever``) keep it once.

**Dense side.** By default the mean weights the query 0.8 and the hypotheses share 0.2
(`DEFAULT_QUERY_WEIGHT`, measured on SciFact with the local writers); ``query_weight=None``
is the paper's equal weighting. The query's own embedding does not depend on the
hypotheses, so it is computed while they are being written.

**Lexical side.** A collection ingested by hyde_lc carries a BM25 index of its chunks
(`hyde_lc.search.lexical`); ``lexical="auto"`` (the default) searches it next to the vectors and
fuses the two lists (`hyde_lc.core.fusion.score_fusion`, dense weight ``dense_weight``). The
lexical query is the question repeated ``lexical_query_repeats`` times plus the
hypotheses (query2doc). Over a store without such an index the retriever searches dense
only and says so once in the log; pass ``lexical=LexicalSearch...`` to bring one, or
``lexical="off"`` for dense only.

**Failures.** If the hypothesis LLM fails (times out, returns nothing or a refusal) the
search uses the query alone and every Document says so in ``metadata["hyde_fallback"]``.
The query is data: it is placed in the prompt as-is, never interpreted. An empty query
is refused (`InvalidQueryError`); one longer than ``max_query_chars`` is cut to that
length and every Document says so in ``metadata["hyde_query_truncated"]``. Every invalid
setting raises `InvalidSettingError`, at construction and at the next call alike.

Example:
    >>> from hyde_lc import HyDERetriever, load_llm, open_store
    >>> retriever = HyDERetriever(
    ...     vectorstore=open_store(), hypothesis_llm=load_llm(role="hypothesis"), k=4
    ... )  # doctest: +SKIP
    >>> details = retriever.retrieve_with_details("Who made the Fresnel lens?")  # doctest: +SKIP
    >>> details.hypotheses[0][:60], details.documents[0].metadata["found_by"]  # doctest: +SKIP

"""

from __future__ import annotations

import asyncio
import logging
import time
from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.caches import BaseCache, InMemoryCache
from langchain_core.callbacks import (
    AsyncCallbackManager,
    AsyncCallbackManagerForRetrieverRun,
    CallbackManager,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseLanguageModel
from langchain_core.messages import BaseMessage
from langchain_core.prompts import BasePromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig, RunnableLambda, ensure_config
from langchain_core.runnables.config import run_in_executor
from langchain_core.vectorstores import VectorStore
from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from hyde_lc.core.chunks import RetrievedChunk
from hyde_lc.errors import InvalidQueryError, InvalidSettingError
from hyde_lc.hyde.hypotheses import Hypotheses
from hyde_lc.hyde.prompts import DEFAULT_PROMPT, get_prompt
from hyde_lc.hyde.transform import (
    DEFAULT_QUERY_WEIGHT,
    MAX_HYPOTHESES,
    Embedded,
    Fused,
    Fusion,
    HyDETransform,
    check_fusion,
    check_n_hypotheses,
    check_prompt,
    check_query_weight,
)
from hyde_lc.search.feedback import (
    DEFAULT_FEEDBACK_DOCS,
    DEFAULT_FEEDBACK_TERM_WEIGHT,
    DEFAULT_FEEDBACK_TERMS,
    DEFAULT_FEEDBACK_VECTOR_WEIGHT,
    Feedback,
    FeedbackMode,
    check_feedback,
    check_feedback_mode,
    chunk_vectors,
    cosine,
    expand_query,
    expansion_terms,
    feedback_needs_vectors,
    returns_vectors,
    rocchio,
)
from hyde_lc.search.hybrid import (
    DEFAULT_DENSE_WEIGHT,
    HYBRID_CANDIDATES,
    HybridFusion,
    HybridSearch,
    check_hybrid_fusion,
    chunk_key,
    in_background,
    settled,
)
from hyde_lc.search.lexical import DEFAULT_QUERY_REPEATS, LexicalSearch, lexical_search_for
from hyde_lc.search.stores import check_dimension, check_embeddings

__all__ = [  # the units' names stay importable from here
    "DEFAULT_DENSE_WEIGHT",
    "DEFAULT_QUERY_WEIGHT",
    "HYBRID_CANDIDATES",
    "MAX_HYPOTHESES",
    "MAX_QUERY_CHARS",
    "DetailedRetriever",
    "Embedded",
    "Fused",
    "HyDEResult",
    "HyDERetriever",
    "clip_query",
    "configuration_label",
    "valid_k",
]

logger = logging.getLogger(__name__)

MAX_QUERY_CHARS = 4000
"""Longest query used as-is: about 1,000 tokens of English, so the hypothesis prompt and
the answer prompt stay well inside a 4,096-token local context window."""


def clip_query(query: str, max_chars: int | None = MAX_QUERY_CHARS) -> tuple[str, str | None]:
    """Check a query and cut it to ``max_chars``; returns the query and a note if it was cut.

    Raises `InvalidQueryError` for an empty query, or for anything that is not a string
    (saying what was given instead).

    Example:
        >>> clip_query("x" * 5000)[1]
        "query truncated from 5000 to 4000 characters to fit the models' context windows"

    """
    if not isinstance(query, str):
        hint = (
            " (a dict: pass the question text itself, e.g. retriever.invoke(inputs['question']),"
            " or map it in LCEL with itemgetter('question') | retriever)"
            if isinstance(query, dict)
            else ""
        )
        raise InvalidQueryError(f"the query must be a string, got {type(query).__name__}{hint}")
    if not query.strip():
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


# -- what a retrieval returns, and the base class -------------------------------------


@dataclass
class HyDEResult:
    """Everything one retrieval produced, for inspection, evaluation and display."""

    query: str
    """The query searched with (cut to ``max_query_chars`` if it was longer)."""
    hypotheses: list[str]
    documents: list[Document]
    label: str
    """The retriever's configuration in one name (`HyDERetriever.label`)."""
    fallback: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    hypothesis_messages: list[BaseMessage] = field(default_factory=list)
    """The hypothesis LLM's fresh outputs, with token usage (cache hits have none)."""
    prompts: list[str] = field(default_factory=list)
    """The rendered hypothesis prompts."""
    cache_hits: int = 0
    """Hypotheses served from ``hypothesis_cache``."""
    embedded_texts: list[str] = field(default_factory=list)
    """Every text the embedding model read (for token accounting)."""
    search_vectors: list[list[float]] = field(default_factory=list)
    """The vector(s) searched: one fused vector, or one per ranking for ``rrf``."""
    query_note: str | None = None
    """Set when the query was truncated: from how many characters to how many."""
    hypotheses_dropped: int = 0
    """Hypotheses left out by ``min_hypothesis_similarity`` (adaptive HyDE)."""
    lexical: bool = False
    """Whether a lexical (BM25) list took part in the ranking."""
    rounds: int = 1
    """Searches behind the documents (neighbour expansion may search again, deeper)."""
    feedback: Feedback | None = None
    """What pseudo-relevance feedback did (``feedback=...``): the chunks fed back, the
    expansion terms, the first ranking; None when it is off. ``search_vectors`` are then
    the moved vectors."""


# -- the base: a retriever whose runs also return their details --------------------------


class DetailedRetriever(BaseRetriever):
    """A LangChain retriever whose runs can also return what they did (`HyDEResult`).

    Subclasses implement `_retrieve` (and optionally `_aretrieve`); ``invoke`` returns its
    documents and `retrieve_with_details` the whole result, in the same traced run. Any
    invalid setting raises `InvalidSettingError` (a ``ValueError``), also at construction.

    Example:
        >>> from hyde_lc import HyDERetriever
        >>> issubclass(HyDERetriever, DetailedRetriever)
        True

    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise InvalidSettingError(_settings_message(type(self), exc)) from None

    def for_repeated_calls(self) -> DetailedRetriever:
        """The retriever set up to be called several times for one query.

        Callers that search one query again (deeper, as neighbour expansion does) use it
        so that per-query work is done once; the default is the retriever itself.
        """
        return self

    @abstractmethod
    def _retrieve(
        self, query: str, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> HyDEResult:
        """Run the retrieval under ``run_manager``; returns documents and details."""

    async def _aretrieve(
        self, query: str, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> HyDEResult:
        """Async `_retrieve` (by default: the sync one in an executor)."""
        return await run_in_executor(None, self._retrieve, query, run_manager.get_sync(), **kwargs)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        return self._retrieve(query, run_manager, **kwargs).documents

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        return (await self._aretrieve(query, run_manager, **kwargs)).documents

    def retrieve_with_details(
        self, query: str, config: RunnableConfig | None = None, **kwargs: Any
    ) -> HyDEResult:
        """Like ``invoke`` (same run, callbacks and tags), but returns the details too."""
        config = ensure_config(config)
        manager = CallbackManager.configure(
            config.get("callbacks"),
            None,
            inheritable_tags=config.get("tags"),
            local_tags=self.tags,
            inheritable_metadata={**(config.get("metadata") or {}), **self._get_ls_params()},
            local_metadata=self.metadata,
        )
        run_manager = manager.on_retriever_start(
            None, query, name=config.get("run_name") or self.get_name()
        )
        try:
            result = self._retrieve(query, run_manager, **kwargs)
        except Exception as exc:
            run_manager.on_retriever_error(exc)
            raise
        run_manager.on_retriever_end(result.documents)
        return result

    async def aretrieve_with_details(
        self, query: str, config: RunnableConfig | None = None, **kwargs: Any
    ) -> HyDEResult:
        """Async `retrieve_with_details`."""
        config = ensure_config(config)
        manager = AsyncCallbackManager.configure(
            config.get("callbacks"),
            None,
            inheritable_tags=config.get("tags"),
            local_tags=self.tags,
            inheritable_metadata={**(config.get("metadata") or {}), **self._get_ls_params()},
            local_metadata=self.metadata,
        )
        run_manager = await manager.on_retriever_start(
            None, query, name=config.get("run_name") or self.get_name()
        )
        try:
            result = await self._aretrieve(query, run_manager, **kwargs)
        except Exception as exc:
            await run_manager.on_retriever_error(exc)
            raise
        await run_manager.on_retriever_end(result.documents)
        return result


def _settings_message(owner: type, exc: ValidationError) -> str:
    """One line per invalid setting, in the package's words (pydantic's prefix removed)."""
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error.get("loc", ()))
        message = str(error.get("msg", "")).removeprefix("Value error, ")
        if error.get("type") == "extra_forbidden":
            known = ", ".join(sorted(getattr(owner, "model_fields", {})))
            message = f"{where}: no such setting (the settings are: {known})"
        # a check of several settings together has no location: its message names them
        parts.append(message if not where or message.startswith(where) else f"{where}: {message}")
    return f"invalid {owner.__name__} settings: " + "; ".join(parts)


def valid_k(value: Any) -> int:
    """``k`` as an int of at least 1, or `InvalidSettingError` saying so."""
    if isinstance(value, bool):
        raise InvalidSettingError(f"k must be a whole number of at least 1, got {value!r}")
    try:
        k = int(value)
    except (TypeError, ValueError, OverflowError):
        raise InvalidSettingError(
            f"k must be a whole number of at least 1, got {value!r}"
        ) from None
    if k < 1 or k != value:
        raise InvalidSettingError(
            f"k must be a whole number of at least 1, got {value!r} (a k above the "
            "collection's size returns every chunk there is)"
        )
    return k


# -- HyDE ---------------------------------------------------------------------------------


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
    hypothesis_llm: BaseLanguageModel | None = None
    """Writes the hypothetical passages; required when ``n_hypotheses > 0``."""
    embeddings: Embeddings | None = None
    """Embeds query and hypotheses; defaults to the vector store's own embeddings."""
    k: int = 4
    """Documents returned (at least 1); ``invoke(q, k=N)`` overrides it per call. A ``k``
    larger than the collection returns every chunk there is (fewer than ``k``)."""
    n_hypotheses: int = 1
    """Passages generated per prompt (0 to `MAX_HYPOTHESES`); 0 means no LLM at all.

    Without a ``hypothesis_llm`` the default is 0: the retriever then searches the
    question itself (hybrid where the store has a lexical index), which is what measured
    best on SciFact with the local writers (BENCHMARKS.md)."""
    fusion: Fusion = "mean"
    """How query and hypotheses make the dense search: ``mean``, ``concat`` or ``rrf``."""
    include_query: bool = True
    """Whether the query itself takes part in the dense fusion (the paper: yes)."""
    query_weight: float | None = DEFAULT_QUERY_WEIGHT
    """The query's share of the dense fusion, between 0 and 1; the hypotheses share the rest.

    ``None`` is the paper's equal weighting (1/(n+1) for ``mean``, equal rankings for
    ``rrf``). Used with ``mean`` and ``rrf`` when ``include_query``; the default does not
    apply to ``concat`` or to ``include_query=False``."""
    prompt: str | list[str] | BasePromptTemplate = DEFAULT_PROMPT
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
    """Seconds to wait for the hypotheses before falling back to the plain query."""
    hypothesis_cache: BaseCache | None = None
    """Optional cache of hypotheses (e.g. `hyde_lc.hyde.hypothesis_cache.HypothesisCache`)."""
    min_hypothesis_similarity: float | None = None
    """Adaptive HyDE: hypotheses whose cosine similarity to the query is below this are
    left out of the search (the dense fusion and the lexical query); if none is left, the
    query alone is searched. ``None``
    (the default) keeps every hypothesis, as the paper does."""
    max_query_chars: int | None = MAX_QUERY_CHARS
    """Longer queries are cut to this many characters; None never cuts."""
    lexical: Literal["auto", "off"] | LexicalSearch = "auto"
    """The lexical (BM25) side: ``auto`` uses the collection's own index when it has one
    (collections ingested by hyde_lc), ``off`` searches dense only, or a `LexicalSearch`
    (e.g. ``LexicalSearch.from_documents(docs)`` for a store of your own)."""
    dense_weight: float = DEFAULT_DENSE_WEIGHT
    """The dense list's share of the hybrid fusion, between 0 and 1."""
    hybrid_fusion: HybridFusion = "score"
    """How dense and lexical lists fuse: rescaled scores (``score``) or ranks (``rrf``)."""
    lexical_query_repeats: int = DEFAULT_QUERY_REPEATS
    """The question's weight against each hypothesis in the lexical query."""
    hybrid_candidates: int = HYBRID_CANDIDATES
    """Candidates taken from each list before the hybrid fusion."""
    feedback: FeedbackMode = "off"
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

    _lexical_search: Any = None
    _lexical_resolved: bool = False

    # -- validation ------------------------------------------------------------------

    @field_validator("k")
    @classmethod
    def _check_k(cls, value: int) -> int:
        return valid_k(value)

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
        return check_n_hypotheses(value)

    @field_validator("fusion", mode="before")
    @classmethod
    def _check_fusion(cls, value: str) -> str:
        return check_fusion(value)

    @field_validator("hybrid_fusion", mode="before")
    @classmethod
    def _check_hybrid_fusion(cls, value: str) -> str:
        return check_hybrid_fusion(value)

    @field_validator("feedback", mode="before")
    @classmethod
    def _check_feedback_mode(cls, value: Any) -> Any:
        return check_feedback_mode(value)

    @field_validator("prompt")
    @classmethod
    def _check_prompt(cls, value: Any) -> Any:
        return check_prompt(value)

    @field_validator("lexical", mode="before")
    @classmethod
    def _check_lexical(cls, value: Any) -> Any:
        if isinstance(value, str) and value not in ("auto", "off"):
            raise InvalidSettingError(
                f"lexical must be 'auto', 'off' or a LexicalSearch, got {value!r}"
            )
        return value

    @model_validator(mode="after")
    def _check_combination(self) -> HyDERetriever:
        if "n_hypotheses" not in self.model_fields_set and self.hypothesis_llm is None:
            self.n_hypotheses = 0  # no writer given: search the question itself
        check_query_weight(self.query_weight)
        if self.query_weight is not None and (self.fusion == "concat" or not self.include_query):
            if "query_weight" in self.model_fields_set:
                raise InvalidSettingError(
                    "query_weight needs the query in a mean or rrf fusion: use "
                    "fusion='mean' or 'rrf' with include_query=True, or leave "
                    "query_weight unset"
                )
            self.query_weight = None  # the default applies where the query is fused
        if "k" in self.search_kwargs:  # the usual LangChain spelling: it sets the default k
            self.search_kwargs = dict(self.search_kwargs)
            self.k = valid_k(self.search_kwargs.pop("k"))
        if self.embeddings is None and getattr(self.vectorstore, "embeddings", None) is None:
            raise InvalidSettingError(
                "HyDERetriever needs embeddings: pass embeddings=... (the model the store's "
                "vectors were made with), or a store that carries its embedding function"
            )
        self.hyde_transform  # noqa: B018  (the units check the rest: timeout, gate, weights, ...)
        self._search_unit(None)
        self._check_feedback()
        check_embeddings(self.vectorstore, self.embedding_model)
        return self

    def _check_feedback(self) -> None:
        """The feedback settings, and that the store and the lexical side can serve them."""
        mode = check_feedback(
            self.feedback,
            self.feedback_docs,
            self.feedback_vector_weight,
            self.feedback_terms,
            self.feedback_term_weight,
        )
        if mode in ("dense", "both") and not returns_vectors(self.vectorstore):
            raise InvalidSettingError(feedback_needs_vectors(self.vectorstore))
        if mode in ("lexical", "both") and (
            self.lexical == "off" or self.search_type != "similarity" or not self.lexical_search
        ):
            raise InvalidSettingError(
                f"feedback={mode!r} adds terms to the lexical (BM25) query, and this retriever "
                "has no lexical side (lexical='off', search_type='mmr', or a store without a "
                "BM25 index): use feedback='dense', or give it a lexical side "
                "(lexical=LexicalSearch.from_store(store))"
            )

    # -- the two units, made of the fields ---------------------------------------------

    @property
    def embedding_model(self) -> Embeddings:
        """The embeddings in force: ``embeddings``, else the vector store's own."""
        embeddings = self.embeddings or self.vectorstore.embeddings
        assert embeddings is not None  # checked at construction
        return embeddings

    @property
    def hyde_transform(self) -> HyDETransform:
        """The HyDE transform these settings make (question -> search vector(s))."""
        return HyDETransform(
            self.embedding_model,
            llm=self.hypothesis_llm,
            prompt=self.prompt,
            n_hypotheses=self.n_hypotheses,
            hypothesis_length=self.hypothesis_length,
            timeout=self.timeout,
            cache=self.hypothesis_cache,
            fusion=self.fusion,
            include_query=self.include_query,
            query_weight=self.query_weight,
            min_similarity=self.min_hypothesis_similarity,
        )

    @property
    def hybrid_search(self) -> HybridSearch:
        """The hybrid search these settings make (search vector(s) + texts -> chunks)."""
        # MMR searches dense only: the lexical side is not even looked up
        return self._search_unit(self.lexical_search if self.search_type == "similarity" else None)

    def _search_unit(self, lexical: LexicalSearch | None) -> HybridSearch:
        return HybridSearch(
            self.vectorstore,
            lexical,
            search_kwargs=self.search_kwargs,
            search_type=self.search_type,
            dense_weight=self.dense_weight,
            hybrid_fusion=self.hybrid_fusion,
            lexical_query_repeats=self.lexical_query_repeats,
            candidates=self.hybrid_candidates,
            rrf_candidates=self.rrf_candidates,
        )

    @property
    def lexical_search(self) -> LexicalSearch | None:
        """The lexical side in force (None: dense only), resolved once."""
        if not self._lexical_resolved:
            if isinstance(self.lexical, str):
                self._lexical_search = (
                    None if self.lexical == "off" else lexical_search_for(self.vectorstore)
                )
            else:
                self._lexical_search = self.lexical
            self._lexical_resolved = True
        return self._lexical_search

    @property
    def label(self) -> str:
        """The configuration in one name, used by the CLI, evaluation records and benchmarks.

        ``standard`` (dense, no LLM), ``hybrid`` (dense + BM25, no LLM), ``hyde`` and
        ``hybrid-hyde``, followed by every setting that differs from the defaults in
        parentheses, e.g. ``hyde(fusion=rrf,w=paper,n=4)``.
        """
        return configuration_label(self)

    def for_repeated_calls(self) -> HyDERetriever:
        """A copy whose later calls for the same query reuse its first hypotheses.

        (Unless a ``hypothesis_cache`` is set already: it reuses them anyway.)
        """
        if not self.n_hypotheses or self.hypothesis_cache is not None:
            return self
        return self.model_copy(update={"hypothesis_cache": InMemoryCache()})

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

    def _prepare(
        self, query: str, kwargs: dict[str, Any]
    ) -> tuple[str, str | None, int, HyDETransform, HybridSearch]:
        """Check the call's query, k and settings before any model runs; cut a long query."""
        k = valid_k(kwargs.get("k", self.k))
        query, note = clip_query(query, self.max_query_chars)
        self._check_feedback()
        return query, note, k, self.hyde_transform, self.hybrid_search

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
            vectors = chunk_vectors(self.vectorstore, ids)
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

    def _retrieve(
        self, query: str, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> HyDEResult:
        query, note, k, transform, search = self._prepare(query, kwargs)
        early = (
            in_background(transform.embeddings.embed_query, query)
            if transform.embeds_query_early
            else None
        )
        lexical = None if transform.writes else search.start_lexical(query, (), k)
        start = time.perf_counter()
        written = transform.write(query, self._child(run_manager, "hyde.hypothesis"))
        timings = {"hypothesis_s": time.perf_counter() - start}
        if _lexical_before_embedding(transform):
            lexical = search.start_lexical(query, written.texts, k)
        start = time.perf_counter()
        with settled(lexical):
            vector = early.result() if early else None
            if _observed(run_manager):
                embed: RunnableLambda[list[float] | None, Embedded] = RunnableLambda(
                    lambda v: transform.embed(query, written.texts, v), name="hyde.embed"
                )
                embedded = embed.invoke(vector, self._child(run_manager, "hyde.embed"))
            else:  # nobody listens: the child run would only cost time
                embedded = transform.embed(query, written.texts, vector)
            fused = transform.fuse(embedded)
            check_dimension(self.vectorstore, len(fused.vectors[0]))
        timings["embedding_s"] = time.perf_counter() - start
        start = time.perf_counter()
        if transform.writes and not _lexical_before_embedding(transform):
            lexical = search.start_lexical(query, fused.kept_texts(written.texts), k)
        docs = search.search(fused, self._first_depth(k), lexical)
        timings["search_s"] = time.perf_counter() - start
        start = time.perf_counter()
        docs, searched, feedback = self.feed_back(
            search, fused, docs, k, lexical, query=query, hypotheses=fused.kept_texts(written.texts)
        )
        if feedback is not None:
            timings["feedback_s"] = time.perf_counter() - start
        result = self._result(
            transform, search, query, note, written, embedded, fused, docs, timings
        )
        return _with_feedback(result, searched, feedback)

    async def _aretrieve(
        self, query: str, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> HyDEResult:
        query, note, k, transform, search = self._prepare(query, kwargs)
        early = None
        if transform.embeds_query_early:
            early = asyncio.ensure_future(transform.embeddings.aembed_query(query))
        lexical = None if transform.writes else search.start_lexical(query, (), k)
        start = time.perf_counter()
        try:
            written = await transform.awrite(query, self._child(run_manager, "hyde.hypothesis"))
        except BaseException:
            if early is not None:
                early.cancel()
            raise
        timings = {"hypothesis_s": time.perf_counter() - start}
        if _lexical_before_embedding(transform):
            lexical = search.start_lexical(query, written.texts, k)
        start = time.perf_counter()

        async def aembed(vector: list[float] | None) -> Embedded:
            return await transform.aembed(query, written.texts, vector)

        with settled(lexical):
            query_vector = await early if early is not None else None
            if _observed(run_manager):
                embed = RunnableLambda(
                    lambda v: transform.embed(query, written.texts, v),
                    afunc=aembed,
                    name="hyde.embed",
                )
                embedded = await embed.ainvoke(query_vector, self._child(run_manager, "hyde.embed"))
            else:  # nobody listens: the child run would only cost time
                embedded = await aembed(query_vector)
            fused = transform.fuse(embedded)
            check_dimension(self.vectorstore, len(fused.vectors[0]))
        timings["embedding_s"] = time.perf_counter() - start
        start = time.perf_counter()
        if transform.writes and not _lexical_before_embedding(transform):
            lexical = search.start_lexical(query, fused.kept_texts(written.texts), k)
        docs = await run_in_executor(None, search.search, fused, self._first_depth(k), lexical)
        timings["search_s"] = time.perf_counter() - start
        if self.feedback != "off":
            start = time.perf_counter()
            kept = fused.kept_texts(written.texts)
            docs, searched, feedback = await run_in_executor(
                None,
                lambda: self.feed_back(
                    search, fused, docs, k, lexical, query=query, hypotheses=kept
                ),
            )
            timings["feedback_s"] = time.perf_counter() - start
        else:
            searched, feedback = fused, None
        result = self._result(
            transform, search, query, note, written, embedded, fused, docs, timings
        )
        return _with_feedback(result, searched, feedback)

    @staticmethod
    def _child(run_manager: Any, tag: str) -> RunnableConfig:
        return RunnableConfig(callbacks=run_manager.get_child(tag), tags=[tag], run_name=tag)

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
            documents=[RetrievedChunk.of(doc) for doc in docs],
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
        lexical_note = _lexical_note(search.lexical_side)
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


def _lexical_note(lexical: LexicalSearch | None) -> str | None:
    """What every Document says when the lexical side searched an index behind its store."""
    if lexical is None or not getattr(lexical, "stale", False):
        return None
    return (
        "the lexical index was built from documents and the store has changed since: "
        "chunks added since were searched dense only (LexicalSearch.refresh() re-indexes)"
    )


def _with_feedback(result: HyDEResult, searched: Fused, feedback: Feedback | None) -> HyDEResult:
    """The result with what the feedback step did (nothing when it is off)."""
    if feedback is not None:
        result.feedback = feedback
        result.search_vectors = searched.vectors
    return result


def _lexical_before_embedding(transform: HyDETransform) -> bool:
    """Whether the lexical query is known once the hypotheses are written.

    It is unless ``min_hypothesis_similarity`` may leave some out: that needs their
    vectors first.
    """
    return transform.writes and transform.min_similarity is None


def _observed(run_manager: Any) -> bool:
    """Whether any callback handler (tracing, ``astream_events``, ...) sees this run."""
    return bool(run_manager.handlers or run_manager.inheritable_handlers)


_LABEL_FIELDS: tuple[tuple[str, str], ...] = (
    ("fusion", "fusion"),
    ("query_weight", "w"),
    ("n_hypotheses", "n"),
    ("prompt", "prompt"),
    ("include_query", "hypotheses-only"),
    ("min_hypothesis_similarity", "gate"),
    ("search_type", "search"),
    ("dense_weight", "dense"),
    ("hybrid_fusion", "hybrid-fusion"),
    ("lexical_query_repeats", "repeats"),
    ("feedback", "feedback"),
    ("feedback_docs", "fb-docs"),
    ("feedback_vector_weight", "fb-beta"),
    ("feedback_terms", "fb-terms"),
    ("feedback_term_weight", "fb-term-weight"),
)
_DENSE_FEEDBACK = ("feedback_vector_weight",)
_LEXICAL_FEEDBACK = ("feedback_terms", "feedback_term_weight")


def configuration_label(retriever: HyDERetriever) -> str:
    """The one name of a retriever's configuration (see `HyDERetriever.label`).

    Example:
        >>> from langchain_core.vectorstores import InMemoryVectorStore
        >>> from langchain_core.embeddings import DeterministicFakeEmbedding
        >>> store = InMemoryVectorStore(DeterministicFakeEmbedding(size=8))
        >>> configuration_label(HyDERetriever(vectorstore=store, n_hypotheses=0))
        'standard'

    """
    hyde = retriever.n_hypotheses > 0
    hybrid = (  # MMR searches dense only
        retriever.search_type == "similarity"
        and retriever.lexical != "off"
        and retriever.lexical_search is not None
    )
    base = {(False, False): "standard", (False, True): "hybrid", (True, False): "hyde"}.get(
        (hyde, hybrid), "hybrid-hyde"
    )
    defaults = HyDERetriever.model_fields
    parts = []
    for name, short in _LABEL_FIELDS:
        value = getattr(retriever, name)
        if value == defaults[name].default:
            continue
        if not hyde and name in (
            "fusion",
            "query_weight",
            "prompt",
            "include_query",
            "n_hypotheses",
            "min_hypothesis_similarity",
        ):
            continue
        if not hybrid and name in ("dense_weight", "hybrid_fusion", "lexical_query_repeats"):
            continue
        if name.startswith("feedback_") and (
            retriever.feedback == "off"
            or (name in _DENSE_FEEDBACK and retriever.feedback == "lexical")
            or (name in _LEXICAL_FEEDBACK and retriever.feedback == "dense")
        ):
            continue
        if name == "query_weight":
            if value is None and (retriever.fusion == "concat" or not retriever.include_query):
                continue
            parts.append(f"w={'paper' if value is None else f'{value:g}'}")
        elif name == "include_query":
            parts.append(short)
        elif name == "prompt":  # canonical names (an alias is its prompt), templates "custom"
            items = value if isinstance(value, list) else [value]
            parts.append("prompt=" + "+".join(get_prompt(item).name for item in items))
        else:
            parts.append(f"{short}={value:g}" if isinstance(value, float) else f"{short}={value}")
    return base + (f"({','.join(parts)})" if parts else "")
