"""Writing hypothetical documents: prompts in, N passages out, with cache and fallbacks.

`write_hypotheses` (and its async twin) sends the rendered prompts to the LLM together
(so local llama.cpp decodes them in one batch and remote APIs in parallel), within a
timeout, and keeps the outputs that are neither empty nor refusals. Reasoning that a
"thinking" model writes before its passage (``<think>...</think>``) is removed first.

What happens when the LLM fails:

* a timeout cancels the generations still running: local llama.cpp requests stop within
  one decoding step (`hyde_lc.cancellation`), remote requests carry the remaining time
  as their HTTP timeout, prompts not yet sent are never sent, and no thread left behind
  holds the process at exit;
* a configuration error (a rejected API key, 401; no permission, 403; an unknown model
  or URL, 404; a missing or damaged local model file) raises
  `hyde_lc.endpoint_errors.ModelConfigurationError` or the package's own error: HyDE is
  not silently turned off by a setup mistake. ``config_errors="fallback"`` treats them
  as transient instead;
* transient failures (timeouts, connection errors, rate limits, 5xx, a prompt over the
  context window, empty output, refusals) fall back: the retriever then searches with
  the plain query. Prompts that did produce a passage are kept.

Each fallback is logged once as a warning on the ``hyde_lc.hypotheses`` logger, and its
reason is returned in `Hypotheses.fallback`.

The optional cache is any LangChain ``BaseCache`` (`hyde_lc.hypothesis_cache.HypothesisCache`
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
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.caches import BaseCache
from langchain_core.language_models import BaseChatModel, BaseLanguageModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, Generation
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import get_config_list

from hyde_lc.cancellation import (
    CancelScope,
    GenerationCancelled,
    cancel_scope,
    current_scope,
)
from hyde_lc.endpoint_errors import (
    ModelConfigurationError,
    describe_endpoint_error,
    is_configuration_error,
)
from hyde_lc.errors import (
    InvalidSettingError,
    MissingDependencyError,
    ModelFileError,
    ModelNotInstalledError,
    UnknownModelSpecError,
    WeightChecksumError,
)
from hyde_lc.reasoning import strip_reasoning

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


def llm_identity(llm: BaseLanguageModel) -> str:
    """The LLM's parameter string (model, temperature, ...), as LangChain's cache uses."""
    getter = getattr(llm, "_get_llm_string", None)
    return getter() if callable(getter) else repr(llm)


def is_setup_error(exc: BaseException) -> bool:
    """True when ``exc`` means the hypothesis model is configured wrongly (see above)."""
    return isinstance(exc, _SETUP_ERRORS) or is_configuration_error(exc)


def _uncached(llm: BaseLanguageModel) -> BaseLanguageModel:
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


def _model_name(llm: BaseLanguageModel) -> str:
    for attr in ("resolved_model_name", "model_name", "model"):
        value = getattr(llm, attr, None)
        if isinstance(value, str) and value:
            return value
    return type(llm).__name__


def _fallback(reason: str, llm: BaseLanguageModel, prompts: list[str]) -> str:
    count = len(prompts)
    logger.warning(
        "HyDE fell back to the plain query (%d %s for %s): %s",
        count,
        "hypothesis" if count == 1 else "hypotheses",
        _model_name(llm),
        reason,
    )
    return reason


def _describe(exc: BaseException, llm: BaseLanguageModel) -> str:
    described = describe_endpoint_error(exc, llm, role="hypothesis")
    return str(described) if described is not None else f"{type(exc).__name__}: {exc}"


def _raise_setup_error(exc: BaseException, llm: BaseLanguageModel) -> None:
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
    llm: BaseLanguageModel,
    prompts: list[str],
    cached: list[str | None],
    results: list[Any],
    config_errors: ConfigErrors,
) -> Hypotheses:
    """Hypotheses from cache hits and fresh results (outputs or exceptions)."""
    errors = [r for r in results if isinstance(r, BaseException)]
    setup = next((e for e in errors if is_setup_error(e)), None)
    if setup is not None and config_errors == "raise":
        _raise_setup_error(setup, llm)
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
        reason = f"error: {_describe(errors[0], llm)}" if errors else "empty or refusal"
        reason = _fallback(reason, llm, prompts)
    elif errors:
        logger.warning(
            "%d of %d hypotheses from %s failed (the others are used): %s",
            len(errors),
            len(prompts),
            _model_name(llm),
            _describe(errors[0], llm),
        )
    return Hypotheses(kept, prompts, messages, cache_hits=hits, fallback=reason, failed=len(errors))


def _to_cache(keys: list[str], cached: list[str | None], results: list[Any]) -> list[tuple]:
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


def _call_kwargs(llm: BaseLanguageModel, timeout: float | None) -> dict[str, Any]:
    """Per-request options: remote OpenAI-style models get ``timeout`` as HTTP timeout."""
    if timeout is None:
        return {}
    try:
        from langchain_openai.chat_models.base import BaseChatOpenAI
    except ImportError:  # pragma: no cover - a core dependency
        return {}
    if not isinstance(llm, BaseChatOpenAI):
        return {}
    configured = llm.request_timeout
    if isinstance(configured, int | float) and configured < timeout:
        return {}
    return {"timeout": timeout}


def _concurrency(config: RunnableConfig | None, count: int) -> int:
    limit = (config or {}).get("max_concurrency") or DEFAULT_CONCURRENCY
    return max(1, min(count, int(limit)))


def _run_in_threads(
    llm: BaseLanguageModel,
    prompts: list[str],
    config: RunnableConfig | None,
    timeout: float | None,
    scope: CancelScope,
) -> list[Any] | None:
    """Invoke ``llm`` on each prompt in daemon threads; results (or exceptions) in order.

    Returns None when ``timeout`` expires first. LangChain's ``batch`` runs on a thread
    pool whose workers the interpreter joins at exit, so a call abandoned on timeout
    would hold the process until it ends; these daemon workers do not. Each worker runs
    in a copy of the caller's context, so tracing and ``collect_runs`` see the calls,
    and under ``scope``, so a cancel stops local generations and unsent prompts.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    configs = get_config_list(config, len(prompts))
    kwargs = _call_kwargs(llm, timeout)
    results: list[Any] = [None] * len(prompts)
    pending = iter(range(len(prompts)))
    lock = threading.Lock()
    left = [len(prompts)]
    finished = threading.Event()

    def work() -> None:
        with cancel_scope(scope):
            while not scope.cancelled:
                with lock:
                    index = next(pending, None)
                if index is None:
                    return
                try:
                    results[index] = llm.invoke(prompts[index], configs[index], **kwargs)
                except Exception as exc:
                    results[index] = exc
                    if is_setup_error(exc):  # the others would fail the same way
                        scope.cancel("configuration error")
                        finished.set()
                with lock:
                    left[0] -= 1
                    if left[0] == 0:
                        finished.set()

    for _ in range(_concurrency(config, len(prompts))):
        context = contextvars.copy_context()
        threading.Thread(
            target=context.run, args=(work,), daemon=True, name="hyde-hypotheses"
        ).start()
    remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
    if not finished.wait(remaining):
        return None
    unsent = GenerationCancelled(f"not generated: {scope.reason}")
    return [unsent if result is None else result for result in list(results)]


