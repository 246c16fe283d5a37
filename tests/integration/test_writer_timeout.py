"""The hypothesis timeout with the real local writer, each case in a process of its own.

What is checked is what happened, never how long it took: the fallback and what it says,
the tokens the abandoned generations spent against what finishing them would have, the
exit code, and that nothing crashed on the way out.
"""

import json
import re
import subprocess
import sys

import pytest

from tests.fakes import ROOT

pytestmark = pytest.mark.integration

QUESTION = "How did the Fresnel lens change lighthouses?"
WRITER = "qwen2.5-coder-0.5b"
CRASHES = ("Traceback", "Fatal Python error", "FATAL", "terminate called", "Segmentation fault")
HANG = 600
"""Seconds before a child process counts as hung (a loaded 2-core machine is slow)."""


def _python(*args: str) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` from the repository root (so this checkout's hyde_lc is imported)."""
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=HANG
    )


def _clean_exit(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, done.stderr[-3000:]
    assert not [mark for mark in CRASHES if mark in done.stderr], done.stderr[-3000:]


def test_ask_falls_back_at_the_timeout_with_a_cold_writer_and_exits(sample_store_dir):
    # The user's command: eight hypotheses, one second, the writer not loaded yet.
    done = _python(
        "-m", "hyde_lc.cli", "ask", QUESTION, "--n-hypotheses", "8", "--timeout", "1",
        "--no-answer", "--json", "--hypothesis-llm", f"local:{WRITER}",
        "--store", str(sample_store_dir),
    )  # fmt: skip
    _clean_exit(done)
    record = json.loads(done.stdout)
    assert record["hypotheses"] == [] and len(record["documents"]) == 4  # the question alone
    # The load is named, whether the time ran out during it or after it.
    assert re.match(
        r"timeout after 1\.0s \((the writer was still loading|loading the writer took)",
        record["fallback"],
    ), record["fallback"]
    assert "writer_load_s" in record["timings"]


ABANDONED = """
import atexit, json, sys, time

state = {}


def report():  # registered first, so it runs last: after the engine's own exit handler
    print(json.dumps(state), flush=True)


atexit.register(report)

from hyde_lc import HyDERetriever, open_store
from hyde_lc.models.loading import local_model_path
from hyde_lc.models.local_llm import LocalChatModel


class Endless(LocalChatModel):
    # Every request runs to max_tokens unless it is stopped.
    def _request(self, messages, stop, **kwargs):
        return {**super()._request(messages, stop, **kwargs), "ignore_eos": True}


n, cap = 8, 1024
writer = Endless(
    model_path=local_model_path(sys.argv[2]), model_name=sys.argv[2], temperature=0.7,
    max_tokens=cap,
)
writer.load()
before = writer.engine_metrics()["tokens_predicted_total"]
retriever = HyDERetriever(
    vectorstore=open_store(sys.argv[1]), hypothesis_llm=writer, n_hypotheses=n, timeout=1.0
)
result = retriever.retrieve_with_details("How did the Fresnel lens change lighthouses?")
state.update(fallback=result.fallback, hypotheses=len(result.hypotheses), cap=n * cap)
# Stopped requests end within a decoding step; requests left running would take minutes.
waited = time.monotonic() + 120
while writer.engine_metrics()["requests_processing"] and time.monotonic() < waited:
    time.sleep(0.05)
state["idle"] = not writer.engine_metrics()["requests_processing"]
state["tokens"] = writer.engine_metrics()["tokens_predicted_total"] - before
"""


def test_generations_left_at_the_timeout_are_stopped_and_the_process_exits(sample_store_dir):
    done = _python("-c", ABANDONED, str(sample_store_dir), WRITER)
    _clean_exit(done)
    state = json.loads(done.stdout.strip().splitlines()[-1])
    assert state["fallback"] == "timeout after 1.0s" and state["hypotheses"] == 0
    assert state["idle"]  # every request stopped, none runs on for nobody
    assert state["tokens"] < state["cap"] / 20, state  # far from what finishing would spend


LOAD_AT_EXIT = """
import threading

import xllamacpp

from hyde_lc.models.loading import load_llm

began = threading.Event()
make_server = xllamacpp.Server


def server(params):
    began.set()  # the llama.cpp load begins now
    return make_server(params)


xllamacpp.Server = server
llm = load_llm("local:smollm2-135m")
threading.Thread(target=llm.load, daemon=True).start()
began.wait(120)
print("exiting", flush=True)
"""


def test_exiting_while_a_load_is_under_way_does_not_crash():
    # The main thread ends as the load begins in a daemon thread: the interpreter exits
    # around a llama.cpp load it cannot stop, and must do so cleanly.
    done = _python("-c", LOAD_AT_EXIT)
    _clean_exit(done)
    assert done.stdout.strip() == "exiting"
