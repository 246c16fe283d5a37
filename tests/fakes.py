"""Fakes and helpers shared by the test suite (fixtures live in the conftest files).

Fake models (``ScriptedChat``, ``SlowLoadingChat``, ``WordCountChat``, ``PromptLog``,
``FakeEmbeddings``), a fake base retriever (``FixedHits``), a callback that records runs
(``RunRecorder``), generators of test documents (``make_pdf``, ``long_text``,
``unique_text``, ``TOPICS``), a digest of a store's content (``tree_digest``) and real local
HTTP endpoints that misbehave (``status_server``, ``silent_server``, ``refused_url``).
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.language_models import FakeListChatModel
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, get_buffer_string
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.retrievers import BaseRetriever
from pydantic import Field

from hyde_lc.models.local_llm import LocalChatModel, _Engine, _Slots

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_PDF = ROOT / "hyde_lc" / "sample" / "lighthouses.pdf"
SHARED = ROOT.parent / "shared"


def default_embedding_id() -> str:
    """The embedding model a new collection records here by default (the CPU decides)."""
    from hyde_lc.models.minilm_quantized import MINILM_DQ_MODEL_ID, cpu_adds_int8_products_exactly

    return MINILM_DQ_MODEL_ID if cpu_adds_int8_products_exactly() else "local:minilm"


# -- documents ------------------------------------------------------------------------------

TOPICS = [
    "Lighthouse lenses bend light into a beam with concentric prisms.",
    "Keepers trimmed wicks and wound the clockwork every night.",
    "Automation replaced most keepers by the end of the century.",
    "GPS made many coastal lights less important for navigation.",
    "Bees pollinate flowers and make honey in hives.",
    "Volcanoes erupt when magma rises through the crust.",
    "The stock market fell sharply in the autumn of that year.",
    "Sourdough bread rises thanks to wild yeast and bacteria.",
]

FIVE_FILES = {
    "lens.txt": "Augustin Fresnel designed a stepped lens of concentric prisms in 1822.",
    "keeper.txt": "Keepers trimmed wicks and wound the clockwork every night.",
    "fog.txt": "Fog signals used horns, bells and guns when the light could not be seen.",
    "bees.txt": "Bees pollinate flowers and make honey in their hives.",
    "yeast.txt": "Sourdough bread rises thanks to wild yeast and lactic bacteria.",
}
"""Five one-line text files by name: three on lighthouses, two on other things."""


def write_files(folder: Path, files: dict[str, str] = FIVE_FILES) -> Path:
    """``folder`` (created) holding ``files``, name -> text."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


PARAGRAPH = (
    "The keeper climbed the tower at dusk to light the lamp. {n} He wound the clockwork that "
    "turned the lens and wrote the weather in the log. Ships passing the reef counted the "
    "flashes to know which light they saw. "
)


def long_text(n_paragraphs: int, tag: str = "") -> str:
    """``n_paragraphs`` paragraphs of keeper prose, each numbered (``{tag}{i}.``)."""
    return "\n\n".join(PARAGRAPH.format(n=f"{tag}{i}.") for i in range(n_paragraphs))


def unique_text(tag: str, paragraphs: int) -> str:
    """Paragraphs of sentences that never repeat (so duplicated text is detectable)."""
    return "\n\n".join(
        " ".join(
            f"In {tag} paragraph {p}, sentence {s} names item {p * 10 + s} and "
            f"harbour {(p * 7 + s) % 23}."
            for s in range(4)
        )
        for p in range(paragraphs)
    )


def make_pdf(path: Path, pages: list[str]) -> Path:
    """Write a real PDF (via fpdf2) with one text page per item ('' = blank page)."""
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_font("Helvetica", size=11)
    for text in pages:
        pdf.add_page()
        if text:
            pdf.multi_cell(0, 6, text)
    pdf.output(str(path))
    return path


def tree_digest(folder: Path, *, skip: tuple[str, ...] = ()) -> str:
    """Digest of a collection's logical content: ids, texts, metadata, vectors, settings.

    Not of the files' bytes: Chroma rewrites its sqlite file and HNSW headers on every
    open, even a read-only one, so bytes change although nothing stored did. ``skip``
    names collection settings left out.
    """
    import chromadb
    from chromadb.config import Settings

    client = chromadb.PersistentClient(str(folder), settings=Settings(anonymized_telemetry=False))
    digest = hashlib.sha256()
    for collection in sorted(client.list_collections(), key=lambda c: c.name):
        got = collection.get(include=["documents", "metadatas", "embeddings"])
        order = sorted(range(len(got["ids"])), key=lambda i: got["ids"][i])
        settings = sorted((k, v) for k, v in (collection.metadata or {}).items() if k not in skip)
        digest.update(repr((collection.name, settings)).encode())
        for i in order:
            vector = [round(float(x), 6) for x in got["embeddings"][i]]
            meta = sorted(got["metadatas"][i].items())
            digest.update(repr((got["ids"][i], got["documents"][i], meta, vector)).encode())
    return digest.hexdigest()


