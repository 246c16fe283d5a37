"""Writing hypothetical documents: prompts in, N passages out, with cache and fallbacks.

`write_hypotheses` (and its async twin) sends the rendered prompts to the LLM together
(so local llama.cpp decodes them in one batch and remote APIs in parallel), within a
timeout, and keeps the outputs that are neither empty nor refusals. Reasoning that a
"thinking" model writes before its passage (``<think>...</think>``) is removed first.

The timeout bounds the whole wait, from the call to its result: loading the writer
included. A writer that loads its weights on first use (`Loadable`: a local llama.cpp
model) is loaded first, as a step of its own, in a daemon thread; the prompts are sent
once it is done, and not at all if the time ran out meanwhile. A llama.cpp load cannot
be cut short, and it holds Python's interpreter lock while it runs (no other thread of
the process runs meanwhile), so a wait whose time runs out during one ends when the load
does, with nothing generated; the fallback says so (``timeout after 3.0s (the writer was
still loading: 5.2s into its load)``) and `Hypotheses.load_s` says how long it took.

What happens when the LLM fails:

* a timeout cancels the generations still running: its deadline is checked by every
  thread that writes, so the limit holds even while the waiting thread is not running;
  local llama.cpp requests stop within one decoding step (`hyde_lc.core.cancellation`),
  remote requests carry the timeout as their HTTP timeout, prompts not yet sent are never
  sent, and no thread left behind (a load or a generation) holds the process at exit;
* a cancel of the caller's `hyde_lc.core.cancellation.CancelScope` (or of one it is nested in)
  stops the generations as a timeout does and ends the wait at once, but keeps the
  passages already written; the prompts that had not finished count as failed
  (`GenerationCancelled`), and with no passage the fallback is ``cancelled: <reason>``;
* a configuration error (a rejected API key, 401; no permission, 403; an unknown model
  or URL, 404; a missing or damaged local model file) raises
  `hyde_lc.models.endpoint_errors.ModelConfigurationError` or the package's own error: HyDE is
  not silently turned off by a setup mistake. ``config_errors="fallback"`` treats them
  as transient instead;
* transient failures (timeouts, connection errors, rate limits, 5xx, a prompt over the
  context window, empty output, refusals) fall back: the retriever then searches with
  the plain query. Prompts that did produce a passage are kept.

Each fallback is logged once as a warning on the ``hyde_lc.hyde.hypotheses`` logger, and its
reason is returned in `Hypotheses.fallback`.

The optional cache is any LangChain ``BaseCache`` (`hyde_lc.hyde.hypothesis_cache.HypothesisCache`
for a persistent one). Its key is the prompt *and the sample's index*, with the LLM's own
parameter string, so N hypotheses for one question stay N different samples and a rerun
of the same questions costs no LLM call. The LLM's own cache is bypassed for these calls:
keyed on the prompt alone, it would return the first sample N times.

Example:
    >>> from langchain_core.language_models import FakeListChatModel
    >>> llm = FakeListChatModel(responses=["Passage A.", "Passage B."])
    >>> write_hypotheses(llm, ["Q1", "Q1"]).texts
    ['Passage A.', 'Passage B.']

"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import re
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypedDict, Unpack, runtime_checkable

from langchain_core.caches import BaseCache
from langchain_core.language_models import BaseChatModel, BaseLanguageModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, Generation
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import get_config_list

from hyde_lc.core.cancellation import (
    CancelScope,
    GenerationCancelled,
    cancel_scope,
    current_scope,
)
from hyde_lc.core.reasoning import strip_reasoning
from hyde_lc.errors import (
    InvalidSettingError,
    MissingDependencyError,
    ModelFileError,
    ModelNotInstalledError,
    UnknownModelSpecError,
    WeightChecksumError,
)
from hyde_lc.models.endpoint_errors import (
    ModelConfigurationError,
    describe_endpoint_error,
    is_configuration_error,
)

logger = logging.getLogger(__name__)

ConfigErrors = Literal["raise", "fallback"]

DEFAULT_CONCURRENCY = 8
"""Prompts in flight at once unless the config sets ``max_concurrency`` (a local model
also waits for one of its ``parallel`` engine slots)."""

_REFUSAL = re.compile(
    r"^\s*(i'?m sorry|i am sorry|sorry, i|i cannot|i can'?t|i'm unable|i am unable|"
    r"as an ai|i do not have|i don'?t have (?:enough )?information)",
    re.IGNORECASE,
)

_SETUP_ERRORS = (
    ModelConfigurationError,
    MissingDependencyError,
    ModelFileError,
    ModelNotInstalledError,
    UnknownModelSpecError,
    WeightChecksumError,
    InvalidSettingError,
)
"""The package's own errors that mean the hypothesis model is set up wrongly."""


