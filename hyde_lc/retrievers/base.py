"""`DetailedRetriever`: a LangChain retriever whose runs can also return what they did.

A retrieval here is a *plan*: a generator that yields the steps that may wait (an LLM
call, an embedding, a store read) and receives their results. `run_plan` runs it in
the calling thread; `arun_plan` runs the same plan under asyncio, awaiting each step's
async form (or running a blocking one in the executor). So ``invoke`` and ``ainvoke``
run one pipeline, written once.

``invoke`` and ``ainvoke`` are LangChain's own (`BaseRetriever`'s run, callbacks, tracing,
run ids); `DetailedRetriever.retrieve_with_details` runs the same ``invoke`` and returns
the whole `HyDEResult`: hypotheses, timings, the vectors searched, besides the documents.

Example:
    >>> from hyde_lc.retrievers.hyde import HyDERetriever
    >>> issubclass(HyDERetriever, DetailedRetriever)
    True

"""

from __future__ import annotations

import asyncio
from abc import abstractmethod
from collections.abc import Awaitable, Callable, Generator, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Generic, TypeVar

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseLanguageModel
from langchain_core.messages import BaseMessage
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import run_in_executor
from langchain_core.vectorstores import VectorStore
from pydantic import AfterValidator, ConfigDict, PrivateAttr

from hyde_lc.core.checked import CheckedModel
from hyde_lc.core.chunks import RetrievedChunk
from hyde_lc.errors import HydeLcError, InvalidSettingError, StoreUnavailableError
from hyde_lc.models.portable import portable_model
from hyde_lc.search.backend import SearchBackend
from hyde_lc.search.feedback import Feedback
from hyde_lc.search.hybrid import in_background
from hyde_lc.store.portable import portable_store

T = TypeVar("T")

# -- what a retrieval returns ---------------------------------------------------------

PART_TIMINGS = frozenset({"writer_load_s"})
"""`HyDEResult.timings` keys that are part of another stage's time, not a stage of their own."""


@dataclass
class HyDEResult:
    """Everything one retrieval produced, for inspection, evaluation and display."""

    query: str
    """The query searched with (cut to ``max_query_chars``, lone surrogates replaced)."""
    hypotheses: list[str]
    documents: list[Document]
    label: str
    """The retriever's configuration in one name (`HyDERetriever.label`)."""
    fallback: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds per stage: ``hypothesis_s`` (the whole wait for the hypotheses), with
    ``writer_load_s`` (its part spent loading the writer, when it loaded then),
    ``embedding_s``, ``search_s``, ..."""
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
    """Set when the query was changed: cut (from how many characters to how many), or
    lone surrogates (not valid Unicode) replaced with U+FFFD."""
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


# -- the steps of a plan, and the two ways to run it -------------------------------------


@dataclass
class Step(Generic[T]):
    """One step of a plan that may wait: ``sync()`` in a thread, ``async_()`` under asyncio.

    Without ``async_`` the async run calls ``sync`` in the executor (a store read).
    """

    sync: Callable[[], T]
    async_: Callable[[], Awaitable[T]] | None = None

    def run(self) -> T:
        """Run the step in this thread."""
        return self.sync()

    async def arun(self) -> T:
        """Run the step under asyncio."""
        if self.async_ is None:
            return await run_in_executor(None, self.sync)
        return await self.async_()


@dataclass
class Start(Generic[T]):
    """Start ``step`` beside the plan; the plan gets a handle to `Join` (or cancel) later.

    In a thread the step runs on the package's background pool; under asyncio, as a task.
    """

    step: Step[T]

    def run(self) -> Future[T]:
        """Start the step on the background pool."""
        return in_background(self.step.sync)

    async def arun(self) -> asyncio.Future[T]:
        """Start the step as an asyncio task."""
        return asyncio.ensure_future(self.step.arun())


@dataclass
class Join(Generic[T]):
    """Wait for a step `Start` began; None stands for a step not started (gives None)."""

    handle: Any

    def run(self) -> T | None:
        """Wait in this thread."""
        return None if self.handle is None else self.handle.result()

    async def arun(self) -> T | None:
        """Await the task."""
        return None if self.handle is None else await self.handle


Plan = Generator[Step[Any] | Start[Any] | Join[Any], Any, T]
"""A retrieval: yields steps, is sent their results, returns what it found."""


@dataclass
class _Outcome:
    """What a step gave: its value, or the exception it raised."""

    value: Any = None
    error: BaseException | None = None


def _resume(plan: Plan[Any], outcome: _Outcome | None) -> tuple[Any, bool]:
    """Hand ``outcome`` to the plan: ``(next step, False)``, or ``(its result, True)``."""
    try:
        if outcome is None:
            return next(plan), False
        if outcome.error is not None:
            return plan.throw(outcome.error), False
        return plan.send(outcome.value), False
    except StopIteration as done:
        return done.value, True


def run_plan(plan: Plan[T]) -> T:
    """Run ``plan`` in this thread: each step is called, its failure thrown into the plan."""
    step, finished = _resume(plan, None)
    while not finished:
        step, finished = _resume(plan, _called(step.run))
    return step  # type: ignore[no-any-return]


async def arun_plan(plan: Plan[T]) -> T:
    """Run ``plan`` under asyncio: each step's async form is awaited."""
    step, finished = _resume(plan, None)
    while not finished:
        step, finished = _resume(plan, await _awaited(step.arun))
    return step  # type: ignore[no-any-return]