# -- models ---------------------------------------------------------------------------------


class FakeEmbeddings(DeterministicFakeEmbedding):
    """Deterministic hash embeddings with a model id, so stores can record it."""

    model_id: str = "fake:hash-32"


class RecordingEmbeddings(FakeEmbeddings):
    """FakeEmbeddings that log every text they embed, in order: ``(method, text)``.

    ``method`` is ``"query"`` (``embed_query``) or ``"documents"`` (``embed_documents``).
    ``on_query``, when set, is called with each text given to ``embed_query``.
    """

    read: list[tuple[str, str]] = Field(default_factory=list)
    on_query: Any = None

    def embed_query(self, text: str) -> list[float]:
        self.read.append(("query", text))
        if self.on_query is not None:
            self.on_query(text)
        return super().embed_query(text)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.read.extend(("documents", text) for text in texts)
        return super().embed_documents(texts)

    @property
    def texts(self) -> list[str]:
        """Every text read so far, in order."""
        return [text for _, text in self.read]


class InFlight:
    """Counts calls running at once (shared by a fake model and its copies)."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0
        self.changed = threading.Condition()

    def enter(self) -> None:
        with self.changed:
            self.now += 1
            self.most = max(self.most, self.now)
            self.changed.notify_all()

    def leave(self) -> None:
        with self.changed:
            self.now -= 1


class ScriptedChat(BaseChatModel):
    """Replies from a script (cycled); optional delay, error or refusal.

    ``log`` gets one entry per call and ``max_in_flight`` is the most calls that ran at
    the same time (both shared with the copies LangChain makes of the model). With
    ``rendezvous=n`` each call waits (at most ``rendezvous_wait`` seconds) until ``n``
    calls have been in flight at once: calls made concurrently all go on at once, calls
    made one after another each wait in vain. Tests check concurrency with
    ``max_in_flight``, never with a clock.
    """

    replies: list[str] = Field(
        default_factory=lambda: ["A passage about lighthouses and their lenses."]
    )
    delay: float = 0.0
    error: bool = False
    finish_reason: str | None = None
    """Reported in each reply's metadata ("length": stopped at the token cap)."""
    counter: Any = Field(default_factory=itertools.count)
    log: list[str] = Field(default_factory=list)
    rendezvous: int = 0
    rendezvous_wait: float = 10.0
    in_flight: Any = Field(default_factory=InFlight)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"replies": self.replies, "delay": self.delay}

    @property
    def max_in_flight(self) -> int:
        return self.in_flight.most

    def _next(self) -> str:
        self.log.append("call")
        if self.error:
            raise RuntimeError("model exploded")
        return self.replies[next(self.counter) % len(self.replies)]

    def _result(self, text: str) -> ChatResult:
        msg = AIMessage(
            content=text,
            usage_metadata={"input_tokens": 5, "output_tokens": 7, "total_tokens": 12},
            response_metadata={"finish_reason": self.finish_reason} if self.finish_reason else {},
        )
        return ChatResult(generations=[ChatGeneration(message=msg)])

    def _met(self) -> bool:
        return self.in_flight.most >= self.rendezvous

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.in_flight.enter()
        try:
            with self.in_flight.changed:
                self.in_flight.changed.wait_for(self._met, timeout=self.rendezvous_wait)
            time.sleep(self.delay)
            return self._result(self._next())
        finally:
            self.in_flight.leave()

    async def _agenerate(self, messages, stop=None, run_manager=None, **kwargs):
        self.in_flight.enter()
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.rendezvous_wait
            while not self._met() and loop.time() < deadline:
                await asyncio.sleep(0.01)
            await asyncio.sleep(self.delay)
            return self._result(self._next())
        finally:
            self.in_flight.leave()


class SlowLoadingChat(BaseChatModel):
    """A writer that loads its weights on first use, as a local llama.cpp model does.

    It has ``loaded`` and ``load()`` (`hyde_lc.hyde.hypotheses.Loadable`); a call loads it
    first if nobody did. The load lasts until ``release`` is set (at most a minute).
    Loaded, a call returns ``reply``, or without one generates until its cancel scope is
    cancelled (at most a minute). ``loaders`` are the threads that ran a load, ``generated``
    counts the calls that began generating (all shared with the model's copies).
    """

    reply: str | None = None
    release: Any = Field(default_factory=threading.Event)
    done: Any = Field(default_factory=threading.Event)
    loaders: list[threading.Thread] = Field(default_factory=list)
    generated: list[int] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "slow-loading"

    @property
    def loaded(self) -> bool:
        return bool(self.done.is_set())

    def load(self) -> None:
        self.loaders.append(threading.current_thread())
        self.release.wait(60)
        self.done.set()

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        from hyde_lc.core.cancellation import GenerationCancelled, current_scope

        if not self.loaded:
            self.load()
        self.generated.append(1)
        scope = current_scope()
        deadline = time.monotonic() + 60
        while self.reply is None and time.monotonic() < deadline:
            if scope is not None and scope.cancelled:
                raise GenerationCancelled(str(scope.reason))
            time.sleep(0.01)
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=self.reply or ""))])


