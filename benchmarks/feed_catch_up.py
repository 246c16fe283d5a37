"""A second client's lexical index on a shared Chroma server: catching up against rebuilding.

Two clients of one ``chroma run`` on 127.0.0.1, each with its own lexical index (its own
``HYDE_LC_CACHE_DIR``, as two machines would have). For each collection size:

1. client A (this process) fills the collection with N synthetic chunks: about 900
   characters each, drawn from a fixed vocabulary (seeded), ten chunks per document, each
   document's chunks carrying one term of their own; 16-d vectors (the lexical side does not
   read them), written through `HybridCollection.writing` a batch at a time;
2. client B (a subprocess) builds its index once, timed: `HybridCollection.rebuild`;
3. repeatedly, A replaces one document in one write (deletes its ten chunks, adds ten new
   ones with a new term), then B catches up, timed: `HybridCollection.sync` with
   ``max_age=0`` (reads the head, then only the chunks and deletions logged since its
   cursor). After each catch-up B checks its index: the new chunks are found by their term,
   the deleted ones by none.

Reported per size: the median catch-up, the rebuild, their ratio, and where each spends its
time (seconds per Chroma call, and in the lexical index), all measured in the same run.

    .venv/bin/python -m benchmarks.feed_catch_up --chunks 50000 500000 \\
        --out benchmarks/results/feed_catch_up
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.soak import LookupEmbeddings, rss_mb, start_chroma_server

ROOT = Path(__file__).resolve().parents[1]
COLLECTION = "feed_catch_up"
DIMENSION = 16
PER_DOCUMENT = 10
BATCH = 5000
"""Chunks per write while filling (within Chroma's largest batch, 5,461)."""
TEXT_CHARS = 900
VOCABULARY = 5000
SEED = 20240
CATCH_UP_TARGET_S = 1.0
RATIO_TARGET = 100.0


# -- the synthetic collection -----------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def vocabulary() -> tuple[list[str], np.ndarray]:
    """A fixed vocabulary of pronounceable words and Zipf-like word frequencies (seeded)."""
    rng = np.random.default_rng(SEED)
    onsets = ["b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "tr"]
    vowels = ["a", "e", "i", "o", "u", "ai", "ou"]
    codas = ["", "n", "r", "s", "l", "th", "m"]
    words: set[str] = set()
    while len(words) < VOCABULARY:
        syllables = int(rng.integers(1, 4))
        words.add(
            "".join(
                onsets[rng.integers(len(onsets))]
                + vowels[rng.integers(len(vowels))]
                + codas[rng.integers(len(codas))]
                for _ in range(syllables)
            )
        )
    ordered = sorted(words)
    rng.shuffle(ordered)
    weights = 1.0 / np.arange(1, VOCABULARY + 1)
    return ordered, weights / weights.sum()


def document_term(doc: int, version: int) -> str:
    """The term only the chunks of version ``version`` of document ``doc`` carry."""
    return f"tagd{doc}v{version}"


def chunk_texts(first: int, count: int, seed: int) -> list[str]:
    """Texts of chunks ``first`` .. ``first + count - 1``: vocabulary words and their term."""
    words, weights = vocabulary()
    rng = np.random.default_rng([SEED, seed, first])
    drawn = rng.choice(len(words), size=(count, 140), p=weights)
    texts = []
    for offset, row in enumerate(drawn):
        number = first + offset
        text = " ".join(words[i] for i in row)[:TEXT_CHARS].rsplit(" ", 1)[0]
        texts.append(f"{document_term(number // PER_DOCUMENT, 0)} {text}")
    return texts


def vectors(count: int, seed: int) -> list[list[float]]:
    """``count`` unit vectors of `DIMENSION` (deterministic)."""
    rng = np.random.default_rng([SEED, seed])
    raw = rng.standard_normal((count, DIMENSION)).astype(np.float32)
    return (raw / np.linalg.norm(raw, axis=1, keepdims=True)).tolist()


def chunk_metadata(doc: int, index: int, version: int) -> dict[str, Any]:
    return {
        "source": f"synthetic/{doc}.txt",
        "doc_id": f"doc{doc}",
        "doc_version": f"doc{doc}-v{version}",
        "chunk_index": index,
        "chunk_count": PER_DOCUMENT,
    }


def chunk_ids(doc: int, version: int) -> list[str]:
    return [f"doc{doc}-v{version}-c{i}" for i in range(PER_DOCUMENT)]


def fill(store: Any, chunks: int, log: Any = print) -> float:
    """Write ``chunks`` chunks through the hybrid collection, `BATCH` per write; seconds."""
    from hyde_lc.store.collection import HybridCollection

    hybrid = HybridCollection.of(store)
    start = time.perf_counter()
    for first in range(0, chunks, BATCH):
        count = min(BATCH, chunks - first)
        numbers = range(first, first + count)
        with hybrid.writing() as write:
            write.upsert(
                [f"doc{n // PER_DOCUMENT}-v0-c{n % PER_DOCUMENT}" for n in numbers],
                vectors(count, first),
                [chunk_metadata(n // PER_DOCUMENT, n % PER_DOCUMENT, 0) for n in numbers],
                chunk_texts(first, count, 0),
            )
        done = first + count
        if done % (10 * BATCH) == 0 or done == chunks:
            elapsed = time.perf_counter() - start
            log(f"  filled {done:,} chunks in {elapsed:.0f} s ({done / elapsed:,.0f} chunks/s)")
    return time.perf_counter() - start


def replace_document(store: Any, doc: int, old: int, new: int) -> dict[str, Any]:
    """In one write: delete version ``old`` of ``doc`` (its chunks), add version ``new``."""
    from hyde_lc.store.collection import HybridCollection

    words, _ = vocabulary()
    texts = [
        f"{document_term(doc, new)} revised part {i} " + " ".join(words[(doc + 7 * i) % 50 : 60])
        for i in range(PER_DOCUMENT)
    ]
    start = time.perf_counter()
    with HybridCollection.of(store).writing() as write:
        write.delete(chunk_ids(doc, old))
        write.upsert(
            chunk_ids(doc, new),
            vectors(PER_DOCUMENT, 1_000_000 + doc * 100 + new),
            [chunk_metadata(doc, i, new) for i in range(PER_DOCUMENT)],
            texts,
        )
    return {
        "seconds": time.perf_counter() - start,
        "new_term": document_term(doc, new),
        "new_ids": chunk_ids(doc, new),
        "old_term": document_term(doc, old),
        "old_ids": chunk_ids(doc, old),
    }


# -- where the time goes --------------------------------------------------------------------


class CallTimes:
    """Seconds and calls per method while `recording` (Chroma's client calls, the index's)."""

    def __init__(self) -> None:
        self.totals: dict[str, list[float]] = {}
        self._installed = False

    def install(self) -> None:
        """Wrap the methods timed (once per process)."""
        if self._installed:
            return
        from chromadb.api.client import Client
        from chromadb.api.models.Collection import Collection

        from hyde_lc.search import lexical as lexical
        from hyde_lc.store.lexical_index import LexicalIndex

        targets = [
            (Collection, name, f"chroma {{}}.{name}")  # {} = which collection: chunks or feed
            for name in ("get", "count", "query", "upsert", "delete", "modify")
        ]
        targets += [(Client, "get_collection", "chroma client.get_collection")]
        targets += [
            (LexicalIndex, name, f"lexical index.{name}")
            for name in ("apply", "mark", "reload", "cursor", "__len__")
        ]
        for owner, name, label in targets:
            setattr(owner, name, self._timed(getattr(owner, name), label))
        lexical.analyze = self._timed(lexical.analyze, "lexical analyze (inside apply)")
        self._installed = True

    def _timed(self, method: Any, label: str) -> Any:
        @functools.wraps(method)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                name = str(getattr(args[0], "name", "")) if args else ""
                which = label.format("feed" if name.endswith(".hyde_lc_feed") else "chunks")
                entry = self.totals.setdefault(which, [0, 0.0])
                entry[0] += 1
                entry[1] += time.perf_counter() - start

        return timed

    @contextmanager
    def recording(self) -> Iterator[dict[str, dict[str, float]]]:
        """Collect the calls made in the block into the dict yielded (filled at its end)."""
        self.totals = {}
        out: dict[str, dict[str, float]] = {}
        try:
            yield out
        finally:
            ranked = sorted(self.totals.items(), key=lambda item: -item[1][1])
            out.update(
                {label: {"calls": int(n), "seconds": round(s, 4)} for label, (n, s) in ranked}
            )


# -- client B: a reader with an index of its own ---------------------------------------------


def reader(url: str) -> int:
    """Client B: answer one JSON command per input line (rebuild, catch_up, quit)."""
    from hyde_lc import open_store
    from hyde_lc.store.collection import HybridCollection
    from hyde_lc.store.lexical_index import lexical_query

    timer = CallTimes()
    timer.install()
    store = open_store(url=url, collection=COLLECTION, embeddings=LookupEmbeddings(DIMENSION))
    hybrid = HybridCollection.of(store)
    for line in sys.stdin:
        command = json.loads(line)
        reply: dict[str, Any] = {}
        if command["op"] == "rebuild":
            with timer.recording() as calls:
                start = time.perf_counter()
                hybrid.rebuild()
                reply["seconds"] = time.perf_counter() - start
            index = hybrid.sync(max_age=0)
            assert index is not None
            reply.update(chunks=len(index), cursor=index.cursor(), calls=calls)
            reply["index_mb"] = round(
                sum(p.stat().st_size for p in hybrid.base.rglob("*") if p.is_file()) / 2**20, 1
            )
        elif command["op"] == "catch_up":
            cursor = hybrid.sync(max_age=3600)
            before = cursor.cursor() if cursor is not None else None
            with timer.recording() as calls:
                start = time.perf_counter()
                index = hybrid.sync(max_age=0)
                reply["seconds"] = time.perf_counter() - start
            assert index is not None
            new = {i for i, _ in index.search(lexical_query(command["new_term"]), k=100)}
            old = {i for i, _ in index.search(lexical_query(command["old_term"]), k=100)}
            reply.update(
                cursor_before=before,
                cursor_after=index.cursor(),
                chunks=len(index),
                new_found=sorted(new & set(command["new_ids"])),
                new_missing=sorted(set(command["new_ids"]) - new),
                old_found=sorted(old),
                calls=calls,
            )
        elif command["op"] == "quit":
            break
        reply["rss_mb"] = round(rss_mb(), 1)
        print(json.dumps(reply), flush=True)
    return 0


class Reader:
    """Client B as a subprocess with its own cache folder (its own lexical index)."""

    def __init__(self, url: str, cache: Path) -> None:
        env = {
            **os.environ,
            "HYDE_LC_CACHE_DIR": str(cache),
            "ANONYMIZED_TELEMETRY": "False",
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.feed_catch_up", "--reader", url],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def ask(self, **command: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"client B exited ({self.proc.wait()}) during {command['op']}")
        return json.loads(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            with suppress(RuntimeError, BrokenPipeError, ValueError):
                self.ask(op="quit")
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# -- one size -------------------------------------------------------------------------------


def run_size(chunks: int, repeats: int, work: Path, log: Any = print) -> dict[str, Any]:
    """Fill, rebuild once, then ``repeats`` change + catch-up rounds, on a fresh server."""
    from hyde_lc import open_store

    os.environ["HYDE_LC_CACHE_DIR"] = str(work / "client-a-cache")
    server = start_chroma_server(work / "server-data", log=work / "server.log")
    reader_b: Reader | None = None
    try:
        store = open_store(
            url=server.url, collection=COLLECTION, embeddings=LookupEmbeddings(DIMENSION)
        )
        log(f"{chunks:,} chunks: filling through {server.url}")
        fill_s = fill(store, chunks, log)
        server_mb = sum(p.stat().st_size for p in server.path.rglob("*") if p.is_file()) / 2**20
        reader_b = Reader(server.url, work / "client-b-cache")
        log("  client B: full rebuild")
        load = {"before_rebuild": os.getloadavg()[0]}
        rebuild = reader_b.ask(op="rebuild")
        if rebuild["chunks"] != chunks:
            raise RuntimeError(f"client B's rebuild indexed {rebuild['chunks']} of {chunks}")
        log(f"  rebuild {rebuild['seconds']:.1f} s")
        rng = np.random.default_rng([SEED, chunks])
        docs = rng.choice(chunks // PER_DOCUMENT, size=repeats, replace=False)
        rounds = []
        for doc in (int(d) for d in docs):
            change = replace_document(store, doc, 0, 1)
            caught = reader_b.ask(op="catch_up", **change)
            ok = (
                not caught["new_missing"] and not caught["old_found"] and caught["chunks"] == chunks
            )
            rounds.append(
                {
                    "document": doc,
                    "change_s": round(change["seconds"], 4),
                    "catch_up_s": round(caught["seconds"], 4),
                    "cursor": [caught["cursor_before"], caught["cursor_after"]],
                    "index_chunks": caught["chunks"],
                    "new_found": len(caught["new_found"]),
                    "old_found": len(caught["old_found"]),
                    "verified": ok,
                    "calls": caught["calls"],
                }
            )
            log(
                f"  change {change['seconds']:.3f} s, catch-up {caught['seconds']:.3f} s, "
                f"{'verified' if ok else 'WRONG: ' + json.dumps(caught)}"
            )
        load["after_rounds"] = os.getloadavg()[0]
        catch_up = statistics.median(r["catch_up_s"] for r in rounds)
        ratio = rebuild["seconds"] / catch_up
        return {
            "chunks": chunks,
            "fill_s": round(fill_s, 1),
            "fill_chunks_per_s": round(chunks / fill_s),
            "server_data_mb": round(server_mb),
            "rebuild_s": round(rebuild["seconds"], 2),
            "rebuild_index_mb": rebuild["index_mb"],
            "rebuild_calls": rebuild["calls"],
            "client_b_rss_mb": rebuild["rss_mb"],
            "catch_up_median_s": round(catch_up, 4),
            "catch_up_s": [r["catch_up_s"] for r in rounds],
            "change_median_s": round(statistics.median(r["change_s"] for r in rounds), 4),
            "ratio": round(ratio, 1),
            "verified": all(r["verified"] for r in rounds),
            "meets_targets": catch_up < CATCH_UP_TARGET_S and ratio >= RATIO_TARGET,
            "load_average_1min": load,
            "rounds": rounds,
        }
    finally:
        if reader_b is not None:
            reader_b.close()
        server.stop()


# -- the report -----------------------------------------------------------------------------


def git(*argv: str) -> str:
    return subprocess.run(["git", *argv], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def markdown(report: dict[str, Any]) -> str:
    """The results as a markdown table, with the command, date and commit."""
    meta = report["meta"]
    lines = [
        f"Command: `{meta['command']}`",
        f"({meta['date']}; commit {meta['commit']}; {meta['machine']}; one `chroma run` "
        f"on 127.0.0.1, chromadb {meta['chromadb']}; {meta['repeats']} change + catch-up "
        "rounds per size, each a replaced document: 10 chunks deleted, 10 added)",
        "",
        "| chunks | fill s (chunks/s) | full rebuild s | catch-up median s | "
        "rebuild / catch-up | change s | verified | targets (< 1 s, >= 100x) |",
        "|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for row in report["sizes"]:
        lines.append(
            f"| {row['chunks']:,} | {row['fill_s']:.0f} ({row['fill_chunks_per_s']:,}) "
            f"| {row['rebuild_s']:.2f} | {row['catch_up_median_s']:.3f} | {row['ratio']:.0f}x "
            f"| {row['change_median_s']:.3f} | {'yes' if row['verified'] else 'NO'} "
            f"| {'met' if row['meets_targets'] else 'MISSED'} |"
        )
    loads = [
        f"{row['chunks']:,}: {row['load_average_1min']['before_rebuild']:.1f} before the "
        f"rebuild, {row['load_average_1min']['after_rounds']:.1f} after the rounds"
        for row in report["sizes"]
        if "load_average_1min" in row
    ]
    if loads:
        lines += ["", f"One-minute load average ({os.cpu_count()} cores): " + "; ".join(loads)]
    lines += ["", "Where the time goes (seconds summed over the calls of one operation):", ""]
    for row in report["sizes"]:
        median_round = sorted(row["rounds"], key=lambda r: r["catch_up_s"])[len(row["rounds"]) // 2]
        for what, calls, total in (
            ("catch-up (median round)", median_round["calls"], median_round["catch_up_s"]),
            ("full rebuild", row["rebuild_calls"], row["rebuild_s"]),
        ):
            top = ", ".join(
                f"{label} {entry['seconds']:.3f} s ({entry['calls']}x)"
                for label, entry in list(calls.items())[:5]
            )
            lines.append(f"- {row['chunks']:,} chunks, {what}, {total:.3f} s: {top}")
    return "\n".join(lines) + "\n"


def write_report(report: dict[str, Any], out: Path) -> list[Path]:
    out.parent.mkdir(parents=True, exist_ok=True)
    paths = [out.with_suffix(".json"), out.with_suffix(".md")]
    paths[0].write_text(json.dumps(report, indent=1) + "\n")
    paths[1].write_text(markdown(report))
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--chunks", type=int, nargs="+", default=[50_000, 500_000])
    parser.add_argument("--repeats", type=int, default=5, help="change + catch-up rounds")
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "benchmarks" / "results" / "feed_catch_up",
        help="writes OUT.json and OUT.md",
    )
    parser.add_argument("--work", type=Path, help="scratch folder (default: a temporary one)")
    parser.add_argument("--reader", metavar="URL", help=argparse.SUPPRESS)  # client B's role
    args = parser.parse_args(argv)
    if args.reader:
        return reader(args.reader)

    import chromadb

    commit = git("rev-parse", "--short", "HEAD") + (" (modified)" if git("status", "-s") else "")
    report: dict[str, Any] = {
        "meta": {
            "command": shlex.join(["python", "-m", "benchmarks.feed_catch_up", *sys.argv[1:]]),
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": commit,
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}",
            "chromadb": chromadb.__version__,
            "repeats": args.repeats,
            "dimension": DIMENSION,
            "chunk_chars": TEXT_CHARS,
            "chunks_per_document": PER_DOCUMENT,
            "fill_batch": BATCH,
            "targets": {"catch_up_s_below": CATCH_UP_TARGET_S, "ratio_at_least": RATIO_TARGET},
        },
        "sizes": [],
    }
    for chunks in args.chunks:
        work = Path(tempfile.mkdtemp(prefix=f"feed-catch-up-{chunks}-", dir=args.work))
        try:
            report["sizes"].append(run_size(chunks, args.repeats, work))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        paths = write_report(report, args.out)  # after each size: a long run keeps its results
    print(markdown(report))
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0 if all(row["verified"] for row in report["sizes"]) else 1


if __name__ == "__main__":
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    sys.exit(main())
