"""The HyDE transform: question -> hypotheses -> embeddings -> search vector(s).

One unit, used by `hyde_lc.HyDERetriever` (whose dense side it is) and by
`hyde_lc.HyDEEmbeddings` (which is nothing else), so both write, embed and fuse alike::

    question --write-->  N passages (the hypothesis LLM; cache first, within a timeout)
             --embed-->  vectors of the texts the fusion needs (the query's may come early)
             --fuse-->   one search vector (mean | concat), or one per text (rrf)

Each step is a method (`HyDETransform.write`, `embed`, `fuse`), so callers that overlap
other work with a step (the retriever starts its BM25 search while the vectors are being
made) compose them; `HyDETransform.run` and `arun` run the three in order. The settings
are checked when a transform is made, so a retriever whose fields were changed after
construction is checked again at its next call.

Example:
    >>> from langchain_core.embeddings import DeterministicFakeEmbedding
    >>> from langchain_core.language_models import FakeListChatModel
    >>> transform = HyDETransform(
    ...     DeterministicFakeEmbedding(size=8),
    ...     llm=FakeListChatModel(responses=["Fresnel built the first lens in 1823."]),
    ... )
    >>> written, embedded, fused = transform.run("Who invented the Fresnel lens?")
    >>> written.texts, len(embedded.vectors), len(fused.vectors[0])
    (['Fresnel built the first lens in 1823.'], 2, 8)

"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal

from langchain_core.caches import BaseCache
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseLanguageModel
from langchain_core.prompts import BasePromptTemplate
from langchain_core.runnables import RunnableConfig

from hyde_lc.core.fusion import FUSION_MODES, Fused, concat_text, fuse_mean, similar_enough
from hyde_lc.core.language import without_lone_surrogates
from hyde_lc.errors import InvalidQueryError, InvalidSettingError
from hyde_lc.hyde.hypotheses import ConfigErrors, Hypotheses, awrite_hypotheses, write_hypotheses
from hyde_lc.hyde.prompts import DEFAULT_PROMPT, get_prompt

logger = logging.getLogger(__name__)

Fusion = Literal["mean", "concat", "rrf"]

DEFAULT_QUERY_WEIGHT = 0.8
"""The query's share of the dense fusion by default, chosen on SciFact train and confirmed
once on test with the default local writer (BENCHMARKS.md): the paper's equal weighting
(``query_weight=None``) lets a small writer's hypothesis pull the search off the question."""

MAX_HYPOTHESES = 64
"""The most hypotheses per prompt: generation cost grows with each one (about 2-10 s each
on 2 cores with the default local writer), and their mean stops moving long before."""

PromptSetting = str | list[str] | BasePromptTemplate[Any]
"""A prompt name, ``{question}`` template or LangChain template, or a list of them."""


# -- the query ------------------------------------------------------------------------


MAX_QUERY_CHARS = 4000
"""Longest query used as-is: about 1,000 tokens of English, so the hypothesis prompt and
the answer prompt stay well inside a 4,096-token local context window."""


def clip_query(query: str, max_chars: int | None = MAX_QUERY_CHARS) -> tuple[str, str | None]:
    r"""Check a query and cut it to ``max_chars``; returns the query and a note if it changed.

    Raises `InvalidQueryError` for an empty query, or for anything that is not a string
    (saying what was given instead). Lone surrogates (not valid Unicode: models and
    stores refuse them) are replaced with U+FFFD, said in the note and in a warning.

    Example:
        >>> clip_query("x" * 5000)[1]
        "query truncated from 5000 to 4000 characters to fit the models' context windows"
        >>> clip_query("lens \ud800?")
        ('lens \ufffd?', 'query held 1 lone surrogate (not valid Unicode), replaced with U+FFFD')

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
    query, replaced = without_lone_surrogates(query)
    notes = []
    if replaced:
        notes.append(
            f"query held {replaced} lone surrogate{'s' if replaced > 1 else ''} (not valid "
            "Unicode), replaced with U+FFFD"
        )
        logger.warning("%s", notes[0])
    if max_chars is not None and len(query) > max_chars:
        notes.append(
            f"query truncated from {len(query)} to {max_chars} characters to fit the models' "
            "context windows"
        )
        query = query[:max_chars]
    return query, "; ".join(notes) or None


# -- what the steps return ---------------------------------------------------------------


@dataclass
class Embedded:
    """What `HyDETransform.embed` embedded: the texts and their vectors, in order.

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

    def read_texts(self, query: str) -> list[str]:
        """Every text the embedding model read (for token accounting).

        ``texts``, and the query when it was embedded for the similarity gate only.
        """
        if self.query_vector is not None and len(self.vectors) == self.hypotheses:
            return [query, *self.texts]
        return list(self.texts)


