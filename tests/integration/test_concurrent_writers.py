"""Several clients writing one Chroma server collection at once, and writers killed or stalled.

Every client is a process of its own with its own cache folder (so its own BM25 index), as
on separate machines; the server is a real ``chroma run``.

* Two and four writers replace their files over and over (the chunk count never changes)
  while a reader searches. Every query must return one version of each document (never two
  at once), find the newest version of every document whose write had returned, lexically
  and through `HyDERetriever`, and never return a version a returned write replaced. Once
  the writers are done, every write number belongs to one writer only, and every client's
  BM25 index holds exactly the collection.
* A writer killed -9 right after writing a replaced file's new version (or right after
  switching searches to it): readers see one version throughout, and the first reader to
  search after the writer's lease has run out finishes the write.
* A second writer waits for the first, or is refused with the holder named; a writer
  stalled past its lease cannot write once another has taken over.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from hyde_lc import HyDERetriever, ingest_paths, open_store
from hyde_lc.errors import StoreBusyError, StoreUnavailableError
from hyde_lc.search.lexical import lexical_search_for
from hyde_lc.store import lease as lease_module
from hyde_lc.store.chroma_collection import DOC_VERSION, META_WRITING, SEQ
from hyde_lc.store.collection import HybridCollection
from hyde_lc.store.lexical_index import lexical_query
from tests.fakes import ROOT, FakeEmbeddings

pytestmark = pytest.mark.integration

COLLECTION = "shared-writers"
DOCS_PER_WRITER = 3
CHUNKS_PER_DOC = 3
CHUNK_SIZE = 200
K = 60
"""Above the most chunks the collection holds: the dense side returns every visible chunk."""


def term(writer: int, doc: int, version: int) -> str:
    """The word only this version of this document contains."""
    return f"quillon{writer}d{doc}v{version}"


def doc_text(writer: int, doc: int, version: int) -> str:
    """``CHUNKS_PER_DOC`` paragraphs of ~150 characters, each with the version's word."""
    word = term(writer, doc, version)
    filler = "the keeper trimmed the lamp and watched the fog roll over the reef at dusk"
    return "\n\n".join(f"{word} part {i}: {filler} {word}." for i in range(CHUNKS_PER_DOC))


def _store(url: str) -> Any:
    return open_store(url=url, collection=COLLECTION, embeddings=FakeEmbeddings(size=32))


def _ingest(store: Any, path: Path) -> Any:
    return ingest_paths([path], store, chunk_size=CHUNK_SIZE, chunk_overlap=0, progress=False)


# -- the clients (this module run as a script) -------------------------------------------------


def run_writer(url: str, folder: Path, log_path: Path, writer: int, rounds: int) -> None:
    """Write ``rounds`` times: each document added, then replaced by its next version."""
    store = _store(url)
    with log_path.open("a", encoding="utf-8") as log:
        for n in range(rounds):
            doc, version = n % DOCS_PER_WRITER, n // DOCS_PER_WRITER
            path = folder / f"w{writer}-d{doc}.txt"
            path.write_text(doc_text(writer, doc, version), encoding="utf-8")
            log.write(json.dumps({"event": "begin", "source": str(path)}) + "\n")
            log.flush()
            report = _ingest(store, path)
            assert report.files[0].status in ("added", "replaced"), report.summary()
            got = (
                HybridCollection.of(store)
                .chroma_collection()
                .get(where={"source": str(path)}, include=["metadatas"])
            )
            seqs = {int(meta[SEQ]) for meta in got["metadatas"]}
            assert len(seqs) == 1, seqs  # one version, written by one write
            event = {
                "event": "done",
                "source": str(path),
                "term": term(writer, doc, version),
                "seq": seqs.pop(),
            }
            if version:
                event["old"] = term(writer, doc, version - 1)
            log.write(json.dumps(event) + "\n")
            log.flush()


def run_killed(url: str, path: Path, where: str) -> None:
    """Replace ``path``'s document with its version 1, killed -9 at ``where``."""
    from hyde_lc.ingest import files

    path.write_text(doc_text(0, 0, 1), encoding="utf-8")

    def die(*args: Any, **kwargs: Any) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    if where == "after-write":  # the new version written, searches not yet switched to it
        original = files._write

        def write_then_die(*args: Any, **kwargs: Any) -> None:
            original(*args, **kwargs)
            die()

        files._write = write_then_die  # type: ignore[assignment]
    else:  # switched to the new version, the old one not yet deleted
        files._retire_group = die  # type: ignore[assignment]
    _ingest(_store(url), path)
    raise AssertionError("the writer should have been killed")


