"""Faults on real components: ingestion killed mid-run (also mid-document, for a document
larger than one Chroma write), concurrent writers and readers, a read-only store, an
unreadable folder, a pipe named as a file, a refused file, a server that never answers.

Ingestion runs in subprocesses (``hyde-lc ingest`` or ``ingest_paths``) with the real
local embeddings (``local:minilm``, or fake ones where only the writing matters) into an
embedded Chroma folder; the test process polls, kills, queries and compares. Every check
of the collection reads it through a fresh Chroma client, since a client's vector index
does not see other processes' writes. Permission tests run the child without root's
permission override (setpriv) when the tests run as root.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from hyde_lc.store.chroma_collection import SEQ
from tests.fakes import ROOT
from tests.integration.corpus import (
    CHUNK_OVERLAP,
    CHUNK_SIZE,
    WORDS,
    Items,
    documents,
    half_written,
    write_corpus,
)

pytestmark = pytest.mark.integration

HYDE_LC = str(Path(sys.executable).parent / "hyde-lc")
# The python-API runs embed 2 chunks at a time, so a document of several chunks takes
# several embedding calls (and, before writes became one call per document, several
# write calls: a kill between them left half a document searchable).
INGEST = f"""
import sys
from hyde_lc import ingest_paths, open_store
ingest_paths(sys.argv[2:], open_store(sys.argv[1]), chunk_size={CHUNK_SIZE},
             chunk_overlap={CHUNK_OVERLAP}, batch_size=2, progress=False)
