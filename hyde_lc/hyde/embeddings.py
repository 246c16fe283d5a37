"""`HyDEEmbeddings`: HyDE as an ``Embeddings``, for any vector store or retriever.

LangChain's ``HypotheticalDocumentEmbedder`` makes HyDE an embedding model: a query is
embedded as the mean of passages an LLM writes for it, documents are embedded as they
are. `HyDEEmbeddings` is the same idea with hyde_lc's parts, so it behaves like
`hyde_lc.HyDERetriever`'s dense side:

* the prompts of `hyde_lc.hyde.prompts` (names, LangChain's keys such as ``"sci_fact"``,
  ``{question}`` templates, ``PromptTemplate`` objects);
* the query itself takes part in the mean with weight ``query_weight``
  (`hyde_lc.retrievers.hyde.DEFAULT_QUERY_WEIGHT`; ``None`` is the paper's equal weighting,
  `hyde_lc.core.fusion.fuse_mean`), from ``n_hypotheses`` passages;
* `hyde_lc.hyde.transform.HyDETransform` writes, embeds and fuses them, the same unit
  as the retriever's dense side: passages within ``timeout``, refusals and empty outputs
  left out, a failing LLM falling back to the plain query embedding
  (logged on the ``hyde_lc.hyde.hypotheses`` logger), a configuration error (rejected API
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

from dataclasses import dataclass, field
from typing import Annotated, Any

from langchain_core.caches import BaseCache
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseLanguageModel
from langchain_core.prompts import BasePromptTemplate
from langchain_core.runnables import RunnableConfig
from pydantic import AfterValidator, PrivateAttr, model_validator

from hyde_lc.core.checked import CheckedModel
from hyde_lc.core.fusion import Fused
from hyde_lc.errors import InvalidSettingError
from hyde_lc.hyde.hypotheses import ConfigErrors, Hypotheses
from hyde_lc.hyde.prompts import DEFAULT_PROMPT
from hyde_lc.hyde.transform import (
    DEFAULT_QUERY_WEIGHT,
    MAX_QUERY_CHARS,
    HyDETransform,
    check_max_query_chars,
    check_n_hypotheses,
    check_prompt,
    check_query_weight,
    check_timeout,
    clip_query,
)
from hyde_lc.models.loading import embedding_model_id
from hyde_lc.models.portable import portable_model

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
    """Set when the query was cut, or lone surrogates in it replaced."""


class HyDEEmbeddings(CheckedModel, Embeddings):
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

    # unparametrised: pydantic checks instances against the class itself
    llm: BaseLanguageModel  # type: ignore[type-arg]
    """Writes the hypothetical passages."""
    base_embeddings: Embeddings
    """Embeds the query, the passages and the documents."""
    prompt: Annotated[
        str | list[str] | BasePromptTemplate,  # type: ignore[type-arg]
        AfterValidator(check_prompt),
    ] = DEFAULT_PROMPT
    """Prompt name (or LangChain key such as ``"sci_fact"``), one-variable template string
    or ``PromptTemplate`` (LangChain's ``PROMPT_MAP`` templates too); a list gives
    ``n_hypotheses`` passages per prompt."""
    n_hypotheses: Annotated[int, AfterValidator(lambda n: check_n_hypotheses(n, least=1))] = 1
    """Passages written per prompt (1 to `hyde_lc.hyde.transform.MAX_HYPOTHESES`)."""
    include_query: bool = True
    """Whether the query's own embedding takes part in the mean (the paper: yes)."""
    query_weight: float | None = DEFAULT_QUERY_WEIGHT
    """The query's share of the mean, between 0 and 1 (None: the paper's equal weights)."""
    hypothesis_length: int | None = None
    """Optional hint to the writer: about this many characters."""
    timeout: Annotated[float | None, AfterValidator(check_timeout)] = 120.0
    """Seconds to wait for the passages, loading the writer included, before falling back to
    the plain query (a llama.cpp load already under way runs to its end: see
    `hyde_lc.hyde.hypotheses`)."""
    hypothesis_cache: BaseCache | None = None
    """Optional cache of passages (e.g. `hyde_lc.hyde.hypothesis_cache.HypothesisCache`)."""
    max_query_chars: Annotated[int | None, AfterValidator(check_max_query_chars)] = MAX_QUERY_CHARS
    """Longer queries are cut to this many characters; None never cuts."""
    config_errors: ConfigErrors = "raise"
    """``raise``: a misconfigured LLM (rejected key, unknown model) raises; ``fallback``
    treats it like any other failure and embeds the plain query."""

    _transform: HyDETransform = PrivateAttr()

    @classmethod
    def from_llm(
        cls,
        llm: BaseLanguageModel[Any],
        base_embeddings: Embeddings,
        prompt: str | list[str] | BasePromptTemplate[Any] | None = None,
        *,
        prompt_key: str | None = None,
        custom_prompt: BasePromptTemplate[Any] | None = None,
        **kwargs: Any,
    ) -> HyDEEmbeddings:
        """HyDE embeddings from a writer LLM and the base embedding model.

        ``prompt`` as for `hyde_lc.HyDERetriever`. ``prompt_key`` and ``custom_prompt`` are
        accepted for code written for LangChain's ``HypotheticalDocumentEmbedder.from_llm``
        (its ``PROMPT_MAP`` templates, with their ``{QUESTION}``, work as they are). Other
        keyword arguments set
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

    @model_validator(mode="after")
    def _check_combination(self) -> HyDEEmbeddings:
        check_query_weight(self.query_weight)
        if self.query_weight is not None and not self.include_query:
            if "query_weight" in self.model_fields_set:
                raise InvalidSettingError(
                    "query_weight needs include_query=True: leave query_weight unset"
                )
            self.__dict__["query_weight"] = None  # the default applies where the query is fused
        self._transform = HyDETransform.from_fields(
            self, self.base_embeddings, cache=self.hypothesis_cache
        )
        return self

    # -- another process: the settings travel, the transform is made again there -------

    def __getstate__(self) -> dict[Any, Any]:
        """The fields (models as their settings: `hyde_lc.models.portable`), no transform.

        A remote model's API key travels as its object holds it, in clear text inside the
        pickle; local models' weights are loaded where it is unpickled, at first use.
        """
        state = super().__getstate__()
        state["__dict__"] = {
            name: portable_model(value) if name in ("llm", "base_embeddings") else value
            for name, value in state["__dict__"].items()
        }
        private = state.get("__pydantic_private__") or {}
        state["__pydantic_private__"] = {k: v for k, v in private.items() if k != "_transform"}
        return state

    def __setstate__(self, state: dict[Any, Any]) -> None:
        super().__setstate__(state)
        self._transform = HyDETransform.from_fields(
            self, self.base_embeddings, cache=self.hypothesis_cache
        )

    # -- identity ----------------------------------------------------------------------

    @property
    def model_id(self) -> str:
        """The base model's id: the vectors live in its space (the collection records it)."""
        return embedding_model_id(self.base_embeddings)

    @property
    def dimension(self) -> int | None:
        """The base model's vector length, when it states one."""
        for attr in ("dimension", "dimensions"):
            value = getattr(self.base_embeddings, attr, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        return None

    # -- the steps: the HyDE transform the retriever uses too -------------------------

    @property
    def hyde_transform(self) -> HyDETransform:
        """The HyDE transform these settings make (`hyde_lc.hyde.transform`), always a mean.

        Made when the settings are given, and again when one is assigned.
        """
        return self._transform

    def build_prompts(self, query: str) -> list[str]:
        """The rendered prompts: ``n_hypotheses`` per configured prompt."""
        return self.hyde_transform.build_prompts(query)

    def _config(self) -> RunnableConfig:
        return RunnableConfig(tags=[HYPOTHESIS_TAG], run_name=HYPOTHESIS_TAG)

    def _details(
        self, query: str, note: str | None, written: Hypotheses, fused: Fused
    ) -> HyDEQueryEmbedding:
        hypotheses = written.texts
        return HyDEQueryEmbedding(
            fused.vectors[0],
            query,
            hypotheses,
            None if hypotheses else written.fallback,
            fused.weights if hypotheses else None,
            note,
        )

    def embed_query_with_details(self, text: str) -> HyDEQueryEmbedding:
        """Embed a query (see `embed_query`) and say what went into the vector."""
        query, note = clip_query(text, self.max_query_chars)
        written, _, fused = self.hyde_transform.run(query, self._config())
        return self._details(query, note, written, fused)

    async def aembed_query_with_details(self, text: str) -> HyDEQueryEmbedding:
        """Async `embed_query_with_details`: the query is embedded while passages are written."""
        query, note = clip_query(text, self.max_query_chars)
        written, _, fused = await self.hyde_transform.arun(query, self._config())
        return self._details(query, note, written, fused)

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
