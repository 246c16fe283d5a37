"""write_hypotheses: cancellation, loading the writer, configuration errors, logging, ..."""

import asyncio
import logging
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from langchain_core.language_models import FakeListChatModel
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tracers.context import collect_runs
from langchain_core.vectorstores import InMemoryVectorStore
from pydantic import Field

from hyde_lc.core.cancellation import CancelScope, GenerationCancelled, cancel_scope, current_scope
from hyde_lc.errors import HydeLcError, ModelFileError
from hyde_lc.hyde.hypotheses import awrite_hypotheses, write_hypotheses
from hyde_lc.models.endpoint_errors import ModelConfigurationError
from hyde_lc.models.loading import load_llm
from hyde_lc.models.local_llm import LocalChatModel
from hyde_lc.retrievers.hyde import HyDERetriever
from tests.fakes import FakeEmbeddings, SlowLoadingChat, status_server

URL = "http://127.0.0.1:9/v1/chat/completions"
LOGGER = "hyde_lc.hyde.hypotheses"


def _response(status: int) -> httpx2.Response:
    return httpx2.Response(
        status,
        request=httpx2.Request("POST", URL),
        json={"error": {"message": f"stub {status}"}},
    )


def openai_error(kind: type[Exception]) -> Exception:
    """A real openai exception, as the client raises it."""
    if kind is openai.APITimeoutError:
        return openai.APITimeoutError(request=httpx2.Request("POST", URL))
    if kind is openai.APIConnectionError:
        return openai.APIConnectionError(request=httpx2.Request("POST", URL))
    status = {
        openai.AuthenticationError: 401,
        openai.PermissionDeniedError: 403,
        openai.NotFoundError: 404,
        openai.RateLimitError: 429,
        openai.InternalServerError: 500,
    }[kind]
    return kind(f"Error code: {status}", response=_response(status), body=None)


class Failing(BaseChatModel):
    """Raises ``error`` for the prompts whose index is in ``fail_on`` (all by default)."""

    error: Any = None
    fail_on: set[int] | None = None
    calls: list[str] = Field(default_factory=list)
    model_name: str = "stub-model"

    @property
    def _llm_type(self) -> str:
        return "failing"

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        index = len(self.calls)
        self.calls.append(messages[-1].text)
        if self.fail_on is None or index in self.fail_on:
            raise self.error
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=f"P{index}."))])


class Patient(BaseChatModel):
    """Generates until its cancellation scope is cancelled (at most a minute)."""

    started: list[int] = Field(default_factory=list)
    stopped: list[str] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "patient"

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        scope = current_scope()
        self.started.append(1)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if scope is not None and scope.cancelled:
                self.stopped.append(str(scope.reason))
                raise GenerationCancelled(str(scope.reason))
            time.sleep(0.01)
        self.stopped.append("never cancelled")
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content="late"))])


class Stalling(BaseChatModel):
    """Answers its first prompt; later ones run until ``release`` is set (at most a minute).

    They ignore cancellation, as a remote request does; ``dropped`` lists the async calls
    whose task was cancelled.
    """

    calls: list[int] = Field(default_factory=list)
    dropped: list[int] = Field(default_factory=list)
    stalled: Any = Field(default_factory=threading.Event)
    release: Any = Field(default_factory=threading.Event)

    @property
    def _llm_type(self) -> str:
        return "stalling"

    def _answer(self, index: int) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=f"P{index}."))])

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        index = len(self.calls)
        self.calls.append(index)
        if index:
            self.stalled.set()
            self.release.wait(60)
        return self._answer(index)

    async def _agenerate(self, messages, stop=None, run_manager=None, **kwargs):
        index = len(self.calls)
        self.calls.append(index)
        if index:
            self.stalled.set()
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                self.dropped.append(index)
                raise
        return self._answer(index)


def _cancel_when_stalled(llm: Stalling, scope: CancelScope) -> None:
    """From another thread, cancel ``scope`` once ``llm`` is generating its second prompt."""

    def cancel() -> None:
        if llm.stalled.wait(10):
            scope.cancel("shutting down")

    threading.Thread(target=cancel, daemon=True).start()