def write_hypotheses(
    llm: BaseLanguageModel,
    prompts: list[str],
    *,
    config: RunnableConfig | None = None,
    timeout: float | None = None,
    cache: BaseCache | None = None,
    config_errors: ConfigErrors = "raise",
) -> Hypotheses:
    """Generate one passage per prompt (cache first), concurrently, within ``timeout``.

    Raises `hyde_lc.endpoint_errors.ModelConfigurationError` (or the package's own error
    for a broken local model) on a configuration error unless ``config_errors`` is
    ``"fallback"``; transient failures fall back (see the module docstring).
    """
    keys = sample_keys(prompts)
    llm_string = llm_identity(llm)
    cached = [
        _cached_text(cache.lookup(k, llm_string)) if cache is not None else None for k in keys
    ]
    todo: list[str] = [p for p, hit in zip(prompts, cached, strict=True) if hit is None]
    results: list[Any] = []
    if todo:
        scope = CancelScope(parent=current_scope())
        done = _run_in_threads(_uncached(llm), todo, config, timeout, scope)
        if done is None:
            scope.cancel(f"timeout after {timeout}s")
            return Hypotheses(
                [], prompts, fallback=_fallback(f"timeout after {timeout}s", llm, prompts)
            )
        results = done
        if cache is not None:
            for key, generations in _to_cache(keys, cached, results):
                cache.update(key, llm_string, generations)
    return _assemble(llm, prompts, cached, results, config_errors)


async def awrite_hypotheses(
    llm: BaseLanguageModel,
    prompts: list[str],
    *,
    config: RunnableConfig | None = None,
    timeout: float | None = None,
    cache: BaseCache | None = None,
    config_errors: ConfigErrors = "raise",
) -> Hypotheses:
    """Async `write_hypotheses`: the N generations are awaited together."""
    keys = sample_keys(prompts)
    llm_string = llm_identity(llm)
    cached = [
        _cached_text(await cache.alookup(k, llm_string)) if cache is not None else None
        for k in keys
    ]
    todo: list[Any] = [p for p, hit in zip(prompts, cached, strict=True) if hit is None]
    results: list[Any] = []
    if todo:
        kwargs = _call_kwargs(llm, timeout)
        with cancel_scope() as scope:
            try:
                results = await asyncio.wait_for(
                    _uncached(llm).abatch(todo, config, return_exceptions=True, **kwargs),
                    timeout=timeout,
                )
            except TimeoutError:
                scope.cancel(f"timeout after {timeout}s")
                return Hypotheses(
                    [], prompts, fallback=_fallback(f"timeout after {timeout}s", llm, prompts)
                )
        if cache is not None:
            for key, generations in _to_cache(keys, cached, results):
                await cache.aupdate(key, llm_string, generations)
    return _assemble(llm, prompts, cached, results, config_errors)


def _cached_text(generations: Any) -> str | None:
    if not generations:
        return None
    return str(generations[0].text)