"""


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
    """id -> (text, metadata) of the whole collection (without the writes' numbers)."""
    got = collection(store).get(include=["documents", "metadatas"])
    return {
        id_: (text, {k: v for k, v in meta.items() if k != SEQ})
        for id_, text, meta in zip(got["ids"], got["documents"], got["metadatas"], strict=True)
    }


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

    from hyde_lc.store.location import LOCK_FILE

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
        # a bound for a stuck start (a loaded machine takes a minute or more), not a timing
        deadline = time.monotonic() + 900
        while not all("waiting for it to finish" in log.read_text() for log in logs):
            assert all(p.poll() is None for p in procs), [log.read_text() for log in logs]
            if time.monotonic() > deadline:
                pytest.fail("the two ingests never both reached the write lock")
            time.sleep(0.1)
        fcntl.flock(lock, fcntl.LOCK_UN)
    outs = [finish(proc)[0] for proc in procs]
    # Whichever went second found the shared files already written by the first.
    assert sum(out.count('"status": "unchanged"') for out in outs) == len(both)
    items = assert_complete_exactly_once(store, only_a + only_b + both)
    assert items == reference(tmp_path, only_a + only_b + both)


def test_threads_query_while_another_process_ingests(tmp_path):
    from hyde_lc import load_embeddings, open_store
    from hyde_lc.ingest.files import ingest_paths
    from hyde_lc.store.vectorstore import refresh_store

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


# -- a document larger than one Chroma write, killed mid-way -----------------------------------

LARGE_INGEST = """
import json, sys, time
sys.path.insert(0, {root!r})
from hyde_lc import ingest_paths, open_store
from tests.fakes import FakeEmbeddings

class Slow(FakeEmbeddings):
    def embed_documents(self, texts):
        time.sleep(float(sys.argv[3]))
        return super().embed_documents(texts)

store = open_store(sys.argv[1], embeddings=Slow(size=32))
report = ingest_paths([sys.argv[2]], store, chunk_size=200, chunk_overlap=20, batch_size=8,
                      max_write=40, progress=False)
print(json.dumps([vars(f) for f in report.files]))
"""


def large_ingest(store: Path, path: Path, delay: float) -> subprocess.Popen:
    """``ingest_paths`` of one file in a child: 200-character chunks, at most 40 per write."""
    script = LARGE_INGEST.format(root=str(ROOT))
    return subprocess.Popen(
        [sys.executable, "-c", script, str(store), str(path), str(delay)],
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def fresh_store(store: Path):
    """``open_store`` through a new client (this process's cached one may be stale)."""
    from chromadb.api.shared_system_client import SharedSystemClient

    from hyde_lc import open_store
    from tests.fakes import FakeEmbeddings

    SharedSystemClient.clear_system_cache()
    return open_store(store, embeddings=FakeEmbeddings(size=32))


def test_a_large_document_killed_mid_write_stays_hidden_and_the_rerun_resumes(tmp_path):
    from hyde_lc import HyDERetriever, collection_info
    from hyde_lc.ingest.files import load_document, split_document
    from hyde_lc.search.lexical import lexical_search_for
    from hyde_lc.store.lexical_index import lexical_query

    path = write_corpus(tmp_path / "docs", ["big.md"], sentences=1800)[0]
    store = tmp_path / "store"
    finish(large_ingest(store, path, 0))
    (old_id,) = {m["doc_id"] for _, m in contents(store).values()}
    old_count = len(contents(store))
    path.write_text("Edited: the keeper's log, second copy.\n\n" + path.read_text(), "utf-8")
    new = split_document(load_document(path), "fake:hash-32", 200, 20)
    new_id = new[0].metadata["doc_id"]
    assert len(new) > 10 * 40  # many writes

    def written() -> int:
        return len(collection(store).get(where={"doc_id": new_id}, include=[])["ids"])

    proc = large_ingest(store, path, 0.05)
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and proc.poll() is None and written() < 80:
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    done = written()
    assert 80 <= done < len(new), "the kill did not land mid-document"

    # Nothing of the new version is visible; the old one is, whole.
    reader = fresh_store(store)
    seen = {m["doc_id"] for m in reader.get(include=["metadatas"])["metadatas"]}
    for chunk in new[: done + 5 : 7]:
        seen |= {d.metadata["doc_id"] for d in reader.similarity_search(chunk.text, k=10)}
        for options in ({}, {"search_type": "mmr"}):
            hyde = HyDERetriever(vectorstore=reader, n_hypotheses=0, k=10, **options)
            seen |= {d.metadata["doc_id"] for d in hyde.invoke(chunk.text)}
    assert seen == {old_id}
    info = collection_info(reader)
    assert [(d["doc_id"], d["chunks"]) for d in info["documents"]] == [(old_id, old_count)]
    assert [(d["doc_id"], d["chunks_written"]) for d in info["incomplete"]] == [(new_id, done)]

    # The rerun embeds only what the killed run had not written, then switches versions.
    out, _ = finish(large_ingest(store, path, 0))
    (result,) = json.loads(out)
    assert (result["status"], result["chunks"]) == ("replaced", len(new))
    assert result["embedded"] == len(new) - done
    items = contents(store)
    assert half_written(items) == [] and {m["doc_id"] for _, m in items.values()} == {new_id}
    assert sorted(items) == sorted(c.id for c in new)
    assert collection_info(fresh_store(store))["incomplete"] == []
    assert_complete_exactly_once(store, [path])
    # The lexical side caught up with the kill and the rerun: it finds the new first chunk.
    search = lexical_search_for(fresh_store(store))
    assert search is not None
    hits = search.search(lexical_query("Edited: the keeper's log, second copy."), k=1)
    assert [chunk_id for chunk_id, _ in hits] == [new[0].id]


# -- permissions, pipes and servers that never answer -------------------------------------------


def without_root_powers() -> list[str]:
    """A command prefix under which file permissions apply (root normally ignores them).

    As root: setpriv drops the capabilities that override permissions. Skips the test
    where that is not possible.
    """
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root, and setpriv is missing: permissions cannot be tested")
    prefix = [setpriv, "--bounding-set=-dac_override,-dac_read_search"]
    if subprocess.run([*prefix, "true"], capture_output=True).returncode != 0:
        pytest.skip("running as root, and setpriv cannot drop the permission override here")
    return prefix


def run_cli(args: list[str], prefix: list[str] | None = None, **env: str):
    return subprocess.run(
        [*(prefix or []), HYDE_LC, *args],
        env={**child_env(), **env},
        capture_output=True,
        text=True,
        timeout=600,
    )


def folder_digest(folder: Path) -> dict[str, str]:
    import hashlib

    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_a_read_only_store_can_be_searched_but_not_written(tmp_path):
    prefix = without_root_powers()
    paths = write_corpus(tmp_path / "docs", ["keeper.md", "later.md"], sentences=11)
    store = tmp_path / "store"
    finish(cli_ingest(store, paths[:1]))
    before = folder_digest(store)
    subprocess.run(["chmod", "-R", "a-w", str(store)], check=True)
    try:
        info = run_cli(["info", "--store", str(store), "--json"], prefix)
        assert info.returncode == 0, info.stderr
        assert json.loads(info.stdout)["chunks"] > 0
        assert "read-only" in info.stderr  # says it reads a temporary copy
        ask = ["ask", "lamp", "--mode", "standard", "--no-answer", "--store", str(store)]
        asked = run_cli([*ask, "--json"], prefix)
        assert asked.returncode == 0, asked.stderr
        assert json.loads(asked.stdout)["documents"]
        refused = run_cli(["ingest", str(paths[1]), "--store", str(store)], prefix)
        assert refused.returncode == 2
        assert "is read-only: it can be searched but not written" in refused.stderr
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(store)], check=True)
    assert folder_digest(store) == before


