"""`LocalChatModel`: a LangChain chat model over llama.cpp, in-process, on the CPU.

It runs llama.cpp's own server engine through ``xllamacpp`` (a prebuilt CPU wheel), so
it needs no compiler, no HTTP port and no network. Unlike
``langchain_community.chat_models.ChatLlamaCpp`` it reports token usage
(``usage_metadata``) exactly as remote chat models do, which per-stage accounting needs.

One engine is loaded per GGUF file and shared by every `LocalChatModel` that uses it:
the hypothesis model (temperature 0.7) and the answer model (temperature 0) over the
same weights cost one load and one copy in memory. Temperature, seed and length are
per request. Concurrent calls (``batch``, ``abatch``, async HyDE hypotheses) are decoded
together by llama.cpp's continuous batching, up to ``parallel`` at once.

Example:
    >>> from hyde_lc import load_llm
    >>> llm = load_llm("local:smollm2-135m", temperature=0.0, max_tokens=32)  # doctest: +SKIP
    >>> llm.invoke("Name a colour.").usage_metadata["output_tokens"] > 0  # doctest: +SKIP
    True

"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Iterator
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
)
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from pydantic import Field

from hyde_lc.errors import HydeLcError, MissingDependencyError

_ENGINES: dict[tuple[str, int, int, int, int], Any] = {}
_ENGINES_LOCK = threading.Lock()


def _default_threads() -> int:
    return int(os.environ.get("HYDE_LC_THREADS", "0")) or max(1, os.cpu_count() or 1)


def _engine(model_path: str, context_size: int, parallel: int, threads: int, poll: int) -> Any:
    """The shared llama.cpp engine for these settings, loaded on first use."""
    key = (model_path, context_size, parallel, threads, poll)
    with _ENGINES_LOCK:
        if key not in _ENGINES:
            try:
                import xllamacpp
            except ImportError as exc:
                raise MissingDependencyError(
                    "local chat models", 'pip install "hyde-lc[local]"'
                ) from exc
            params = xllamacpp.CommonParams()
            params.model.path = model_path
            # llama.cpp splits n_ctx across the parallel slots.
            params.n_ctx = context_size * parallel
            params.n_parallel = parallel
            params.cpuparams.n_threads = threads
            params.cpuparams_batch.n_threads = threads
            params.cpuparams.poll = poll
            params.cpuparams_batch.poll = poll
            params.verbosity = -1
            params.warmup = False
            try:
                _ENGINES[key] = xllamacpp.Server(params)
            except RuntimeError as exc:
                raise HydeLcError(
                    f"llama.cpp could not load {model_path} ({exc}): is it a valid GGUF "
                    "chat model file?"
                ) from exc
        return _ENGINES[key]


def _role(message: BaseMessage) -> str:
    if isinstance(message, SystemMessage):
        return "system"
    if isinstance(message, HumanMessage):
        return "user"
    if isinstance(message, AIMessage):
        return "assistant"
    if isinstance(message, ChatMessage):
        return message.role
    raise HydeLcError(f"LocalChatModel cannot send a {type(message).__name__}; use text messages")


def _usage(usage: dict[str, Any] | None) -> UsageMetadata | None:
    if not usage:
        return None
    return UsageMetadata(
        input_tokens=int(usage.get("prompt_tokens", 0)),
        output_tokens=int(usage.get("completion_tokens", 0)),
        total_tokens=int(usage.get("total_tokens", 0)),
    )


class LocalChatModel(BaseChatModel):
    """Chat model over a local GGUF file, run in-process by llama.cpp on the CPU.

    Example:
        >>> from hyde_lc.local_llm import LocalChatModel
        >>> llm = LocalChatModel(model_path="/models/any.gguf", temperature=0.7)  # doctest: +SKIP
        >>> msg = llm.invoke("Write one sentence about tides.")  # doctest: +SKIP
        >>> msg.usage_metadata  # doctest: +SKIP
        {'input_tokens': 34, 'output_tokens': 21, 'total_tokens': 55}

    """

    model_path: str
    """Path of the GGUF weights file."""
    model_name: str = ""
    """Name reported in ``response_metadata`` and traces (defaults to the file name)."""
    temperature: float = 0.7
    """Sampling temperature; 0 is greedy and deterministic."""
    max_tokens: int = 512
    """Upper bound on generated tokens per call."""
    top_p: float = 0.95
    """Nucleus sampling threshold."""
    seed: int | None = None
    """Sampling seed; None draws a fresh one per call (so repeated calls differ)."""
    stop: list[str] | None = None
    """Stop sequences applied to every call."""
    context_size: int = 4096
    """Context window per concurrent request (prompt plus output), in tokens."""
    parallel: int = 4
    """Requests decoded together by continuous batching."""
    threads: int = Field(default_factory=_default_threads)
    """CPU threads (``HYDE_LC_THREADS`` or all cores)."""
    poll: int = 50
    """llama.cpp busy-wait level between steps (0-100, its default 50). Spinning is fastest
    on an idle machine; on a busy one, prefer ``threads=1`` (benchmarks/llm_threads.py)."""

    @property
    def _llm_type(self) -> str:
        return "hyde-lc-llamacpp"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {
            "model_name": self.resolved_model_name,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }

    @property
    def resolved_model_name(self) -> str:
        """The reported model name."""
        return self.model_name or os.path.basename(self.model_path)

    def _request(self, messages: list[BaseMessage], stop: list[str] | None, **kwargs: Any) -> dict:
        request: dict[str, Any] = {
            "messages": [{"role": _role(m), "content": m.text} for m in messages],
            "temperature": kwargs.get("temperature", self.temperature),
            "top_p": kwargs.get("top_p", self.top_p),
            "max_tokens": kwargs.get("max_tokens", self.max_tokens),
        }
        seed = kwargs.get("seed", self.seed)
        if seed is not None:
            request["seed"] = seed
        stops = stop or self.stop
        if stops:
            request["stop"] = list(stops)
        return request

    def _engine(self) -> Any:
        if not os.path.isfile(self.model_path):
            raise HydeLcError(f"model file not found: {self.model_path}")
        return _engine(self.model_path, self.context_size, self.parallel, self.threads, self.poll)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        response = self._engine().handle_chat_completions(self._request(messages, stop, **kwargs))
        if "error" in response or not response.get("choices"):
            raise HydeLcError(f"llama.cpp failed: {response.get('error', response)}")
        choice = response["choices"][0]
        metadata = {
            "model_name": self.resolved_model_name,
            "finish_reason": choice.get("finish_reason"),
            "timings": response.get("timings", {}),
        }
        message = AIMessage(
            content=choice["message"].get("content") or "",
            usage_metadata=_usage(response.get("usage")),
            response_metadata=metadata,
        )
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        request = self._request(messages, stop, **kwargs)
        request.update(stream=True, stream_options={"include_usage": True})
        engine = self._engine()
        # llama.cpp streams through a callback on the calling thread; a worker thread
        # and a queue turn that into a Python iterator.
        chunks: queue.Queue[dict | BaseException | None] = queue.Queue()

        def work() -> None:
            try:
                engine.handle_chat_completions(request, chunks.put)
            except BaseException as exc:  # handed to the consumer below
                chunks.put(exc)
            finally:
                chunks.put(None)

        threading.Thread(target=work, daemon=True).start()
        while (item := chunks.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            if "error" in item:
                raise HydeLcError(f"llama.cpp failed: {item['error']}")
            text = ""
            metadata: dict[str, Any] = {}
            if item.get("choices"):
                choice = item["choices"][0]
                text = choice.get("delta", {}).get("content") or ""
                if choice.get("finish_reason"):
                    metadata = {
                        "finish_reason": choice["finish_reason"],
                        "model_name": self.resolved_model_name,
                    }
            usage = _usage(item.get("usage"))
            if not text and not usage and not metadata:
                continue
            chunk = ChatGenerationChunk(
                message=AIMessageChunk(
                    content=text, usage_metadata=usage, response_metadata=metadata
                )
            )
            if run_manager and text:
                run_manager.on_llm_new_token(text, chunk=chunk)
            yield chunk