@runtime_checkable
class Loadable(Protocol):
    """A writer that loads its weights on first use, and can be loaded ahead of it.

    `hyde_lc.models.local_llm.LocalChatModel` is one. `write_hypotheses` loads such a
    writer as a step of its own, within its timeout (see the module docstring).
    """

    @property
    def loaded(self) -> bool:
        """Whether the weights are loaded (a call would not load them first)."""
        ...

    def load(self) -> None:
        """Load the weights now."""
        ...


@dataclass
class Hypotheses:
    """What one round of generation produced."""

    texts: list[str]
    """The usable passages, in prompt order."""
    prompts: list[str]
    """The rendered prompts, one per requested passage."""
    messages: list[BaseMessage] = field(default_factory=list)
    """Fresh LLM outputs (with token usage); cache hits add none."""
    cache_hits: int = 0
    """Passages served from the cache."""
    fallback: str | None = None
    """Why no passage is usable (the retriever then searches with the query alone)."""
    failed: int = 0
    """Prompts whose generation failed while others succeeded (their passages are missing)."""
    load_s: float | None = None
    """Seconds this call spent loading the writer's weights (part of the wait; so far, if
    the load was still running at the timeout). None: the writer was loaded already."""


def is_refusal(text: str) -> bool:
    """True for empty output and for the refusal openings small models produce."""
    return not text.strip() or bool(_REFUSAL.match(text))


def sample_keys(prompts: list[str]) -> list[str]:
    """Cache keys: each prompt plus the index of its sample (``...#sample=2``)."""
    seen: Counter[str] = Counter()
    keys = []
    for prompt in prompts:
        keys.append(f"{prompt}\x1f#sample={seen[prompt]}")
        seen[prompt] += 1
    return keys


def llm_identity(llm: BaseLanguageModel[Any]) -> str:
    """The LLM's parameter string (model, temperature, ...), as LangChain's cache uses."""
    getter = getattr(llm, "_get_llm_string", None)
    return getter() if callable(getter) else repr(llm)


def is_setup_error(exc: BaseException) -> bool:
    """True when ``exc`` means the hypothesis model is configured wrongly (see above)."""
    return isinstance(exc, _SETUP_ERRORS) or is_configuration_error(exc)


def _uncached(llm: BaseLanguageModel[Any]) -> BaseLanguageModel[Any]:
    """The LLM without its own cache, and generating without streaming its tokens.

    A passage is used only once complete, and streamed tokens would reach
    ``astream_events`` consumers as if they were the answer.
    """
    update: dict[str, Any] = {}
    if getattr(llm, "cache", None) is not False:
        update["cache"] = False
    if isinstance(llm, BaseChatModel) and llm.disable_streaming is not True:
        update["disable_streaming"] = True
    return llm.model_copy(update=update) if update else llm


def _text(output: Any) -> str:
    text = output.text if isinstance(output, BaseMessage) else str(output)
    return strip_reasoning(text)


def _model_name(llm: BaseLanguageModel[Any]) -> str:
    for attr in ("resolved_model_name", "model_name", "model"):
        value = getattr(llm, attr, None)
        if isinstance(value, str) and value:
            return value
    return type(llm).__name__


def _fallback(reason: str, llm: BaseLanguageModel[Any], prompts: list[str]) -> str:
    count = len(prompts)
    logger.warning(
        "HyDE fell back to the plain query (%d %s for %s): %s",
        count,
        "hypothesis" if count == 1 else "hypotheses",
        _model_name(llm),
        reason,
    )
    return reason


def _describe(exc: BaseException, llm: BaseLanguageModel[Any]) -> str:
    described = describe_endpoint_error(exc, llm, role="hypothesis")
    return str(described) if described is not None else f"{type(exc).__name__}: {exc}"


def _raise_setup_error(exc: BaseException, llm: BaseLanguageModel[Any]) -> None:
    if isinstance(exc, _SETUP_ERRORS):
        raise exc
    described = describe_endpoint_error(exc, llm, role="hypothesis")
    message = str(described) if described is not None else f"{type(exc).__name__}: {exc}"
    raise ModelConfigurationError(
        f"HyDE cannot write hypotheses: {message}. To search without hypotheses, use "
        "--mode standard (n_hypotheses=0)",
        url=getattr(described, "url", None),
        status=getattr(described, "status", None),
    ) from exc