def test_a_read_only_index_folder_is_named_kept_and_searched_around(tmp_path):
    """Only the BM25 index folder read-only: a write is refused naming it and the fix,
    the index is never called damaged nor rebuilt, and searches answer dense only, saying
    so in every result."""
    prefix = without_root_powers()
    paths = write_corpus(tmp_path / "docs", ["keeper.md", "later.md"], sentences=11)
    store = tmp_path / "store"
    finish(cli_ingest(store, paths[:1]))
    (lexical,) = [p for p in (store / "hyde_lc_lexical").iterdir() if p.is_dir()]  # the index's
    before, index_before = contents(store), folder_digest(lexical)
    ask = ["ask", "lantern prism", "--mode", "standard", "--no-answer", "--store", str(store)]
    subprocess.run(["chmod", "-R", "a-w", str(lexical)], check=True)
    try:
        refused = run_cli(["ingest", str(paths[1]), "--store", str(store)], prefix)
        asked = run_cli([*ask, "--json"], prefix)
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(lexical)], check=True)
    assert refused.returncode == 2, refused.stderr
    assert "error: the BM25 index folder " in refused.stderr
    assert f"chmod -R u+w {lexical.parent}" in refused.stderr
    assert "the collection is as before" in refused.stderr
    assert "damaged" not in refused.stderr and "PermissionError" not in refused.stderr
    assert asked.returncode == 0, asked.stderr
    assert "damaged" not in asked.stderr
    found = json.loads(asked.stdout)["documents"]
    assert found and all("searched dense only" in d["lexical_note"] for d in found)
    assert contents(store) == before
    assert folder_digest(lexical) == index_before  # nothing rebuilt, nothing deleted


def test_an_unreadable_sub_folder_is_reported(tmp_path):
    prefix = without_root_powers()
    docs = tmp_path / "docs"
    write_corpus(docs, ["a.md"], sentences=11)
    write_corpus(docs / "locked", ["b.md"], sentences=11)
    (docs / "locked").chmod(0)
    try:
        done = run_cli(["ingest", str(docs), "--store", str(tmp_path / "store")], prefix)
    finally:
        (docs / "locked").chmod(0o755)
    assert done.returncode == 1, done.stderr  # the rest ingested, one folder passed over
    assert "a.md" in done.stdout
    assert (
        f"1 item(s) inside the folders were passed over (see their notes): {docs / 'locked'}"
        in done.stderr
    )
    assert f"{docs / 'locked'}: folder skipped: cannot read it (Permission denied)" in done.stderr


def test_a_pipe_named_on_the_command_line_is_refused(tmp_path):
    fifo = tmp_path / "feed.txt"
    os.mkfifo(fifo)
    done = run_cli(["ingest", str(fifo), "--store", str(tmp_path / "store")])
    assert done.returncode == 2
    assert "it is a named pipe (FIFO), not a regular file" in done.stderr
    assert not (tmp_path / "store").exists()


def test_a_refused_file_leaves_no_store_behind(tmp_path):
    good = write_corpus(tmp_path / "docs", ["good.md"], sentences=11)[0]
    binary = tmp_path / "docs" / "scan.txt"
    binary.write_bytes(bytes(range(32)) * 100)
    done = run_cli(["ingest", str(good), str(binary), "--store", str(tmp_path / "store")])
    assert done.returncode == 2 and "does not look like text" in done.stderr
    assert not (tmp_path / "store").exists()


def test_info_on_a_server_that_never_answers_fails_naming_it(tmp_path):
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.getsockname()[1]}"
    try:
        done = run_cli(["info", "--chroma-url", url], HYDE_LC_CHROMA_TIMEOUT="2")
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        server.close()
    assert done.returncode == 2
    assert f"the Chroma server at {url} did not answer within 2 s" in done.stderr