def _called(run: Callable[[], Any]) -> _Outcome:
    try:
        return _Outcome(run())
    except BaseException as exc:
        return _Outcome(error=exc)


async def _awaited(arun: Callable[[], Awaitable[Any]]) -> _Outcome:
    try:
        return _Outcome(await arun())
    except BaseException as exc:
        return _Outcome(error=exc)


# -- the base class -------------------------------------------------------------------


@dataclass
class _Details:
    """Where a run reports its `HyDEResult` to `retrieve_with_details`."""

    owner: Any
    result: HyDEResult | None = None


_DETAILS: ContextVar[_Details | None] = ContextVar("hyde_lc_details", default=None)


@contextmanager
def _reporting_to(owner: Any) -> Iterator[_Details]:
    details = _Details(owner)
    token = _DETAILS.set(details)
    try:
        yield details
    finally:
        _DETAILS.reset(token)


class DetailedRetriever(CheckedModel, BaseRetriever):
    """A LangChain retriever whose runs can also return what they did (`HyDEResult`).

    Subclasses implement `_plan`; ``invoke`` and ``ainvoke`` run it and return its
    documents, and `retrieve_with_details` returns the whole result, in the same traced
    run. Every setting is checked when the retriever is made and when one is assigned
    later: an invalid one raises `InvalidSettingError` (a ``ValueError``), and an
    assignment refused leaves the retriever as it was.

    Example:
        >>> from hyde_lc import HyDERetriever
        >>> issubclass(HyDERetriever, DetailedRetriever)
        True

    """

    model_config = ConfigDict(extra="forbid")

    _not_remade: HydeLcError | None = PrivateAttr(default=None)
    _PER_PROCESS: ClassVar[tuple[str, ...]] = ()
    """Private state made from the fields (the units, the store's backend): never pickled,
    made again from the fields where the retriever is unpickled (`_remake`)."""

    # -- another process: the fields travel, the rest is made again there --------------

    def __getstate__(self) -> dict[Any, Any]:
        """The fields, with each store as another process can reopen it.

        A hyde_lc collection travels as its folder or server (its client is opened again
        in the worker), models as their settings (weights loaded at their first use
        there); a store another process cannot open again (langchain-chroma's ``Chroma``)
        raises `NotPortableError` (`hyde_lc.store.portable`). A remote model's API key
        travels as its object holds it, in clear text inside the pickle
        (`hyde_lc.models.portable`); ``to_config`` never writes one.
        """
        state = super().__getstate__()
        fields = dict(state["__dict__"])
        for name, value in fields.items():
            if isinstance(value, VectorStore):
                fields[name] = portable_store(value)
            elif isinstance(value, BaseLanguageModel | Embeddings):
                fields[name] = portable_model(value)
            else:  # a store's own retriever as a base, a lexical side: their store too
                portable_store(getattr(value, "vectorstore", None))
        private = state.get("__pydantic_private__") or {}
        state["__dict__"] = fields
        state["__pydantic_private__"] = {
            key: value
            for key, value in private.items()
            if key not in self._PER_PROCESS and key != "_not_remade"
        }
        return state

    def __setstate__(self, state: dict[Any, Any]) -> None:
        """The fields restored, the private state made from them (the store reopened).

        If that fails (the store's server cannot be reached from here, say), the
        retriever is unpickled all the same and its first call tries again, raising why
        it cannot: an error while unpickling would end a worker process without a word
        to its caller.
        """
        super().__setstate__(state)
        self._not_remade = None
        try:
            self._remake()
        except HydeLcError as exc:
            self._not_remade = exc

    def _remake(self) -> None:
        """Make the private state again from the fields (after unpickling)."""

    def _made(self) -> None:
        """The private state made, if unpickling could not make it; raises why if it cannot."""
        if self._not_remade is not None:
            self._remake()
            self._not_remade = None

    def for_repeated_calls(self) -> DetailedRetriever:
        """The retriever set up to be called several times for one query.

        Callers that search one query again (deeper, as neighbour expansion does) use it
        so that per-query work is done once; the default is the retriever itself.
        """
        return self

    @abstractmethod
    def _plan(
        self, query: str, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> Plan[HyDEResult]:
        """The retrieval of ``query`` under ``run_manager``, as a plan (`run_plan`)."""

    def _store_backend(self) -> SearchBackend | None:
        """The backend of the store this retriever searches (None: it searches none itself)."""
        return None

    def _server_lost(self, exc: Exception) -> Exception:
        """``exc``, or the package's error naming the store's server when it is gone."""
        backend = self._store_backend()
        if isinstance(exc, StoreUnavailableError) or backend is None:
            return exc
        return backend.lost_server(exc, "ask again once it is back") or exc

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        self._made()
        try:
            return self._reported(run_plan(self._plan(query, run_manager, **kwargs)))
        except Exception as exc:
            lost = self._server_lost(exc)
            if lost is exc:
                raise
            raise lost from exc

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        self._made()
        try:
            plan = self._plan(query, run_manager, **kwargs)  # type: ignore[arg-type]
            return self._reported(await arun_plan(plan))
        except Exception as exc:
            lost = self._server_lost(exc)
            if lost is exc:
                raise
            raise lost from exc

    def _reported(self, result: HyDEResult) -> list[Document]:
        """``result``'s documents, after handing ``result`` to `retrieve_with_details`."""
        details = _DETAILS.get()
        if details is not None and details.owner is self:
            details.result = result
        return result.documents

    def retrieve_with_details(
        self, query: str, config: RunnableConfig | None = None, **kwargs: Any
    ) -> HyDEResult:
        """``invoke`` (the same run, callbacks and tags), returning the whole `HyDEResult`."""
        with _reporting_to(self) as details:
            self.invoke(query, config, **kwargs)
        assert details.result is not None
        return details.result

    async def aretrieve_with_details(
        self, query: str, config: RunnableConfig | None = None, **kwargs: Any
    ) -> HyDEResult:
        """Async `retrieve_with_details` (``ainvoke``)."""
        with _reporting_to(self) as details:
            await self.ainvoke(query, config, **kwargs)
        assert details.result is not None
        return details.result

    @staticmethod
    def child_config(run_manager: Any, tag: str) -> RunnableConfig:
        """The config of a child run of this retrieval, tagged and named ``tag``."""
        return RunnableConfig(callbacks=run_manager.get_child(tag), tags=[tag], run_name=tag)


def retrieved(documents: list[Document]) -> list[Document]:
    """``documents`` as `RetrievedChunk`: equal to the same chunk found by another search."""
    return [RetrievedChunk.of(doc) for doc in documents]


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


TopK = Annotated[int, AfterValidator(valid_k)]
"""How many documents a retriever returns: a whole number of at least 1 (`valid_k`)."""
