"""Soak test: many concurrent retrievals against a large collection, in both client modes.

Builds a collection of synthetic clustered 384-d unit vectors (`clustered_vectors`, as the
speed benchmark's scale section does), then runs ``retrievals`` queries with ``concurrency``
threads through the package's retriever path (`HyDERetriever` over `open_store`, with
``n_hypotheses=0`` by default, or an instant fake LLM with ``--hypotheses N``), once against
the embedded persistent client and once against a real ``chroma run`` server on 127.0.0.1
(loopback only; the server is started and stopped here). Each query's vector is a point
near a stored one, served by an embeddings object that looks it up (no model runs).

Recorded per mode: errors (each retrieval that raised or returned fewer than k documents;
the soak passes only with none), the resident memory (RSS) of this process, and of the
server in server mode, at start, after the collection is built, after a warm-up, at the
end and its peak, latency p50/p95/p99/mean/max and throughput. Memory may grow during the
warm-up (thread stacks, allocator arenas, caches); growth after it, above
``--memory-bound-mb``, fails the soak. Bounded in count (``--retrievals``) and in time
(``--time-limit`` per mode: retrievals not started by then are counted as skipped, which
also fails the soak). Writes ``soak.json`` and ``soak.md``; exits 1 when the soak fails.

    .venv/bin/python benchmarks/soak.py --chunks 50000 --retrievals 1000 --concurrency 8 \\
        --out benchmarks/results/soak
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

from hyde_lc import HyDERetriever, open_store
from hyde_lc.bench.speed import (
    SimulatedRemoteChat,
    _near,
    add_in_batches,
    clustered_vectors,
    percentiles,
)
from hyde_lc.store.collection import HybridCollection

MODES = ("embedded", "server")
MEMORY_BOUND_MB = 50.0
"""Default bound on RSS growth after the warm-up, per process (client, and server)."""
CHROMA = shutil.which("chroma") or str(Path(sys.executable).parent / "chroma")


def rss_mb(pid: int | None = None) -> float:
    """Resident memory of process ``pid`` (default: this one) in MB (psutil, else /proc)."""
    try:
        import psutil

        return psutil.Process(pid).memory_info().rss / 2**20
    except ImportError:
        status = Path(f"/proc/{pid or 'self'}/status").read_text()
        line = next(x for x in status.splitlines() if x.startswith("VmRSS:"))
        return int(line.split()[1]) / 1024


class LookupEmbeddings(Embeddings):
    """Embeddings that return stored vectors for known texts (no model, no CPU to speak of).

    Unknown texts (a fake LLM's hypothesis) get a deterministic unit vector from their hash.

    Example:
        >>> emb = LookupEmbeddings(dimension=3, vectors={"q": [1.0, 0.0, 0.0]})
        >>> emb.embed_query("q")
        [1.0, 0.0, 0.0]

    """

    def __init__(self, dimension: int = 384, vectors: dict[str, list[float]] | None = None) -> None:
        self.dimension = dimension
        self.model_id = f"synthetic:clustered-{dimension}"
        self.vectors: dict[str, list[float]] = dict(vectors or {})

    def _vector(self, text: str) -> list[float]:
        known = self.vectors.get(text)
        if known is not None:
            return known
        seed = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")
        vector = np.random.default_rng(seed).standard_normal(self.dimension)
        return (vector / np.linalg.norm(vector)).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)


@dataclass
class ChromaServer:
    """A ``chroma run`` process on 127.0.0.1 (see `chroma_server`)."""

    url: str
    port: int
    path: Path
    proc: subprocess.Popen

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 30 s) and wait for it to exit."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_chroma_server(
    path: Path, port: int | None = None, log: Path | None = None, timeout: float = 60
) -> ChromaServer:
    """Start ``chroma run`` on 127.0.0.1 over the data folder ``path``; wait until it listens.

    Raises RuntimeError (with the end of its log) if it exits or does not listen in time.
    """
    if not Path(CHROMA).exists():
        raise RuntimeError("the `chroma` command (chromadb's server) is not installed")
    port = port or free_port()
    log = log or path.parent / f"{path.name}-server.log"
    with log.open("ab") as sink:
        proc = subprocess.Popen(
            [CHROMA, "run", "--host", "127.0.0.1", "--port", str(port), "--path", str(path)],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    server = ChromaServer(f"http://127.0.0.1:{port}", port, path, proc)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return server
        time.sleep(0.2)
    server.stop()
    tail = log.read_text(errors="replace")[-2000:]
    raise RuntimeError(
        f"chroma server on port {port} did not start (exit {proc.returncode})\n{tail}"
    )


@contextmanager
def chroma_server(path: Path, port: int | None = None) -> Iterator[ChromaServer]:
    """`start_chroma_server`, stopped when the block ends."""
    server = start_chroma_server(path, port)
    try:
        yield server
    finally:
        server.stop()


def build_collection(store: Any, vectors: np.ndarray, per_document: int = 50) -> float:
    """Add ``vectors`` to the store's collection in Chroma's largest batches; returns seconds.

    Each vector becomes a chunk ``chunk <i>`` of a synthetic document of ``per_document``
    chunks, with the metadata hyde_lc's own chunks carry for neighbour lookups.
    """
    count = len(vectors)
    return add_in_batches(
        HybridCollection.of(store).chroma.prepare_write(store.embeddings),
        HybridCollection.of(store).chroma.max_write(),
        [f"c{i}" for i in range(count)],
        vectors,
        [f"chunk {i}" for i in range(count)],
        [
            {
                "source": f"synthetic/{i // per_document}.txt",
                "chunk_index": i % per_document,
                "chunk_count": per_document,
                "start_index": 0,
            }
            for i in range(count)
        ],
    )


def _latency(seconds: Sequence[float]) -> dict[str, float]:
    """p50/p95/p99/mean/max in milliseconds (nothing for no retrievals)."""
    return percentiles(seconds, qs=(50, 95, 99)) if seconds else {}


class _Peak:
    """Samples the RSS of some processes every ``every`` seconds in a thread; keeps the peak."""

    def __init__(self, pids: dict[str, int | None], every: float = 0.25) -> None:
        self.pids, self.every = pids, every
        self.peak = {name: rss_mb(pid) for name, pid in pids.items()}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            for name, pid in self.pids.items():
                self.peak[name] = max(self.peak[name], rss_mb(pid))

    def __enter__(self) -> _Peak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _retrieve_all(
    retriever: HyDERetriever, queries: Sequence[str], k: int, concurrency: int, deadline: float
) -> tuple[list[float], list[str], int, float]:
    """Run ``queries`` on ``concurrency`` threads: latencies, errors, skipped, wall seconds."""
    latencies: list[float] = []
    errors: list[str] = []
    skipped = 0
    lock = threading.Lock()

    def one(query: str) -> None:
        nonlocal skipped
        if time.monotonic() > deadline:
            with lock:
                skipped += 1
            return
        start = time.perf_counter()
        try:
            docs = retriever.invoke(query)
            problem = None if len(docs) == k else f"returned {len(docs)} of {k} documents"
        except Exception as exc:
            problem = f"{type(exc).__name__}: {exc}"
        elapsed = time.perf_counter() - start
        with lock:
            if problem:
                errors.append(f"{query}: {problem}")
            else:
                latencies.append(elapsed)

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        list(pool.map(one, queries))
    return latencies, errors, skipped, time.perf_counter() - start


def soak_mode(
    mode: str,
    work: Path,
    vectors: np.ndarray,
    probes: np.ndarray,
    *,
    warmup: int,
    concurrency: int,
    k: int,
    hypotheses: int,
    time_limit: float,
    memory_bound_mb: float,
) -> dict[str, Any]:
    """Build the collection in one client mode, warm up, then run the timed retrievals."""
    embeddings = LookupEmbeddings(vectors.shape[1])
    queries = [f"probe {i}" for i in range(len(probes))]
    embeddings.vectors.update(zip(queries, probes.tolist(), strict=True))
    memory: dict[str, dict[str, float]] = {"client": {"start": rss_mb()}}
    with _server_for(mode, work) as server:
        if server is None:
            store = open_store(work / "embedded", collection="soak", embeddings=embeddings)
        else:
            store = open_store(url=server.url, collection="soak", embeddings=embeddings)
            memory["server"] = {"start": rss_mb(server.pid)}
        pids: dict[str, int | None] = {"client": None}
        if server is not None:
            pids["server"] = server.pid
        build_s = build_collection(store, vectors)
        count = store.existing_collection().count()
        for name, pid in pids.items():
            memory[name]["after_build"] = rss_mb(pid)
        llm = SimulatedRemoteChat(latency=0.0) if hypotheses else None
        retriever = HyDERetriever(
            vectorstore=store, hypothesis_llm=llm, n_hypotheses=hypotheses, k=k
        )
        deadline = time.monotonic() + time_limit
        with _Peak(pids) as peak:
            _, warm_errors, _, _ = _retrieve_all(
                retriever, queries[:warmup], k, concurrency, deadline
            )
            for name, pid in pids.items():
                memory[name]["after_warmup"] = rss_mb(pid)
            latencies, errors, skipped, wall = _retrieve_all(
                retriever, queries[warmup:], k, concurrency, deadline
            )
            for name, pid in pids.items():
                memory[name]["end"] = rss_mb(pid)
        for name, values in memory.items():
            values["peak"] = max(peak.peak[name], *values.values())
            values["growth_after_warmup"] = values["end"] - values["after_warmup"]
            memory[name] = {key: round(value, 1) for key, value in values.items()}
        errors = warm_errors + errors
        growth = max(m["growth_after_warmup"] for m in memory.values())
        return {
            "mode": mode,
            "url": server.url if server else None,
            "chunks": count,
            "build_s": round(build_s, 1),
            "warmup": warmup,
            "retrievals": len(queries) - warmup,
            "completed": len(latencies),
            "skipped": skipped,
            "concurrency": concurrency,
            "k": k,
            "retrieval_mode": retriever.label,
            "errors": len(errors),
            "error_samples": errors[:10],
            "seconds": round(wall, 2),
            "retrievals_per_s": round(len(latencies) / wall, 1) if wall else 0.0,
            "latency": _latency(latencies),
            "memory_mb": memory,
            "memory_bound_mb": memory_bound_mb,
            "passed": not errors and not skipped and growth <= memory_bound_mb,
        }


@contextmanager
def _server_for(mode: str, work: Path) -> Iterator[ChromaServer | None]:
    if mode == "embedded":
        yield None
        # Let the embedded client (and its index in this process) go before the next mode.
        from chromadb.api.shared_system_client import SharedSystemClient

        SharedSystemClient.clear_system_cache()
    elif mode == "server":
        (work / "server").mkdir(parents=True, exist_ok=True)
        with chroma_server(work / "server") as server:
            yield server
    else:
        raise ValueError(f"unknown mode {mode!r}: choose from {', '.join(MODES)}")


def run_soak(
    *,
    chunks: int = 50_000,
    retrievals: int = 1000,
    concurrency: int = 8,
    k: int = 10,
    warmup: int = 50,
    hypotheses: int = 0,
    modes: Sequence[str] = MODES,
    dim: int = 384,
    seed: int = 0,
    time_limit: float = 900.0,
    memory_bound_mb: float = MEMORY_BOUND_MB,
    work_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Run the soak in each of ``modes``; returns the report (see the module docstring)."""
    started = time.perf_counter()
    rng = np.random.default_rng(seed)
    vectors = clustered_vectors(chunks, dim, rng)
    probes = _near(vectors[rng.integers(0, chunks, warmup + retrievals)], rng)
    report: dict[str, Any] = {
        "meta": {
            "date": date.today().isoformat(),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "chunks": chunks,
            "dim": dim,
            "retrievals": retrievals,
            "warmup": warmup,
            "concurrency": concurrency,
            "k": k,
            "hypotheses": hypotheses,
            "time_limit_s": time_limit,
        },
        "modes": [],
    }
    with tempfile.TemporaryDirectory(prefix="hyde-soak-", dir=work_dir) as tmp:
        for mode in modes:
            report["modes"].append(
                soak_mode(
                    mode,
                    Path(tmp),
                    vectors,
                    probes,
                    warmup=warmup,
                    concurrency=concurrency,
                    k=k,
                    hypotheses=hypotheses,
                    time_limit=time_limit,
                    memory_bound_mb=memory_bound_mb,
                )
            )
    report["meta"]["seconds"] = round(time.perf_counter() - started, 1)
    report["passed"] = all(row["passed"] for row in report["modes"])
    return report


def markdown(report: dict[str, Any]) -> str:
    """The soak's tables, for BENCHMARKS.md."""
    meta = report["meta"]
    lines = [
        f"**Soak** ({meta['chunks']:,} chunks of synthetic {meta['dim']}-d vectors, "
        f"{meta['retrievals']:,} retrievals after {meta['warmup']} warm-up, concurrency "
        f"{meta['concurrency']}, k={meta['k']}, HyDERetriever with {meta['hypotheses']} "
        f"hypotheses; {meta['machine']}, {meta['date']})",
        "",
        "| client | errors | completed | p50 ms | p95 ms | p99 ms | max ms | retrievals/s "
        "| RSS MB start / warm / end / peak | growth after warm-up MB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in report["modes"]:
        lat = row["latency"]
        for name, mem in row["memory_mb"].items():
            label = row["mode"] if name == "client" else f"{row['mode']} (server process)"
            timing = (
                f"| {lat.get('p50_ms')} | {lat.get('p95_ms')} | {lat.get('p99_ms')} "
                f"| {lat.get('max_ms')} | {row['retrievals_per_s']} "
                if name == "client"
                else "| | | | | "
            )
            lines.append(
                f"| {label} | {row['errors'] if name == 'client' else ''} "
                f"| {row['completed'] if name == 'client' else ''} {timing}"
                f"| {mem['start']} / {mem['after_warmup']} / {mem['end']} / {mem['peak']} "
                f"| {mem['growth_after_warmup']} |"
            )
    verdict = "passed" if report["passed"] else "FAILED"
    lines += [
        "",
        f"{verdict}: no errors, nothing skipped, and RSS growth after warm-up at most "
        f"{report['modes'][0]['memory_bound_mb'] if report['modes'] else MEMORY_BOUND_MB} MB "
        "per process.",
    ]
    return "\n".join(lines) + "\n"


def write_report(report: dict[str, Any], out: Path) -> dict[str, Path]:
    """Write ``soak.json`` and ``soak.md`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "soak.json", "markdown": out / "soak.md"}
    paths["json"].write_text(json.dumps(report, indent=1))
    paths["markdown"].write_text(markdown(report))
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--chunks", type=int, default=50_000)
    parser.add_argument("--retrievals", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--hypotheses", type=int, default=0, help="0: plain retrieval")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--time-limit", type=float, default=900.0, help="seconds per mode")
    parser.add_argument("--memory-bound-mb", type=float, default=MEMORY_BOUND_MB)
    parser.add_argument("--out", default="soak-results")
    args = parser.parse_args(argv)
    report = run_soak(
        chunks=args.chunks,
        retrievals=args.retrievals,
        concurrency=args.concurrency,
        k=args.k,
        warmup=args.warmup,
        hypotheses=args.hypotheses,
        modes=args.modes,
        time_limit=args.time_limit,
        memory_bound_mb=args.memory_bound_mb,
    )
    paths = write_report(report, Path(args.out))
    print(markdown(report))
    print(f"{report['meta']['seconds']} s; wrote " + ", ".join(str(p) for p in paths.values()))
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    sys.exit(main())
