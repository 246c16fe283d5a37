"""Writing hypothetical documents: prompts in, N passages out, with cache and fallbacks.

`write_hypotheses` (and its async twin) sends the rendered prompts to the LLM together
(so local llama.cpp decodes them in one batch and remote APIs in parallel), within a
timeout, and keeps the outputs that are neither empty nor refusals. It reports why
nothing usable came back, so the retriever can fall back to the plain query.

The optional cache is any LangChain ``BaseCache`` (``SQLiteCache`` for a persistent
one). Its key is the prompt *and the sample's index*, with the LLM's own parameter
string, so N hypotheses for one question stay N different samples and a rerun of the
same questions costs no LLM call. The LLM's own cache is bypassed for these calls: keyed
on the prompt alone, it would return the first sample N times.

Example:
    >>> from langchain_core.language_models import FakeListChatModel
    >>> llm = FakeListChatModel(responses=["Passage A.", "Passage B."])
    >>> write_hypotheses(llm, ["Q1", "Q1"]).texts
    ['Passage A.', 'Passage B.']

"""

from __future__ import annotations

import asyncio
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from langchain_core.caches import BaseCache
from langchain_core.language_models import BaseLanguageModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, Generation
from langchain_core.runnables import RunnableConfig

_REFUSAL = re.compile(
    r"^\s*(i'?m sorry|i am sorry|sorry, i|i cannot|i can'?t|i'm unable|i am unable|"
    r"as an ai|i do not have|i don'?t have (?:enough )?information)",
    re.IGNORECASE,
)


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


def _uncached(llm: BaseLanguageModel) -> BaseLanguageModel:
    if getattr(llm, "cache", None) is False:
        return llm
    return llm.model_copy(update={"cache": False})


def _text(output: Any) -> str:
    return (output.text if isinstance(output, BaseMessage) else str(output)).strip()


def _assemble(prompts: list[str], cached: list[str | None], outputs: list[Any]) -> Hypotheses:
    fresh = iter(outputs)
    texts, messages = [], []
    for hit in cached:
        if hit is not None:
            texts.append(hit)
            continue
        output = next(fresh)
        if isinstance(output, BaseMessage):
            messages.append(output)
        texts.append(_text(output))
    kept = [t for t in texts if not is_refusal(t)]
    hits = sum(c is not None for c in cached)
    reason = None if kept else "empty or refusal"
    return Hypotheses(kept, prompts, messages, cache_hits=hits, fallback=reason)


def _to_cache(
    cache: BaseCache | None,
    llm_string: str,
    keys: list[str],
    cached: list[str | None],
    outputs: list[Any],
) -> list[tuple[str, list]]:
    """The (key, generations) pairs worth caching: fresh, usable outputs only."""
    if cache is None:
        return []
    missing = [key for key, hit in zip(keys, cached, strict=True) if hit is None]
    entries = []
    for key, output in zip(missing, outputs, strict=True):
        text = _text(output)
        if not is_refusal(text):
            generation: Generation = ChatGeneration(message=AIMessage(content=text))
            entries.append((key, [generation]))
    return entries


def write_hypotheses(
    llm: BaseLanguageModel,
    prompts: list[str],
    *,
    config: RunnableConfig | None = None,
    timeout: float | None = None,
    cache: BaseCache | None = None,
) -> Hypotheses:
    """Generate one passage per prompt (cache first), concurrently, within ``timeout``."""
    keys = sample_keys(prompts)
    llm_string = llm_identity(llm)
    cached = [_cached_text(cache.lookup(k, llm_string)) if cache else None for k in keys]
    todo: list[Any] = [p for p, hit in zip(prompts, cached, strict=True) if hit is None]
    outputs: list[Any] = []
    if todo:
        # A daemon thread: after a timeout the abandoned call (which cannot be cancelled)
        # does not keep the process alive at exit.
        box: dict[str, Any] = {}

        def work() -> None:
            try:
                box["out"] = _uncached(llm).batch(todo, config)
            except Exception as exc:
                box["error"] = exc

        worker = threading.Thread(target=work, daemon=True, name="hyde-hypotheses")
        worker.start()
        worker.join(timeout)
        if worker.is_alive():
            return Hypotheses([], prompts, fallback=f"timeout after {timeout}s")
        if "error" in box:
            exc = box["error"]
            return Hypotheses([], prompts, fallback=f"error: {type(exc).__name__}: {exc}")
        outputs = box["out"]
        for key, generations in _to_cache(cache, llm_string, keys, cached, outputs):
            cache.update(key, llm_string, generations)  # type: ignore[union-attr]
    return _assemble(prompts, cached, outputs)


async def awrite_hypotheses(
    llm: BaseLanguageModel,
    prompts: list[str],
    *,
    config: RunnableConfig | None = None,
    timeout: float | None = None,
    cache: BaseCache | None = None,
) -> Hypotheses:
    """Async `write_hypotheses`: the N generations are awaited together."""
    keys = sample_keys(prompts)
    llm_string = llm_identity(llm)
    cached = [_cached_text(await cache.alookup(k, llm_string)) if cache else None for k in keys]
    todo: list[Any] = [p for p, hit in zip(prompts, cached, strict=True) if hit is None]
    outputs: list[Any] = []
    if todo:
        try:
            outputs = await asyncio.wait_for(_uncached(llm).abatch(todo, config), timeout=timeout)
        except TimeoutError:
            return Hypotheses([], prompts, fallback=f"timeout after {timeout}s")
        except Exception as exc:
            return Hypotheses([], prompts, fallback=f"error: {type(exc).__name__}: {exc}")
        for key, generations in _to_cache(cache, llm_string, keys, cached, outputs):
            await cache.aupdate(key, llm_string, generations)  # type: ignore[union-attr]
    return _assemble(prompts, cached, outputs)


def _cached_text(generations: Any) -> str | None:
    if not generations:
        return None
    return str(generations[0].text)
