"""Kill loop: writers SIGKILLed mid-write while a reader searches, both sides checked each round.

One embedded store folder and a corpus of small text files in which every sentence carries
a term unique to its file and version (``doc03v002n0011q``: file ``doc03``, version 2,
sentence 11), plus a few large files written in several Chroma calls (``max_write`` of
`MAX_WRITE` chunks) and one file that never changes (`STABLE_TERM`). Each round a writer
subprocess does one of:

* ``ingest``: ingest some files as they are on disk (completing what a killed round left);
* ``replace``: rewrite some files with new unique terms (sometimes a large one), ingest them;
* ``delete``: ``open_store(path).delete(ids=...)`` of one visible document's chunk ids;
* ``rebuild``: ``HybridCollection.of(store).rebuild()``, the lexical index built afresh in
  a new folder and switched to (what a missing or damaged index gets), old folder removed;

and is SIGKILLed at a seeded random delay after it opened the store (in some rounds it is
left to finish). Embedding pauses `EMBED_PAUSE_S` per call of `BATCH` chunks, so kills land
inside writes, multi-part ones included.

A reader subprocess runs through all rounds, asking the lexical side for the stable file's
term (``lexical_search_for(open_store(path)).search(lexical_query(STABLE_TERM), k)``, with
the collection's state read for every search; one store kept open, and every
`FRESH_READER_EVERY`-th search a store just opened) and logging every search that raised,
returned nothing, or whose hits' documents left the stable chunk out.

After each round a fresh checker process opens the store and checks, over what searches
see (``store.get()``):

(a) every visible chunk is found by the lexical side (a search for one of its terms hits
    it, and ``documents`` of the hits returns it) and by the dense side (a search by its
    own stored vector has it in the top `DENSE_TOP`); no visible document is missing
    chunks;
(b) nothing either side returns is outside ``store.get()``, and no chunk deleted or
    replaced by a write that finished (a ``delete`` that returned; an ingest of a newer
    version of its file that returned) is visible, held by the lexical index, or returned
    by either side.

A killed write's chunks are not "deleted" or "replaced" until a later write finishes that
job, so the checks hold whatever a kill left, as long as the two sides agree on it.
Writes that fail without a kill are violations too. Writes ``kill_loop.json`` and
``kill_loop.md`` to ``--out``; exits 1 when any violation or reader error was seen.

    .venv/bin/python benchmarks/kill_loop.py --rounds 50 --seed 1 --out benchmarks/results/kill_loop
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from langchain_core.embeddings import DeterministicFakeEmbedding

ROOT = Path(__file__).resolve().parents[1]
CHUNK_SIZE, CHUNK_OVERLAP = 300, 0
"""No overlap: each unique term is in exactly one chunk."""
MAX_WRITE = 8
"""Chunks per Chroma write: a large file (about 60 chunks) is written in 8 calls, pending."""
BATCH = 4
"""Chunks per embedding call."""
EMBED_PAUSE_S = 0.02
SMALL_FILES, LARGE_FILES = 10, 2
SMALL_SENTENCES, LARGE_SENTENCES = 16, 360
STABLE_KEY = "stable"
STABLE_TERM = "kqstableanchorq"
"""The never-changed file's term: the reader's query."""
DENSE_TOP = 3
FRESH_READER_EVERY = 10
"""The reader searches through one store object it keeps, and every this many searches
through a store it has just opened (a new client of the collection and its index)."""
DEAD_DENSE_SAMPLE = 120
"""Chunks deleted or replaced in earlier rounds checked on the dense side per round (all
the lexical checks cover every one, batched)."""
EXAMPLES = 8
"""Violations kept per category and round, with details."""
FILLER = [
    "lamp", "lens", "keeper", "tower", "reef", "beacon", "flash", "signal", "harbour", "storm",
    "fog", "horn", "prism", "mirror", "oil", "wick", "shutter", "gallery", "lantern", "rock",
    "coast", "ship", "pilot", "chart", "tide", "wave", "granite", "brass", "beam", "range",
]  # fmt: skip
TERM = re.compile(r"\b([a-z]+\d*)v(\d{3})n(\d{4})q\b")
VIOLATIONS = {
    "lexical_not_found": "a visible chunk that a lexical search for its own unique term "
    "does not hit",
    "lexical_documents_left_out": "a visible chunk the lexical search hits but whose "
    "`documents()` leaves it out",
    "dense_not_found": f"a visible chunk not in the top {DENSE_TOP} of a dense search by "
    "its own stored vector",
    "lexical_returned_outside_get": "a chunk the lexical side returned that `store.get()` "
    "does not show",
    "dense_returned_outside_get": "a chunk the dense side returned that `store.get()` does "
    "not show",
    "partial_document_visible": "a document version `store.get()` shows only some chunks of",
    "dead_visible": "a chunk deleted or replaced by a finished write that `store.get()` shows",
    "dead_in_lexical_hits": "a chunk deleted or replaced by a finished write still in the "
    "lexical index's hits",
    "dead_returned_lexical": "a chunk deleted or replaced by a finished write returned by "
    "the lexical side's `documents()`",
    "dead_returned_dense": "a chunk deleted or replaced by a finished write returned by a "
    "dense search",
    "no_lexical_side": "`lexical_search_for` gave no lexical side",
    "lexical_error": "the lexical side raised (bringing the index up to date, searching, "
    "or reading the hits' documents)",
    "checker_failed": "the checker process failed (its traceback is in the round's record)",
    "writer_failed": "a writer that exited with an error without being killed",
}
"""What each violation means; ``_past_head`` after a name: the chunk is stamped with a
write number past the collection's head (``hyde_lc_seq`` > ``hyde_lc_head``)."""
ACTIONS = {"ingest": 0.27, "replace": 0.4, "delete": 0.23, "rebuild": 0.1}


