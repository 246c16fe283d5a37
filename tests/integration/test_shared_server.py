"""Two clients of one Chroma server, each with a lexical index of its own, see each other's writes.

Client A (a subprocess with its own ``HYDE_LC_CACHE_DIR``, as on another machine) adds,
replaces (old chunks deleted, new ones added, in one write) and deletes documents, and logs
each write to a file: a line before it begins (what it will delete) and one after it returns.
Client B (this process, another cache folder, ``HYDE_LC_REFRESH_INTERVAL=0``) searches all
the while, with `HyDERetriever` and with the lexical side alone. For every write B knew had
returned when a query began, that query must find each chunk the write added, lexically, by
its document's own term (unless a write begun since deletes it), and must never return a
chunk the write deleted, from either side.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from hyde_lc import HyDERetriever, open_store
from hyde_lc.search.lexical import lexical_search_for
from hyde_lc.store.collection import HybridCollection
from hyde_lc.store.lexical_index import lexical_query
from tests.fakes import ROOT, FakeEmbeddings

pytestmark = pytest.mark.integration

COLLECTION = "shared"
CHUNKS_PER_DOCUMENT = 3
MOST_DOCUMENTS = 10
ROUNDS = 60
K = 60
"""Above the most chunks the collection holds: the dense side returns every visible chunk."""
FILLER = [
    "lamp", "keeper", "tower", "lens", "beam", "harbour", "fog", "signal", "coast", "rock",
    "reef", "light",
]  # fmt: skip


def document_term(doc: int, version: int) -> str:
    """The word only the chunks of this version of this document contain."""
    return f"zorblax{doc}r{version}"


def document_chunks(doc: int, version: int) -> tuple[list[str], list[str], list[dict]]:
    """Ids, texts and metadata of one version of a document."""
    term = document_term(doc, version)
    ids = [f"d{doc}-r{version}-c{i}" for i in range(CHUNKS_PER_DOCUMENT)]
    rng = random.Random(f"{doc}/{version}")
    texts = [
        f"{term} part {i}: " + " ".join(rng.choice(FILLER) for _ in range(12))
        for i in range(CHUNKS_PER_DOCUMENT)
    ]
    metas = [
        {"doc_id": f"d{doc}", "source": f"d{doc}.txt", "chunk_index": i}
        for i in range(CHUNKS_PER_DOCUMENT)
    ]
    return ids, texts, metas


# -- client A ---------------------------------------------------------------------------------


def write_documents(url: str, log_path: str, rounds: int, seed: int) -> None:
    """Client A: ``rounds`` writes (add, replace, delete), each logged before and after."""
    store = open_store(url=url, collection=COLLECTION, embeddings=FakeEmbeddings(size=32))
    embeddings = FakeEmbeddings(size=32)
    rng = random.Random(seed)
    alive: dict[int, int] = {}  # document -> its version in the collection
    next_doc = 0
    with open(log_path, "a", encoding="utf-8") as log:

        def note(**event: Any) -> None:
            log.write(json.dumps(event) + "\n")
            log.flush()

        for n in range(rounds):
            if len(alive) < 3:
                op = "add"
            elif len(alive) >= MOST_DOCUMENTS:
                op = rng.choice(["replace", "delete"])
            else:
                op = rng.choice(["add", "add", "replace", "delete"])
            added: dict[str, list[str]] = {}
            deleted: dict[str, list[str]] = {}
            if op == "add":
                doc, version = next_doc, 0
                next_doc += 1
                ids, texts, metas = document_chunks(doc, version)
                note(event="begin", write=n, deletes=[])
                store.add_texts(texts, metas, ids=ids)
                added[document_term(doc, version)] = ids
                alive[doc] = version
            elif op == "replace":
                doc = rng.choice(sorted(alive))
                old, version = alive[doc], alive[doc] + 1
                old_ids = document_chunks(doc, old)[0]
                ids, texts, metas = document_chunks(doc, version)
                note(event="begin", write=n, deletes=old_ids)
                with HybridCollection.of(store).writing() as write:
                    write.delete(old_ids)
                    write.upsert(ids, embeddings.embed_documents(texts), metas, texts)
                deleted[document_term(doc, old)] = old_ids
                added[document_term(doc, version)] = ids
                alive[doc] = version
            else:
                doc = rng.choice(sorted(alive))
                old_ids = document_chunks(doc, alive[doc])[0]
                note(event="begin", write=n, deletes=old_ids)
                if n % 2:
                    store.delete(ids=old_ids)
                else:
                    store.delete(where={"doc_id": f"d{doc}"})
                deleted[document_term(doc, alive.pop(doc))] = old_ids
            note(event="done", write=n, op=op, added=added, deleted=deleted)
            time.sleep(rng.uniform(0, 0.03))


# -- client B ---------------------------------------------------------------------------------


@dataclass
class WriteLog:
    """What client B has read of A's log: finished writes, and deletions begun."""

    path: Path
    alive: dict[str, list[str]] = field(default_factory=dict)
    """Term -> chunk ids, of every document version added by a finished write and not yet
    deleted by one."""
    deleted: dict[str, list[str]] = field(default_factory=dict)
    """Term -> chunk ids deleted by finished writes."""
    being_deleted: set[str] = field(default_factory=set)
    """Chunk ids a write has begun to delete (finished or not)."""
    newest: dict[str, list[str]] = field(default_factory=dict)
    """What the last finished write added (its own, not merged)."""
    newest_deleted: dict[str, list[str]] = field(default_factory=dict)
    finished: int = 0
    _offset: int = 0

    def read(self) -> WriteLog:
        """Take in the lines A has written since the last read (whole lines only)."""
        with self.path.open("rb") as log:
            log.seek(self._offset)
            data = log.read()
        end = data.rfind(b"\n") + 1
        self._offset += end
        for line in data[:end].splitlines():
            event = json.loads(line)
            if event["event"] == "begin":
                self.being_deleted.update(event["deletes"])
                continue
            for term, ids in event["deleted"].items():
                self.alive.pop(term, None)
                self.deleted[term] = ids
            self.alive.update(event["added"])
            self.newest, self.newest_deleted = event["added"], event["deleted"]
            self.finished += 1
        return self

    def deleted_ids(self) -> set[str]:
        return {i for ids in self.deleted.values() for i in ids}

    def as_of_now(self) -> WriteLog:
        """A copy that later reads leave unchanged: what was known when a query began."""
        return replace(
            self,
            alive=dict(self.alive),
            deleted=dict(self.deleted),
            being_deleted=set(self.being_deleted),
        )


