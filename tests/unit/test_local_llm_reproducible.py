"""Greedy and seeded local requests take one path: no reused prompt prefix, and alone.

The llama.cpp engine is replaced by a stand-in that records the requests it is sent and
how many run at once; the real engine is tested in tests/integration/test_reproducible.py.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from hyde_lc.models.local_llm import LocalChatModel, _Slots
from tests.fakes import serve_local_models


class StandInServer:
    """Answers every request with "ok", counting requests that run at the same time.

    With ``barrier`` set, sampled requests wait there for each other; with ``linger``,
    a greedy request waits up to that long for another request to join it.
    """

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.running = 0
        self.most = 0
        self.changed = threading.Condition()
        self.barrier: threading.Barrier | None = None
        self.linger = 0.0

    def handle_chat_completions(self, request: dict[str, Any], on_chunk: Any) -> None:
        with self.changed:
            self.requests.append(request)
            self.running += 1
            self.most = max(self.most, self.running)
            self.changed.notify_all()
            if request["temperature"] == 0:
                self.changed.wait_for(lambda: self.running > 1, self.linger)
        try:
            if self.barrier is not None and request["temperature"] > 0:
                self.barrier.wait()  # sampled requests meet: they do run together
            on_chunk({"choices": [{"delta": {"content": "ok"}, "finish_reason": "stop"}]})
            usage = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
            on_chunk({"choices": [], "usage": usage})
        finally:
            with self.changed:
                self.running -= 1


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> StandInServer:
    stand_in = StandInServer()
    serve_local_models(monkeypatch, stand_in)
    return stand_in


def _model(**fields: Any) -> LocalChatModel:
    return LocalChatModel(model_path="stand-in.gguf", model_name="stand-in", **fields)


@pytest.mark.parametrize(
    ("fields", "cached"),
    [
        ({"temperature": 0.0}, False),
        ({"temperature": 0.7, "seed": 42}, False),
        ({"temperature": 0.7}, True),
    ],
    ids=["greedy", "seeded", "sampled"],
)
def test_only_unseeded_sampling_reuses_a_cached_prompt_prefix(server, fields, cached):
    assert _model(**fields).invoke("Name a colour.").text == "ok"
    (request,) = server.requests
    assert request["cache_prompt"] is cached


def test_greedy_calls_run_one_at_a_time_and_sampled_ones_together(server):
    server.linger = 0.2  # long enough for a second request to join, if it could
    _model(temperature=0.0).batch(["a", "b", "c", "d"], {"max_concurrency": 4})
    assert server.most == 1
    server.barrier = threading.Barrier(3, timeout=10)
    _model(temperature=0.7).batch(["a", "b", "c"], {"max_concurrency": 3})
    assert server.most == 3  # all three met at the rendezvous


def test_warming_sends_one_greedy_request_per_engine(server):
    answer, writer = _model(temperature=0.0), _model(temperature=0.7)
    answer.warm_up()
    writer.warm_up()  # the same engine: already warm
    (request,) = server.requests
    assert request["max_tokens"] == 1 and request["temperature"] == 0
    assert len(request["messages"][0]["content"].split()) == 512  # one full batch


# -- the engine's places -------------------------------------------------------------------


def _acquire_in_thread(slots: _Slots, alone: bool, stop: threading.Event) -> threading.Thread:
    got: list[bool] = []

    def take() -> None:
        got.append(slots.acquire(alone=alone, stopped=stop.is_set))

    thread = threading.Thread(target=take, daemon=True)
    thread.got = got  # type: ignore[attr-defined]
    thread.start()
    return thread


def _waiting(thread: threading.Thread) -> bool:
    thread.join(0.3)  # a thread let in finishes at once; one that waits is still there
    return thread.is_alive()


def test_shared_requests_fill_the_places_then_wait():
    slots, stop = _Slots(2), threading.Event()
    assert slots.acquire(alone=False, stopped=stop.is_set)
    assert slots.acquire(alone=False, stopped=stop.is_set)
    third = _acquire_in_thread(slots, False, stop)
    assert _waiting(third)
    slots.release()
    third.join(10)
    assert third.got == [True] and slots.busy == 2  # type: ignore[attr-defined]


def test_a_request_alone_waits_for_an_empty_engine_and_goes_before_newcomers():
    slots, stop = _Slots(4), threading.Event()
    assert slots.acquire(alone=False, stopped=stop.is_set)
    alone = _acquire_in_thread(slots, True, stop)
    assert _waiting(alone)  # one request is decoding: not alone yet
    newcomer = _acquire_in_thread(slots, False, stop)
    assert _waiting(newcomer)  # places are free, but the request alone waits first
    slots.release()
    alone.join(10)
    assert alone.got == [True] and slots.alone  # type: ignore[attr-defined]
    assert _waiting(newcomer)  # nobody decodes beside it
    slots.release()
    newcomer.join(10)
    assert newcomer.got == [True] and not slots.alone  # type: ignore[attr-defined]


def test_a_stopped_wait_gives_up_and_lets_others_in():
    slots, stop = _Slots(2), threading.Event()
    assert slots.acquire(alone=False, stopped=threading.Event().is_set)
    alone = _acquire_in_thread(slots, True, stop)
    assert _waiting(alone)
    stop.set()
    alone.join(10)
    assert alone.got == [False] and slots.waiting_alone == 0  # type: ignore[attr-defined]
    assert slots.acquire(alone=False, stopped=threading.Event().is_set)