class HashEmbeddings(DeterministicFakeEmbedding):
    """32-d vectors from each text's hash (no model), optionally pausing per call.

    Example:
        >>> HashEmbeddings().embed_query("lamp") == HashEmbeddings().embed_query("lamp")
        True

    """

    model_id: str = "fake:hash-32"
    size: int = 32
    pause_s: float = 0.0
    announce: bool = False
    """Print ``embed`` on stdout at each call (the loop counts how far a write got)."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if self.pause_s:
            time.sleep(self.pause_s)
        if self.announce:
            _emit("embed")
        return super().embed_documents(texts)


# -- the corpus ---------------------------------------------------------------------------


def term(key: str, version: int, n: int) -> str:
    """The unique term of sentence ``n`` of version ``version`` of file ``key``."""
    return f"{key}v{version:03d}n{n:04d}q"


def file_text(key: str, version: int) -> str:
    """The text of one version of one file: sentences of filler around unique terms."""
    if key == STABLE_KEY:
        return f"The {STABLE_TERM} lamp stays lit over the granite reef every night."
    sentences = LARGE_SENTENCES if key.startswith("big") else SMALL_SENTENCES
    rng = random.Random(f"{key}:{version}")
    lines = []
    for n in range(sentences):
        words = [rng.choice(FILLER) for _ in range(4)]
        lines.append(
            f"{words[0].capitalize()} {words[1]} {term(key, version, n)} {words[2]} {words[3]}."
        )
    return "\n\n".join(" ".join(lines[i : i + 5]) for i in range(0, len(lines), 5))


@dataclass
class Corpus:
    """The files on disk and what the loop knows each write did to them."""

    folder: Path
    on_disk: dict[str, int] = field(default_factory=dict)
    """File key -> the version written to disk."""
    settled: dict[str, int] = field(default_factory=dict)
    """File key -> the version of the last ingest of it that finished (older ones are gone)."""
    fresh_needed: set[str] = field(default_factory=set)
    """Files whose document a finished delete removed: rewritten before the next ingest,
    so the deleted chunk ids never come back."""

    @property
    def keys(self) -> list[str]:
        return [STABLE_KEY, *self.changing]

    @property
    def changing(self) -> list[str]:
        return [f"doc{i:02d}" for i in range(SMALL_FILES)] + [f"big{i}" for i in range(LARGE_FILES)]

    def path(self, key: str) -> Path:
        return self.folder / f"{key}.txt"

    def write(self, key: str, version: int) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path(key).write_text(file_text(key, version), encoding="utf-8")
        self.on_disk[key] = version
        self.fresh_needed.discard(key)


def key_of(source: str) -> str:
    return Path(source).stem


# -- child processes ----------------------------------------------------------------------


def _emit(word: str, payload: Any = None) -> None:
    line = word if payload is None else f"{word} {json.dumps(payload)}"
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def child_main() -> None:
    """Entry point of the writer, reader and checker processes (``ROLE STORE`` in argv).

    Imports first and says ``imported``, then reads one job (a JSON line) from stdin: the
    store is opened only once the job has come.
    """
    role, store_dir = sys.argv[1], Path(sys.argv[2])
    import hyde_lc.store.collection  # noqa: F401  (the import cost is paid before the job)
    from hyde_lc import ingest_paths, open_store  # noqa: F401

    _emit("imported")
    job = json.loads(sys.stdin.readline())
    {"writer": run_writer, "reader": run_reader, "checker": run_checker}[role](store_dir, job)


def run_writer(store_dir: Path, job: dict[str, Any]) -> None:
    """One write: ingest ``paths``, or delete ``ids``; ``ready`` once the store is open."""
    from hyde_lc import ingest_paths, open_store

    embeddings = HashEmbeddings(pause_s=job["pause_s"], announce=True)
    store = open_store(store_dir, embeddings=embeddings)
    _emit("ready")
    if job["action"] == "delete":
        store.delete(ids=job["ids"])
        _emit("done", {})
        return
    if job["action"] == "rebuild":
        from hyde_lc.store.collection import HybridCollection

        HybridCollection.of(store).rebuild()
        _emit("done", {})
        return
    report = ingest_paths(
        job["paths"],
        store,
        chunk_size=CHUNK_SIZE,
        chunk_overlap=CHUNK_OVERLAP,
        batch_size=BATCH,
        max_write=MAX_WRITE,
        progress=False,
    )
    files = [[key_of(f.source), f.status, f.chunks, f.embedded] for f in report.files]
    _emit("done", {"files": files})


def run_reader(store_dir: Path, job: dict[str, Any]) -> None:
    """Search the lexical side for `STABLE_TERM` until ``stop_file`` exists; log problems."""
    from hyde_lc import open_store
    from hyde_lc.search.lexical import lexical_search_for
    from hyde_lc.store.lexical_index import lexical_query

    stable = set(job["stable_ids"])
    stop = Path(job["stop_file"])
    weights = lexical_query(STABLE_TERM)
    counts: Counter[str] = Counter()
    with Path(job["events"]).open("a", encoding="utf-8") as events:

        def log(kind: str, detail: str) -> None:
            counts[kind] += 1
            record = {"t": time.time(), "kind": kind, "fresh": fresh, "detail": detail[-2000:]}
            events.write(json.dumps(record) + "\n")
            events.flush()

        kept = open_store(store_dir, embeddings=HashEmbeddings())
        _emit("started")
        while not stop.exists():
            counts["queries"] += 1
            fresh = counts["queries"] % FRESH_READER_EVERY == 0
            if fresh:
                counts["fresh_store_queries"] += 1
            try:
                store = open_store(store_dir, embeddings=HashEmbeddings()) if fresh else kept
                search = lexical_search_for(store, quiet=True)
                if search is None:
                    log("no_lexical_side", "lexical_search_for returned None")
                    continue
                hits = search.search(weights, k=5)
                if not hits:
                    log("empty", "the lexical search returned no hits")
                    continue
                ids = {str(d.id) for d in search.documents([i for i, _ in hits])}
                if not stable & ids:
                    log("stable_not_returned", f"hits {hits}, documents {sorted(ids)}")
            except Exception:
                log("error", traceback.format_exc())
            finally:
                time.sleep(0.01)
    _emit("summary", dict(counts))


def run_checker(store_dir: Path, job: dict[str, Any]) -> None:
    """Check both sides against ``store.get()`` and the ``dead`` chunks; print one result."""
    started = time.monotonic()
    _emit("result", check_store(store_dir, job["dead"], job["dense_dead"]))
    sys.stderr.write(f"checked in {time.monotonic() - started:.2f} s\n")


def check_store(store_dir: Path, dead: list[list[str]], dense_dead: list[str]) -> dict[str, Any]:
    """The checks (a) and (b) of the module docstring, in this process.

    ``dead``: ``[chunk id, text]`` of every chunk deleted or replaced by a finished write;
    ``dense_dead``: the ids among them to check on the dense side too.
    """
    from hyde_lc import open_store
    from hyde_lc.search.lexical import lexical_search_for
    from hyde_lc.store.chroma_collection import DOC_VERSION, SEQ, head_of, pending_in
    from hyde_lc.store.collection import HybridCollection
    from hyde_lc.store.lexical_index import lexical_query

    embeddings = HashEmbeddings()
    store = open_store(store_dir, embeddings=embeddings)
    collection = store.existing_collection()
    raw = collection.get(include=["documents", "metadatas"])
    metadata = HybridCollection.of(store).chroma.fresh_metadata()
    head = head_of(metadata)
    pending = pending_in(metadata)
    visible = store.get(include=["documents", "metadatas", "embeddings"])
    violations: dict[str, list[dict[str, Any]]] = defaultdict(list)

    def violation(kind: str, chunk_id: str, meta: dict[str, Any] | None, **detail: Any) -> None:
        meta = meta or {}
        violations[kind].append(
            {
                "id": chunk_id,
                "file": key_of(str(meta.get("source", "?"))),
                "seq": meta.get(SEQ),
                "head": head,
                "doc_version": meta.get(DOC_VERSION),
                **detail,
            }
        )

    def failed(exc: Exception) -> None:
        violation("lexical_error", "-", None, error=f"{type(exc).__name__}: {exc}")

    def lexical_hits(weights: Counter[str], k: int) -> list[str] | None:
        """The lexical side's hits (None: it raised, recorded as a violation)."""
        try:
            return [i for i, _ in search.search(weights, k)]
        except Exception as exc:
            failed(exc)
            return None

    def lexical_documents(ids: list[str]) -> list[Any]:
        try:
            return search.documents(ids)
        except Exception as exc:
            failed(exc)
            return []

    cursor = chunks_indexed = None
    try:  # the index as brought up to date now (a rebuild elsewhere may replace it later)
        index = HybridCollection.of(store).sync(max_age=0)
        if index is not None:
            cursor, chunks_indexed = index.cursor(), len(index)
    except Exception as exc:
        failed(exc)
    search = lexical_search_for(store, quiet=True)
    visible_ids = set(visible["ids"])
    lexical_returned: set[str] = set()
    dense_returned: set[str] = set()
    if search is None:
        violation("no_lexical_side", "-", None)
    for chunk_id, text, meta, vector in zip(
        visible["ids"],
        visible["documents"],
        visible["metadatas"],
        visible["embeddings"],
        strict=True,
    ):
        past_head = int(meta.get(SEQ) or 0) > head
        suffix = "_past_head" if past_head else ""
        found = TERM.search(text)
        wanted = found.group(0) if found else STABLE_TERM
        hits = lexical_hits(lexical_query(wanted), 10) if search is not None else None
        if hits is not None:
            if chunk_id not in hits:
                violation(f"lexical_not_found{suffix}", chunk_id, meta, term=wanted, hits=hits)
            returned = {str(d.id) for d in lexical_documents(hits)}
            lexical_returned |= returned
            if chunk_id in hits and chunk_id not in returned:
                violation(f"lexical_documents_left_out{suffix}", chunk_id, meta, term=wanted)
        top = [d.id for d in store.similarity_search_by_vector(list(vector), k=DENSE_TOP)]
        dense_returned.update(str(i) for i in top)
        if chunk_id not in top:
            violation(f"dense_not_found{suffix}", chunk_id, meta, top=top)
    for chunk_id in sorted(lexical_returned - visible_ids):
        violation("lexical_returned_outside_get", chunk_id, None)
    for chunk_id in sorted(dense_returned - visible_ids):
        violation("dense_returned_outside_get", chunk_id, None)

    # Visible documents are whole.
    parts: dict[tuple[str, str], list[int]] = defaultdict(list)
    counts: dict[tuple[str, str], int] = {}
    for meta in visible["metadatas"]:
        key = (str(meta.get("source")), str(meta.get(DOC_VERSION)))
        parts[key].append(int(meta["chunk_index"]))
        counts[key] = int(meta["chunk_count"])
    for key, indexes in parts.items():
        if sorted(indexes) != list(range(counts[key])):
            violation(
                "partial_document_visible",
                "-",
                {"source": key[0], DOC_VERSION: key[1]},
                chunks=sorted(indexes),
                of=counts[key],
            )

    # Deleted and replaced chunks: gone from both sides.
    dead_ids = {chunk_id for chunk_id, _ in dead}
    for chunk_id in sorted(dead_ids & visible_ids):
        violation("dead_visible", chunk_id, None)
    if search is not None:
        for start in range(0, len(dead), 40):
            batch = dead[start : start + 40]
            terms = [m.group(0) for _, text in batch for m in TERM.finditer(text)]
            hits = lexical_hits(lexical_query(" ".join(terms)), len(terms) + 20)
            if hits is None:
                continue
            for chunk_id in sorted(dead_ids & set(hits)):
                violation("dead_in_lexical_hits", chunk_id, None)
            for doc in lexical_documents(hits):
                if str(doc.id) in dead_ids:
                    violation("dead_returned_lexical", str(doc.id), doc.metadata)
    texts = dict((chunk_id, text) for chunk_id, text in dead)
    for chunk_id in dense_dead:
        vector = embeddings.embed_query(texts[chunk_id])
        top = [d.id for d in store.similarity_search_by_vector(vector, k=DENSE_TOP)]
        if chunk_id in top:
            violation("dead_returned_dense", chunk_id, None, top=top)

    past_head = [
        i for i, m in zip(raw["ids"], raw["metadatas"], strict=True) if int(m.get(SEQ) or 0) > head
    ]
    chunks = {
        i: [key_of(str(m.get("source"))), text, str(m.get(DOC_VERSION))]
        for i, text, m in zip(raw["ids"], raw["documents"], raw["metadatas"], strict=True)
    }
    return {
        "head": head,
        "index_cursor": cursor,
        "index_chunks": chunks_indexed,
        "chunks": len(raw["ids"]),
        "visible": len(visible_ids),
        "pending_versions": len(pending),
        "past_head": len(past_head),
        "dead_checked": len(dead),
        "dead_checked_dense": len(dense_dead),
        "violations": {kind: len(found) for kind, found in violations.items()},
        "examples": {kind: found[:EXAMPLES] for kind, found in violations.items()},
        "chunk_list": chunks,
        "visible_ids": sorted(visible_ids),
    }