def _assemble(
    llm: BaseLanguageModel[Any],
    prompts: list[str],
    cached: list[str | None],
    results: list[Any],
    config_errors: ConfigErrors,
    cancelled: str | None = None,
) -> Hypotheses:
    """Hypotheses from cache hits and fresh results (outputs or exceptions).

    ``cancelled`` says why the generations were cancelled, if they were: the fallback
    names it when nothing else went wrong.
    """
    errors = [r for r in results if isinstance(r, BaseException)]
    setup = next((e for e in errors if is_setup_error(e)), None)
    if setup is not None and config_errors == "raise":
        _raise_setup_error(setup, llm)
    # An error that cancelled the other generations says more than their cancels.
    first = next((e for e in errors if not isinstance(e, GenerationCancelled)), None)
    fresh = iter(results)
    texts, messages = [], []
    for hit in cached:
        if hit is not None:
            texts.append(hit)
            continue
        output = next(fresh)
        if isinstance(output, BaseException):
            continue
        if isinstance(output, BaseMessage):
            messages.append(output)
        texts.append(_text(output))
    kept = [t for t in texts if not is_refusal(t)]
    hits = sum(c is not None for c in cached)
    reason = None
    if not kept:
        if errors and first is None and cancelled is not None:
            reason = f"cancelled: {cancelled}"
        elif errors:
            reason = f"error: {_describe(first or errors[0], llm)}"
        else:
            reason = "empty or refusal"
        reason = _fallback(reason, llm, prompts)
    elif errors:
        logger.warning(
            "%d of %d hypotheses from %s failed (the others are used): %s",
            len(errors),
            len(prompts),
            _model_name(llm),
            _describe(first or errors[0], llm),
        )
    return Hypotheses(kept, prompts, messages, cache_hits=hits, fallback=reason, failed=len(errors))


def _to_cache(
    keys: list[str], cached: list[str | None], results: list[Any]
) -> list[tuple[Any, ...]]:
    """The (key, generations) pairs worth caching: fresh, usable outputs only."""
    missing = [key for key, hit in zip(keys, cached, strict=True) if hit is None]
    entries = []
    for key, output in zip(missing, results, strict=True):
        if isinstance(output, BaseException):
            continue
        text = _text(output)
        if not is_refusal(text):
            generation: Generation = ChatGeneration(message=AIMessage(content=text))
            entries.append((key, [generation]))
    return entries


def _call_kwargs(llm: BaseLanguageModel[Any], timeout: float | None) -> dict[str, Any]:
    """Per-request options: remote OpenAI-style models get ``timeout`` as HTTP timeout."""
    if timeout is None:
        return {}
    # Not imported: ``llm`` is none of its models (importing it would take seconds of the
    # timeout's time on a slow machine).
    module = sys.modules.get("langchain_openai.chat_models.base")
    if module is None or not isinstance(llm, module.BaseChatOpenAI):
        return {}
    configured = llm.request_timeout
    if isinstance(configured, int | float) and configured < timeout:
        return {}
    return {"timeout": timeout}


def _concurrency(config: RunnableConfig | None, count: int) -> int:
    limit = (config or {}).get("max_concurrency") or DEFAULT_CONCURRENCY
    return max(1, min(count, int(limit)))


_PENDING: Any = object()
"""The outcome of a prompt that has not ended yet."""


