"""What several writers on one Chroma server cost: throughput, waits, and readers meanwhile.

One ``chroma run`` on 127.0.0.1 and, for each writer count, a fresh collection. Each writer
is a process of its own with its own lexical index (its own ``HYDE_LC_CACHE_DIR``, as
separate machines would have); each ingests ``--writes`` files one `ingest_paths` call at a
time (one write each: ten chunks of about 900 characters, a term of their own per file),
then replaces every file once (the same count of writes again, each deleting ten chunks
and adding ten). Vectors come from `benchmarks.soak.LookupEmbeddings` (a hash, no model),
so the figures are the write path's and the lease's, not an embedder's: with a real
embedder each write takes longer and the lease's share is smaller.

Meanwhile this process searches the collection (hybrid, k=10, the default
``HYDE_LC_REFRESH_INTERVAL``) as a reader on a third cache folder, and times each search;
the same searches on the finished collection, with no writer, are the baseline.

Reported per writer count: writes per second over all writers, a write's time (median,
95th percentile), the time writers waited for the lease, and the reader's search time
during the writes and after. ``--code DIR`` runs the writers from another checkout of the
package (the code before the lease, for the single-writer overhead).

    .venv/bin/python -m benchmarks.concurrent_writers --writers 1 2 4 --writes 30 \\
        --out benchmarks/results/concurrent_writers
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
COLLECTION = "concurrent_writers"
DIMENSION = 64
PARAGRAPHS = 10
CHUNK_SIZE = 1000
SEED = 7
WORDS = [
    "lamp",
    "keeper",
    "tower",
    "reef",
    "fog",
    "lens",
    "light",
    "signal",
    "harbour",
    "storm",
    "coast",
    "wave",
    "rock",
    "beacon",
    "night",
    "ship",
    "keeper's",
    "log",
    "oil",
    "wick",
    "glass",
    "rotation",
    "flash",
    "mariner",
    "chart",
    "bell",
    "horn",
]


def file_text(writer: int, number: int, version: int) -> str:
    """Ten paragraphs of about 900 characters, each with the file's own term."""
    rng = random.Random(f"{SEED}-{writer}-{number}-{version}")
    term = f"sigil{writer}x{number}v{version}"
    paragraphs = []
    for _ in range(PARAGRAPHS):
        words = [rng.choice(WORDS) for _ in range(140)]
        paragraphs.append(f"{term} " + " ".join(words) + f" {term}.")
    return "\n\n".join(paragraphs)


# -- a writer (this module run with ``write``) -------------------------------------------------


def run_writer(url: str, folder: Path, out: Path, writer: int, writes: int) -> None:
    """Add ``writes`` files one write each, then replace each once; log each write's times."""
    from benchmarks.soak import LookupEmbeddings
    from hyde_lc import ingest_paths, open_store

    waits: list[float] = []
    try:  # the lease exists from the version that has several writers on a server
        from hyde_lc.store.lease import WriterLease

        acquire = WriterLease.acquire

        def timed(self: Any, wait: float) -> None:
            started = time.perf_counter()
            try:
                acquire(self, wait)
            finally:
                waits.append(time.perf_counter() - started)

        WriterLease.acquire = timed  # type: ignore[method-assign]
    except ImportError:
        pass
    store = open_store(url=url, collection=COLLECTION, embeddings=LookupEmbeddings(DIMENSION))
    rows = []
    for version in (0, 1):
        for number in range(writes):
            path = folder / f"w{writer}-{number}.txt"
            path.write_text(file_text(writer, number, version), encoding="utf-8")
            waits.clear()
            at = time.time()
            started = time.perf_counter()
            report = ingest_paths(
                [path], store, chunk_size=CHUNK_SIZE, chunk_overlap=0, progress=False
            )
            took = time.perf_counter() - started
            assert report.files[0].status == ("added", "replaced")[version], report.summary()
            rows.append({"version": version, "s": took, "wait_s": sum(waits), "at": at})
    out.write_text(json.dumps(rows), encoding="utf-8")


# -- the driver ----------------------------------------------------------------------------------


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _search_times(retriever: Any, queries: list[str]) -> list[float]:
    times = []
    for query in queries:
        started = time.perf_counter()
        retriever.invoke(query)
        times.append(time.perf_counter() - started)
    return times