# -- the settings' checks, shared with the classes that carry them as fields --------------


def check_fusion(value: Any) -> Any:
    """``value`` if it is a fusion mode, else `InvalidSettingError` naming the modes."""
    if value not in FUSION_MODES:
        raise InvalidSettingError(
            f"unknown fusion {value!r}: choose one of {', '.join(FUSION_MODES)}"
        )
    return value


def check_n_hypotheses(value: Any, *, least: int = 0) -> int:
    """``value`` if it is a hypothesis count from ``least`` to `MAX_HYPOTHESES`."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not least <= value <= MAX_HYPOTHESES
    ):
        lowest = "0 (no LLM)" if least == 0 else str(least)
        raise InvalidSettingError(
            f"n_hypotheses must be between {lowest} and {MAX_HYPOTHESES}, got {value}: "
            "each hypothesis is one more generation"
            + ("" if least == 0 else " (for no hypotheses, use the base embeddings themselves)")
        )
    return value


def check_prompt(value: Any) -> Any:
    """``value`` if every prompt in it resolves (`hyde_lc.hyde.prompts.get_prompt`)."""
    items = value if isinstance(value, list) else [value]
    if not items:
        raise InvalidSettingError("prompt needs at least one prompt name or template")
    for item in items:
        get_prompt(item)  # raises naming the valid names, or the template's variable
    return value


def check_max_query_chars(value: int | None) -> int | None:
    """``value`` if it is None or at least 1 (characters of a query used as-is)."""
    if value is not None and value < 1:
        raise InvalidSettingError(
            f"max_query_chars must be at least 1 (or None for no limit), got {value}"
        )
    return value


def check_timeout(value: float | None) -> float | None:
    """``value`` if it is None or a positive, finite number of seconds."""
    if value is not None and not 0 < value < math.inf:
        raise InvalidSettingError(
            f"timeout must be a positive number of seconds or None, got {value}"
        )
    return value


def check_query_weight(value: float | None) -> float | None:
    """``value`` if it is None or strictly between 0 and 1."""
    if value is not None and not 0 < value < 1:
        raise InvalidSettingError(
            f"query_weight must lie strictly between 0 and 1, got {value} "
            "(for 0 set include_query=False; for 1 set n_hypotheses=0, or use the base "
            "embeddings alone)"
        )
    return value


def check_gate(value: float | None, fusion: str) -> float | None:
    """``value`` if it is None or a cosine similarity usable with ``fusion``."""
    if value is None:
        return None
    if not -1 <= value <= 1:
        raise InvalidSettingError(
            f"min_hypothesis_similarity is a cosine similarity between -1 and 1, got {value}"
        )
    if fusion == "concat":
        raise InvalidSettingError(
            "min_hypothesis_similarity needs each hypothesis embedded on its own: use "
            "fusion='mean' or 'rrf', or leave min_hypothesis_similarity=None"
        )
    return value


# -- the transform -----------------------------------------------------------------------


@dataclass(frozen=True)
class HyDETransform:
    """Write hypothetical passages for a question and turn them into search vectors.

    ``llm`` writes ``n_hypotheses`` passages per prompt in ``prompt``; ``embeddings``
    embeds them (and the query); ``fusion`` makes the dense search vector(s). Without an
    ``llm`` (or with ``n_hypotheses=0``) the query alone is embedded.

    Example:
        >>> from langchain_core.embeddings import DeterministicFakeEmbedding
        >>> transform = HyDETransform(DeterministicFakeEmbedding(size=4), n_hypotheses=0)
        >>> transform.fuse(transform.embed("a question", [])).vectors == [
        ...     DeterministicFakeEmbedding(size=4).embed_query("a question")]
        True

    """

    embeddings: Embeddings
    llm: BaseLanguageModel[Any] | None = None
    prompt: PromptSetting = DEFAULT_PROMPT
    n_hypotheses: int = 1
    hypothesis_length: int | None = None
    """Optional hint to the writer: about this many characters."""
    timeout: float | None = 120.0
    """Seconds to wait for the passages, loading the writer included, before falling back to
    the plain query (a llama.cpp load already under way runs to its end: see
    `hyde_lc.hyde.hypotheses`)."""
    cache: BaseCache | None = None
    config_errors: ConfigErrors = "raise"
    """``raise``: a misconfigured LLM (rejected key, unknown model) raises; ``fallback``
    treats it like any other failure."""
    fusion: Fusion = "mean"
    include_query: bool = True
    """Whether the query's own embedding takes part in the fusion (the paper: yes)."""
    query_weight: float | None = DEFAULT_QUERY_WEIGHT
    """The query's share of the fusion (None: the paper's equal weighting). Applies where
    the query is fused (``mean`` or ``rrf`` with ``include_query``)."""
    min_similarity: float | None = None
    """Adaptive HyDE: hypotheses less similar (cosine) to the query are left out."""

    @classmethod
    def from_fields(cls, owner: Any, embeddings: Embeddings, **given: Any) -> HyDETransform:
        """A transform with the settings ``owner`` has under the same names, and ``given``.

        What ``owner`` (a retriever, an embeddings object) does not have keeps its default.
        """
        names = {f.name for f in fields(cls)} - {"embeddings", *given}
        found = {name: getattr(owner, name) for name in names if hasattr(owner, name)}
        return cls(embeddings, **found, **given)

    def __post_init__(self) -> None:
        check_fusion(self.fusion)
        check_n_hypotheses(self.n_hypotheses)
        check_prompt(self.prompt)
        check_timeout(self.timeout)
        check_query_weight(self.query_weight)
        check_gate(self.min_similarity, self.fusion)
        if self.n_hypotheses and self.llm is None:
            raise InvalidSettingError(
                "n_hypotheses > 0 needs a hypothesis_llm (or set n_hypotheses=0)"
            )

    @property
    def writes(self) -> bool:
        """Whether hypotheses are written at all."""
        return bool(self.n_hypotheses)

    # -- step 1: hypotheses ------------------------------------------------------------

    def build_prompts(self, query: str) -> list[str]:
        """The rendered prompts: ``n_hypotheses`` per configured prompt."""
        names = self.prompt if isinstance(self.prompt, list) else [self.prompt]
        rendered = [get_prompt(n).render(query, self.hypothesis_length) for n in names]
        return [p for p in rendered for _ in range(self.n_hypotheses)]

    def _writing(
        self, query: str, config: RunnableConfig | None
    ) -> tuple[BaseLanguageModel[Any], list[str], dict[str, Any]] | None:
        """The writer, its prompts and the options for ``query`` (None: nothing is written)."""
        if not self.writes:
            return None
        assert self.llm is not None  # checked when made
        options = {
            "config": config,
            "timeout": self.timeout,
            "cache": self.cache,
            "config_errors": self.config_errors,
        }
        return self.llm, self.build_prompts(query), options

    def write(self, query: str, config: RunnableConfig | None = None) -> Hypotheses:
        """Step 1: write the hypotheses (concurrently, cache first, within ``timeout``)."""
        request = self._writing(query, config)
        if request is None:
            return Hypotheses([], [])
        llm, prompts, options = request
        return write_hypotheses(llm, prompts, **options)

    async def awrite(self, query: str, config: RunnableConfig | None = None) -> Hypotheses:
        """Async `write`: the generations are awaited together."""
        request = self._writing(query, config)
        if request is None:
            return Hypotheses([], [])
        llm, prompts, options = request
        return await awrite_hypotheses(llm, prompts, **options)

    # -- step 2: embeddings ------------------------------------------------------------

    @property
    def embeds_query_early(self) -> bool:
        """Whether the query's own vector is used beside hypotheses (fused, or for the gate).

        Then a caller can compute it while the hypotheses are being written (it does not
        depend on them) and hand it to `embed`.
        """
        if not self.writes or self.fusion == "concat":
            return False
        return self.include_query or self.min_similarity is not None

    def _needs_query_vector(self, hypotheses: Sequence[str]) -> bool:
        return not hypotheses or (self.fusion != "concat" and self.embeds_query_early)

    def embed(
        self, query: str, hypotheses: Sequence[str], query_vector: list[float] | None = None
    ) -> Embedded:
        """Step 2: embed what the fusion needs (the hypotheses in one batch).

        ``query_vector``, when given, is the query's embedding computed earlier.
        """
        hypotheses = list(hypotheses)
        if hypotheses and self.fusion == "concat":
            text = concat_text(query if self.include_query else None, hypotheses)
            return Embedded([text], [self.embeddings.embed_query(text)], hypotheses=len(hypotheses))
        if query_vector is None and self._needs_query_vector(hypotheses):
            query_vector = self.embeddings.embed_query(query)
        vectors = self.embeddings.embed_documents(hypotheses) if hypotheses else []
        return self._embedded(query, hypotheses, vectors, query_vector)

    async def aembed(
        self, query: str, hypotheses: Sequence[str], query_vector: list[float] | None = None
    ) -> Embedded:
        """Async `embed`, through the embedding model's own async methods."""
        hypotheses = list(hypotheses)
        if hypotheses and self.fusion == "concat":
            text = concat_text(query if self.include_query else None, hypotheses)
            vector = await self.embeddings.aembed_query(text)
            return Embedded([text], [vector], hypotheses=len(hypotheses))
        if query_vector is None and self._needs_query_vector(hypotheses):
            query_vector = await self.embeddings.aembed_query(query)
        vectors = await self.embeddings.aembed_documents(hypotheses) if hypotheses else []
        return self._embedded(query, hypotheses, vectors, query_vector)

    def _embedded(
        self,
        query: str,
        hypotheses: list[str],
        vectors: list[list[float]],
        query_vector: list[float] | None,
    ) -> Embedded:
        texts, out = list(hypotheses), list(vectors)
        if query_vector is not None and (self.include_query or not hypotheses):
            texts, out = [query, *texts], [query_vector, *out]
        return Embedded(texts, out, query_vector, hypotheses=len(hypotheses))

    # -- step 3: fusion ----------------------------------------------------------------

    def fuse(self, embedded: Embedded) -> Fused:
        """Step 3: the dense search vector(s) made of `Embedded`.

        The weighted mean, the concat vector, or one vector per ranking for ``rrf``;
        hypotheses below ``min_similarity`` are left out first.
        """
        if not embedded.hypotheses or self.fusion == "concat":
            return Fused(embedded.vectors[:1])
        with_query = len(embedded.vectors) > embedded.hypotheses
        hypotheses = embedded.vectors[-embedded.hypotheses :]
        dropped = 0
        kept: list[int] | None = None
        if self.min_similarity is not None and embedded.query_vector is not None:
            kept = similar_enough(embedded.query_vector, hypotheses, self.min_similarity)
            dropped = len(hypotheses) - len(kept)
            hypotheses = [hypotheses[i] for i in kept]
            if not hypotheses:
                return Fused([embedded.query_vector], dropped=dropped, kept=kept)
        vectors = ([embedded.vectors[0]] if with_query else []) + hypotheses
        weights = self.weights(len(vectors), with_query)
        if self.fusion == "mean":
            return Fused([fuse_mean(vectors, weights)], weights, dropped=dropped, kept=kept)
        return Fused(vectors, weights, dropped=dropped, kept=kept)

    def weights(self, count: int, with_query: bool) -> list[float] | None:
        """Weights of [query, *hypotheses] by ``query_weight`` (None: all equal)."""
        if self.query_weight is None or not with_query or count < 2:
            return None
        return [self.query_weight] + [(1 - self.query_weight) / (count - 1)] * (count - 1)

    def fallback(self, written: Hypotheses, fused: Fused) -> str | None:
        """Why the dense search used the query alone, if it did."""
        if not self.writes:
            return None
        if written.fallback or not written.texts or fused.dropped < len(written.texts):
            return written.fallback
        return (
            f"no hypothesis reached min_hypothesis_similarity={self.min_similarity}"
            " (cosine to the query): searched with the query alone"
        )

    # -- all three ---------------------------------------------------------------------

    def run(
        self, query: str, config: RunnableConfig | None = None
    ) -> tuple[Hypotheses, Embedded, Fused]:
        """Write, embed and fuse, in order."""
        written = self.write(query, config)
        embedded = self.embed(query, written.texts)
        return written, embedded, self.fuse(embedded)

    async def arun(
        self, query: str, config: RunnableConfig | None = None
    ) -> tuple[Hypotheses, Embedded, Fused]:
        """Async `run`: the query is embedded while the hypotheses are being written."""
        early = (
            asyncio.ensure_future(self.embeddings.aembed_query(query))
            if self.embeds_query_early
            else None
        )
        try:
            written = await self.awrite(query, config)
        except BaseException:
            if early is not None:
                early.cancel()
            raise
        query_vector = await early if early is not None else None
        embedded = await self.aembed(query, written.texts, query_vector)
        return written, embedded, self.fuse(embedded)