class _Round:
    """The outcome of every prompt of one round of generation, each counted exactly once.

    A prompt ends with its output, with the exception its call raised or, once the scope
    (or one it is nested in) is cancelled, with `GenerationCancelled` if it had not ended
    yet: never sent, or still generating for nobody. The round is over when every prompt
    has ended, so a cancel ends it at once and keeps the passages already written. A
    setup error cancels the scope: the other prompts would fail the same way.

    The threads of `write_hypotheses` and the tasks of `awrite_hypotheses` both take
    their prompts from a round and hand it their outcomes.
    """

    def __init__(self, count: int, scope: CancelScope) -> None:
        self.scope = scope
        self.results: list[Any] = [_PENDING] * count
        self.timed_out = False
        """True when the scope's deadline (the timeout) ended the round."""
        self.cancelled: str | None = None
        """Why the scope was cancelled, when that ended the round."""
        self._sent = 0
        self._left = count
        self._lock = threading.Lock()
        self._over = threading.Event()
        self._wakers: list[Callable[[], None]] = []
        if not count:
            self._over.set()
        self._forget = scope.on_cancel(self._cancel)

    def next_prompt(self) -> int | None:
        """The next prompt's index; None once all are sent or the scope is cancelled."""
        with self._lock:
            if self._sent == len(self.results) or self.scope.cancelled:
                return None
            self._sent += 1
            return self._sent - 1

    def end(self, index: int, outcome: Any) -> None:
        """Record how prompt ``index`` ended: its output or the exception its call raised."""
        with self._lock:
            if self.results[index] is not _PENDING:  # ended by a cancel already
                return
            self.results[index] = outcome
            self._left -= 1
            over = self._left == 0
        if isinstance(outcome, BaseException) and is_setup_error(outcome):
            self.scope.cancel("configuration error")
        if over:
            self._finish()

    def fail(self, error: BaseException) -> None:
        """End every prompt not ended yet with ``error`` (the writer could not be loaded)."""
        for index in range(len(self.results)):
            self.end(index, error)

    def wait(self) -> None:
        """Block until the round is over; at the scope's deadline, expire the scope."""
        if not self._over.wait(self.scope.remaining()):
            self.scope.expire()

    async def wait_async(self) -> None:
        """`wait` in a coroutine: the event loop runs on while the prompts end."""
        loop = asyncio.get_running_loop()
        over: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            with suppress(RuntimeError):  # the loop is closed: nobody waits any more
                loop.call_soon_threadsafe(_resolve, over)

        with self._lock:
            waiting = not self._over.is_set()
            if waiting:
                self._wakers.append(wake)
        if not waiting:
            return
        try:
            await asyncio.wait_for(over, self.scope.remaining())
        except TimeoutError:
            self.scope.expire()

    def close(self) -> None:
        """Stop listening to the scope; a caller that stopped waiting early cancels it."""
        if not self._over.is_set():
            self.scope.cancel("the caller stopped waiting")
        self._forget()

    def _cancel(self) -> None:
        reason = self.scope.reason
        with self._lock:
            if self._left == 0:
                return
            self.cancelled = reason
            self.timed_out = self.scope.expired
            for index, result in enumerate(self.results):
                if result is _PENDING:
                    state = "generation cancelled" if index < self._sent else "not generated"
                    self.results[index] = GenerationCancelled(f"{state}: {reason}")
            self._left = 0
        self._finish()

    def _finish(self) -> None:
        with self._lock:
            self._over.set()
            wakers, self._wakers = self._wakers, []
        for wake in wakers:
            wake()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class _Load:
    """Loading a `Loadable` writer before its first prompt, as a step of its own.

    It runs in a daemon thread (nothing waits for it at exit) under the round's scope, and
    is not started once the scope is cancelled; a load that fails ends every prompt with
    its error. When it ran, and how long, makes the timeout's fallback truthful.
    """

    def __init__(self, llm: Loadable, round_: _Round) -> None:
        self.llm = llm
        self.round = round_
        self.started: float | None = None
        self.ended: float | None = None

    @classmethod
    def of(cls, llm: BaseLanguageModel[Any], round_: _Round) -> _Load | None:
        """The load ``llm`` needs first; None if it does not load on first use, or has."""
        if isinstance(llm, Loadable) and not llm.loaded:
            return cls(llm, round_)
        return None

    def run(self) -> bool:
        """Load, unless the scope is cancelled first; True when the prompts may be sent."""
        scope = self.round.scope
        if scope.cancelled:
            return False
        self.started = time.monotonic()
        try:
            self.llm.load()
        except BaseException as exc:  # the round counts it for every prompt
            self.round.fail(exc)
            return False
        finally:
            self.ended = time.monotonic()
        return not scope.cancelled

    def in_background(self, then: Callable[[], None]) -> None:
        """Run the load in a daemon thread (in a copy of the caller's context), then ``then``."""

        def load() -> None:
            with cancel_scope(self.round.scope):
                if self.run():
                    then()

        context = contextvars.copy_context()
        threading.Thread(target=context.run, args=(load,), daemon=True, name="hyde-load").start()

    def seconds(self) -> float | None:
        """Seconds spent loading (so far, if it still runs); None if it never started."""
        if self.started is None:
            return None
        return (self.ended or time.monotonic()) - self.started

    def note(self, deadline: float | None) -> str:
        """What the load had to do with a timeout at ``deadline``, said in brackets."""
        took = self.seconds()
        if took is None:
            return " (the writer had not started loading)"
        if self.ended is None or deadline is None or self.ended > deadline:
            return f" (the writer was still loading: {took:.1f}s into its load)"
        return f" (loading the writer took {took:.1f}s of it)"