def _start_writer(url: str, log: Path, cache: Path, output: Path) -> subprocess.Popen:
    """Client A in a process of its own, with its own cache folder (so its own index)."""
    env = {**os.environ, "HYDE_LC_CACHE_DIR": str(cache), "ANONYMIZED_TELEMETRY": "False"}
    env.pop("HYDE_LC_REFRESH_INTERVAL", None)
    argv = [sys.executable, "-m", "tests.integration.test_shared_server", url, str(log)]
    with output.open("wb") as sink:
        return subprocess.Popen(
            [*argv, str(ROUNDS)], cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT
        )


def test_a_write_by_one_client_is_seen_by_the_next_query_of_another(server, tmp_path, monkeypatch):
    cache_a, cache_b = tmp_path / "client-a-cache", tmp_path / "client-b-cache"
    monkeypatch.setenv("HYDE_LC_CACHE_DIR", str(cache_b))
    monkeypatch.setenv("HYDE_LC_REFRESH_INTERVAL", "0")
    log_path = tmp_path / "writes.jsonl"
    log_path.touch()
    output = tmp_path / "client-a.log"
    writer = _start_writer(server.url, log_path, cache_a, output)
    failures: list[str] = []
    checks = {"queries": 0, "found": 0, "absent": 0, "during_writes": 0}
    try:
        log = WriteLog(log_path)
        while not log.read().finished:  # B opens the collection once A has created it
            assert writer.poll() is None, output.read_text(errors="replace")
            time.sleep(0.01)
        store = open_store(
            url=server.url, collection=COLLECTION, embeddings=FakeEmbeddings(size=32)
        )
        lexical = lexical_search_for(store)
        assert lexical is not None, "a hyde_lc collection on a server has a lexical side"
        retriever = HyDERetriever(vectorstore=store, n_hypotheses=0, k=K)
        assert retriever.lexical_search is not None
        rng = random.Random(7)

        def check(known: WriteLog) -> None:
            """One round of queries, judged by what ``known`` says had finished before it."""
            gone = known.deleted_ids()
            alive = dict(known.alive)
            wanted = dict(known.newest)
            for term in rng.sample(sorted(alive), min(2, len(alive))):
                wanted[term] = alive[term]
            absent = dict(known.newest_deleted)
            for term in rng.sample(sorted(known.deleted), min(2, len(known.deleted))):
                absent[term] = known.deleted[term]
            for term, ids in wanted.items():
                hits = [i for i, _ in lexical.search(lexical_query(term), K)]
                docs = lexical.documents(hits)
                missing = set(ids) - {d.id for d in docs}
                returned_gone = (set(hits) | {d.id for d in docs}) & gone
                if returned_gone:
                    failures.append(f"lexical search for {term} returned deleted {returned_gone}")
                if missing:
                    later = log.read().being_deleted  # a write begun since may delete them
                    if missing - later:
                        failures.append(f"{term}: chunks {sorted(missing - later)} not found")
                checks["found"] += len(ids)
            for term, ids in absent.items():
                hits = [i for i, _ in lexical.search(lexical_query(term), K)]
                docs = lexical.documents(sorted({*hits, *ids}))
                back = (set(hits) | {d.id for d in docs}) & gone
                if back:
                    failures.append(f"deleted chunks of {term} came back lexically: {back}")
                for doc in retriever.invoke(term):
                    if doc.id in gone or term in doc.page_content.split():
                        failures.append(f"the retriever returned deleted chunk {doc.id} ({term})")
                checks["absent"] += len(ids)
            if wanted:
                term = next(iter(known.newest or wanted))
                returned = {d.id for d in retriever.invoke(term)}
                if returned & gone:
                    failures.append(f"the retriever returned deleted chunks {returned & gone}")
                missing = set(wanted[term]) - returned - log.read().being_deleted
                if missing:
                    failures.append(f"the retriever missed {sorted(missing)} ({term})")
            checks["queries"] += 1

        while not failures:
            a_running = writer.poll() is None
            known = log.read().as_of_now()
            check(known)
            if log.read().finished != known.finished:  # a write returned during the round
                checks["during_writes"] += 1
            if not a_running:
                break
        assert writer.wait(timeout=30) == 0, output.read_text(errors="replace")
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    assert not failures, "\n".join(failures[:10])
    assert log.finished == ROUNDS
    assert checks["queries"] >= 20 and checks["during_writes"] >= 10, checks

    # Once A is done, B's index holds exactly the collection, in B's own cache folder.
    index = HybridCollection.of(store).sync(max_age=0)
    assert index is not None
    assert len(index) == store._collection.count() == sum(len(i) for i in log.alive.values())
    assert HybridCollection.of(store).base.is_relative_to(cache_b)
    assert list((cache_a / "lexical").iterdir()), "client A keeps an index of its own"
    for term, ids in log.alive.items():
        assert {i for i, _ in index.search(lexical_query(term), K)} == set(ids)
    for term in log.deleted:
        assert index.search(lexical_query(term), K) == []


if __name__ == "__main__":  # client A, started by the test above
    write_documents(sys.argv[1], sys.argv[2], int(sys.argv[3]), seed=11)