class WordCountChat(BaseChatModel):
    """Reports usage as word counts of the prompt and the reply, so stages differ."""

    model_name: str = "word-counter"
    replies: dict[str, str] = Field(default_factory=dict)
    prompts: list[str] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "word-count"

    def _generate(self, messages, stop=None, run_manager=None, **kwargs: Any) -> ChatResult:
        prompt = get_buffer_string(messages)
        self.prompts.append(prompt)
        reply = next((r for key, r in self.replies.items() if key in prompt), "A passage.")
        usage = {
            "input_tokens": len(prompt.split()),
            "output_tokens": len(reply.split()),
            "total_tokens": len(prompt.split()) + len(reply.split()),
        }
        message = AIMessage(
            content=reply, usage_metadata=usage, response_metadata={"model_name": self.model_name}
        )
        return ChatResult(generations=[ChatGeneration(message=message)])


class PromptLog(FakeListChatModel):
    """A fake chat model that keeps every prompt it is sent (as text)."""

    seen: list[str] = Field(default_factory=list)

    def _call(self, messages, stop=None, run_manager=None, **kwargs):
        self.seen.append("\n".join(m.text for m in messages))
        return super()._call(messages, stop, run_manager, **kwargs)


# -- retrievers and callbacks ---------------------------------------------------------------


class FixedHits(BaseRetriever):
    """Returns the given hits in order (at most k), like a ranked base retriever."""

    hits: list[Document]
    requests: list[int | None] = Field(default_factory=list)

    def _get_relevant_documents(self, query, *, run_manager, k=None, **kwargs):
        self.requests.append(k)
        return self.hits[: k or len(self.hits)]

    async def _aget_relevant_documents(self, query, *, run_manager, k=None, **kwargs):
        return self.hits[: k or len(self.hits)]


class RunRecorder(BaseCallbackHandler):
    """Records (kind, run id, parent run id, tags) of every retriever, chat model and chain run.

    ``ended`` maps each retriever run that ended to the documents it returned.
    """

    def __init__(self) -> None:
        self.runs: list[tuple[str, UUID, UUID | None, list[str]]] = []
        self.ended: dict[UUID, list[Document]] = {}

    def on_retriever_end(self, documents, *, run_id, parent_run_id=None, **kw):
        self.ended[run_id] = list(documents)

    def on_retriever_start(self, serialized, query, *, run_id, parent_run_id=None, tags=None, **kw):
        self.runs.append(("retriever", run_id, parent_run_id, tags or []))

    def on_chat_model_start(
        self, serialized, messages, *, run_id, parent_run_id=None, tags=None, **kw
    ):
        self.runs.append(("llm", run_id, parent_run_id, tags or []))

    def on_chain_start(self, serialized, inputs, *, run_id, parent_run_id=None, tags=None, **kw):
        self.runs.append((kw.get("name") or "chain", run_id, parent_run_id, tags or []))


def serve_local_models(monkeypatch: Any, server: Any) -> None:
    """Every `LocalChatModel` sends its requests to ``server``, a stand-in for llama.cpp's.

    ``server`` answers ``handle_chat_completions(request, on_chunk)`` as llama.cpp's does;
    the model's slots, streaming, parsing and guards run as with the real engine.
    """
    engine = _Engine(server=server, slots=_Slots(4), address="", api_key="")
    monkeypatch.setattr(LocalChatModel, "_engine", lambda self: engine)


# -- endpoints ------------------------------------------------------------------------------


@contextmanager
def status_server(status: int, message: str = "stub error") -> Iterator[str]:
    """An OpenAI-style endpoint answering every POST with ``status``; yields its /v1 URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = json.dumps({"error": {"message": message, "type": "stub"}}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def silent_server() -> Iterator[str]:
    """An endpoint that accepts connections and never replies; yields its /v1 URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        listener.close()


def refused_url() -> str:
    """A /v1 URL on a local port where nothing listens (connections are refused)."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    return f"http://127.0.0.1:{port}/v1"


def recorded_threads(monkeypatch: Any) -> list[threading.Thread]:
    """The threads started from now on in this test (to join a background task's)."""
    made: list[threading.Thread] = []

    class Recorded(threading.Thread):
        def start(self) -> None:
            made.append(self)
            super().start()

    monkeypatch.setattr(threading, "Thread", Recorded)
    return made


def chroma_of(store: Any) -> Any:
    """The `ChromaCollection` behind a store opened by `open_store` (its records, metadata)."""
    from hyde_lc.store.collection import HybridCollection

    return HybridCollection.of(store).chroma
