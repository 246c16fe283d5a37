"""Faults on real components: ingestion killed mid-run, concurrent writers and readers.

Ingestion runs in subprocesses (``hyde-lc ingest`` or ``ingest_paths``) with the real
local embeddings (``local:minilm``) into an embedded Chroma folder; the test process
polls, kills, queries and compares. Every check of the collection reads it through a
fresh Chroma client, since a client's vector index does not see other processes' writes.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

HYDE_LC = str(Path(sys.executable).parent / "hyde-lc")
CHUNK_SIZE, CHUNK_OVERLAP = 400, 40
WORDS = [
    "lamp", "lens", "keeper", "tower", "reef", "beacon", "flash", "signal", "harbour", "storm",
    "fog", "horn", "prism", "mirror", "oil", "wick", "clockwork", "shutter", "gallery",
    "lantern", "rock", "coast", "ship", "pilot", "chart", "tide", "wave", "granite", "iron",
    "copper", "glass", "brass", "mercury", "rotation", "beam", "range", "order",
]  # fmt: skip
# The python-API runs embed 2 chunks at a time, so a document of several chunks takes
# several embedding calls (and, before writes became one call per document, several
# write calls: a kill between them left half a document searchable).
INGEST = f"""
import sys
from hyde_lc import ingest_paths, open_store
ingest_paths(sys.argv[2:], open_store(sys.argv[1]), chunk_size={CHUNK_SIZE},
             chunk_overlap={CHUNK_OVERLAP}, batch_size=2, progress=False)
"""

Items = dict[str, tuple[str, dict]]


def write_corpus(folder: Path, names: list[str], sentences: int = 22) -> list[Path]:
    """Small text files of varied words (22 sentences: about 6 chunks of 400 characters)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in names:
        rng = random.Random(name)
        lines = [
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 14))).capitalize() + "."
            for _ in range(sentences)
        ]
        body = "\n\n".join(" ".join(lines[i : i + 4]) for i in range(0, len(lines), 4))
        path = folder / name
        path.write_text(f"# {name}\n\n{body}", encoding="utf-8")
        paths.append(path.resolve())
    return paths


def child_env() -> dict[str, str]:
    return {**os.environ, "HYDE_LC_THREADS": "1", "ANONYMIZED_TELEMETRY": "False"}


def api_ingest(store: Path, paths: list[Path]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", INGEST, str(store), *map(str, paths)],
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def cli_ingest(store: Path, paths: list[Path], stderr: Any = subprocess.PIPE) -> subprocess.Popen:
    args = ["ingest", *map(str, paths), "--store", str(store), "--json"]
    args += ["--chunk-size", str(CHUNK_SIZE), "--chunk-overlap", str(CHUNK_OVERLAP)]
    return subprocess.Popen(
        [HYDE_LC, *args], env=child_env(), stdout=subprocess.PIPE, stderr=stderr, text=True
    )


def finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[str, str]:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out}\n{err}"
    return out, err


def collection(store: Path):
    """The collection through a new client (not the process's cached, possibly stale one)."""
    import chromadb
    from chromadb.api.shared_system_client import SharedSystemClient
    from chromadb.config import Settings

    SharedSystemClient.clear_system_cache()
    client = chromadb.PersistentClient(str(store), settings=Settings(anonymized_telemetry=False))
    return client.get_collection("hyde_lc")


def contents(store: Path) -> Items:
    """id -> (text, metadata) of the whole collection."""
    got = collection(store).get(include=["documents", "metadatas"])
    return {
        id_: (text, dict(meta))
        for id_, text, meta in zip(got["ids"], got["documents"], got["metadatas"], strict=True)
    }


def documents(items: Items) -> dict[tuple[str, str], list[int]]:
    """(source, doc_id) -> the chunk indexes present, sorted."""
    out: dict[tuple[str, str], list[int]] = defaultdict(list)
    for _, meta in items.values():
        out[(meta["source"], meta["doc_id"])].append(int(meta["chunk_index"]))
    return {key: sorted(indexes) for key, indexes in out.items()}


def half_written(items: Items) -> list[str]:
    """Documents whose chunks are not exactly 0..chunk_count-1, once each."""
    counts = {(m["source"], m["doc_id"]): int(m["chunk_count"]) for _, m in items.values()}
    return [
        f"{Path(source).name}: chunks {indexes} of {counts[(source, doc_id)]}"
        for (source, doc_id), indexes in documents(items).items()
        if indexes != list(range(counts[(source, doc_id)]))
    ]


def assert_complete_exactly_once(store: Path, paths: list[Path]) -> Items:
    """Every file is one whole document, and each chunk's own vector finds that chunk."""
    items = contents(store)
    assert half_written(items) == []
    sources = sorted(source for source, _ in documents(items))
    assert sources == sorted(map(str, paths))  # one version per file, none missing
    got = collection(store).get(include=["embeddings"])
    found = collection(store).query(query_embeddings=list(got["embeddings"]), n_results=1)
    misses = [id_ for id_, hit in zip(got["ids"], found["ids"], strict=True) if hit != [id_]]
    assert misses == [], f"{len(misses)} of {len(got['ids'])} chunks missing from the index"
    return items


