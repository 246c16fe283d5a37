"""`HyDERetriever`: Hypothetical Document Embeddings (Gao et al. 2022), hybrid, for LangChain.

The pipeline, one public step per line::

    question --write_hypotheses--> N passages (hypothesis LLM; none with n_hypotheses=0)
             --embed-->            vectors of the texts the fusion needs
             --fuse-->             one search vector (mean | concat), or one per text (rrf)
             --search-->           dense hits (vector store) + lexical hits (BM25, fed the
                                   question and the passages), fused into one ranking

Each step can be called on its own (`write_hypotheses`, `embed`, `fuse`, `search`), and
`retrieve_with_details` runs them all and returns what each produced (`HyDEResult`).
``invoke`` runs the same steps in the same LangChain run (callbacks, tracing, tags).

**Dense side.** By default the mean weights the query 0.8 and the hypotheses share 0.2
(`DEFAULT_QUERY_WEIGHT`, measured on SciFact with the local writers); ``query_weight=None``
is the paper's equal weighting. The query's own embedding does not depend on the
hypotheses, so it is computed while they are being written.

**Lexical side.** A collection ingested by hyde_lc carries a BM25 index of its chunks
(`hyde_lc.lexical`); ``lexical="auto"`` (the default) searches it next to the vectors and
fuses the two lists (`hyde_lc.fusion.score_fusion`, dense weight ``dense_weight``). The
lexical query is the question repeated ``lexical_query_repeats`` times plus the
hypotheses (query2doc). Over a store without such an index the retriever searches dense
only and says so once in the log; pass ``lexical=LexicalSearch...`` to bring one, or
``lexical="off"`` for dense only.

**Failures.** If the hypothesis LLM fails (times out, returns nothing or a refusal) the
search uses the query alone and every Document says so in ``metadata["hyde_fallback"]``.
The query is data: it is placed in the prompt as-is, never interpreted. An empty query
is refused (`InvalidQueryError`); one longer than ``max_query_chars`` is cut to that
length and every Document says so in ``metadata["hyde_query_truncated"]``. Every invalid
setting raises `InvalidSettingError`, at construction and per call alike.

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
import contextvars
import logging
import time
from abc import abstractmethod
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
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

from hyde_lc.errors import InvalidQueryError, InvalidSettingError
from hyde_lc.fusion import (
    FUSION_MODES,
    HYBRID_FUSIONS,
    concat_text,
    fuse_mean,
    reciprocal_rank_fusion,
    score_fusion,
    similar_enough,
)
from hyde_lc.hypotheses import Hypotheses, awrite_hypotheses, write_hypotheses
from hyde_lc.lexical import DEFAULT_QUERY_REPEATS, LexicalSearch, lexical_query, lexical_search_for
from hyde_lc.prompts import DEFAULT_PROMPT, get_prompt
from hyde_lc.vectorstore import (
    check_dimension,
    check_embeddings,
    is_chroma,
    mmr_search,
    scored_search,
    vector_search,
    with_metadata,
)

logger = logging.getLogger(__name__)

Fusion = Literal["mean", "concat", "rrf"]
HybridFusion = Literal["score", "rrf"]

DEFAULT_QUERY_WEIGHT = 0.8
"""The query's share of the dense fusion by default, chosen on SciFact train and confirmed
once on test with the default local writer (BENCHMARKS.md): the paper's equal weighting
(``query_weight=None``) lets a small writer's hypothesis pull the search off the question."""

DEFAULT_DENSE_WEIGHT = 0.5
"""The dense list's share of the hybrid fusion (the lexical list has the rest): chosen on
all 809 SciFact train queries (0.4 and 0.5 tied at 73.0 nDCG@10; BENCHMARKS.md)."""

HYBRID_CANDIDATES = 100
"""Candidates taken from each list before fusing: the rescaling of `score_fusion` needs a
list deep enough that its lowest score means "not relevant"."""

MAX_QUERY_CHARS = 4000
"""Longest query used as-is: about 1,000 tokens of English, so the hypothesis prompt and
the answer prompt stay well inside a 4,096-token local context window."""

MAX_HYPOTHESES = 64
"""The most hypotheses per prompt: generation cost grows with each one (about 2-10 s each
on 2 cores with the default local writer), and their mean stops moving long before."""