def run_holder(url: str) -> None:
    """Hold the writer lease; on a line from stdin, try to write one chunk."""
    store = _store(url)
    embeddings = FakeEmbeddings(size=32)
    with HybridCollection.of(store).writing() as write:
        print("holding", flush=True)
        sys.stdin.readline()
        try:
            text = "written by the stalled holder"
            write.upsert(["held-1"], embeddings.embed_documents([text]), [{}], [text])
        except Exception as exc:
            print(f"refused: {type(exc).__name__}: {exc}", flush=True)
            return
    print("wrote", flush=True)


# -- helpers ------------------------------------------------------------------------------------


def _spawn(args: list[str], cache: Path, output: Path, **env: str) -> subprocess.Popen:
    environ = {
        **os.environ,
        "HYDE_LC_CACHE_DIR": str(cache),
        "HYDE_LC_AUDIT_INTERVAL": "0",  # what the feed and the lease keep right, not an audit
        "ANONYMIZED_TELEMETRY": "False",
        **env,
    }
    with output.open("wb") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.integration.test_concurrent_writers", *args],
            cwd=ROOT,
            env=environ,
            stdin=subprocess.PIPE,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )


class Logs:
    """What the writers' logs say: sources being written, each source's newest version."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths
        self.offsets = [0] * len(paths)
        self.newest: dict[str, str] = {}
        """Source -> the term of its version written by the last write that returned."""
        self.replaced: set[str] = set()
        """Terms of versions that a returned write replaced."""
        self.begun: dict[str, int] = defaultdict(int)
        """Source -> writes begun on it."""
        self.ended: dict[str, int] = defaultdict(int)
        """Source -> writes on it that returned."""
        self.done = 0
        self.seqs: list[int] = []
        """The write number of every write that returned."""
        self.replacing: set[int] = set()
        """The write numbers of the writes that replaced a version."""

    def read(self) -> Logs:
        for n, path in enumerate(self.paths):
            with path.open("rb") as log:
                log.seek(self.offsets[n])
                data = log.read()
            end = data.rfind(b"\n") + 1
            self.offsets[n] += end
            for line in data[:end].splitlines():
                event = json.loads(line)
                if event["event"] == "begin":
                    self.begun[event["source"]] += 1
                    continue
                self.newest[event["source"]] = event["term"]
                self.ended[event["source"]] += 1
                self.seqs.append(event["seq"])
                if "old" in event:
                    self.replaced.add(event["old"])
                    self.replacing.add(event["seq"])
                self.done += 1
        return self


def _versions_by_source(docs: list[Any]) -> dict[str, set[str]]:
    seen: dict[str, set[str]] = defaultdict(set)
    for doc in docs:
        seen[str(doc.metadata.get("source"))].add(str(doc.metadata.get(DOC_VERSION)))
    return seen


def _index_matches_collection(store: Any) -> None:
    hybrid = HybridCollection.of(store)
    index = hybrid.sync(max_age=0)
    assert index is not None
    chroma = hybrid.chroma_collection()
    got = chroma.get(include=[])
    assert set(index.contents()) == {str(i) for i in got["ids"]}
    result = hybrid.audit()
    assert result is not None and not result.changed, result


@pytest.fixture
def reader_env(tmp_path, monkeypatch):
    monkeypatch.setenv("HYDE_LC_CACHE_DIR", str(tmp_path / "reader-cache"))
    monkeypatch.setenv("HYDE_LC_REFRESH_INTERVAL", "0")
    monkeypatch.setenv("HYDE_LC_AUDIT_INTERVAL", "0")


# -- many writers ----------------------------------------------------------------------------


@pytest.mark.parametrize("writers", [2, 4])
def test_concurrent_writers_replacing_files_with_a_reader_checking_every_change(
    server, tmp_path, reader_env, writers
):
    rounds = DOCS_PER_WRITER * 3  # each document added, then replaced twice
    folders, logs, outputs, procs = [], [], [], []
    for w in range(writers):
        folder = tmp_path / f"files-{w}"
        folder.mkdir()
        log = tmp_path / f"writer-{w}.jsonl"
        log.touch()
        output = tmp_path / f"writer-{w}.out"
        args = ["write", server.url, str(folder), str(log), str(w), str(rounds)]
        procs.append(_spawn(args, tmp_path / f"cache-{w}", output))
        folders.append(folder)
        logs.append(log)
        outputs.append(output)
    failures: list[str] = []
    queries = during = 0
    try:
        known = Logs(logs)
        while not known.read().done:
            for proc, output in zip(procs, outputs, strict=True):
                assert proc.poll() in (None, 0), output.read_text(errors="replace")
            time.sleep(0.05)
        store = _store(server.url)
        lexical = lexical_search_for(store)
        assert lexical is not None
        retriever = HyDERetriever(vectorstore=store, n_hypotheses=0, k=K)
        while not failures:
            running = any(proc.poll() is None for proc in procs)
            known.read()
            settled = {s for s, n in known.begun.items() if known.ended[s] == n}
            begun = dict(known.begun)
            newest, replaced, done = dict(known.newest), set(known.replaced), known.done
            for source, word in newest.items():
                hits = [i for i, _ in lexical.search(lexical_query(word), K)]
                docs = lexical.documents(hits)
                # A write on it before or during the search may hide it (see the note).
                moved_on = known.read().begun[source] != begun.get(source)
                if len(docs) != CHUNKS_PER_DOC and source in settled and not moved_on:
                    failures.append(f"{word}: {len(docs)} of {CHUNKS_PER_DOC} chunks found")
                for doc in docs:
                    if any(old in doc.page_content for old in replaced):
                        failures.append(f"a replaced version came back: {doc.id}")
            everything = retriever.invoke(next(iter(newest.values())))
            for source, versions in _versions_by_source(everything).items():
                if len(versions) > 1:
                    failures.append(f"{source}: two versions searched at once: {versions}")
            for doc in everything:
                if any(old in doc.page_content.split() for old in replaced):
                    failures.append(f"the retriever returned a replaced version: {doc.id}")
            queries += 1
            during += known.read().done != done
            if not running:
                break
        for proc, output in zip(procs, outputs, strict=True):
            assert proc.wait(timeout=120) == 0, output.read_text(errors="replace")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert not failures, "\n".join(failures[:10])
    assert known.read().done == writers * rounds
    assert queries >= 10 and during >= 5, (queries, during)

    # Every write had a number of its own, and every deletion logged is a replacing write's.
    assert len(set(known.seqs)) == len(known.seqs), sorted(known.seqs)
    hybrid = HybridCollection.of(store)
    feed = hybrid.feed(create=False)
    assert feed is not None
    logged = {int(meta[SEQ]) for meta in feed.get(include=["metadatas"])["metadatas"]}
    assert logged <= known.replacing, logged - known.replacing
    got = hybrid.chroma_collection().get(include=[])
    assert len(got["ids"]) == writers * DOCS_PER_WRITER * CHUNKS_PER_DOC

    # The reader's index, and each writer's own, hold exactly the collection.
    _index_matches_collection(store)
    for w in range(writers):
        os.environ["HYDE_LC_CACHE_DIR"] = str(tmp_path / f"cache-{w}")
        writer_store = _store(server.url)
        assert HybridCollection.of(writer_store).base.is_relative_to(tmp_path / f"cache-{w}")
        _index_matches_collection(writer_store)


# -- a writer killed -------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["after-write", "after-switch"])
def test_a_writer_killed_mid_replacement_leaves_one_version_and_a_reader_finishes_it(
    server, tmp_path, reader_env, monkeypatch, where
):
    monkeypatch.setattr(lease_module, "CLOCK_SKEW_S", 0.0)  # one machine: the clocks agree
    path = tmp_path / "w0-d0.txt"
    path.write_text(doc_text(0, 0, 0), encoding="utf-8")
    store = _store(server.url)
    assert _ingest(store, path).files[0].status == "added"
    writer = _spawn(
        ["kill", server.url, str(path), where],
        tmp_path / "killed-cache",
        tmp_path / "killed.out",
        HYDE_LC_WRITER_LEASE="3",
    )
    assert writer.wait(timeout=120) == -signal.SIGKILL, (tmp_path / "killed.out").read_text()
    old, new = term(0, 0, 0), term(0, 0, 1)
    shown = old if where == "after-write" else new
    hidden = new if where == "after-write" else old
    hybrid = HybridCollection.of(store)
    lexical = lexical_search_for(store)
    retriever = HyDERetriever(vectorstore=store, n_hypotheses=0, k=K)

    def lexically(word: str) -> list[Any]:
        return lexical.documents([i for i, _ in lexical.search(lexical_query(word), K)])

    def one_version() -> None:
        docs = retriever.invoke(f"{old} {new}")
        assert docs and len(_versions_by_source(docs)[str(path)]) == 1, docs
        assert all(hidden not in d.page_content for d in docs)
        assert lexically(hidden) == []
        # The new version switched to by a writer still counted as writing is found by
        # dense search only, and the results say so; the old one is indexed already.
        found = lexically(shown)
        said = all("another client is writing" in d.metadata.get("lexical_note", "") for d in docs)
        assert len(found) == CHUNKS_PER_DOC or (not found and said), (found, docs)

    one_version()
    deadline = time.monotonic() + 90
    while hybrid.chroma.fresh_metadata().get(META_WRITING) is not None:
        assert time.monotonic() < deadline, "no reader finished the write of the killed writer"
        one_version()  # each search reads the state; one of them finishes the write
        time.sleep(0.2)
    one_version()
    assert len(lexically(shown)) == CHUNKS_PER_DOC
    assert not any("lexical_note" in d.metadata for d in retriever.invoke(shown))
    _index_matches_collection(store)

    # Ingesting the file again completes the replacement, embedding nothing again.
    report = _ingest(store, path)
    assert report.files[0].status == "replaced"
    assert report.files[0].embedded == 0
    docs = retriever.invoke(f"{old} {new}")
    assert docs and all(new in d.page_content for d in docs)
    assert len(hybrid.chroma_collection().get(include=[])["ids"]) == CHUNKS_PER_DOC
    _index_matches_collection(store)


# -- waiting, refusing, taking over ----------------------------------------------------------


def test_a_second_writer_waits_for_the_first_or_is_refused_naming_it(
    server, tmp_path, reader_env, monkeypatch
):
    holder = _spawn(["hold", server.url], tmp_path / "holder-cache", tmp_path / "holder.out")
    try:
        deadline = time.monotonic() + 60
        while "holding" not in (tmp_path / "holder.out").read_text(errors="replace"):
            assert holder.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        monkeypatch.setenv("HYDE_LC_WRITE_WAIT", "1")
        store = _store(server.url)
        with pytest.raises(StoreBusyError, match=rf":{holder.pid}\b.*HYDE_LC_WRITE_WAIT"):
            store.add_texts(["the second writer's text"], ids=["second-1"])
        assert store.get(ids=["second-1"])["ids"] == []

        monkeypatch.setenv("HYDE_LC_WRITE_WAIT", "120")
        holder.stdin.write(b"go\n")
        holder.stdin.flush()
        store.add_texts(["the second writer's text"], ids=["second-1"])  # waits, then writes
        assert holder.wait(timeout=60) == 0
        assert "wrote" in (tmp_path / "holder.out").read_text()
        assert sorted(store.get()["ids"]) == ["held-1", "second-1"]
        _index_matches_collection(store)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_a_writer_stalled_past_its_lease_cannot_write_after_another_took_over(
    server, tmp_path, reader_env, monkeypatch
):
    monkeypatch.setattr(lease_module, "CLOCK_SKEW_S", 0.0)
    monkeypatch.setenv("HYDE_LC_WRITER_LEASE", "3")
    holder = _spawn(
        ["hold", server.url],
        tmp_path / "holder-cache",
        tmp_path / "holder.out",
        HYDE_LC_WRITER_LEASE="3",
    )
    try:
        deadline = time.monotonic() + 60
        while "holding" not in (tmp_path / "holder.out").read_text(errors="replace"):
            assert holder.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        os.kill(holder.pid, signal.SIGSTOP)  # stalled: its lease stops being renewed
        store = _store(server.url)
        store.add_texts(["written after taking over"], ids=["second-1"])
        os.kill(holder.pid, signal.SIGCONT)
        holder.stdin.write(b"go\n")
        holder.stdin.flush()
        assert holder.wait(timeout=60) == 0
        out = (tmp_path / "holder.out").read_text()
        assert "refused: WriterLeaseLostError" in out and "lost its writer lease" in out, out
        assert store.get()["ids"] == ["second-1"]
        _index_matches_collection(store)
    finally:
        if holder.poll() is None:
            os.kill(holder.pid, signal.SIGCONT)
            holder.kill()
            holder.wait()


def test_a_retriever_and_a_store_whose_server_stopped_raise_the_packages_error_naming_it(
    server, tmp_path, reader_env
):
    store = _store(server.url)
    store.add_texts(["the lamp keeper's log"], ids=["one"])
    retriever = HyDERetriever(vectorstore=store, n_hypotheses=0, k=1)
    assert retriever.invoke("lamp")
    server.stop()
    with pytest.raises(StoreUnavailableError, match=server.url):
        retriever.invoke("lamp")
    # LangChain's store API on the same store says the same.
    for call in (
        lambda: store.similarity_search("lamp", k=1),
        lambda: store.max_marginal_relevance_search("lamp", k=1),
        lambda: store.get(),
        lambda: store.add_texts(["written while the server is down"]),
        lambda: store.delete(["one"]),
    ):
        with pytest.raises(StoreUnavailableError, match=server.url):
            call()


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    if command == "write":
        run_writer(rest[0], Path(rest[1]), Path(rest[2]), int(rest[3]), int(rest[4]))
    elif command == "kill":
        run_killed(rest[0], Path(rest[1]), rest[2])
    else:
        run_holder(rest[0])