CHILD = "from benchmarks.kill_loop import child_main; child_main()"


class Child:
    """A child process of this script (`child_main`), its stdout read line by line."""

    def __init__(self, role: str, store_dir: Path, log: Path, env: dict[str, str]) -> None:
        self.role = role
        self.log = log
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, role, str(store_dir)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log.open("w", encoding="utf-8"),
            text=True,
            bufsize=1,
        )
        self.lines: queue.Queue[tuple[float, str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            word, _, rest = line.strip().partition(" ")
            self.lines.put((time.monotonic(), word, json.loads(rest) if rest else None))
        self.lines.put(None)

    def wait_for(self, word: str, timeout: float, seen: list[str] | None = None) -> Any:
        """The payload of the next ``word`` line (other words go to ``seen``)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                item = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise RuntimeError(f"{self.role}: no {word!r} within {timeout:.0f} s") from None
            if item is None:
                self.proc.wait()
                raise RuntimeError(
                    f"{self.role} exited ({self.proc.returncode}) before {word!r}: "
                    f"{self.stderr_tail()}"
                )
            if item[1] == word:
                return item[2]
            if seen is not None:
                seen.append(item[1])

    def send(self, job: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()

    def stderr_tail(self, lines: int = 30) -> str:
        text = self.log.read_text(encoding="utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def drain(self) -> list[tuple[float, str, Any]]:
        """Every line read so far (call once the process has exited)."""
        out = []
        while True:
            try:
                item = self.lines.get(timeout=5)
            except queue.Empty:
                return out
            if item is None:
                return out
            out.append(item)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYDE_LC_")}
    env.update(
        ANONYMIZED_TELEMETRY="False",
        HYDE_LC_THREADS="1",
        HYDE_LC_REFRESH_INTERVAL="0",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
    )
    return env


# -- the loop -------------------------------------------------------------------------------


@dataclass
class Settings:
    rounds: int = 50
    seed: int = 1
    max_kill_delay_s: float = 0.7
    """Kills land uniformly in [0, this] seconds after the writer opened the store (a
    write of small files takes about 0.1-0.3 s there, one with a large file 0.3-0.8 s)."""
    finish_share: float = 0.2
    """Share of rounds whose writer is left to finish."""
    pause_s: float = EMBED_PAUSE_S


@dataclass
class LoopState:
    corpus: Corpus
    chunks: dict[str, list[str]] = field(default_factory=dict)
    """Every chunk a checker saw: id -> [file key, text, doc_version]."""
    deleted: set[str] = field(default_factory=set)
    """Chunk ids removed by a delete that finished."""
    dead_since: dict[str, int] = field(default_factory=dict)
    """Dead chunk id -> the round it became dead."""
    visible_groups: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    """(file key, doc_version) -> visible chunk ids, as the last checker saw them."""

    def dead(self) -> dict[str, str]:
        """Chunk id -> text of each chunk deleted or replaced by a finished write."""
        out = {}
        for chunk_id, (key, text, _) in self.chunks.items():
            found = TERM.search(text)
            version = int(found.group(2)) if found else None
            settled = self.corpus.settled.get(key)
            replaced = version is not None and settled is not None and version < settled
            if replaced or chunk_id in self.deleted:
                out[chunk_id] = text
        return out


def plan_round(rng: random.Random, state: LoopState) -> dict[str, Any]:
    """This round's action, with the files rewritten on disk for it."""
    corpus = state.corpus
    action = rng.choices(list(ACTIONS), weights=list(ACTIONS.values()))[0]
    groups = [g for g in state.visible_groups if g[0] != STABLE_KEY]
    if action == "delete" and groups:
        group = rng.choice(sorted(groups))
        return {"action": "delete", "files": [group[0]], "ids": state.visible_groups[group]}
    if action == "delete":
        action = "ingest"
    if action == "rebuild":
        return {"action": "rebuild", "files": []}
    if action == "replace":
        small = [k for k in corpus.changing if not k.startswith("big")]
        keys = rng.sample(small, rng.randint(1, 3))
        if rng.random() < 0.4:
            keys.append(rng.choice([k for k in corpus.changing if k.startswith("big")]))
        for key in keys:
            corpus.write(key, corpus.on_disk[key] + 1)
    else:
        keys = rng.sample(corpus.changing, rng.randint(2, 5))
    for key in keys:
        if key in corpus.fresh_needed:
            corpus.write(key, corpus.on_disk[key] + 1)
    return {"action": action, "files": sorted(keys), "paths": [str(corpus.path(k)) for k in keys]}


def run_write(
    writer: Child, job: dict[str, Any], kill_at: float | None, pause_s: float
) -> dict[str, Any]:
    """Run one write in ``writer``; SIGKILL it ``kill_at`` seconds after ``ready``."""
    writer.send({**job, "pause_s": pause_s})
    try:
        writer.wait_for("ready", 120)
    except RuntimeError as exc:  # it could not open the store
        writer.kill()
        return {
            "outcome": "failed",
            "kill_at_s": kill_at,
            "write_s": 0.0,
            "embed_calls": 0,
            "returncode": writer.proc.returncode,
            "files_done": None,
            "stderr": str(exc),
        }
    ready = time.monotonic()
    killed = False
    if kill_at is None:
        writer.proc.wait(600)
    else:
        try:
            writer.proc.wait(kill_at)
        except subprocess.TimeoutExpired:
            writer.proc.send_signal(signal.SIGKILL)
            killed = True
            writer.proc.wait()
    lines = writer.drain()
    done = next((payload for _, word, payload in lines if word == "done"), None)
    end = max([t for t, word, _ in lines if word == "done"], default=time.monotonic())
    if done is not None:
        outcome = "finished"
    elif killed:
        outcome = "killed"
    else:
        outcome = "failed"
    return {
        "outcome": outcome,
        "kill_at_s": kill_at,
        "write_s": round(end - ready, 3),
        "embed_calls": sum(1 for _, word, _ in lines if word == "embed"),
        "returncode": writer.proc.returncode,
        "files_done": (done or {}).get("files"),
        "stderr": writer.stderr_tail() if outcome == "failed" else None,
    }


def absorb(state: LoopState, job: dict[str, Any], write: dict[str, Any], round_no: int) -> None:
    """What a finished write makes dead: a delete's ids, an ingest's older versions."""
    if write["outcome"] != "finished":
        return
    corpus = state.corpus
    if job["action"] == "delete":
        state.deleted.update(job["ids"])
        corpus.fresh_needed.update(job["files"])
    else:
        for key in job["files"]:
            corpus.settled[key] = corpus.on_disk[key]
    for chunk_id in state.dead():
        state.dead_since.setdefault(chunk_id, round_no)


def check_job(state: LoopState, rng: random.Random, round_no: int) -> dict[str, Any]:
    dead = state.dead()
    recent = [i for i in dead if state.dead_since.get(i, round_no) >= round_no - 1]
    older = sorted(set(dead) - set(recent))
    sample = rng.sample(older, min(len(older), max(0, DEAD_DENSE_SAMPLE - len(recent))))
    return {
        "dead": sorted([i, t] for i, t in dead.items()),
        "dense_dead": sorted(recent[:DEAD_DENSE_SAMPLE] + sample),
    }


def failed_check(error: str) -> dict[str, Any]:
    """The result of a check whose process failed: one ``checker_failed`` violation."""
    return {
        "failed": True,
        "head": -1,
        "index_cursor": None,
        "index_chunks": None,
        "chunks": -1,
        "visible": -1,
        "pending_versions": 0,
        "past_head": 0,
        "dead_checked": 0,
        "dead_checked_dense": 0,
        "violations": {"checker_failed": 1},
        "examples": {"checker_failed": [{"error": error[-3000:]}]},
        "chunk_list": {},
        "visible_ids": [],
    }


def absorb_check(state: LoopState, result: dict[str, Any]) -> None:
    if result.get("failed"):
        return
    state.chunks.update(result["chunk_list"])
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for chunk_id in result["visible_ids"]:
        key, _, version = result["chunk_list"][chunk_id]
        groups[(key, version)].append(chunk_id)
    state.visible_groups = dict(groups)


def run_kill_loop(settings: Settings, work_dir: Path, say: Any = print) -> dict[str, Any]:
    """Run the loop in ``work_dir`` (created); return the report (see `write_report`)."""
    rng = random.Random(settings.seed)
    work_dir.mkdir(parents=True, exist_ok=True)
    store_dir = work_dir / "store"
    logs = work_dir / "logs"
    logs.mkdir(exist_ok=True)
    env = child_env()
    corpus = Corpus(work_dir / "docs")
    for key in corpus.keys:
        corpus.write(key, 1)
    state = LoopState(corpus)
    if store_dir.exists():
        raise FileExistsError(f"{store_dir} exists: give the loop a new or empty work folder")
    events = work_dir / "reader-events.jsonl"
    stop_file = work_dir / "stop-reader"
    events.unlink(missing_ok=True)
    stop_file.unlink(missing_ok=True)
    rounds: list[dict[str, Any]] = []
    started = time.monotonic()

    children: list[Child] = []

    def spawn(role: str, name: str) -> Child:
        children.append(Child(role, store_dir, logs / f"{name}.log", env))
        return children[-1]

    try:
        # Round 0: everything ingested, left to finish; the reader starts on its result.
        writer, checker = spawn("writer", "writer-000"), spawn("checker", "checker-000")
        writer.wait_for("imported", 180)
        setup_job = {"action": "ingest", "files": corpus.keys, "ids": []}
        setup_job["paths"] = [str(corpus.path(k)) for k in corpus.keys]
        write = run_write(writer, setup_job, None, 0.0)
        if write["outcome"] != "finished":
            raise RuntimeError(f"the first ingest failed: {write['stderr']}")
        absorb(state, setup_job, write, 0)
        checker.wait_for("imported", 180)
        checker.send(check_job(state, rng, 0))
        result = checker.wait_for("result", 600)
        checker.proc.wait()
        absorb_check(state, result)
        stable_ids = [i for i in result["visible_ids"] if result["chunk_list"][i][0] == STABLE_KEY]
        reader = spawn("reader", "reader")
        reader.wait_for("imported", 180)
        reader.send({"stable_ids": stable_ids, "stop_file": str(stop_file), "events": str(events)})
        reader.wait_for("started", 60)
        rounds.append(round_record(0, setup_job, write, result, (time.time(), time.time())))
        say(format_round(rounds[-1]))

        # The next round's processes import while this round's checker runs; they open the
        # store only when their job comes.
        writer, checker = spawn("writer", "writer-001"), spawn("checker", "checker-001")
        for round_no in range(1, settings.rounds + 1):
            writer.wait_for("imported", 180)
            checker.wait_for("imported", 180)
            job = plan_round(rng, state)
            finish = rng.random() < settings.finish_share
            kill_at = None if finish else round(rng.uniform(0, settings.max_kill_delay_s), 3)
            window_start = time.time()
            write = run_write(writer, job, kill_at, settings.pause_s)
            absorb(state, job, write, round_no)
            checker.send(check_job(state, rng, round_no))
            this_checker, name = checker, f"{round_no + 1:03d}"
            if round_no < settings.rounds:
                writer, checker = (
                    spawn("writer", f"writer-{name}"),
                    spawn("checker", f"checker-{name}"),
                )
            try:
                result = this_checker.wait_for("result", 600)
            except RuntimeError as exc:
                result = failed_check(str(exc))
            this_checker.proc.wait()
            absorb_check(state, result)
            rounds.append(round_record(round_no, job, write, result, (window_start, time.time())))
            say(format_round(rounds[-1]))

        stop_file.touch()
        summary = reader.wait_for("summary", 120)
        reader.proc.wait(60)
        attribute_reader_events(rounds, events)
        return {
            "settings": vars(settings),
            "seconds": round(time.monotonic() - started, 1),
            "reader": {**summary, "events": read_events(events)[: EXAMPLES * 4]},
            "rounds": rounds,
            "totals": totals(rounds, summary),
        }
    finally:  # on any failure: no process of this loop outlives it
        stop_file.touch()
        for child in children:
            if child.proc.poll() is None:
                child.kill()


def round_record(
    round_no: int,
    job: dict[str, Any],
    write: dict[str, Any],
    result: dict[str, Any],
    window: tuple[float, float],
) -> dict[str, Any]:
    violations = dict(result["violations"])
    examples = dict(result["examples"])
    if write["outcome"] == "failed":
        violations["writer_failed"] = 1
        examples["writer_failed"] = [{"stderr": str(write["stderr"])[-3000:]}]
    return {
        "round": round_no,
        "action": job["action"],
        "files": job["files"],
        "large": any(k.startswith("big") for k in job["files"]),
        "deleted_ids": len(job.get("ids") or []),
        **{k: v for k, v in write.items() if v is not None},
        "check": {
            k: v
            for k, v in result.items()
            if k not in ("chunk_list", "visible_ids", "violations", "examples")
        },
        "violations": violations,
        "examples": examples,
        "window": window,
        "reader_events": {},
    }


def read_events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def attribute_reader_events(rounds: list[dict[str, Any]], path: Path) -> None:
    """Count the reader's problems per round (by time: between its write and its check)."""
    for event in read_events(path):
        for record in rounds:
            start, end = record["window"]
            if start <= event["t"] <= end:
                record["reader_events"][event["kind"]] = (
                    record["reader_events"].get(event["kind"], 0) + 1
                )
                break
        else:
            rounds[-1]["reader_events"].setdefault("outside_rounds", 0)
            rounds[-1]["reader_events"]["outside_rounds"] += 1


def totals(rounds: list[dict[str, Any]], reader: dict[str, Any]) -> dict[str, Any]:
    loop = rounds[1:]
    violations: Counter[str] = Counter()
    for record in rounds:
        violations.update(record["violations"])
    reader_problems = sum(
        v for k, v in reader.items() if k not in ("queries", "fresh_store_queries")
    )
    return {
        "rounds": len(loop),
        "actions": dict(Counter(r["action"] for r in loop)),
        "outcomes": dict(Counter(r["outcome"] for r in loop)),
        "killed_with_large_file": sum(1 for r in loop if r["outcome"] == "killed" and r["large"]),
        "kills_leaving_a_new_pending_version": sum(
            1
            for before, r in zip(rounds, loop, strict=False)
            if r["outcome"] == "killed"
            and r["check"]["pending_versions"] > before["check"]["pending_versions"]
        ),
        "kills_leaving_chunks_past_head": sum(
            1 for r in loop if r["outcome"] == "killed" and r["check"]["past_head"]
        ),
        "finished_writes_leaving_chunks_past_head": sum(
            1
            for r in loop
            if r["outcome"] == "finished" and r["action"] != "rebuild" and r["check"]["past_head"]
        ),
        "violations": dict(violations),
        "violation_count": sum(violations.values()),
        "rounds_with_violations": sum(1 for r in rounds if r["violations"]),
        "reader_queries": reader.get("queries", 0),
        "reader_problems": reader_problems,
        "passed": not violations and reader_problems == 0,
    }


def format_round(record: dict[str, Any]) -> str:
    check = record["check"]
    bad = ", ".join(f"{k} {v}" for k, v in sorted(record["violations"].items())) or "ok"
    return (
        f"round {record['round']:3d} {record['action']:7} {record['outcome']:8} "
        f"write {record['write_s']:6.2f}s embeds {record['embed_calls']:3d} "
        f"| head {check['head']:3d} "
        f"visible {check['visible']:4d}/{check['chunks']:4d} pending {check['pending_versions']} "
        f"past-head {check['past_head']:3d} dead {check['dead_checked']:4d} | {bad}"
    )


# -- the report ---------------------------------------------------------------------------


def git(*argv: str) -> str:
    return subprocess.run(["git", *argv], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def write_report(report: dict[str, Any], out: Path, command: str) -> None:
    """``kill_loop.json`` (everything) and ``kill_loop.md`` (the summary) in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "kill_loop.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    t = report["totals"]
    meta = report["meta"]
    lines = [
        "# Kill loop",
        "",
        f"Command: `{command}`",
        f"Date: {meta['date']}; commit {meta['commit']}; Python {meta['python']}, "
        f"{meta['cores']} cores; {report['seconds']} s.",
        "",
        f"{t['rounds']} rounds after the first ingest: actions {t['actions']}; writers "
        f"{t['outcomes']}. Kills with a large (multi-part) file in the write: "
        f"{t['killed_with_large_file']}; kills that left a new version pending (written in "
        f"part): {t['kills_leaving_a_new_pending_version']}; kills that left chunks stamped "
        f"past the head: {t['kills_leaving_chunks_past_head']}; finished writes after which "
        f"chunks stamped past the head remained: "
        f"{t['finished_writes_leaving_chunks_past_head']}.",
        "",
        f"**Violations: {t['violation_count']}** in {t['rounds_with_violations']} round(s) "
        f"{t['violations'] or ''}; reader: {t['reader_queries']} lexical searches, "
        f"**{t['reader_problems']} problems** (raised, returned nothing, or left the "
        f"stable chunk out). Passed: {t['passed']}.",
        "",
        "| round | action | files | writer | kill at s | write s | embeds | head | visible/chunks "
        "| pending | past head | dead checked | violations | reader |",
        "|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in report["rounds"]:
        c = r["check"]
        bad = ", ".join(f"{k} {v}" for k, v in sorted(r["violations"].items())) or "0"
        events = ", ".join(f"{k} {v}" for k, v in sorted(r["reader_events"].items())) or "0"
        kill = "" if r.get("kill_at_s") is None else f"{r['kill_at_s']:.2f}"
        lines.append(
            f"| {r['round']} | {r['action']} | {' '.join(r['files'])} | {r['outcome']} | {kill} "
            f"| {r['write_s']:.2f} | {r['embed_calls']} | {c['head']} | {c['visible']}/"
            f"{c['chunks']} | {c['pending_versions']} | {c['past_head']} | {c['dead_checked']} "
            f"| {bad} | {events} |"
        )
    examples = [(r, kind, found) for r in report["rounds"] for kind, found in r["examples"].items()]
    if t["violations"]:
        lines += ["", "## What the violations seen mean", ""]
        for kind in sorted(t["violations"]):
            base = kind.removesuffix("_past_head")
            past = " (the chunk is stamped past the head)" if base != kind else ""
            lines.append(f"- `{kind}`: {VIOLATIONS.get(base, '?')}{past}")
    if examples:
        lines += ["", "## Violations: one example per round and kind", ""]
        for record, kind, found in examples:
            count = record["violations"].get(kind, len(found))
            lines.append(f"- round {record['round']}, {kind} ({count}): {describe(found[0])}")
    events = report["reader"].get("events") or []
    if events:
        lines += ["", "## The reader's first problem", ""]
        lines += ["```", events[0]["detail"].strip()[-1500:], "```"]
    (out / "kill_loop.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def describe(example: dict[str, Any]) -> str:
    """One violation in a line: the chunk, its file and write number, and the detail."""
    if "error" in example or "stderr" in example:
        text = str(example.get("error") or example.get("stderr")).strip().splitlines()
        return f"`{text[-1] if text else ''}`"
    parts = [f"chunk `{example['id']}` of {example['file']}"]
    if example.get("seq") is not None:
        parts.append(f"(written by write {example['seq']}; head {example['head']})")
    parts += [f"{key} `{example[key]}`" for key in ("term", "hits", "top") if key in example]
    return " ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50, help="rounds after the first ingest")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-kill-delay", type=float, default=Settings.max_kill_delay_s)
    parser.add_argument("--finish-share", type=float, default=Settings.finish_share)
    parser.add_argument("--pause", type=float, default=EMBED_PAUSE_S, help="s per embedding call")
    parser.add_argument("--out", type=Path, help="write kill_loop.json and kill_loop.md here")
    parser.add_argument("--work-dir", type=Path, help="keep the store and logs here")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    settings = Settings(args.rounds, args.seed, args.max_kill_delay, args.finish_share, args.pause)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="kill-loop-"))
    report = run_kill_loop(settings, work)
    command = shlex.join([".venv/bin/python", "benchmarks/kill_loop.py", *argv])
    dirty = " (modified)" if git("status", "--short") else ""
    report["meta"] = {
        "command": command,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": git("rev-parse", "--short", "HEAD") + dirty,
        "python": platform.python_version(),
        "cores": os.cpu_count(),
        "work_dir": str(work),
    }
    if args.out:
        write_report(report, args.out, command)
    passed = report["totals"]["passed"]
    print(json.dumps(report["totals"], indent=1))
    if passed and not args.work_dir:
        shutil.rmtree(work, ignore_errors=True)
    elif not passed:
        print(f"store and logs kept in {work}", file=sys.stderr)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
