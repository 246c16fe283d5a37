"""`LocalChatModel`: a LangChain chat model over llama.cpp, in-process, on the CPU.

It runs llama.cpp's own server engine through ``xllamacpp`` (a prebuilt CPU wheel), so
it needs no compiler and no network. Unlike
``langchain_community.chat_models.ChatLlamaCpp`` it reports token usage
(``usage_metadata``) exactly as remote chat models do, which per-stage accounting needs.

One engine is loaded per GGUF file and shared by every `LocalChatModel` that uses it:
the hypothesis model (temperature 0.7) and the answer model (temperature 0) over the
same weights cost one load and one copy in memory. Temperature, seed and length are
per request. Concurrent sampled calls (``batch``, ``abatch``, async HyDE hypotheses) are
decoded together by llama.cpp's continuous batching, up to ``parallel`` at once; further
calls wait for a free slot.

Greedy calls (temperature 0) and seeded ones are reproducible: the same request gives
the same text every time in a process, whatever ran before it or beside it. llama.cpp's
CPU kernels do not compute a token to the same bits in batches of different sizes, and
at a near tie between two tokens that difference picks the other one, so such a call
takes the one path that does not depend on history: its prompt is evaluated from the
start (llama.cpp's prompt cache, which would evaluate only the part after a prefix left
by an earlier request, is off for it), and it runs alone in the engine (a batch shared
with other requests would change its numbers too). Concurrent greedy calls therefore run
one after another; sampled calls without a seed keep the prompt cache and the batching.
`LocalChatModel.warm_up` loads the weights and runs them once, for timings that must
not include loading.

Every request can be stopped: it is streamed token by token, and it ends within one
decoding step when the caller stops reading, when its awaiting task is cancelled, or
when the `hyde_lc.core.cancellation.CancelScope` it runs under is cancelled (what
`hyde_lc.hyde.hypotheses.write_hypotheses` does on timeout). A stopped request frees its slot
at once, so the next call (the answer, say) never queues behind abandoned work. A call
given ``stop_when=`` (a function of the text written so far) ends where it returns True,
as if it had reached a stop sequence: the answer chain stops an answer that begins to
repeat itself this way (`hyde_lc.core.sentences`).

The context window is ``context_size`` tokens per request (prompt plus output), 4,096 by
default or ``HYDE_LC_N_CTX``. The engine also listens on a random 127.0.0.1 port, guarded
by a random API key; it is used only to count tokens with the model's own tokenizer.

Example:
    >>> from hyde_lc import load_llm
    >>> llm = load_llm("local:smollm2-135m", temperature=0.0, max_tokens=32)  # doctest: +SKIP
    >>> llm.invoke("Name a colour.").usage_metadata["output_tokens"] > 0  # doctest: +SKIP
    True

"""

from __future__ import annotations

import asyncio
import json
import math
import os
import queue
import re
import secrets
import threading
import time
import urllib.request
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import LanguageModelInput
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.runnables.config import run_in_executor
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

from hyde_lc.core.cancellation import CancelScope, GenerationCancelled, cancel_scope, current_scope
from hyde_lc.core.cpu import free_cores
from hyde_lc.core.settings import settings
from hyde_lc.core.teardown import CLOSE_ENGINES, STOP_WORK, at_exit
from hyde_lc.errors import (
    HydeLcError,
    MissingDependencyError,
    ModelFileError,
)
from hyde_lc.models import tool_calls

N_CTX_ENV = "HYDE_LC_N_CTX"
"""Environment variable with the default context window of local models, in tokens."""
_POLL_S = 0.05  # how often a waiting request looks at its cancellation flag
_DONE = object()
_EXIT_WAIT_S = 30.0
_WARM_UP_TOKENS = 512  # llama.cpp's micro-batch: the first one this large is slow too