def _run_in_threads(job: _Job) -> tuple[_Round, _Load | None]:
    """Invoke the writer on each prompt left in daemon threads, until the round is over.

    LangChain's ``batch`` runs on a thread pool whose workers the interpreter joins at
    exit, so a call abandoned on timeout would hold the process until it ends; these
    daemon workers do not. Each worker runs in a copy of the caller's context, so
    tracing and ``collect_runs`` see the calls, and under ``scope``, so a cancel stops
    local generations and unsent prompts. A writer not loaded yet is loaded first
    (`_Load`), and the workers start once it is.
    """
    llm, prompts, config, timeout, scope = job.round_settings()
    configs = get_config_list(config, len(prompts))
    kwargs = _call_kwargs(llm, timeout)
    round_ = _Round(len(prompts), scope)
    load = _Load.of(llm, round_)
    contexts = [contextvars.copy_context() for _ in range(_concurrency(config, len(prompts)))]

    def work() -> None:
        with cancel_scope(scope):
            while (index := round_.next_prompt()) is not None:
                try:
                    outcome = llm.invoke(prompts[index], configs[index], **kwargs)
                except BaseException as exc:  # whatever ends a prompt, the round counts it
                    outcome = exc
                round_.end(index, outcome)

    def start() -> None:
        for context in contexts:
            threading.Thread(
                target=context.run, args=(work,), daemon=True, name="hyde-hypotheses"
            ).start()

    try:
        if load is None:
            start()
        else:
            load.in_background(start)
        round_.wait()
    finally:
        round_.close()
    return round_, load


async def _run_as_tasks(job: _Job) -> tuple[_Round, _Load | None]:
    """Await the writer on each prompt left in asyncio tasks, until the round is over.

    The tasks run under ``scope``, in copies of the caller's context; those still
    running when the round is over are cancelled (a local generation stops, a remote
    request is dropped). A writer not loaded yet is loaded first, in a daemon thread
    (`_Load`), and the tasks send their prompts once it is.
    """
    llm, prompts, config, timeout, scope = job.round_settings()
    configs = get_config_list(config, len(prompts))
    kwargs = _call_kwargs(llm, timeout)
    round_ = _Round(len(prompts), scope)
    load = _Load.of(llm, round_)
    loaded = asyncio.Event()
    if load is None:
        loaded.set()
    else:
        loop = asyncio.get_running_loop()

        def wake() -> None:
            with suppress(RuntimeError):  # the loop is closed: nobody waits any more
                loop.call_soon_threadsafe(loaded.set)

        load.in_background(wake)

    async def work() -> None:
        await loaded.wait()
        while (index := round_.next_prompt()) is not None:
            try:
                outcome = await llm.ainvoke(prompts[index], configs[index], **kwargs)
            except Exception as exc:
                outcome = exc
            except BaseException as exc:  # counted, then passed on (a cancelled task)
                round_.end(index, exc)
                raise
            round_.end(index, outcome)

    with cancel_scope(scope):
        workers = [asyncio.ensure_future(work()) for _ in range(_concurrency(config, len(prompts)))]
    try:
        await round_.wait_async()
    finally:
        round_.close()
        for worker in workers:
            worker.cancel()
    return round_, load


class WriteOptions(TypedDict, total=False):
    """The options of `write_hypotheses` and `awrite_hypotheses`."""

    config: RunnableConfig | None
    """The LangChain config of the calls (callbacks, tags, ``max_concurrency``)."""
    timeout: float | None
    """Seconds to wait for the passages, from the call on, loading the writer included
    (None: no limit)."""
    cache: BaseCache | None
    """Passages already written, by prompt and sample (see the module docstring)."""
    config_errors: ConfigErrors
    """``raise`` (the default) or ``fallback`` on a configuration error."""