def _wait_for(condition, seconds: float = 60.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


# -- timeouts cancel the work ----------------------------------------------------------


# The timeouts below leave a loaded machine seconds to start the first generations: the
# tests check what happens to generations that are running when the time is up.


def test_a_timeout_cancels_running_generations_and_never_sends_the_rest():
    llm = Patient()
    out = write_hypotheses(llm, ["q"] * 6, timeout=3, config={"max_concurrency": 2})
    assert out.fallback == "timeout after 3s" and out.texts == []
    assert _wait_for(lambda: len(llm.stopped) == len(llm.started))
    assert llm.stopped == ["timeout after 3s"] * 2  # the running two, told why
    time.sleep(0.3)
    assert len(llm.started) == 2  # the four waiting prompts were never sent


async def test_an_async_timeout_cancels_running_generations():
    llm = Patient()
    out = await awrite_hypotheses(llm, ["q"] * 3, timeout=3)
    assert out.fallback == "timeout after 3s"
    assert await asyncio.to_thread(_wait_for, lambda: len(llm.stopped) == len(llm.started))
    assert llm.stopped and "never cancelled" not in llm.stopped


def test_many_hypotheses_run_with_bounded_concurrency():
    seen: list[int] = []
    lock = threading.Lock()
    active = [0]

    class Counting(FakeListChatModel):
        def _call(self, *args, **kwargs):
            with lock:
                active[0] += 1
                seen.append(active[0])
            time.sleep(0.01)
            with lock:
                active[0] -= 1
            return "A passage."

    out = write_hypotheses(Counting(responses=["x"]), ["q"] * 40, timeout=120)
    assert len(out.texts) == 40 and max(seen) <= 8


# -- the timeout covers loading the writer ---------------------------------------------


def _lighthouse_store() -> InMemoryVectorStore:
    store = InMemoryVectorStore(embedding=FakeEmbeddings(size=32))
    store.add_texts(["Lighthouses use lenses.", "Bees make honey."])
    return store


def _held_at_exit(before: set[threading.Thread]) -> list[threading.Thread]:
    """Threads started since ``before`` that the interpreter would wait for at exit.

    Daemon threads are not waited for; nor, in effect, an idle worker of a thread pool
    (the retrieval's own steps ran on pools and ended): it waits in
    ``concurrent.futures``' ``_worker`` for work, and ends at once at exit.
    """
    frames = sys._current_frames()

    def idle(thread: threading.Thread) -> bool:
        frame = frames.get(thread.ident or -1)
        if frame is None or frame.f_code.co_name != "_worker":
            return False
        return Path(frame.f_code.co_filename).parts[-3:] == ("concurrent", "futures", "thread.py")

    return [
        t
        for t in threading.enumerate()
        if t not in before and t.is_alive() and not t.daemon and not idle(t)
    ]


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
async def test_the_timeout_ends_the_wait_while_the_writer_is_still_loading(use_async):
    writer = SlowLoadingChat()  # its load lasts until released
    retriever = HyDERetriever(
        vectorstore=_lighthouse_store(), hypothesis_llm=writer, n_hypotheses=4, k=1, timeout=1.0
    )
    question = "How do lighthouses focus light?"
    before = set(threading.enumerate())
    try:
        if use_async:
            result = await retriever.aretrieve_with_details(question)
        else:
            result = retriever.retrieve_with_details(question)
        (loader,) = writer.loaders  # loaded once, by one thread, still loading now
        assert loader.is_alive() and not writer.loaded
        assert loader.daemon
        # (a pool worker may still be handing back the result of a step: a moment's wait)
        assert _wait_for(lambda: _held_at_exit(before) == [], 10), _held_at_exit(before)
        assert loader.is_alive()  # still loading
        assert result.fallback is not None
        assert result.fallback.startswith("timeout after 1.0s (the writer was still loading")
        assert "writer_load_s" in result.timings
        assert result.hypotheses == [] and len(result.documents) == 1  # the question alone
    finally:
        writer.release.set()
    assert _wait_for(lambda: not loader.is_alive())
    assert writer.generated == []  # loaded after the timeout: nothing written for nobody


def test_a_writer_loaded_within_the_timeout_writes_and_its_load_is_timed():
    writer = SlowLoadingChat(reply="Lenses bend the light.")
    writer.release.set()
    out = write_hypotheses(writer, ["q"] * 3, timeout=60)
    assert out.texts == ["Lenses bend the light."] * 3 and out.fallback is None
    assert len(writer.loaders) == 1 and out.load_s is not None  # once, before the prompts
    again = write_hypotheses(writer, ["q"], timeout=60)
    assert again.texts and again.load_s is None and len(writer.loaders) == 1


def test_a_writer_that_fails_to_load_raises_its_error():
    class Broken(SlowLoadingChat):
        def load(self) -> None:
            raise ModelFileError("model file not found: /nowhere/model.gguf")

    with pytest.raises(ModelFileError, match=r"/nowhere/model\.gguf"):
        write_hypotheses(Broken(), ["q", "q"], timeout=60)


def test_a_local_model_begins_no_load_under_a_cancelled_scope(tmp_path):
    llm = LocalChatModel(model_path=str(tmp_path / "absent.gguf"))  # a load would fail
    assert not llm.loaded
    with cancel_scope() as scope:
        scope.cancel("timeout after 1s")
        with pytest.raises(GenerationCancelled, match="timeout after 1s"):
            llm.load()
        with pytest.raises(GenerationCancelled, match="timeout after 1s"):
            llm.invoke("q")


def test_a_scope_expires_at_its_deadline_for_whichever_thread_asks():
    scope = CancelScope(deadline=time.monotonic() + 0.5, expiry="timeout after 0.5s")
    heard: list[str] = []
    scope.on_cancel(lambda: heard.append(threading.current_thread().name))
    asker = threading.Thread(target=_wait_for, args=(lambda: scope.cancelled,), name="asker")
    asker.start()
    asker.join()
    assert scope.expired and scope.reason == "timeout after 0.5s" and heard == ["asker"]


def test_a_cancel_before_the_deadline_is_no_expiry():
    outer = CancelScope()
    inner = CancelScope(parent=outer, deadline=time.monotonic() - 1, expiry="timeout after 1s")
    outer.cancel("shutting down")
    assert inner.cancelled and not inner.expired and inner.reason == "shutting down"


# -- a cancel of the caller's scope ends the call, keeping what was written ------------

# The pytest timeouts turn a call that never returns into a failure. With ``timeout=5``,
# a call that waited for the stalled prompt would report a timeout and no passage.


@pytest.mark.timeout(10)
@pytest.mark.parametrize("timeout", [None, 5])
def test_a_cancelled_enclosing_scope_ends_the_call_and_keeps_the_passages_written(timeout):
    llm = Stalling()
    try:
        with cancel_scope() as caller:
            _cancel_when_stalled(llm, caller)
            out = write_hypotheses(llm, ["q"] * 3, timeout=timeout, config={"max_concurrency": 1})
    finally:
        llm.release.set()
    assert out.texts == ["P0."] and out.fallback is None
    assert out.failed == 2  # the stalled prompt and the one never sent
    time.sleep(0.3)
    assert llm.calls == [0, 1]


@pytest.mark.timeout(10)
@pytest.mark.parametrize("timeout", [None, 5])
async def test_async_a_cancelled_enclosing_scope_ends_the_call_and_keeps_the_passages_written(
    timeout,
):
    llm = Stalling()
    with cancel_scope() as caller:
        _cancel_when_stalled(llm, caller)
        out = await awrite_hypotheses(
            llm, ["q"] * 3, timeout=timeout, config={"max_concurrency": 1}
        )
    assert out.texts == ["P0."] and out.fallback is None and out.failed == 2
    for _ in range(500):
        if llm.dropped:
            break
        await asyncio.sleep(0.01)
    assert llm.dropped == [1]  # the stalled request was dropped
    assert llm.calls == [0, 1]


@pytest.mark.timeout(10)
def test_under_a_cancelled_scope_no_prompt_is_sent(caplog):
    llm = Stalling()
    try:
        with cancel_scope() as caller, caplog.at_level(logging.WARNING, logger=LOGGER):
            caller.cancel("shutting down")
            out = write_hypotheses(llm, ["q"] * 3)
    finally:
        llm.release.set()
    assert out.texts == [] and out.failed == 3
    assert out.fallback == "cancelled: shutting down"
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == [
        "HyDE fell back to the plain query (3 hypotheses for Stalling): cancelled: shutting down"
    ]
    time.sleep(0.3)
    assert llm.calls == []


@pytest.mark.timeout(10)
async def test_async_under_a_cancelled_scope_no_prompt_is_sent():
    llm = Stalling()
    with cancel_scope() as caller:
        caller.cancel("shutting down")
        out = await awrite_hypotheses(llm, ["q"] * 3)
    assert out.texts == [] and out.fallback == "cancelled: shutting down"
    await asyncio.sleep(0.3)
    assert llm.calls == []


def test_a_scope_tells_its_listeners_when_an_enclosing_scope_is_cancelled():
    outer = CancelScope()
    inner = CancelScope(parent=outer)
    heard: list[str] = []
    inner.on_cancel(lambda: heard.append("inner"))
    forget = inner.on_cancel(lambda: heard.append("forgotten"))
    forget()
    outer.cancel("shutting down")
    inner.cancel("again")
    assert heard == ["inner"]
    inner.on_cancel(lambda: heard.append("late"))  # already cancelled: told at once
    assert heard == ["inner", "late"]


# -- configuration errors raise, transient ones fall back (and are logged) --------------


@pytest.mark.parametrize(
    ("kind", "status"),
    [
        (openai.AuthenticationError, "401"),
        (openai.PermissionDeniedError, "403"),
        (openai.NotFoundError, "404"),
    ],
)
def test_configuration_errors_raise_naming_model_and_endpoint(kind, status):
    llm = Failing(error=openai_error(kind))
    with pytest.raises(ModelConfigurationError) as caught:
        write_hypotheses(llm, ["q"] * 3)
    message = str(caught.value)
    assert status in message and URL in message and "stub-model" in message
    assert "--mode standard" in message
    assert len(llm.calls) < 3 or caught.value.status == int(status)


async def test_async_configuration_errors_raise_too():
    with pytest.raises(ModelConfigurationError, match="401"):
        await awrite_hypotheses(Failing(error=openai_error(openai.AuthenticationError)), ["q"])


def test_configuration_errors_can_be_told_to_fall_back(caplog):
    llm = Failing(error=openai_error(openai.AuthenticationError))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        out = write_hypotheses(llm, ["q"], config_errors="fallback")
    assert "401" in out.fallback and len(caplog.records) == 1


@pytest.mark.parametrize(
    "kind",
    [
        openai.RateLimitError,
        openai.InternalServerError,
        openai.APITimeoutError,
        openai.APIConnectionError,
    ],
)
def test_transient_errors_fall_back_and_are_logged_once(kind, caplog):
    llm = Failing(error=openai_error(kind))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        out = write_hypotheses(llm, ["q"] * 4)
    assert out.texts == [] and out.fallback.startswith("error:")
    assert URL in out.fallback
    fallbacks = [r for r in caplog.records if r.name == LOGGER]
    assert len(fallbacks) == 1 and "fell back" in fallbacks[0].getMessage()


def test_every_fallback_is_logged(caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        write_hypotheses(FakeListChatModel(responses=["I'm sorry, I cannot help."]), ["q"])
        write_hypotheses(Patient(), ["q"], timeout=0.2)
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(messages) == 2
    assert "empty or refusal" in messages[0] and "timeout after 0.2s" in messages[1]


def test_a_partial_failure_keeps_the_passages_that_came_back(caplog):
    llm = Failing(error=openai_error(openai.InternalServerError), fail_on={1})
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        out = write_hypotheses(llm, ["q"] * 3, config={"max_concurrency": 1})
    assert out.fallback is None and out.failed == 1 and len(out.texts) == 2
    assert any("1 of 3 hypotheses" in r.getMessage() for r in caplog.records)


def test_a_missing_local_model_file_is_a_configuration_error(tmp_path):
    llm = LocalChatModel(model_path=str(tmp_path / "gone.gguf"))
    with pytest.raises(HydeLcError, match="model file not found"):
        write_hypotheses(llm, ["q"])


def test_a_real_endpoint_that_rejects_the_key_raises():
    with status_server(401, "Incorrect API key provided") as url:
        llm = load_llm(f"openai:gpt-x@{url}", role="hypothesis", api_key="wrong", max_retries=0)
        with pytest.raises(ModelConfigurationError) as caught:
            write_hypotheses(llm, ["q"], timeout=60)
    assert url in str(caught.value) and "Incorrect API key provided" in str(caught.value)


def test_a_real_endpoint_that_fails_falls_back():
    with status_server(503, "overloaded") as url:
        llm = load_llm(f"openai:gpt-x@{url}", role="hypothesis", max_retries=0)
        out = write_hypotheses(llm, ["q"], timeout=60)
    assert "503" in out.fallback and url in out.fallback


# -- reasoning models ------------------------------------------------------------------


def test_reasoning_is_stripped_before_hypotheses_are_used():
    llm = FakeListChatModel(
        responses=["<think>The user wants a passage on lenses.</think>\nFresnel lenses bend light."]
    )
    out = write_hypotheses(llm, ["q"])
    assert out.texts == ["Fresnel lenses bend light."] and out.fallback is None


def test_output_that_is_all_reasoning_falls_back():
    llm = FakeListChatModel(responses=["<think>Let me consider the lenses, and then"])
    out = write_hypotheses(llm, ["q"])
    assert out.texts == [] and out.fallback == "empty or refusal"


# -- tracing context -------------------------------------------------------------------


def _runs(runs) -> list:
    found = []
    for run in runs:
        found.append(run)
        found.extend(_runs(run.child_runs))
    return found


def test_collect_runs_sees_the_hypothesis_llm_run():
    store = InMemoryVectorStore(embedding=FakeEmbeddings(size=32))
    store.add_texts(["Lighthouses use lenses.", "Bees make honey."])
    retriever = HyDERetriever(
        vectorstore=store,
        hypothesis_llm=FakeListChatModel(responses=["A passage about lenses."]),
        k=1,
    )
    with collect_runs() as collected:
        retriever.invoke("How do lighthouses focus light?")
    llm_runs = [r for r in _runs(collected.traced_runs) if r.run_type == "llm"]
    assert [r.name for r in llm_runs] == ["hyde.hypothesis"]
    assert llm_runs[0].outputs["generations"][0][0]["text"] == "A passage about lenses."


def test_a_timed_out_hypothesis_does_not_hold_the_process_at_exit():
    # The abandoned calls sleep ten minutes; the process must exit without them. The
    # limit below leaves minutes for a slow import on a loaded machine, and still
    # fails long before the abandoned calls could end.
    script = (
        "import time\n"
        "from langchain_core.language_models import BaseChatModel\n"
        "from hyde_lc.hyde.hypotheses import write_hypotheses\n"
        "class Slow(BaseChatModel):\n"
        "    _llm_type = 'slow'\n"
        "    def _generate(self, *a, **k):\n"
        "        time.sleep(600)\n"
        "out = write_hypotheses(Slow(), ['q', 'q', 'q'], timeout=0.3)\n"
        "assert out.fallback.startswith('timeout'), out\n"
        "print('done', flush=True)\n"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the process waited for the abandoned calls at exit: {exc.stdout!r}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "done"