class _InFlight:
    """Engine calls under way, so that the interpreter can stop them before it exits.

    llama.cpp hands each token to Python through a callback that needs the GIL. A call
    still running while the interpreter finalises would take the GIL in a dying thread,
    which aborts the process ("FATAL: exception not rethrown"). At exit every call is
    told to stop, and the exit waits (one decoding step, at most ``_EXIT_WAIT_S``) until
    none is left inside the engine; then the engines are closed (`hyde_lc.core.teardown`).
    """

    def __init__(self) -> None:
        self.count = 0
        self.closing = threading.Event()
        self.changed = threading.Condition()

    def enter(self) -> None:
        with self.changed:
            self.count += 1

    def leave(self) -> None:
        with self.changed:
            self.count -= 1
            self.changed.notify_all()

    def stop_all(self, timeout: float = _EXIT_WAIT_S) -> bool:
        """Stop every call and wait until none is inside the engine; False on timeout."""
        self.closing.set()
        with self.changed:
            return self.changed.wait_for(lambda: self.count == 0, timeout)


_IN_FLIGHT = _InFlight()
at_exit("llama.cpp generations", STOP_WORK, _IN_FLIGHT.stop_all)


class ContextWindowError(HydeLcError):
    """A request that does not fit the local model's context window."""


def _default_threads() -> int:
    """``HYDE_LC_THREADS`` (1 to 256; 0 or unset: the cores other work leaves free now)."""
    return settings().threads or free_cores()


def default_context_size() -> int:
    """``HYDE_LC_N_CTX`` if set (256 to 131,072 tokens), else 4,096."""
    return settings().n_ctx


def estimate_tokens(text: str) -> int:
    """A conservative token count without a tokenizer: one token per 3 bytes of UTF-8.

    English runs about 4 characters per token with the usual tokenizers, so this
    overestimates it; one character of Chinese (3 bytes) counts as one token.
    """
    return math.ceil(len(text.encode("utf-8")) / 3)


class _Slots:
    """Who may decode in one engine: up to ``parallel`` requests together, or one alone.

    A reproducible request (greedy or seeded) is decoded alone, since the requests batched
    with it would change its numbers (see the module docstring). It waits until the engine
    is empty, and while it waits no other request is let in, so a stream of sampled
    requests cannot starve it.
    """

    def __init__(self, parallel: int) -> None:
        self.parallel = parallel
        self.busy = 0
        self.alone = False
        self.waiting_alone = 0
        self.changed = threading.Condition()

    def _free(self, alone: bool) -> bool:
        if self.alone:
            return False
        if alone:
            return self.busy == 0
        return self.busy < self.parallel and self.waiting_alone == 0

    def acquire(self, *, alone: bool, stopped: Callable[[], bool]) -> bool:
        """Wait for a place; False if ``stopped()`` turns true first (looked at every 50 ms)."""
        with self.changed:
            self.waiting_alone += int(alone)
            try:
                while not self.changed.wait_for(lambda: self._free(alone), _POLL_S):
                    if stopped():
                        return False
                self.busy += 1
                self.alone = alone
                return True
            finally:
                self.waiting_alone -= int(alone)
                self.changed.notify_all()  # a request that stops waiting may let others in

    def release(self) -> None:
        """Give the place back."""
        with self.changed:
            self.busy -= 1
            self.alone = False
            self.changed.notify_all()


def _reproducible(request: dict[str, Any]) -> bool:
    """Whether ``request`` must give the same text every time: greedy, or seeded."""
    temperature = request.get("temperature")
    greedy = temperature is not None and float(temperature) <= 0
    return greedy or request.get("seed") is not None


