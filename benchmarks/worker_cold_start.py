"""What a retriever costs a worker process: unpickling and the first query, against the parent's.

A HyDE retriever over the sample PDF's collection (default embeddings, ``--writer`` writing
one hypothesis) is measured two ways, ``--rounds`` times each, taking turns:

* **in one process**: a fresh Python builds the retriever (``open_store``, ``load_llm``)
  and asks a first question (the embedding model and the writer load then), then the
  others (warm); ``import`` is the time to import hyde_lc and LangChain;
* **in a spawned worker**: the parent, which built and used the retriever already, hands
  it to a new ``ProcessPoolExecutor(1, mp_context=spawn)`` through the pool's initializer
  (the README recipe); ``start`` is from creating the pool to the initializer running
  (a new Python with the standard library only), ``unpickle`` the initializer's
  ``pickle.loads`` (importing hyde_lc, LangChain and Chroma, and reopening the store),
  then the first question (models loaded there) and the warm ones.

The writer samples at 0.7, so each question's time varies with what it writes; the table
gives medians over the rounds of each step, in seconds, and the pickle's size.

    python benchmarks/worker_cold_start.py --rounds 5 --writer local:qwen2.5-coder-0.5b
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

QUESTIONS = [
    "Who made the first Fresnel lens?",
    "How were lighthouse lamps fuelled?",
    "Why were keepers withdrawn?",
    "What did fog signals use?",
]


def build(store: str, writer: str) -> Any:
    from hyde_lc import HyDERetriever, load_llm, open_store

    return HyDERetriever(
        vectorstore=open_store(store), hypothesis_llm=load_llm(writer, role="hypothesis")
    )


def timed_queries(retriever: Any) -> dict[str, float]:
    start = time.perf_counter()
    retriever.invoke(QUESTIONS[0])
    first = time.perf_counter() - start
    warm = []
    for question in QUESTIONS[1:]:
        start = time.perf_counter()
        retriever.invoke(question)
        warm.append(time.perf_counter() - start)
    return {"first_s": first, "warm_s": statistics.median(warm)}


def as_one_process(store: str, writer: str) -> dict[str, float]:
    start = time.perf_counter()
    from langchain_core.retrievers import BaseRetriever  # noqa: F401

    import hyde_lc  # noqa: F401

    imported = time.perf_counter() - start
    start = time.perf_counter()
    retriever = build(store, writer)
    built = time.perf_counter() - start
    return {"import_s": imported, "build_s": built, **timed_queries(retriever)}


_RETRIEVER: Any = None
_READY: dict[str, float] = {}


def _keep(data: bytes) -> None:
    global _RETRIEVER
    _READY["at"] = time.time()
    start = time.perf_counter()
    _RETRIEVER = pickle.loads(data)
    _READY["unpickle_s"] = time.perf_counter() - start


def _in_worker() -> dict[str, float]:
    return {**_READY, **timed_queries(_RETRIEVER)}


def in_a_worker(data: bytes) -> dict[str, float]:
    spawn = multiprocessing.get_context("spawn")
    created = time.time()
    with ProcessPoolExecutor(1, mp_context=spawn, initializer=_keep, initargs=(data,)) as pool:
        got = pool.submit(_in_worker).result()
    return {
        "start_s": got.pop("at") - created,
        "unpickle_s": got["unpickle_s"],
        "first_s": got["first_s"],
        "warm_s": got["warm_s"],
    }


def sample_store(folder: Path) -> str:
    from hyde_lc import ingest_paths, open_store
    from hyde_lc.ingest.samples import sample_files

    ingest_paths(sample_files(), open_store(folder))
    return str(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--writer", default="local:qwen2.5-coder-0.5b")
    parser.add_argument(
        "--one-process", nargs=2, metavar=("STORE", "WRITER"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.one_process:
        print(json.dumps(as_one_process(*args.one_process)))
        return
    with tempfile.TemporaryDirectory(prefix="hyde-lc-workers-") as work:
        store = sample_store(Path(work) / "store")
        retriever = build(store, args.writer)
        timed_queries(retriever)  # the parent has used it: its models are loaded
        data = pickle.dumps(retriever)
        own: list[dict[str, float]] = []
        worker: list[dict[str, float]] = []
        for _ in range(args.rounds):
            done = subprocess.run(
                [sys.executable, __file__, "--one-process", store, args.writer],
                capture_output=True,
                text=True,
                check=True,
            )
            own.append(json.loads(done.stdout.strip().splitlines()[-1]))
            worker.append(in_a_worker(data))

    def median(rows: list[dict[str, float]], key: str) -> str:
        return f"{statistics.median(r[key] for r in rows):.2f}"

    print(f"writer {args.writer}, {args.rounds} rounds, pickle {len(data) / 1024:.1f} KiB")
    print("| where | import / start | build / unpickle | first query | warm query |")
    print("|---|---|---|---|---|")
    print(
        f"| one process | {median(own, 'import_s')} | {median(own, 'build_s')} | "
        f"{median(own, 'first_s')} | {median(own, 'warm_s')} |"
    )
    print(
        f"| spawned worker | {median(worker, 'start_s')} | {median(worker, 'unpickle_s')} | "
        f"{median(worker, 'first_s')} | {median(worker, 'warm_s')} |"
    )


if __name__ == "__main__":
    main()