def reference(tmp_path: Path, paths: list[Path]) -> Items:
    """The collection an uninterrupted run builds from ``paths``."""
    store = tmp_path / "reference"
    finish(api_ingest(store, paths))
    return contents(store)


def small_sync_threshold(store: Path) -> None:
    """Create the collection with a vector index written to disk every few records.

    Chroma persists its HNSW index every ``sync_threshold`` (default 1,000) records;
    with a small one, concurrent writers clash on the index files within seconds.
    """
    import chromadb
    from chromadb.config import Settings

    client = chromadb.PersistentClient(str(store), settings=Settings(anonymized_telemetry=False))
    client.create_collection(
        "hyde_lc", configuration={"hnsw": {"space": "cosine", "sync_threshold": 10}}
    )


def test_killed_ingestion_leaves_no_half_document_and_a_rerun_completes_it(tmp_path):
    paths = write_corpus(tmp_path / "docs", [f"note{i:02d}.md" for i in range(24)])
    store = tmp_path / "store"
    proc = api_ingest(store, paths)
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if len(documents(contents(store))) >= 4:
                    break
            except Exception:  # store or collection not created yet
                pass
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    killed = contents(store)
    assert 4 <= len(documents(killed)) < len(paths), "the kill did not land mid-run"
    assert half_written(killed) == []
    vector = collection(store).get(limit=1, include=["embeddings"])["embeddings"][0]
    assert collection(store).query(query_embeddings=[vector], n_results=3)["ids"][0]

    out, _ = finish(cli_ingest(store, paths))  # the same files again, now from the CLI
    assert '"status": "added"' in out and '"status": "unchanged"' in out
    assert contents(store) == reference(tmp_path, paths)
    assert_complete_exactly_once(store, paths)


def test_two_processes_ingesting_at_once_write_each_document_once(tmp_path):
    import fcntl

    from hyde_lc.store import LOCK_FILE

    docs = tmp_path / "docs"
    only_a = write_corpus(docs, [f"a{i}.txt" for i in range(4)], sentences=11)
    only_b = write_corpus(docs, [f"b{i}.txt" for i in range(4)], sentences=11)
    both = write_corpus(docs, [f"c{i}.md" for i in range(3)], sentences=11)
    store = tmp_path / "store"
    small_sync_threshold(store)
    logs = [tmp_path / "first.err", tmp_path / "second.err"]
    # Hold the write lock until both processes are at their first write, so that they
    # contend for certain; then let them go.
    with (store / LOCK_FILE).open("a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        procs = [
            cli_ingest(store, files, stderr=log.open("w"))
            for files, log in ((only_a + both, logs[0]), (both + only_b, logs[1]))
        ]
        deadline = time.monotonic() + 120
        while not all("waiting for it to finish" in log.read_text() for log in logs):
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
            time.sleep(0.1)
        fcntl.flock(lock, fcntl.LOCK_UN)
    outs = [finish(proc)[0] for proc in procs]
    # Whichever went second found the shared files already written by the first.
    assert sum(out.count('"status": "unchanged"') for out in outs) == len(both)
    items = assert_complete_exactly_once(store, only_a + only_b + both)
    assert items == reference(tmp_path, only_a + only_b + both)


def test_threads_query_while_another_process_ingests(tmp_path):
    from hyde_lc import load_embeddings, open_store
    from hyde_lc.ingest import ingest_paths
    from hyde_lc.store import refresh_store

    paths = write_corpus(tmp_path / "docs", [f"n{i}.md" for i in range(10)], sentences=11)
    store_dir = tmp_path / "store"
    small_sync_threshold(store_dir)
    embeddings = load_embeddings()
    mine = open_store(store_dir, embeddings=embeddings)
    ingest_paths(paths[:1], mine, chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP)
    proc = api_ingest(store_dir, paths[1:])
    errors: list[BaseException] = []
    queries = [0] * 6

    def read(slot: int) -> None:
        try:
            store = open_store(store_dir, embeddings=embeddings)
            while proc.poll() is None:
                assert store.similarity_search(random.choice(WORDS), k=3)
                queries[slot] += 1
                time.sleep(0.02)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=read, args=(i,)) for i in range(len(queries))]
    for thread in threads:
        thread.start()
    finish(proc)
    for thread in threads:
        thread.join(60)
    assert errors == [] and min(queries) > 0, (errors, queries)
    assert_complete_exactly_once(store_dir, paths)
    # This process's index predates the other's writes; a refresh brings them in.
    refresh_store(mine)
    last = contents(store_dir)
    text = next(t for t, m in last.values() if m["source"] == str(paths[-1]))
    assert mine.similarity_search(text, k=1)[0].page_content == text
