"""`HyDEEmbeddings`: HyDE as an ``Embeddings``, for any vector store or retriever.

LangChain's ``HypotheticalDocumentEmbedder`` makes HyDE an embedding model: a query is
embedded as the mean of passages an LLM writes for it, documents are embedded as they
are. `HyDEEmbeddings` is the same idea with hyde_lc's parts, so it behaves like
`hyde_lc.HyDERetriever`'s dense side:

* the prompts of `hyde_lc.prompts` (names, LangChain's keys such as ``"sci_fact"``,
  ``{question}`` templates, ``PromptTemplate`` objects);
* the query itself takes part in the mean with weight ``query_weight``
  (`hyde_lc.retriever.DEFAULT_QUERY_WEIGHT`; ``None`` is the paper's equal weighting,
  `hyde_lc.fusion.fuse_mean`), from ``n_hypotheses`` passages;
* `hyde_lc.hypotheses.write_hypotheses` writes them: within ``timeout``, refusals and
  empty outputs left out, a failing LLM falling back to the plain query embedding
  (logged on the ``hyde_lc.hypotheses`` logger), a configuration error (rejected API
  key, unknown model) raised rather than silently turning HyDE off.

`HyDEEmbeddings.embed_query_with_details` also returns the hypotheses and why it fell
back, if it did. ``embed_documents`` is the base model's, unchanged, and ``model_id`` is
the base model's id, so a hyde_lc collection built with the base model is searched with
`HyDEEmbeddings` without complaint.

Hypotheses are generated without streaming their tokens and under the tag
``hyde.hypothesis``: an ``astream_events`` consumer does not mistake them for an answer.

Example:
    >>> from langchain_core.vectorstores import InMemoryVectorStore
    >>> from hyde_lc import HyDEEmbeddings, load_embeddings, load_llm
    >>> embeddings = HyDEEmbeddings.from_llm(
    ...     load_llm(role="hypothesis"), load_embeddings("local:minilm"), prompt="web_search"
    ... )  # doctest: +SKIP
    >>> store = InMemoryVectorStore.from_texts(["Fresnel lenses ..."], embeddings)  # doctest: +SKIP
    >>> store.similarity_search("Who invented the Fresnel lens?", k=1)  # doctest: +SKIP

"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from langchain_core.caches import BaseCache
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseLanguageModel
from langchain_core.prompts import BasePromptTemplate
from langchain_core.runnables import RunnableConfig
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from hyde_lc.errors import InvalidSettingError
from hyde_lc.fusion import fuse_mean
from hyde_lc.hypotheses import ConfigErrors, Hypotheses, awrite_hypotheses, write_hypotheses
from hyde_lc.models import embedding_model_id
from hyde_lc.prompts import DEFAULT_PROMPT, get_prompt
from hyde_lc.retriever import (
    DEFAULT_QUERY_WEIGHT,
    MAX_HYPOTHESES,
    MAX_QUERY_CHARS,
    _settings_message,
    clip_query,
)

HYPOTHESIS_TAG = "hyde.hypothesis"
"""The tag on every hypothesis call (as `hyde_lc.HyDERetriever` tags them)."""


@dataclass
class HyDEQueryEmbedding:
    """One query embedded by `HyDEEmbeddings`, with what went into its vector."""

    vector: list[float]
    """The fused vector (what ``embed_query`` returns)."""
    query: str
    """The query embedded (cut to ``max_query_chars`` if it was longer)."""
    hypotheses: list[str] = field(default_factory=list)
    """The passages averaged in (none when it fell back)."""
    fallback: str | None = None
    """Why the plain query embedding was used, if it was."""
    weights: list[float] | None = None
    """The weights of [query, *hypotheses] in the mean (None: equal)."""
    query_note: str | None = None
    """Set when the query was truncated."""


class HyDEEmbeddings(BaseModel, Embeddings):
    """Embeddings that embed a query as the mean of it and LLM-written passages (HyDE).

    A drop-in for LangChain's ``HypotheticalDocumentEmbedder``: hand it to any vector
    store; ``embed_documents`` is the base model's.

    Example:
        >>> from langchain_core.embeddings import DeterministicFakeEmbedding
        >>> from langchain_core.language_models import FakeListChatModel
        >>> embeddings = HyDEEmbeddings.from_llm(
        ...     FakeListChatModel(responses=["Augustin Fresnel built the first one."]),
        ...     DeterministicFakeEmbedding(size=8),
        ...     prompt="web_search",
        ... )
        >>> len(embeddings.embed_query("Who invented the Fresnel lens?"))
        8

    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    llm: BaseLanguageModel
    """Writes the hypothetical passages."""
    base_embeddings: Embeddings
    """Embeds the query, the passages and the documents."""
    prompt: str | list[str] | BasePromptTemplate = DEFAULT_PROMPT
    """Prompt name (or LangChain key such as ``"sci_fact"``), ``{question}`` template or
    ``PromptTemplate``; a list gives ``n_hypotheses`` passages per prompt."""
    n_hypotheses: int = 1
    """Passages written per prompt (1 to `hyde_lc.retriever.MAX_HYPOTHESES`)."""
    include_query: bool = True
    """Whether the query's own embedding takes part in the mean (the paper: yes)."""
    query_weight: float | None = DEFAULT_QUERY_WEIGHT
    """The query's share of the mean, between 0 and 1 (None: the paper's equal weights)."""
    hypothesis_length: int | None = None
    """Optional hint to the writer: about this many characters."""
    timeout: float | None = 120.0
    """Seconds to wait for the passages before falling back to the plain query."""
    hypothesis_cache: BaseCache | None = None
    """Optional cache of passages (e.g. `hyde_lc.hypothesis_cache.HypothesisCache`)."""
    max_query_chars: int | None = MAX_QUERY_CHARS
    """Longer queries are cut to this many characters; None never cuts."""
    config_errors: ConfigErrors = "raise"
    """``raise``: a misconfigured LLM (rejected key, unknown model) raises; ``fallback``
    treats it like any other failure and embeds the plain query."""

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise InvalidSettingError(_settings_message(type(self), exc)) from None

    @classmethod
    def from_llm(
        cls,
        llm: BaseLanguageModel,
        base_embeddings: Embeddings,
        prompt: str | list[str] | BasePromptTemplate | None = None,
        *,
        prompt_key: str | None = None,
        custom_prompt: BasePromptTemplate | None = None,
        **kwargs: Any,
    ) -> HyDEEmbeddings:
        """HyDE embeddings from a writer LLM and the base embedding model.

        ``prompt`` as for `hyde_lc.HyDERetriever`. ``prompt_key`` and ``custom_prompt`` are
        accepted for code written for LangChain's ``HypotheticalDocumentEmbedder.from_llm``
        (its templates fill in ``{question}``, lower case). Other keyword arguments set
        the fields (``n_hypotheses``, ``query_weight``, ``timeout``, ...).
        """
        given = [p for p in (prompt, prompt_key, custom_prompt) if p is not None]
        if len(given) > 1:
            raise InvalidSettingError(
                "give the prompt once: prompt=..., prompt_key=... or custom_prompt=..."
            )
        if given:
            kwargs["prompt"] = given[0]
        return cls(llm=llm, base_embeddings=base_embeddings, **kwargs)

    # -- validation ------------------------------------------------------------------

    @field_validator("n_hypotheses")
    @classmethod
    def _check_n(cls, value: int) -> int:
        if not 1 <= value <= MAX_HYPOTHESES:
            raise InvalidSettingError(
                f"n_hypotheses must be between 1 and {MAX_HYPOTHESES}, got {value}: each "
                "hypothesis is one more generation (for no hypotheses, use the base "
                "embeddings themselves)"
            )
        return value

    @field_validator("prompt")
    @classmethod
    def _check_prompt(cls, value: Any) -> Any:
        items = value if isinstance(value, list) else [value]
        if not items:
            raise InvalidSettingError("prompt needs at least one prompt name or template")
        for item in items:
            get_prompt(item)  # raises naming the valid names, or {question}
        return value

    @model_validator(mode="after")
    def _check_combination(self) -> HyDEEmbeddings:
        if self.timeout is not None and not 0 < self.timeout < float("inf"):
            raise InvalidSettingError(
                f"timeout must be a positive number of seconds or None, got {self.timeout}"
            )
        if self.max_query_chars is not None and self.max_query_chars < 1:
            raise InvalidSettingError(
                f"max_query_chars must be at least 1 (or None for no limit), got "
                f"{self.max_query_chars}"
            )
        if self.query_weight is not None:
            if not 0 < self.query_weight < 1:
                raise InvalidSettingError(
                    f"query_weight must lie strictly between 0 and 1, got {self.query_weight} "
                    "(for 0 set include_query=False)"
                )
            if not self.include_query:
                if "query_weight" in self.model_fields_set:
                    raise InvalidSettingError(
                        "query_weight needs include_query=True: leave query_weight unset"
                    )
                self.query_weight = None
        return self

    # -- identity ----------------------------------------------------------------------

    @property
    def model_id(self) -> str:
        """The base model's id: the vectors live in its space (`hyde_lc.store` checks it)."""
        return embedding_model_id(self.base_embeddings)

    @property
    def dimension(self) -> int | None:
        """The base model's vector length, when it states one."""
        for attr in ("dimension", "dimensions"):
            value = getattr(self.base_embeddings, attr, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        return None

    # -- the steps ---------------------------------------------------------------------

    def build_prompts(self, query: str) -> list[str]:
        """The rendered prompts: ``n_hypotheses`` per configured prompt."""
        names = self.prompt if isinstance(self.prompt, list) else [self.prompt]
        rendered = [get_prompt(n).render(query, self.hypothesis_length) for n in names]
        return [p for p in rendered for _ in range(self.n_hypotheses)]

    def _config(self) -> RunnableConfig:
        return RunnableConfig(tags=[HYPOTHESIS_TAG], run_name=HYPOTHESIS_TAG)

    def _weights(self, count: int) -> list[float] | None:
        """Weights of [query, *hypotheses] by ``query_weight`` (None: all equal)."""
        if self.query_weight is None or count < 2:
            return None
        return [self.query_weight] + [(1 - self.query_weight) / (count - 1)] * (count - 1)

    def _fuse(
        self,
        query: str,
        note: str | None,
        written: Hypotheses,
        query_vector: list[float] | None,
        vectors: list[list[float]],
    ) -> HyDEQueryEmbedding:
        if not written.texts:
            assert query_vector is not None
            return HyDEQueryEmbedding(query_vector, query, [], written.fallback, None, note)
        if self.include_query:
            assert query_vector is not None
            vectors = [query_vector, *vectors]
        weights = self._weights(len(vectors)) if self.include_query else None
        return HyDEQueryEmbedding(
            fuse_mean(vectors, weights), query, written.texts, None, weights, note
        )

    def embed_query_with_details(self, text: str) -> HyDEQueryEmbedding:
        """Embed a query (see `embed_query`) and say what went into the vector."""
        query, note = clip_query(text, self.max_query_chars)
        written = write_hypotheses(
            self.llm,
            self.build_prompts(query),
            config=self._config(),
            timeout=self.timeout,
            cache=self.hypothesis_cache,
            config_errors=self.config_errors,
        )
        query_vector = None
        if self.include_query or not written.texts:
            query_vector = self.base_embeddings.embed_query(query)
        vectors = self.base_embeddings.embed_documents(written.texts) if written.texts else []
        return self._fuse(query, note, written, query_vector, vectors)

    async def aembed_query_with_details(self, text: str) -> HyDEQueryEmbedding:
        """Async `embed_query_with_details`: the query is embedded while passages are written."""
        query, note = clip_query(text, self.max_query_chars)
        early = asyncio.ensure_future(self.base_embeddings.aembed_query(query))
        try:
            written = await awrite_hypotheses(
                self.llm,
                self.build_prompts(query),
                config=self._config(),
                timeout=self.timeout,
                cache=self.hypothesis_cache,
                config_errors=self.config_errors,
            )
        except BaseException:
            early.cancel()
            raise
        query_vector = await early
        vectors = (
            await self.base_embeddings.aembed_documents(written.texts) if written.texts else []
        )
        return self._fuse(query, note, written, query_vector, vectors)

    # -- Embeddings ----------------------------------------------------------------------

    def embed_query(self, text: str) -> list[float]:
        """The query's HyDE vector: the weighted mean of it and the passages written for it.

        Falls back to the query's own embedding when no usable passage comes back (see
        the module docstring); raises `hyde_lc.errors.InvalidQueryError` for an empty
        query.
        """
        return self.embed_query_with_details(text).vector

    async def aembed_query(self, text: str) -> list[float]:
        """Async `embed_query`."""
        return (await self.aembed_query_with_details(text)).vector

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """The base model's document embeddings, unchanged."""
        return self.base_embeddings.embed_documents(texts)

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        """Async `embed_documents`."""
        return await self.base_embeddings.aembed_documents(texts)