@dataclass
class _Engine:
    """One loaded model: the llama.cpp server, its slots and its private loopback address."""

    server: Any
    slots: _Slots
    address: str
    api_key: str
    warm: bool = False
    """Whether `LocalChatModel.warm_up` ran on it."""
    warming: threading.Lock = field(default_factory=threading.Lock)

    def post(self, path: str, body: dict[str, Any], timeout: float = 30.0) -> Any:
        """POST to the engine's own loopback HTTP server (tokenizer endpoints)."""
        if not self.address.startswith("http://127.0.0.1:"):
            raise OSError("the llama.cpp engine has no loopback address")
        request = urllib.request.Request(
            self.address + path,
            data=json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.api_key}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())

    def metrics(self) -> dict[str, float]:
        """llama.cpp's counters and gauges (``requests_processing``, ``n_decode_total``...)."""
        text = str(self.server.handle_metrics())
        return {k: float(v) for k, v in re.findall(r"^llamacpp:(\w+) (\S+)$", text, re.M)}


_ENGINES: dict[tuple[str, int, int, int, int], _Engine] = {}
_ENGINES_LOCK = threading.Lock()


def _engine(model_path: str, context_size: int, parallel: int, threads: int, poll: int) -> _Engine:
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
            params.endpoint_metrics = True  # busy slots, decoded tokens (read in-process)
            # The engine always serves HTTP on a random loopback port; a random key keeps
            # other local users off it.
            api_key = secrets.token_urlsafe(24)
            params.api_keys = [api_key]
            try:
                server = xllamacpp.Server(params)
            except RuntimeError as exc:
                raise ModelFileError(
                    f"llama.cpp could not load {model_path} ({exc}): is it a valid GGUF "
                    "chat model file?"
                ) from exc
            _ENGINES[key] = _Engine(
                server=server,
                slots=_Slots(parallel),
                address=str(server.listening_address or ""),
                api_key=api_key,
            )
            at_exit("llama.cpp engines", CLOSE_ENGINES, _close_engines)
        return _ENGINES[key]


def _close_engines() -> None:
    """Close every loaded engine, at exit: each stops its loop and joins its threads.

    Called once generations have stopped (`hyde_lc.core.teardown`), so that the servers
    are freed now, in order, and not in whatever order finalisation collects them.
    """
    with _ENGINES_LOCK:
        engines = list(_ENGINES.values())
        _ENGINES.clear()
    del engines  # the last references: each server's destructor runs here


_FORKED_AWAY: list[_Engine] = []
"""In a forked child: the parent's engines, kept so that their destructors never run here."""


def _engines_of_its_own() -> None:
    """In a forked child: forget the parent's engines; a model loads its own at first use.

    ``fork`` copies an engine's memory but not its threads, so the copy never answers.
    It is kept (`_FORKED_AWAY`), not closed: closing would wait for those threads. A
    `LocalChatModel` unpickled in the child (or inherited by it) loads the weights again.
    """
    global _ENGINES_LOCK
    _ENGINES_LOCK = threading.Lock()
    _FORKED_AWAY.extend(_ENGINES.values())
    _ENGINES.clear()
    _IN_FLIGHT.__init__()  # type: ignore[misc]  # no generation of the parent runs here


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_engines_of_its_own)


def _role(message: BaseMessage) -> str:
    if isinstance(message, SystemMessage):
        return "system"
    if isinstance(message, HumanMessage):
        return "user"
    if isinstance(message, AIMessage):
        return "assistant"
    if isinstance(message, ChatMessage):
        return message.role
    if isinstance(message, ToolMessage):
        return "tool"
    raise HydeLcError(f"LocalChatModel cannot send a {type(message).__name__}; use text messages")


def _usage(usage: dict[str, Any] | None) -> UsageMetadata | None:
    if not usage:
        return None
    return UsageMetadata(
        input_tokens=int(usage.get("prompt_tokens", 0)),
        output_tokens=int(usage.get("completion_tokens", 0)),
        total_tokens=int(usage.get("total_tokens", 0)),
    )


PENALTIES = ("repeat_penalty", "frequency_penalty", "dry_multiplier", "dry_penalty_last_n")
"""Sampling penalties sent to llama.cpp only when set (its own defaults: all off)."""