@dataclass
class _Job:
    """One call's prompts: what the cache held, what is left to write, the result.

    `write_hypotheses` and `awrite_hypotheses` differ only in how they wait (threads or
    tasks, a cache's sync or async methods); the rest is here.
    """

    llm: BaseLanguageModel[Any]
    prompts: list[str]
    options: WriteOptions
    keys: list[str] = field(init=False)
    llm_string: str = field(init=False)
    cached: list[str | None] = field(init=False)
    deadline: float | None = field(init=False)
    """When the timeout ends the wait, on the `time.monotonic` clock (None: no timeout)."""

    def __post_init__(self) -> None:
        timeout = self.options.get("timeout")
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.keys = sample_keys(self.prompts)
        self.llm_string = llm_identity(self.llm)
        self.cached = [None] * len(self.prompts)

    @property
    def cache(self) -> BaseCache | None:
        """The cache asked first (None: every prompt is sent)."""
        return self.options.get("cache")

    def found(self, generations: list[Any]) -> None:
        """What the cache gave for each key (nothing: none)."""
        self.cached = [_cached_text(g) for g in generations]

    @property
    def todo(self) -> list[str]:
        """The prompts the cache did not answer."""
        return [p for p, hit in zip(self.prompts, self.cached, strict=True) if hit is None]

    def round_settings(
        self,
    ) -> tuple[BaseLanguageModel[Any], list[str], RunnableConfig | None, float | None, CancelScope]:
        """The round's writer (its own cache bypassed), prompts left, config, timeout, scope.

        The scope is a new one for this call's generations, inside the caller's; it expires
        at the call's deadline.
        """
        timeout = self.options.get("timeout")
        expiry = f"timeout after {timeout}s"
        scope = CancelScope(parent=current_scope(), deadline=self.deadline, expiry=expiry)
        return _uncached(self.llm), self.todo, self.options.get("config"), timeout, scope

    def to_cache(self, round_: _Round) -> list[tuple[str, list[Generation]]]:
        """The fresh outputs worth caching (none after a timeout or without a cache)."""
        if self.cache is None or round_.timed_out:
            return []
        return _to_cache(self.keys, self.cached, round_.results)

    def result(self, round_: _Round | None, load: _Load | None = None) -> Hypotheses:
        """The hypotheses: from the cache and ``round_``'s outputs, or the timeout's fallback.

        ``load`` is the writer's load, if the round began with one: the fallback of a
        timeout says what it had to do with it.
        """
        errors = self.options.get("config_errors", "raise")
        if round_ is None:
            return _assemble(self.llm, self.prompts, self.cached, [], errors)
        if round_.timed_out:
            reason = f"timeout after {self.options.get('timeout')}s"
            if load is not None:
                reason += load.note(self.deadline)
            written = Hypotheses(
                [], self.prompts, fallback=_fallback(reason, self.llm, self.prompts)
            )
        else:
            written = _assemble(
                self.llm, self.prompts, self.cached, round_.results, errors, round_.cancelled
            )
        written.load_s = None if load is None else load.seconds()
        return written


def write_hypotheses(
    llm: BaseLanguageModel[Any], prompts: list[str], **options: Unpack[WriteOptions]
) -> Hypotheses:
    """Generate one passage per prompt (cache first), concurrently, within ``timeout``.

    Raises `hyde_lc.models.endpoint_errors.ModelConfigurationError` (or the package's own error
    for a broken local model) on a configuration error unless ``config_errors`` is
    ``"fallback"``; transient failures fall back (see the module docstring).
    """
    job = _Job(llm, prompts, options)
    if job.cache is not None:
        job.found([job.cache.lookup(key, job.llm_string) for key in job.keys])
    round_ = load = None
    if job.todo:
        round_, load = _run_in_threads(job)
        for key, generations in job.to_cache(round_):
            job.cache.update(key, job.llm_string, generations)  # type: ignore[union-attr]
    return job.result(round_, load)


async def awrite_hypotheses(
    llm: BaseLanguageModel[Any], prompts: list[str], **options: Unpack[WriteOptions]
) -> Hypotheses:
    """Async `write_hypotheses`: the N generations are awaited together."""
    job = _Job(llm, prompts, options)
    if job.cache is not None:
        job.found([await job.cache.alookup(key, job.llm_string) for key in job.keys])
    round_ = load = None
    if job.todo:
        round_, load = await _run_as_tasks(job)
        for key, generations in job.to_cache(round_):
            await job.cache.aupdate(key, job.llm_string, generations)  # type: ignore[union-attr]
    return job.result(round_, load)


def _cached_text(generations: Any) -> str | None:
    if not generations:
        return None
    return str(generations[0].text)