def run_case(writers: int, writes: int, code: Path, work: Path) -> dict[str, Any]:
    """One fresh server collection, ``writers`` writer processes, a reader in this process."""
    from benchmarks.soak import LookupEmbeddings, start_chroma_server
    from hyde_lc import HyDERetriever, open_store

    server = start_chroma_server(work / f"server-{writers}")
    try:
        procs, outs = [], []
        started = time.perf_counter()
        for w in range(writers):
            folder = work / f"files-{writers}-{w}"
            folder.mkdir()
            out = work / f"writer-{writers}-{w}.json"
            env = {
                **os.environ,
                "HYDE_LC_CACHE_DIR": str(work / f"cache-{writers}-{w}"),
                "PYTHONPATH": str(code),
            }
            args = ["write", server.url, str(folder), str(out), str(w), str(writes)]
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "benchmarks.concurrent_writers", *args],
                    cwd=code,
                    env=env,
                )
            )
            outs.append(out)
        os.environ["HYDE_LC_CACHE_DIR"] = str(work / f"cache-{writers}-reader")
        store = open_store(
            url=server.url, collection=COLLECTION, embeddings=LookupEmbeddings(DIMENSION)
        )
        rng = random.Random(SEED)
        during: list[float] = []
        notes = 0
        retriever = None
        while any(p.poll() is None for p in procs):
            if retriever is None:
                if not store.get(limit=1)["ids"]:
                    time.sleep(0.05)
                    continue
                retriever = HyDERetriever(vectorstore=store, k=10)
            w, n = rng.randrange(writers), rng.randrange(writes)
            query = f"sigil{w}x{n}v0 keeper lamp fog"
            t0 = time.perf_counter()
            docs = retriever.invoke(query)
            during.append(time.perf_counter() - t0)
            notes += any("lexical_note" in d.metadata for d in docs)
        wall = time.perf_counter() - started
        for proc in procs:
            if proc.wait() != 0:
                raise RuntimeError(f"a writer failed (exit {proc.returncode})")
        rows = [row for out in outs for row in json.loads(out.read_text(encoding="utf-8"))]
        if retriever is None:
            retriever = HyDERetriever(vectorstore=store, k=10)
        queries = [f"sigil{w}x{n}v1 keeper lamp fog" for w in range(writers) for n in range(writes)]
        _search_times(retriever, queries[:20])  # warm
        after = _search_times(retriever, queries[:200])
    finally:
        server.stop()
    # From the first write's start to the last one's end (process start-up left out).
    span = max(r["at"] + r["s"] for r in rows) - min(r["at"] for r in rows)
    times = [r["s"] for r in rows]
    waits = [r["wait_s"] for r in rows]
    return {
        "writers": writers,
        "writes": len(rows),
        "wall_s": round(wall, 2),
        "writing_s": round(span, 2),
        "writes_per_s": round(len(rows) / span, 2),
        "chunks_per_s": round(len(rows) * PARAGRAPHS / span, 1),
        "write_median_s": round(statistics.median(times), 3),
        "write_p95_s": round(_quantile(times, 0.95), 3),
        "lease_wait_median_s": round(statistics.median(waits), 3),
        "lease_wait_p95_s": round(_quantile(waits, 0.95), 3),
        "lease_wait_max_s": round(max(waits), 3),
        "searches_during": len(during),
        "search_during_median_ms": round(1000 * statistics.median(during), 1) if during else None,
        "search_during_p95_ms": round(1000 * _quantile(during, 0.95), 1) if during else None,
        "searches_noting_a_write_under_way": notes,
        "search_after_median_ms": round(1000 * statistics.median(after), 1),
        "search_after_p95_ms": round(1000 * _quantile(after, 0.95), 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--writers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument(
        "--writes", type=int, default=30, help="files per writer (each added, then replaced)"
    )
    parser.add_argument("--code", type=Path, default=ROOT, help="the checkout the writers run")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    results = []
    with tempfile.TemporaryDirectory(prefix="hyde_lc-writers-") as tmp:
        for writers in args.writers:
            result = run_case(writers, args.writes, args.code.resolve(), Path(tmp))
            print(json.dumps(result), flush=True)
            results.append(result)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        commit = subprocess.run(
            ["git", "-C", str(args.code), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        record = {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "writers_code_commit": commit,
            "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "load_average_at_end": [round(x, 1) for x in os.getloadavg()],
            "command": " ".join(
                [
                    sys.executable.rsplit("/", 1)[-1],
                    "-m",
                    "benchmarks.concurrent_writers",
                    *(argv or sys.argv[1:]),
                ]
            ),
            "results": results,
        }
        name = f"concurrent_writers-{commit or 'unknown'}.json"
        (args.out / name).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "write":
        _, _, url, folder, out, writer, writes = sys.argv
        run_writer(url, Path(folder), Path(out), int(writer), int(writes))
    else:
        sys.exit(main())
