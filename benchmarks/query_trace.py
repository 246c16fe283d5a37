"""Which hyde_lc modules one warm HyDE query runs code in.

A hybrid HyDE query (one hypothesis from an instant fake chat model, fake embeddings) on
an on-disk collection of 40 chunks, through the public API only. One query warms every
cache; the next one is traced with ``sys.setprofile`` in every thread (the lexical search
and the query's embedding run beside the main thread): each Python function it enters is
counted under the file that defines it. ``--no-writer`` traces the default configuration
(no hypothesis model: hybrid on the question alone).

    python benchmarks/query_trace.py
    python benchmarks/query_trace.py --no-writer --functions
    python benchmarks/query_trace.py --all   # every Python function, libraries included
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.language_models.fake_chat_models import FakeListChatModel

import hyde_lc
from hyde_lc import HyDERetriever, ingest_documents, open_store

PACKAGE = Path(hyde_lc.__file__).resolve().parent
TOPICS = ("lamps", "lenses", "fog horns", "keepers", "towers", "storms", "oil", "ships")


def build(folder: Path, writer: bool) -> HyDERetriever:
    """A retriever over a small on-disk collection ingested through the public API."""
    store = open_store(folder, embeddings=DeterministicFakeEmbedding(size=32))
    docs = [
        Document(
            f"Chunk {i} about {TOPICS[i % len(TOPICS)]} and lighthouse {i // 8}.",
            metadata={"source": f"doc{i // 8}.txt"},
        )
        for i in range(40)
    ]
    ingest_documents(docs, store, progress=False)
    llm = FakeListChatModel(responses=["Fresnel lenses focus the light of the lamps."])
    return HyDERetriever(vectorstore=store, hypothesis_llm=llm if writer else None, k=4)


class Tracer:
    """Counts (module, function) calls while active, in every thread started after it."""

    def __init__(self, everything: bool = False) -> None:
        self.everything = everything
        """Count every Python function (libraries too), not only hyde_lc's."""
        self.calls: Counter[tuple[str, str]] = Counter()
        self.active = False
        self._lock = threading.Lock()

    def profile(self, frame: Any, event: str, arg: Any) -> None:
        if not self.active or event != "call":
            return
        path = Path(frame.f_code.co_filename)
        if not path.is_absolute():
            return
        try:
            module = f"hyde_lc/{path.resolve().relative_to(PACKAGE)}"
        except ValueError:
            if not self.everything:
                return
            module = str(path)
        with self._lock:
            self.calls[(module, frame.f_code.co_name)] += 1

    def install(self) -> None:
        """Profile this thread and every thread started from now on (worker pools)."""
        threading.setprofile(self.profile)
        sys.setprofile(self.profile)

    def run(self, retriever: HyDERetriever, query: str) -> Counter[tuple[str, str]]:
        """(module, function) -> calls, for one ``invoke`` of ``retriever``."""
        self.calls.clear()
        self.active = True
        try:
            retriever.invoke(query)
        finally:
            self.active = False
        return Counter(self.calls)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--no-writer", action="store_true", help="no hypothesis model")
    parser.add_argument("--functions", action="store_true", help="list the functions too")
    parser.add_argument("--all", action="store_true", help="count libraries' functions too")
    args = parser.parse_args()
    tracer = Tracer(everything=args.all)
    tracer.install()  # before any worker thread starts, so that they are traced too
    with tempfile.TemporaryDirectory(prefix="hyde-trace-") as tmp:
        retriever = build(Path(tmp) / "store", writer=not args.no_writer)
        retriever.invoke("How do lighthouse lenses work?")  # warm
        calls = tracer.run(retriever, "Which oil did the keepers burn?")
    modules: Counter[str] = Counter()
    for (module, _), count in calls.items():
        modules[module] += count
    ours = [m for m in modules if m.startswith("hyde_lc/")]
    print(
        f"{len(ours)} hyde_lc modules entered by one warm query; "
        f"{sum(modules.values())} Python function calls"
    )
    for module, count in sorted(modules.items()):
        print(f"  {module:48s} {count:6d} calls")
        if args.functions:
            for (mod, function), n in sorted(calls.items()):
                if mod == module:
                    print(f"      {function:44s} {n:6d}")


if __name__ == "__main__":
    main()