_EARLY = ThreadPoolExecutor(max_workers=8, thread_name_prefix="hyde-side")
"""Work that does not wait for the step before it: the query's embedding while the
hypotheses are written, and the lexical search while the dense side embeds and searches.
Its tasks never wait on each other, so a full pool only queues them."""


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


# -- what the steps return ---------------------------------------------------------------


@dataclass
class Embedded:
    """What `HyDERetriever.embed` embedded: the texts and their vectors, in order.

    ``texts[i]`` was embedded into ``vectors[i]``. With ``mean`` and ``rrf`` the query
    (when it takes part) comes first, then each hypothesis; with ``concat`` there is one
    text; without hypotheses, the query alone.
    """

    texts: list[str]
    vectors: list[list[float]]
    query_vector: list[float] | None = None
    """The query's own embedding, when it was computed (also for the similarity gate)."""
    hypotheses: int = 0
    """How many of ``texts`` are hypotheses (they come last)."""


@dataclass
class Fused:
    """What `HyDERetriever.fuse` made of `Embedded`: the dense search vector(s)."""

    vectors: list[list[float]]
    """One vector (mean, concat, no hypotheses), or one per ranking to fuse (rrf)."""
    weights: list[float] | None = None
    """With several vectors: each ranking's weight in reciprocal rank fusion."""
    dropped: int = 0
    """Hypotheses left out by ``min_hypothesis_similarity``."""
    kept: list[int] | None = None
    """Positions of the hypotheses the gate kept (None: no gate applied, all of them)."""

    def kept_texts(self, hypotheses: Sequence[str]) -> list[str]:
        """The hypotheses that took part: the lexical query uses these, as the dense one."""
        return list(hypotheses) if self.kept is None else [hypotheses[i] for i in self.kept]


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
    """Optional cache of hypotheses (e.g. `hyde_lc.hypothesis_cache.HypothesisCache`)."""
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
        if not 0 <= value <= MAX_HYPOTHESES:
            raise InvalidSettingError(
                f"n_hypotheses must be between 0 (no LLM) and {MAX_HYPOTHESES}, got {value}: "
                "each hypothesis is one more generation"
            )
        return value

    @field_validator("fusion", mode="before")
    @classmethod
    def _check_fusion(cls, value: str) -> str:
        if value not in FUSION_MODES:
            raise InvalidSettingError(
                f"unknown fusion {value!r}: choose one of {', '.join(FUSION_MODES)}"
            )
        return value

    @field_validator("hybrid_fusion", mode="before")
    @classmethod
    def _check_hybrid_fusion(cls, value: str) -> str:
        if value not in HYBRID_FUSIONS:
            raise InvalidSettingError(
                f"unknown hybrid_fusion {value!r}: choose one of {', '.join(HYBRID_FUSIONS)}"
            )
        return value

    @field_validator("prompt")
    @classmethod
    def _check_prompt(cls, value: Any) -> Any:
        items = value if isinstance(value, list) else [value]
        if not items:
            raise InvalidSettingError("prompt needs at least one prompt name or template")
        for item in items:
            get_prompt(item)  # raises with the list of valid names
        return value

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
        if self.n_hypotheses and self.hypothesis_llm is None:
            raise InvalidSettingError(
                "n_hypotheses > 0 needs a hypothesis_llm (or set n_hypotheses=0)"
            )
        if self.timeout is not None and not 0 < self.timeout < float("inf"):
            raise InvalidSettingError(
                f"timeout must be a positive number of seconds or None, got {self.timeout}"
            )
        for name in ("dense_weight",):
            value = getattr(self, name)
            if not 0 <= value <= 1:
                raise InvalidSettingError(f"{name} must lie between 0 and 1, got {value}")
        for name in ("rrf_candidates", "hybrid_candidates", "lexical_query_repeats"):
            if getattr(self, name) < 1:
                raise InvalidSettingError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.query_weight is not None:
            if not 0 < self.query_weight < 1:
                raise InvalidSettingError(
                    f"query_weight must lie strictly between 0 and 1, got {self.query_weight} "
                    "(for 0 set include_query=False; for 1 set n_hypotheses=0)"
                )
            if self.fusion == "concat" or not self.include_query:
                if "query_weight" in self.model_fields_set:
                    raise InvalidSettingError(
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
            self.k = valid_k(self.search_kwargs.pop("k"))
        if self.embeddings is None and getattr(self.vectorstore, "embeddings", None) is None:
            raise InvalidSettingError(
                "HyDERetriever needs embeddings: pass embeddings=... (the model the store's "
                "vectors were made with), or a store that carries its embedding function"
            )
        check_embeddings(self.vectorstore, self.embedding_model)
        return self

    # -- configuration -----------------------------------------------------------------

    @property
    def embedding_model(self) -> Embeddings:
        """The embeddings in force: ``embeddings``, else the vector store's own."""
        embeddings = self.embeddings or self.vectorstore.embeddings
        assert embeddings is not None  # checked at construction
        return embeddings

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

    # -- step 1: hypotheses ------------------------------------------------------------

    def build_prompts(self, query: str) -> list[str]:
        """The rendered prompts: ``n_hypotheses`` per configured prompt."""
        names = self.prompt if isinstance(self.prompt, list) else [self.prompt]
        rendered = [get_prompt(n).render(query, self.hypothesis_length) for n in names]
        return [p for p in rendered for _ in range(self.n_hypotheses)]

    def write_hypotheses(self, query: str, config: RunnableConfig | None = None) -> Hypotheses:
        """Step 1: write the hypotheses (concurrently, cache first, within ``timeout``)."""
        if not self.n_hypotheses:
            return Hypotheses([], [])
        assert self.hypothesis_llm is not None
        return write_hypotheses(
            self.hypothesis_llm,
            self.build_prompts(query),
            config=config,
            timeout=self.timeout,
            cache=self.hypothesis_cache,
        )

    async def awrite_hypotheses(
        self, query: str, config: RunnableConfig | None = None
    ) -> Hypotheses:
        """Async `write_hypotheses`: the generations are awaited together."""
        if not self.n_hypotheses:
            return Hypotheses([], [])
        assert self.hypothesis_llm is not None
        return await awrite_hypotheses(
            self.hypothesis_llm,
            self.build_prompts(query),
            config=config,
            timeout=self.timeout,
            cache=self.hypothesis_cache,
        )

    # -- step 2: embeddings ------------------------------------------------------------

    def _needs_query_vector(self, hypotheses: Sequence[str]) -> bool:
        if not hypotheses:
            return True
        if self.fusion == "concat":
            return False
        return self.include_query or self.min_hypothesis_similarity is not None

    def embed(
        self,
        query: str,
        hypotheses: Sequence[str],
        query_vector: list[float] | None = None,
    ) -> Embedded:
        """Step 2: embed what the fusion needs (hypotheses in one batch).

        ``query_vector``, when given, is the query's embedding computed earlier (the
        retriever computes it while the hypotheses are being written).
        """
        embeddings = self.embedding_model
        hypotheses = list(hypotheses)
        if hypotheses and self.fusion == "concat":
            text = concat_text(query if self.include_query else None, hypotheses)
            return Embedded([text], [embeddings.embed_query(text)], hypotheses=len(hypotheses))
        if self._needs_query_vector(hypotheses) and query_vector is None:
            query_vector = embeddings.embed_query(query)
        vectors = embeddings.embed_documents(hypotheses) if hypotheses else []
        texts, out = list(hypotheses), list(vectors)
        if query_vector is not None and (self.include_query or not hypotheses):
            texts, out = [query, *texts], [query_vector, *out]
        return Embedded(texts, out, query_vector, hypotheses=len(hypotheses))

    # -- step 3: fusion ----------------------------------------------------------------

    def fuse(self, embedded: Embedded) -> Fused:
        """Step 3: the dense search vector(s) made of `Embedded`.

        The weighted mean, the concat vector, or one vector per ranking for ``rrf``;
        hypotheses below ``min_hypothesis_similarity`` are left out first.
        """
        if not embedded.hypotheses or self.fusion == "concat":
            return Fused(embedded.vectors[:1])
        with_query = len(embedded.vectors) > embedded.hypotheses
        hypotheses = embedded.vectors[-embedded.hypotheses :]
        dropped = 0
        kept: list[int] | None = None
        gate = self.min_hypothesis_similarity
        if gate is not None and embedded.query_vector is not None:
            kept = similar_enough(embedded.query_vector, hypotheses, gate)
            dropped = len(hypotheses) - len(kept)
            hypotheses = [hypotheses[i] for i in kept]
            if not hypotheses:
                return Fused([embedded.query_vector], dropped=dropped, kept=kept)
        vectors = ([embedded.vectors[0]] if with_query else []) + hypotheses
        weights = self._fusion_weights(len(vectors), with_query)
        if self.fusion == "mean":
            return Fused([fuse_mean(vectors, weights)], dropped=dropped, kept=kept)
        return Fused(vectors, weights, dropped=dropped, kept=kept)

    def _fusion_weights(self, count: int, with_query: bool) -> list[float] | None:
        """Weights of [query, *hypotheses] by ``query_weight`` (None: all equal)."""
        if self.query_weight is None or not with_query or count < 2:
            return None
        return [self.query_weight] + [(1 - self.query_weight) / (count - 1)] * (count - 1)

    # -- step 4: search ----------------------------------------------------------------

    def search(
        self,
        fused: Fused,
        k: int,
        *,
        query: str = "",
        hypotheses: Sequence[str] = (),
    ) -> list[Document]:
        """Step 4: dense hits for ``fused``, fused with lexical hits for query + hypotheses.

        Every Document's ``metadata["score"]`` is its score in the final ranking (cosine
        relevance when dense only); with a lexical side, ``dense_score`` and
        ``lexical_score`` give each list's own score (None where it did not find the
        chunk) and ``found_by`` the lists that found it.
        """
        return self._search(fused, k, self._start_lexical(query, hypotheses, k))

    def _lexical_side(self) -> LexicalSearch | None:
        return self.lexical_search if self.search_type == "similarity" else None

    def _start_lexical(
        self, query: str, hypotheses: Sequence[str], k: int
    ) -> Future[list[tuple[str, float]]] | None:
        """Start the lexical search in the background (None: dense only).

        It needs only texts, so it runs while the dense side embeds and searches.
        """
        lexical = self._lexical_side()
        if lexical is None:
            return None
        weights = lexical_query(query, list(hypotheses), self.lexical_query_repeats)
        depth = max(k, self.hybrid_candidates)
        where = self.search_kwargs.get("filter")
        context = contextvars.copy_context()
        return _EARLY.submit(context.run, lexical.search, weights, depth, where)

    def _search(
        self, fused: Fused, k: int, lexical_hits: Future[list[tuple[str, float]]] | None
    ) -> list[Document]:
        """The dense search for ``fused``, fused with the lexical search already started."""
        lexical = self._lexical_side()
        if lexical_hits is None or lexical is None:
            return self._dense(fused, k)
        with _settled(lexical_hits):
            scored, docs = self._dense_candidates(fused, max(k, self.hybrid_candidates))
        return self._hybrid(scored, docs, lexical_hits.result(), k, lexical)

    def _dense_candidates(
        self, fused: Fused, depth: int
    ) -> tuple[list[tuple[str, Any]], dict[str, Document]]:
        """A hybrid search's dense side: ``(id, score)`` best first, and the chunks read.

        A Chroma collection searched with one vector (and at most a ``filter``) gives ids
        and scores only: the texts of the candidates that make the fused ranking are read
        afterwards, in one request. Another store gives its own Documents, which `_hybrid`
        copies only when it returns them; several vectors (``rrf``) give their fusion.
        """
        if len(fused.vectors) > 1:
            hits = self._dense(fused, depth)
            return [(_key(d), d.metadata.get("score")) for d in hits], {_key(d): d for d in hits}
        vector = fused.vectors[0]
        if is_chroma(self.vectorstore) and not set(self.search_kwargs) - {"filter"}:
            from hyde_lc import store

            where = self.search_kwargs.get("filter")  # pending versions: left out by vector_hits
            return store.vector_hits(self.vectorstore, vector, depth, where), {}  # type: ignore[arg-type]
        pairs = scored_search(self.vectorstore, vector, depth, self.search_kwargs)
        return [(_key(d), score) for d, score in pairs], {_key(d): d for d, _ in pairs}

    def _dense(self, fused: Fused, k: int) -> list[Document]:
        """One search, or the reciprocal rank fusion of several (``rrf``)."""
        if len(fused.vectors) == 1:
            return self._search_one(fused.vectors[0], k)
        depth = max(k, self.rrf_candidates)
        rankings = [self._search_one(v, depth) for v in fused.vectors]
        by_key: dict[str, Document] = {}
        for ranking in rankings:
            for doc in ranking:
                by_key.setdefault(_key(doc), doc)
        fused_ids = reciprocal_rank_fusion(
            [[_key(d) for d in r] for r in rankings], weights=fused.weights
        )[:k]
        out = []
        for key, score in fused_ids:
            found = by_key[key]
            out.append(with_metadata(found, similarity=found.metadata.get("score"), score=score))
        return out

    def _search_one(self, vector: list[float], k: int) -> list[Document]:
        if self.search_type == "mmr":
            return mmr_search(self.vectorstore, vector, k, self.search_kwargs)
        return vector_search(self.vectorstore, vector, k, self.search_kwargs)

    def _hybrid(
        self,
        dense_scored: list[tuple[str, Any]],
        dense_docs: dict[str, Document],
        lexical_hits: list[tuple[str, float]],
        k: int,
        lexical: LexicalSearch,
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
            read = {_key(d): d for d in lexical.documents(unread)} if unread else {}
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

    # -- the whole pipeline ------------------------------------------------------------

    def _prepare(self, query: str, kwargs: dict[str, Any]) -> tuple[str, str | None, int]:
        """Check the call's query and k before any model runs; cut a long query."""
        k = valid_k(kwargs.get("k", self.k))
        query, note = clip_query(query, self.max_query_chars)
        return query, note, k

    def _retrieve(
        self, query: str, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> HyDEResult:
        query, note, k = self._prepare(query, kwargs)
        early = self._embed_query_early(query)
        lexical = None if self.n_hypotheses else self._start_lexical(query, (), k)
        start = time.perf_counter()
        written = self.write_hypotheses(query, self._child(run_manager, "hyde.hypothesis"))
        timings = {"hypothesis_s": time.perf_counter() - start}
        if self._lexical_before_embedding():
            lexical = self._start_lexical(query, written.texts, k)
        start = time.perf_counter()
        embed: RunnableLambda[list[float] | None, Embedded] = RunnableLambda(
            lambda vector: self.embed(query, written.texts, vector), name="hyde.embed"
        )
        with _settled(lexical):
            vector = early.result() if early else None
            if _observed(run_manager):
                embedded = embed.invoke(vector, self._child(run_manager, "hyde.embed"))
            else:  # nobody listens: the child run would only cost time
                embedded = self.embed(query, written.texts, vector)
            fused = self.fuse(embedded)
            check_dimension(self.vectorstore, len(fused.vectors[0]))
        timings["embedding_s"] = time.perf_counter() - start
        start = time.perf_counter()
        if self.n_hypotheses and not self._lexical_before_embedding():
            lexical = self._start_lexical(query, fused.kept_texts(written.texts), k)
        docs = self._search(fused, k, lexical)
        timings["search_s"] = time.perf_counter() - start
        return self._result(query, note, written, embedded, fused, docs, timings)

    async def _aretrieve(
        self, query: str, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> HyDEResult:
        query, note, k = self._prepare(query, kwargs)
        early = None
        if self._embeds_query_early():
            early = asyncio.ensure_future(
                run_in_executor(None, self.embedding_model.embed_query, query)
            )
        lexical = None if self.n_hypotheses else self._start_lexical(query, (), k)
        start = time.perf_counter()
        try:
            written = await self.awrite_hypotheses(
                query, self._child(run_manager, "hyde.hypothesis")
            )
        except BaseException:
            if early is not None:
                early.cancel()
            raise
        timings = {"hypothesis_s": time.perf_counter() - start}
        if self._lexical_before_embedding():
            lexical = self._start_lexical(query, written.texts, k)
        start = time.perf_counter()

        async def aembed(vector: list[float] | None) -> Embedded:
            return await run_in_executor(None, self.embed, query, written.texts, vector)

        embed = RunnableLambda(
            lambda vector: self.embed(query, written.texts, vector), afunc=aembed, name="hyde.embed"
        )
        with _settled(lexical):
            query_vector = await early if early is not None else None
            if _observed(run_manager):
                embedded = await embed.ainvoke(query_vector, self._child(run_manager, "hyde.embed"))
            else:  # nobody listens: the child run would only cost time
                embedded = await aembed(query_vector)
            fused = self.fuse(embedded)
            check_dimension(self.vectorstore, len(fused.vectors[0]))
        timings["embedding_s"] = time.perf_counter() - start
        start = time.perf_counter()
        if self.n_hypotheses and not self._lexical_before_embedding():
            lexical = self._start_lexical(query, fused.kept_texts(written.texts), k)
        docs = await run_in_executor(None, self._search, fused, k, lexical)
        timings["search_s"] = time.perf_counter() - start
        return self._result(query, note, written, embedded, fused, docs, timings)

    def _lexical_before_embedding(self) -> bool:
        """Whether the lexical query is known once the hypotheses are written.

        It is unless ``min_hypothesis_similarity`` may leave some out: that needs their
        vectors first.
        """
        return bool(self.n_hypotheses) and self.min_hypothesis_similarity is None

    def _embeds_query_early(self) -> bool:
        """Whether the query's own vector is used beside hypotheses (fused, or for the gate).

        Then it is computed while the hypotheses are being written; otherwise it is
        computed only if no hypothesis comes.
        """
        if not self.n_hypotheses or self.fusion == "concat":
            return False
        return self.include_query or self.min_hypothesis_similarity is not None

    def _embed_query_early(self, query: str) -> Future[list[float]] | None:
        """Start the query's embedding now if hypotheses are coming (it does not need them)."""
        if not self._embeds_query_early():
            return None
        context = contextvars.copy_context()
        return _EARLY.submit(context.run, self.embedding_model.embed_query, query)

    @staticmethod
    def _child(run_manager: Any, tag: str) -> RunnableConfig:
        return RunnableConfig(callbacks=run_manager.get_child(tag), tags=[tag], run_name=tag)

    def _fallback(self, written: Hypotheses, dropped: int) -> str | None:
        """Why the dense search used the query alone, if it did."""
        if not self.n_hypotheses:
            return None
        if written.fallback or not written.texts or dropped < len(written.texts):
            return written.fallback
        return (
            f"no hypothesis reached min_hypothesis_similarity={self.min_hypothesis_similarity}"
            " (cosine to the query): searched with the query alone"
        )

    def _result(
        self,
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
            documents=docs,
            label=self.label,
            fallback=self._fallback(written, fused.dropped),
            timings=timings,
            hypothesis_messages=written.messages,
            prompts=written.prompts,
            cache_hits=written.cache_hits,
            embedded_texts=_read_texts(query, embedded),
            search_vectors=fused.vectors,
            query_note=note,
            hypotheses_dropped=fused.dropped,
            lexical=self.lexical_search is not None and self.search_type == "similarity",
        )
        for doc in docs:
            doc.metadata["retrieval_mode"] = result.label
            if result.fallback:
                doc.metadata["hyde_fallback"] = result.fallback
            if note:
                doc.metadata["hyde_query_truncated"] = note
            if self.min_hypothesis_similarity is not None and written.texts:
                doc.metadata["hyde_hypotheses_dropped"] = fused.dropped
        return result


def _observed(run_manager: Any) -> bool:
    """Whether any callback handler (tracing, ``astream_events``, ...) sees this run."""
    return bool(run_manager.handlers or run_manager.inheritable_handlers)


@contextmanager
def _settled(pending: Future[Any] | None) -> Iterator[None]:
    """Cancel ``pending`` if the block fails (a started search then runs out unread)."""
    try:
        yield
    except BaseException:
        if pending is not None:
            pending.cancel()
        raise


def _read_texts(query: str, embedded: Embedded) -> list[str]:
    """Every text the embedding model read for one retrieval.

    ``embedded.texts``, and the query when it was embedded for the similarity gate only.
    """
    if embedded.query_vector is not None and len(embedded.vectors) == embedded.hypotheses:
        return [query, *embedded.texts]
    return list(embedded.texts)


def _key(doc: Document) -> str:
    return str(doc.id) if doc.id else doc.page_content


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
)


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