class LocalChatModel(BaseChatModel):
    """Chat model over a local GGUF file, run in-process by llama.cpp on the CPU.

    Example:
        >>> from hyde_lc.models.local_llm import LocalChatModel
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
    repeat_penalty: float | None = None
    """llama.cpp's penalty on tokens seen in the last 64 (1.0 or None: off, its default)."""
    frequency_penalty: float | None = None
    """OpenAI-style penalty growing with a token's count so far (0 or None: off)."""
    dry_multiplier: float | None = Field(default=None, ge=0)
    """llama.cpp's DRY sampler ("don't repeat yourself"): a token that would extend a
    sequence already seen (past 2 tokens) is penalised by this times 1.75 to the power of
    the extra length, so verbatim loops die out while single words may recur (0 or None:
    off). It also weighs sequences in the prompt: see `dry_penalty_last_n`."""
    dry_penalty_last_n: int | None = Field(default=None, ge=-1)
    """Tokens DRY looks back over (-1: the whole context, llama.cpp's default; 0: off)."""
    context_size: int = Field(default_factory=default_context_size)
    """Context window per concurrent request (prompt plus output), in tokens
    (``HYDE_LC_N_CTX`` or 4,096). Memory grows with ``context_size * parallel``."""
    parallel: int = 4
    """Requests decoded together by continuous batching."""
    threads: int = Field(default_factory=_default_threads)
    """CPU threads: ``HYDE_LC_THREADS``, else the cores that other processes leave free when
    the model is made (every core on an idle machine; `hyde_lc.core.cpu`)."""
    poll: int = 50
    """llama.cpp busy-wait level between steps (0-100, its default 50): spinning is fastest
    while the threads have their cores to themselves (benchmarks/llm_threads.py)."""

    @property
    def _llm_type(self) -> str:
        return "hyde-lc-llamacpp"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        # These make up the hypothesis cache's key: adding one invalidates every cache.
        return {
            "model_name": self.resolved_model_name,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }

    @property
    def resolved_model_name(self) -> str:
        """The reported model name."""
        return self.model_name or os.path.basename(self.model_path)

    def _request(
        self, messages: list[BaseMessage], stop: list[str] | None, **kwargs: Any
    ) -> dict[str, Any]:
        request: dict[str, Any] = {
            "messages": [tool_calls.chat_message(m, _role(m)) for m in messages],
            "temperature": kwargs.get("temperature", self.temperature),
            "top_p": kwargs.get("top_p", self.top_p),
            "max_tokens": kwargs.get("max_tokens", self.max_tokens),
        }
        seed = kwargs.get("seed", self.seed)
        if seed is not None:
            request["seed"] = seed
        for key in PENALTIES:
            value = kwargs.get(key, getattr(self, key))
            if value is not None:
                request[key] = value
        stops = stop or self.stop
        if stops:
            request["stop"] = list(stops)
        request.update(tool_calls.request_fields(kwargs.get("tools"), kwargs.get("tool_choice")))
        return request

    def _engine(self) -> _Engine:
        if not os.path.isfile(self.model_path):
            raise ModelFileError(f"model file not found: {self.model_path}")
        return _engine(self.model_path, self.context_size, self.parallel, self.threads, self.poll)

    @property
    def loaded(self) -> bool:
        """Whether the engine this model uses is loaded (its first call loads it otherwise)."""
        key = (self.model_path, self.context_size, self.parallel, self.threads, self.poll)
        return key in _ENGINES  # the key `_engine` files it under

    def load(self) -> None:
        """Load the weights now, unless the current cancel scope is cancelled.

        llama.cpp cannot stop a load once begun, and holds Python's interpreter lock while
        it loads: no other thread of the process runs until it is done. So a load is not
        begun for a cancelled scope, nor once the interpreter is exiting
        (`hyde_lc.hyde.hypotheses.write_hypotheses` loads a writer this way, within its timeout).
        """
        scope = current_scope()
        if scope is not None:
            scope.check()
        if _IN_FLIGHT.closing.is_set():
            raise GenerationCancelled("not loaded: the interpreter is exiting")
        self._engine()

    def engine_metrics(self) -> dict[str, float]:
        """The engine's llama.cpp metrics.

        ``requests_processing`` (busy slots), ``tokens_predicted_total``,
        ``n_decode_total``, ...
        """
        return self._engine().metrics()

    def warm_up(self) -> float:
        """Load the weights and run them once; the seconds it took (about 0 the next time).

        The engine loads on first use, and its first requests run several times slower
        than later ones: the weights are read from disk as the first request runs through
        them, and the first full batch of prompt tokens is slow too. Warming decodes one
        token after a prompt of one full batch (512 tokens, at most half the window).
        Call it before timing anything that must not include loading; models sharing an
        engine (the hypothesis and answer roles over one file) warm it once.
        """
        start = time.perf_counter()
        engine = self._engine()
        with engine.warming:
            if not engine.warm:
                words = min(_WARM_UP_TOKENS, self.context_size // 2)
                prompt: list[BaseMessage] = [HumanMessage(" ".join(["Hello"] * words))]
                for _ in self._events(self._request(prompt, None, max_tokens=1, temperature=0)):
                    pass
                engine.warm = True
        return time.perf_counter() - start

    # -- tools -------------------------------------------------------------------------

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | dict[str, Any] | bool | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """The model with ``tools``, which its replies may call (``AIMessage.tool_calls``).

        The tools go into the prompt as the model's chat template lists them, and calls
        are read from the reply (`hyde_lc.models.tool_calls`); a call whose JSON does not
        parse is in ``invalid_tool_calls``. ``tool_choice``: None or ``"auto"`` lets the
        model choose, and nothing obliges it to call (small models often answer
        directly); ``"none"`` sends no tools; a tool's name (or ``"any"``) makes the reply
        one call of that tool (of one of the tools): llama.cpp's grammar lets the model
        write only JSON with the tool's name and arguments that follow its schema, and a
        call cut at ``max_tokens`` is closed where it was cut (an argument that ran on is
        cut short), so the reply is a call unless the cap comes before its arguments; the
        arguments are not guaranteed to make sense. A forced
        choice holds for every reply of the bound model: in an agent loop, force only the
        first turn (README, "An offline agent"). A chat template without tools (SmolLM2's)
        does not show them to the model; a forced call still follows the schema.

        Example:
            >>> from langchain_core.tools import tool
            >>> @tool
            ... def search(query: str) -> str:
            ...     '''Search the documents.'''
            ...     return "..."
            >>> llm = LocalChatModel(model_path="/models/any.gguf")  # doctest: +SKIP
            >>> searching = llm.bind_tools([search], tool_choice="search")  # doctest: +SKIP
            >>> searching.invoke("Fresnel?").tool_calls[0]["args"]  # doctest: +SKIP
            {'query': 'Fresnel'}

        """
        formatted = [convert_to_openai_tool(t) for t in tools]
        tool_calls.forced_tool_names(tool_choice, formatted)  # a bad choice fails here
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        return self.bind(tools=formatted, **kwargs)

    # -- token counting ----------------------------------------------------------------

    def get_num_tokens(self, text: str) -> int:
        """Tokens of ``text`` with the model's own tokenizer (an estimate if unavailable)."""
        try:
            return len(self._engine().post("/tokenize", {"content": text})["tokens"])
        except (OSError, ValueError, KeyError, TypeError):
            return estimate_tokens(text)

    def get_num_tokens_from_messages(
        self, messages: list[BaseMessage], tools: Sequence[Any] | None = None
    ) -> int:
        """Prompt tokens of ``messages`` after the model's chat template, exactly."""
        body: dict[str, Any] = {"messages": self._request(messages, None)["messages"]}
        if tools:  # the template lists them in the prompt
            body["tools"] = [convert_to_openai_tool(t) for t in tools]
        try:
            return int(
                self._engine().post("/v1/chat/completions/input_tokens", body)["input_tokens"]
            )
        except (OSError, ValueError, KeyError, TypeError):
            return sum(estimate_tokens(m.text) + 8 for m in messages) + 16

    # -- generation --------------------------------------------------------------------

    def _fail(self, error: Any) -> HydeLcError:
        if isinstance(error, dict) and error.get("type") == "exceed_context_size_error":
            return ContextWindowError(
                f"the request to {self.resolved_model_name} ({error.get('n_prompt_tokens')} "
                f"tokens) does not fit its context window ({error.get('n_ctx')} tokens per "
                f"request): shorten the input, or raise the window with {N_CTX_ENV}=8192 or "
                "load_llm(..., context_size=8192)"
            )
        message = error.get("message", error) if isinstance(error, dict) else error
        return HydeLcError(f"llama.cpp failed on {self.resolved_model_name}: {message}")

    def _events(self, request: dict[str, Any]) -> Generator[dict[str, Any], None, None]:
        """Stream the engine's chunks for ``request``; stoppable (see the module docstring).

        llama.cpp streams through a callback on the calling thread, and stops a request
        when that callback returns True. A worker thread runs the request and a queue
        hands the chunks over, so the consumer can give up at any time.
        """
        alone = _reproducible(request)
        request = {
            **request,
            "stream": True,
            "stream_options": {"include_usage": True},
            "cache_prompt": not alone,  # a reused prefix changes a greedy request's numbers
        }
        scope = current_scope()
        abandoned = threading.Event()

        def stopped() -> bool:
            return (
                abandoned.is_set()
                or _IN_FLIGHT.closing.is_set()
                or (scope is not None and scope.cancelled)
            )

        def cancelled() -> GenerationCancelled:
            reason = "abandoned by its caller"
            if scope is not None and scope.cancelled:
                reason = str(scope.reason)
            elif _IN_FLIGHT.closing.is_set():
                reason = "the interpreter is exiting"
            return GenerationCancelled(f"generation cancelled: {reason}")

        if stopped():  # nobody waits: not even a load is begun
            raise cancelled()
        engine = self._engine()
        # Wait for a free slot here rather than in llama.cpp's queue: a waiting request can
        # then be dropped without ever reaching the engine.
        if not engine.slots.acquire(alone=alone, stopped=stopped):
            raise cancelled()
        if stopped():
            engine.slots.release()
            raise cancelled()
        items: queue.Queue[Any] = queue.Queue()

        def on_chunk(chunk: Any) -> bool:
            items.put(chunk)
            return stopped()  # True makes llama.cpp cancel the request

        def work() -> None:
            try:
                engine.server.handle_chat_completions(request, on_chunk)
            except BaseException as exc:  # handed to the consumer below
                items.put(exc)
            finally:
                engine.slots.release()
                _IN_FLIGHT.leave()
                items.put(_DONE)

        _IN_FLIGHT.enter()
        try:
            threading.Thread(target=work, daemon=True, name="hyde-lc-llamacpp").start()
        except BaseException:
            _IN_FLIGHT.leave()
            engine.slots.release()
            raise
        try:
            while True:
                try:
                    item = items.get(timeout=_POLL_S)
                except queue.Empty:
                    if stopped():
                        raise cancelled() from None
                    continue
                if item is _DONE:
                    return
                if isinstance(item, BaseException):
                    raise item
                if isinstance(item, dict) and "error" in item:
                    raise self._fail(item["error"])
                if stopped():
                    raise cancelled()
                yield item
        finally:
            abandoned.set()  # a consumer that stops early stops the engine too

    def _chunks(
        self, request: dict[str, Any], stop_when: Callable[[str], bool] | None = None
    ) -> Iterator[ChatGenerationChunk]:
        """The engine's chunks as LangChain's; ``stop_when(text so far)`` ends them early.

        A generation that ``stop_when`` ends is stopped like one whose caller stops
        reading, and its last chunk reports ``finish_reason`` ``"stop"`` and the tokens
        read and written so far (llama.cpp's running counts).
        """
        if stop_when is not None:
            request = {**request, "timings_per_token": True}
        written = ""
        timings: dict[str, Any] = {}
        events = self._events(request)
        try:
            for item in events:
                text = ""
                metadata: dict[str, Any] = {}
                calls: list[Any] = []
                if item.get("choices"):
                    choice = item["choices"][0]
                    text = choice.get("delta", {}).get("content") or ""
                    calls = tool_calls.engine_chunks(choice.get("delta", {}))
                    if choice.get("finish_reason"):
                        metadata = {
                            "finish_reason": choice["finish_reason"],
                            "model_name": self.resolved_model_name,
                        }
                if item.get("timings"):
                    timings = item["timings"]
                    if stop_when is None or item.get("usage"):  # running counts stay here
                        metadata["timings"] = timings
                usage = _usage(item.get("usage"))
                if not text and not usage and not metadata and not calls:
                    continue
                yield ChatGenerationChunk(
                    message=AIMessageChunk(
                        content=text,
                        usage_metadata=usage,
                        response_metadata=metadata,
                        tool_call_chunks=calls,
                    )
                )
                written += text
                if stop_when is not None and text and stop_when(written):
                    yield self._stopped_early(timings)
                    return
        finally:
            events.close()  # a request stopped early stops the engine at once

    def _stopped_early(self, timings: dict[str, Any]) -> ChatGenerationChunk:
        read = int(timings.get("prompt_n", 0)) + int(timings.get("cache_n", 0))
        wrote = int(timings.get("predicted_n", 0))
        usage = UsageMetadata(input_tokens=read, output_tokens=wrote, total_tokens=read + wrote)
        metadata = {"finish_reason": "stop", "model_name": self.resolved_model_name}
        return ChatGenerationChunk(
            message=AIMessageChunk(content="", usage_metadata=usage, response_metadata=metadata)
        )

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        parts: list[str] = []
        usage: UsageMetadata | None = None
        metadata: dict[str, Any] = {"model_name": self.resolved_model_name}
        stop_when = kwargs.pop("stop_when", None)
        request = self._request(messages, stop, **kwargs)
        engine_calls: list[Any] = []
        for chunk in self._chunks(request, stop_when):
            parts.append(chunk.text)
            usage = chunk.message.usage_metadata or usage  # type: ignore[attr-defined]
            metadata.update(chunk.message.response_metadata)
            engine_calls += chunk.message.tool_call_chunks  # type: ignore[attr-defined]
        metadata.setdefault("finish_reason", None)
        metadata.setdefault("timings", {})
        reading = tool_calls.calls_read(request)
        if reading is not None:  # tools bound: the reply's calls parsed out of it
            message = tool_calls.reply_message(
                "".join(parts),
                engine_calls,
                reading,
                usage_metadata=usage,
                response_metadata=metadata,
            )
        else:
            message = AIMessage(
                content="".join(parts), usage_metadata=usage, response_metadata=metadata
            )
        return ChatResult(generations=[ChatGeneration(message=message)])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        # A cancelled awaiting task (asyncio.wait_for, TaskGroup...) stops the request.
        scope = CancelScope(parent=current_scope())

        def generate() -> ChatResult:
            with cancel_scope(scope):
                return self._generate(messages, stop, None, **kwargs)

        try:
            return await run_in_executor(None, generate)
        except asyncio.CancelledError:
            scope.cancel("the awaiting task was cancelled")
            raise

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        stop_when = kwargs.pop("stop_when", None)
        request = self._request(messages, stop, **kwargs)
        chunks = self._chunks(request, stop_when)
        reading = tool_calls.calls_read(request)
        if reading is not None:  # text that may be a call is held back, calls come at the end
            chunks = tool_calls.stream_tool_calls(chunks, reading)
        for chunk in chunks:
            if run_manager and chunk.text:
                run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk
