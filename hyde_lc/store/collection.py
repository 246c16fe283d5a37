"""One hybrid collection: a Chroma collection and its BM25 index, written through one door.

Every write to a hyde_lc collection (ingestion, replacing or removing a document, and
LangChain's ``add_texts`` / ``add_documents`` / ``update_documents`` / ``delete`` on
`hyde_lc.store.vectorstore.HydeChroma`) goes through `HybridCollection.writing`, which:

* holds one lock per collection: a file lock beside an embedded store, so other
  processes wait; for a Chroma server, a writer lease kept in the server
  (`hyde_lc.store.lease`), so that its clients, wherever they run, write one at a time
  (each waits up to ``HYDE_LC_WRITE_WAIT`` seconds for another) and every write has a
  sequence number of its own;
* stamps every chunk it writes with the write's *sequence number* (``hyde_lc_seq`` in the
  chunk's metadata) and logs every chunk it deletes, with that number, in a small
  companion collection (`feed_name`). The collection's metadata records the last
  finished write (``hyde_lc_head``). Together they are a change feed kept in Chroma
  itself: any client reads what changed since the write its index last saw;
* updates the lexical index at once from the write's own texts (no rebuild, no re-read).

Reading needs no repair in the normal case. A search reads the collection's state (the
head and the versions being written) at most once per `refresh_interval` seconds
(``HYDE_LC_REFRESH_INTERVAL``), and this process's own writes refresh it at once; a
warm hybrid search then costs two Chroma calls, the dense query and one read of the
winners' texts. When the head has moved past the index's cursor (another client
wrote), the index catches up by reading only the chunks and deletions logged since; an
index that is missing, damaged, of another layout, or whose collection changed outside
hyde_lc (the chunk count, read every `COUNT_CHECK_S` seconds, disagrees while no write is
under way) is rebuilt in a new folder beside the old one and switched to in one rename,
so a query never meets an empty or half-built index. A document being written in parts
(its `hyde_lc.store.chroma_collection.DOC_VERSION` listed as pending) is never returned
until it is whole: a winner written after the state a search used makes it read the state
again.

A change made outside hyde_lc that keeps the count (another program deleting one chunk and
adding another with chromadb, or rewriting a chunk's text in place) is found by the
*audit*: every `audit_interval` seconds (``HYDE_LC_AUDIT_INTERVAL``; the time of the last
one is kept with the index, so short-lived processes share it), a background thread
compares the fingerprint of every chunk in Chroma with the index's
(`hyde_lc.search.lexical.chunk_digest`) and indexes just the difference. Searches go on meanwhile.

A writer killed mid-write leaves chunks stamped past the head, or deletions logged and
not done: the next writer rolls that write forward (finishes the deletions, takes a
sequence number past it). Until then, readers of a store folder index what it wrote at
their next count check (the lock tells them no write is under way). On a server, the
first reader to read the state once the killed writer's lease has run out finishes its
write itself (`finish_abandoned`); meanwhile, as during any other client's write, the
chunks that write made searchable are found by dense search only, and the results say so
(`lexical_note`). A replaced document is written out of searches and switched to in one
metadata write, so no reader ever finds two versions of it.

Example:
    >>> from hyde_lc import open_store
    >>> store = open_store()  # doctest: +SKIP
    >>> with HybridCollection.of(store).writing() as write:  # doctest: +SKIP
    ...     write.delete(["chunk-id"])

"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from hyde_lc.core.locks import LockHeldError, file_lock, is_locked
from hyde_lc.core.settings import settings
from hyde_lc.errors import (
    IndexNotWritableError,
    InvalidSettingError,
    StoreBusyError,
    StoreError,
)
from hyde_lc.models.weights import cache_dir
from hyde_lc.store import disk_space
from hyde_lc.store.chroma_collection import (
    DOC_VERSION,
    META_FEED_FLOOR,
    META_WRITING,
    SEQ,
    ChromaCollection,
    head_of,
    paged,
    pending_in,
    seq_of,
    user_metadata,
)
from hyde_lc.store.lease import WriterLease, read_lease
from hyde_lc.store.lexical_index import (
    LexicalIndex,
    cannot_write,
    check_index_folder,
    chunk_digest,
    dense_only_note,
    index_not_writable,
    read_state,
)
from hyde_lc.store.location import LEXICAL_FOLDER, LOCK_FILE

logger = logging.getLogger(__name__)

COUNT_CHECK_S = 30.0
"""How often (seconds) a state read also counts the chunks, to catch a collection changed
outside hyde_lc (one more Chroma call; it grows with the collection)."""
AUDIT_ENV = "HYDE_LC_AUDIT_INTERVAL"
"""The variable with the seconds between background audits (`audit_interval`)."""
AUDIT_MAX_CHANGES = 20_000
"""An audit that finds more chunks changed than this rebuilds the index instead (the texts
it would hold to apply them are bounded by this)."""
CLOCK_SKEW_S = 60.0
"""An audit time up to this far ahead of the clock is taken as a small skew between
machines; further ahead, the time cannot be right and the audit is due."""
CURRENT_FILE = "CURRENT"
"""In an index's base folder: the name of the index folder in use."""
_PAGE = 1000
Where = dict[str, Any] | None
"""A Chroma ``where`` filter (None: every chunk)."""


def refresh_interval() -> float:
    """How old (seconds) a search may take the collection's state to be (0: every search).

    ``HYDE_LC_REFRESH_INTERVAL`` (1 s by default): another client's write reaches this
    process's searches within it; this process's own writes at once.
    """
    return settings().refresh_interval


def audit_interval() -> float:
    """Seconds between background comparisons of the index with the collection (0: off).

    ``HYDE_LC_AUDIT_INTERVAL`` (600 s by default): the longest a change made outside
    hyde_lc that keeps the chunk count goes unseen by the lexical side.
    """
    return settings().audit_interval


@dataclass(frozen=True)
class AuditResult:
    """What one `HybridCollection.audit` found and did."""

    checked: int
    """Chunks compared (the collection's, pending versions included)."""
    indexed: list[str]
    """Chunks (re)indexed: missing from the index, or held with other text or metadata."""
    removed: list[str]
    """Chunks the index held that the collection no longer has."""
    rebuilt: bool = False
    """Whether so much had changed that the index was rebuilt instead."""

    @property
    def changed(self) -> bool:
        """Whether the index differed from the collection."""
        return bool(self.indexed or self.removed or self.rebuilt)


@dataclass(frozen=True)
class Snapshot:
    """The collection's state as read at ``read_at`` (``time.monotonic()``)."""

    head: int
    """The last finished write's sequence number (0: none recorded)."""
    pending: tuple[str, ...]
    """Document versions being written in parts or removed: searches leave them out."""
    writing: int | None
    count: int
    """Chunks the collection held (visible or not); -1 when not read this time."""
    read_at: float


class Write:
    """One write to a hybrid collection (see `HybridCollection.writing`).

    Every method is one or a few Chroma calls; the lexical index takes the changes when
    the write ends.
    """

    def __init__(self, owner: HybridCollection, seq: int) -> None:
        self.owner = owner
        self.seq = seq
        self.new_collection = owner.chroma_collection() is None
        """Whether the collection is created by this write (its index starts empty)."""
        self.index_failed = False
        """Whether the lexical index failed to take one of its changes (rebuilt at the end)."""
        self.index_blocked: OSError | None = None
        """Why the lexical index's folder could not take a change (full, read-only): the
        write goes on, and its end catches the index up or says why it cannot."""
        self.touched = False
        """Whether the write changed anything (only then does the head move)."""
        self._chroma: Any = None

    def _begin(self) -> None:
        """Before the write's first change: mark it under way in the collection's metadata.

        The mark goes when the head moves to this write; a mark left behind with no writer
        holding the lock tells readers of a store folder that a writer was killed.
        """
        if not self.touched:
            self.collection  # noqa: B018 - created (model recorded) before the mark
            self.owner.check_lease()
            self.owner.chroma.set_value(META_WRITING, self.seq)
            self.touched = True

    @property
    def collection(self) -> Any:
        """The chromadb collection written (created, model recorded, by the first write)."""
        if self._chroma is None:
            self._chroma = self.owner.chroma_collection(create=True)
        return self._chroma

    def upsert(
        self,
        ids: Sequence[str],
        vectors: Any,
        metadatas: Sequence[dict[str, Any] | None],
        documents: Sequence[str],
    ) -> None:
        """Write records in one Chroma call (one transaction): all of them or none."""
        self._put("upsert", ids, vectors, metadatas, documents)

    def update(self, *records: Any) -> None:
        """Change existing records (Chroma's ``update``) in one call; arguments as `upsert`."""
        self._put("update", *records)

    def _put(
        self,
        how: str,
        ids: Sequence[str],
        vectors: Any,
        metadatas: Sequence[dict[str, Any] | None],
        documents: Sequence[str],
    ) -> None:
        stamped = [{**(meta or {}), SEQ: self.seq} for meta in metadatas]
        folder = self.owner.chroma.folder
        dimension = len(vectors[0]) if len(vectors) else 0
        disk_space.check_room(folder, len(ids), dimension, documents, stamped)
        disk_space.check_index_room(self.owner.base, folder, documents, stamped)
        self._begin()
        self.owner.check_lease()
        ids = [str(i) for i in ids]
        before = self.collection.get(ids=ids, include=["embeddings", "metadatas", "documents"])
        try:
            getattr(self.collection, how)(
                ids=ids, embeddings=vectors, metadatas=stamped, documents=list(documents)
            )
        except Exception as exc:
            undone = self._undo(ids, stamped, before)
            raise disk_space.as_no_space(exc, folder, undone) or exc from exc
        self.owner.index_now(list(zip(ids, documents, stamped, strict=True)), (), self)

    def _undo(self, ids: list[str], written: list[dict[str, Any]], before: Any) -> bool:
        """Cancel a Chroma call that failed; whether the cancellation is logged.

        Chroma may have logged the call before failing (a full disk failing the apply
        step), and then applies it later, at the next open of the folder once there is
        room: the records it would have created are deleted, and those it would have
        replaced written back (``before``), in a call logged after it.
        """
        old = dict(
            zip(
                before["ids"],
                zip(
                    before["embeddings"] if before["embeddings"] is not None else [],
                    before["metadatas"] or [],
                    before["documents"] or [],
                    strict=True,
                ),
                strict=True,
            )
        )
        new = [i for i in ids if i not in old]
        try:
            if new:
                self.collection.delete(ids=new)
            if old:
                keys = {i: set(meta) for i, meta in zip(ids, written, strict=True)}
                self.collection.upsert(  # Chroma merges metadata: keys added are dropped
                    ids=list(old),
                    embeddings=[vector for vector, _, _ in old.values()],
                    metadatas=[
                        {**dict.fromkeys(keys.get(i, set()) - set(meta or {})), **(meta or {})}
                        for i, (_, meta, _) in old.items()
                    ],
                    documents=[text for _, _, text in old.values()],
                )
        except Exception as exc:
            if disk_space.logged_anyway(exc):
                return True  # logged: it takes effect whenever the failed call does
            logger.warning("a failed write could not be undone: %s", exc)
            return False
        return True

    def delete(self, ids: Sequence[str], batch: int | None = None) -> None:
        """Delete records by id: logged in the feed first, then deleted."""
        if not ids:
            return
        size = batch or self.owner.chroma.max_write()
        for start in range(0, len(ids), size):
            part = [str(i) for i in ids[start : start + size]]
            self._begin()
            self.owner.check_lease()
            self.owner.log_deletions(part, self.seq)
            self.collection.delete(ids=part)
            self.owner.index_now((), part, self)

    def delete_where(self, where: dict[str, Any]) -> None:
        """Delete every record matching ``where``."""
        ids = [str(i) for page in self.owner.chroma.pages(where, include=()) for i in page["ids"]]
        self.delete(ids)

    def set_pending(self, add: Iterable[str] = (), remove: Iterable[str] = ()) -> list[str]:
        """Change the versions searches leave out, in one metadata write."""
        self._begin()
        self.owner.check_lease()
        after = self.owner.chroma.set_pending(add=add, remove=remove)
        self.owner.forget_snapshot()
        return after


_PROCESS_LOCK = threading.Lock()
_SERVER_LOCKS: dict[str, threading.RLock] = {}
"""One writer at a time per server collection within this process."""
_LEASES: dict[str, WriterLease] = {}
"""The writer leases this process holds, by server collection (touched under its lock)."""
_DAMAGED: set[str] = set()
"""Index folders found damaged (warned once each; the rebuild replaces them)."""
_UNWRITABLE: set[str] = set()
"""Collections whose lexical index could not be written (warned once each)."""
_AUDITING: set[str] = set()
"""Collections with an audit running in this process (one at a time each)."""
_SNAPSHOTS: dict[str, Snapshot] = {}
"""The last state read of each collection in this process (shared by every store object
over it, so that a write through one is seen at once through the others)."""


class HybridCollection:
    """A hyde_lc collection with its lexical index: the one write path, and both search sides.

    Made by `hyde_lc.store.vectorstore.open_store` with the store it returns (one per
    store object; `HybridCollection.of(store)` finds it): a `ChromaCollection` and the
    embeddings its vectors are made with. See the module docstring for how the two
    indexes stay in step.

    Example:
        >>> from hyde_lc import open_store
        >>> store = open_store()  # doctest: +SKIP
        >>> hybrid = HybridCollection.of(store)  # doctest: +SKIP
        >>> hybrid.search(lexical_query("Fresnel"), k=3)  # doctest: +SKIP

    """

    def __init__(self, chroma: ChromaCollection, embeddings: Embeddings) -> None:
        self.chroma = chroma
        """The Chroma collection: its client, records and metadata."""
        self.embeddings = embeddings
        """The embeddings queries and writes are embedded with."""
        where = chroma.folder or chroma.server
        self._key = f"{where}\0{chroma.name}"
        self._base: Path | None = None
        self._counted_at: float | None = None
        self._audit_check_at = 0.0
        self._refresh_lock = threading.RLock()
        self._index: LexicalIndex | None = None
        self._index_name: str | None = None
        self.released = False
        """Set when the store that owns this collection is let go (background work stops)."""
        self.lexical_trouble: str | None = None
        """Why the last `search` answered dense only (its index could not be brought up to
        date, opened or written), to be said with its results; None when it did not."""

    @classmethod
    def of(cls, store: Any) -> HybridCollection:
        """The hybrid collection behind a store opened by `hyde_lc.open_store`."""
        found = getattr(store, "hybrid", None)
        if not isinstance(found, HybridCollection):
            raise StoreError(
                "hyde_lc writes through a store opened by hyde_lc.open_store(...) (for a "
                "collection on a Chroma server: open_store(url=..., collection=...)); "
                "langchain-chroma's Chroma gives no public access to the collection it writes"
            )
        return found

    def release(self) -> None:
        """The owning store was let go: a background audit still running ends quietly."""
        self.released = True

    # -- the collection ------------------------------------------------------------------

    def chroma_collection(self, create: bool = False) -> Any:
        """The chromadb collection (None if it does not exist and ``create`` is False)."""
        if create:
            return self.chroma.prepare_write(self.embeddings)
        return self.chroma.existing()

    @property
    def base(self) -> Path | None:
        """The folder holding this collection's lexical index folders (None: no index).

        Beside the collection in a writable store folder; for a Chroma server or a
        read-only folder, in this machine's cache (``$HYDE_LC_CACHE_DIR/lexical``), keyed
        by where the collection lives, and kept current from the collection like any
        other. None for a collection not built by hyde_lc (it records no model).
        """
        if self._base is None:
            collection = self.chroma.existing()
            if collection is None or not self.chroma.records_model():
                return None
            name = f"{collection.name}-{collection.id}"
            folder = self.chroma.writable_folder
            if folder is not None:
                self._base = folder / LEXICAL_FOLDER / name
            else:
                where = self.chroma.server or str(self.chroma.folder)
                key = hashlib.sha256(where.encode("utf-8")).hexdigest()[:12]
                self._base = cache_dir() / "lexical" / f"{key}-{name}"
        return self._base

    @property
    def _snapshot(self) -> Snapshot | None:
        return _SNAPSHOTS.get(self._key)

    @_snapshot.setter
    def _snapshot(self, value: Snapshot | None) -> None:
        if value is None:
            _SNAPSHOTS.pop(self._key, None)
        else:
            _SNAPSHOTS[self._key] = value

    # -- the state ------------------------------------------------------------------------

    def snapshot(self, max_age: float | None = None) -> Snapshot:
        """The collection's state, read again if older than ``max_age`` seconds."""
        age = refresh_interval() if max_age is None else max_age
        current = self._snapshot
        if current is not None and time.monotonic() - current.read_at <= age:
            return current
        with self._refresh_lock:  # one reader refreshes; the others wait for its result
            current = self._snapshot
            if current is not None and time.monotonic() - current.read_at <= age:
                return current
            fresh = self._read_snapshot()
            try:
                finished = self._after_refresh(fresh)
            except OSError as exc:  # the lexical side's own catch-up meets it and says so
                if not cannot_write(exc):
                    raise
                finished = False
            if finished:
                fresh = self._read_snapshot()  # a write whose writer was gone, finished
            self._snapshot = fresh
        self._audit_if_due()
        return fresh

    def forget_snapshot(self) -> None:
        """Make the next search read the state afresh (after this process wrote)."""
        self._snapshot = None

    def _read_snapshot(self) -> Snapshot:
        collection = self.chroma_collection()
        if collection is None:
            return Snapshot(0, (), None, 0, time.monotonic())
        metadata = self.chroma.fresh_metadata()
        now = time.monotonic()
        count = -1  # not read this time
        if self._counted_at is None or now - self._counted_at >= COUNT_CHECK_S:
            count, self._counted_at = int(collection.count()), now
        return Snapshot(
            head=head_of(metadata),
            pending=tuple(pending_in(metadata)),
            writing=_int_or_none(metadata.get(META_WRITING)),
            count=count,
            read_at=now,
        )

    # -- writing --------------------------------------------------------------------------

    @contextmanager
    def writing(self, wait: float | None = None) -> Iterator[Write]:
        """Be the collection's only writer while the block runs; yields the `Write`.

        On the way in: the lock (for a Chroma server, the writer lease, waited for up to
        ``wait`` seconds, default ``HYDE_LC_WRITE_WAIT``), this process's view of the
        store refreshed, and a write killed earlier rolled forward. On the way out (also
        when the block fails: what it wrote stays, and must be indexed): the head moves to
        this write if it changed anything, then the index takes its changes (or catches
        up, or is built, if it was behind or missing).
        """
        with self._write_lock(wait):
            self._check_index_writable()
            latest, head = self._roll_forward()
            write = Write(self, latest + 1)
            write.touched = latest != head  # the head must pass the write finished here
            try:
                yield write
            finally:
                with self._index_errors_said():
                    self._finish(write)

    @contextmanager
    def _write_lock(self, wait: float | None = None) -> Iterator[None]:
        """Be the only writer of the collection while the block runs (processes and threads).

        Embedded Chroma is not process-safe: two processes writing one folder at once
        corrupt its vector index. So writers take an exclusive lock on ``hyde_lc.lock`` in
        the folder (creating the folder), and anyone else waits for it; the operating
        system releases it when its holder exits or is killed, so a crash never leaves it
        stuck. Once the lock is held, this process's view of the folder is read afresh
        (`ChromaCollection.reopen`), so the write builds on what other processes wrote.

        A Chroma server's clients share no folder: its writers hold a lease kept in the
        server (`hyde_lc.store.lease`), one writer per collection across every client, and
        within this process a lock per collection. ``wait`` is how long (seconds) to wait
        for another writer (None: ``HYDE_LC_WRITE_WAIT``; for a store folder, 0 refuses at
        once with `StoreBusyError` and anything else waits as long as it takes).
        """
        folder = self.chroma.folder
        if folder is not None:
            self.chroma.ensure_writable()
            folder.mkdir(parents=True, exist_ok=True)
            note = f"{folder} is being written"
            with ExitStack() as stack:
                try:
                    held = file_lock(folder / LOCK_FILE, waiting_note=note, wait=wait != 0)
                    stack.enter_context(held)
                except LockHeldError as exc:
                    raise StoreBusyError(f"{folder} is being written by {exc.holder}") from exc
                self.chroma.reopen()
                yield
            return
        key = self._lease_key
        with _PROCESS_LOCK:
            lock = _SERVER_LOCKS.setdefault(key, threading.RLock())
        with lock:
            if key in _LEASES:  # this thread's write, entered again
                yield
                return
            lease = WriterLease(self.chroma.client(), self.chroma.name, str(self.chroma.server))
            with lease.held(settings().write_wait if wait is None else wait):
                _LEASES[key] = lease
                try:
                    yield
                finally:
                    del _LEASES[key]

    @property
    def _lease_key(self) -> str:
        """The collection's key in `_LEASES` and `_SERVER_LOCKS` (server and name)."""
        return f"{self.chroma.server}/{self.chroma.name}"

    def check_lease(self) -> None:
        """Before a change: refuse if this process's writer lease may have been taken over."""
        lease = _LEASES.get(self._lease_key)
        if lease is not None:
            lease.check()

    def _roll_forward(self) -> tuple[int, int]:
        """``(last write's number, head)``, after finishing a write that was killed midway."""
        collection = self.chroma_collection()
        if collection is None:
            return 0, 0
        metadata = self.chroma.fresh_metadata()
        head = head_of(metadata)
        past = {SEQ: {"$gt": head}}
        latest = head
        feed = self.feed(create=False)
        if feed is not None:
            logged = feed.get(where=past, include=["metadatas"])
            if logged["ids"]:
                when = {
                    str((m or {}).get("chunk_id")): int((m or {})[SEQ])
                    for m in logged["metadatas"] or []
                }
                ids = list(when)
                step = self.chroma.max_write()
                for start in range(0, len(ids), step):  # the deletions it had logged, done
                    part = ids[start : start + step]
                    found = collection.get(ids=part, include=["metadatas"])
                    gone = [  # a chunk written again by that write (or later) stays
                        i
                        for i, meta in zip(found["ids"], found["metadatas"] or [], strict=True)
                        if seq_of(dict(meta or {})) < when[str(i)]
                    ]
                    if gone:
                        collection.delete(ids=gone)
                latest = max(latest, *when.values())
        stray = collection.get(where=past, include=["metadatas"], limit=_PAGE)
        for meta in stray["metadatas"] or []:
            latest = max(latest, int((meta or {}).get(SEQ, 0)))
        if latest != head or metadata.get(META_WRITING) is not None:
            logger.info("finishing an interrupted write to the collection (write %d)", latest)
            latest = max(latest, head + 1)
        return latest, head

    def _finish(self, write: Write) -> None:
        if self.chroma_collection() is None:
            return
        if write.touched:
            self.check_lease()
            self.chroma.set_head(write.seq)
            self.forget_snapshot()
            if write.seq % FEED_TRIM_EVERY == 0:
                self._trim_feed(write.seq - FEED_KEEP_WRITES)
        if self.base is None:
            return
        with self._index_lock():
            index = self._open_index()
            if index is not None:
                index.reload()  # another process may have caught it up meanwhile
            cursor = index.cursor() if index is not None else None
            behind = write.index_blocked is not None or cursor is None or cursor < write.seq - 1
            if write.index_failed or index is None or behind:
                rebuild = not self._catch_up_locked()
            else:
                rebuild = False
                if write.touched:
                    index.mark(write.seq)  # its changes are in already (`index_now`)
        if rebuild or write.index_failed:
            self.rebuild()

    def index_now(
        self, added: Sequence[tuple[str, str, dict[str, Any]]], deleted: Sequence[str], write: Write
    ) -> None:
        """Put one Chroma call's changes in the lexical index at once.

        Memory stays bounded (a large document's texts are never held whole); the write's
        end records its number.
        """
        if self.base is None or write.index_blocked is not None:
            return
        try:
            with self._index_lock():
                index = self._open_index()
                if index is None and write.new_collection:
                    index = self._start_empty_locked()
                if index is not None and not write.index_failed:
                    write.index_failed = not self._apply(index, added, deleted)
        except OSError as exc:
            if not cannot_write(exc):
                raise
            write.index_blocked = exc

    def _start_empty_locked(self) -> LexicalIndex:
        """An empty index for a collection this write creates (nothing to read back)."""
        base = self.base
        assert base is not None
        _clear_other_layout(base)
        name = f"idx-{uuid.uuid4().hex[:12]}"
        index = LexicalIndex.create(base / name)
        index.mark(0)
        self._switch_locked(base, name, index)
        return index

    def _switch_locked(self, base: Path, name: str, index: LexicalIndex) -> str | None:
        """Make ``name`` the index in use (one rename); returns the folder it replaced."""
        old = self._current_name()
        tmp = base / f"{CURRENT_FILE}.{os.getpid()}.{threading.get_ident()}.tmp"
        tmp.write_text(name, encoding="utf-8")
        os.replace(tmp, base / CURRENT_FILE)
        self._index, self._index_name = index, name
        return old

    # -- the change feed ------------------------------------------------------------------

    def _trim_feed(self, floor: int) -> None:
        """Forget deletions logged by writes up to ``floor`` (an index older is rebuilt)."""
        feed = self.feed(create=False)
        if feed is None or floor <= 0:
            return
        self.chroma.set_value(META_FEED_FLOOR, floor)  # first: never a gap
        feed.delete(where={SEQ: {"$lte": floor}})

    def feed(self, create: bool) -> Any:
        """The companion collection logging deletions (None if missing and not created)."""
        client = self.chroma.client()
        name = feed_name(self.chroma.name)
        if create:
            return client.get_or_create_collection(
                name,
                metadata={"hyde_lc_feed_of": self.chroma.name},
                embedding_function=None,  # records carry a one-number vector; none embedded
            )
        try:
            return client.get_collection(name)
        except Exception:  # chromadb raises NotFoundError (or ValueError in some versions)
            return None

    def log_deletions(self, ids: Sequence[str], seq: int) -> None:
        """Record that ``ids`` are deleted by write ``seq`` (before deleting them)."""
        feed = self.feed(create=True)
        feed.upsert(
            ids=[f"{seq}:{i}" for i in ids],
            embeddings=[[1.0]] * len(ids),
            metadatas=[{SEQ: seq, "chunk_id": i} for i in ids],
        )

    def changes_since(self, cursor: int) -> tuple[list[str], list[tuple[str, str, dict[str, Any]]]]:
        """Chunk ids deleted, and chunks written, after write ``cursor`` (read in pages)."""
        past = {SEQ: {"$gt": cursor}}
        deleted: list[str] = []
        feed = self.feed(create=False)
        if feed is not None:
            for page in paged(feed.get, past, ("metadatas",), _PAGE):
                deleted.extend(str((m or {}).get("chunk_id")) for m in page["metadatas"] or [])
        added = [
            (str(i), text or "", dict(meta or {}))
            for page in self.chroma.pages(past, ("documents", "metadatas"), page_size=_PAGE)
            for i, text, meta in zip(
                page["ids"], page["documents"] or [], page["metadatas"] or [], strict=True
            )
        ]
        deleted = list(dict.fromkeys(deleted))  # a chunk deleted by several writes
        collection = self.chroma_collection()
        if deleted and collection is not None:
            # A writer killed between logging a deletion and doing it left the chunk in
            # Chroma: it stays in the index too (the next writer deletes both).
            step = self.chroma.max_write()
            still = {
                str(i)
                for start in range(0, len(deleted), step)
                for i in collection.get(ids=deleted[start : start + step], include=[])["ids"]
            }
            deleted = [i for i in deleted if i not in still]
        return deleted, added

    # -- the lexical index ------------------------------------------------------------------

    def _lock_path(self) -> Path:
        base = self.base
        assert base is not None
        return base.parent / f"{base.name}.lock"

    @contextmanager
    def _index_lock(self) -> Iterator[None]:
        with file_lock(self._lock_path()):
            yield

    def _check_index_writable(self) -> None:
        """Refuse a write now, before anything is written, if its index cannot follow it.

        That is: the index folder (or its lock, or the folder it will be made in) cannot be
        written, or it is on a device of its own without room (`check_index_folder`).
        """
        if self.base is not None:
            index = self._current_name()
            check_index_folder(self.base, self._lock_path(), index, self.chroma.folder)

    @contextmanager
    def _index_errors_said(self) -> Iterator[None]:
        """At a write's end: an index that could not take it raised as the package's error.

        The write's chunks are stored; the error names the index folder, why (no space on
        its device, or no permission) and what to do; the next search or write catches the
        index up once that is done.
        """
        try:
            yield
        except OSError as exc:
            if self.base is None or not cannot_write(exc):
                raise
            raise index_not_writable(self.base, exc, stored=True) from exc

    def _current_name(self) -> str | None:
        base = self.base
        if base is None:
            return None
        try:
            name = (base / CURRENT_FILE).read_text(encoding="utf-8").strip()
        except OSError:
            return None
        return name if name and read_state(base / name) is not None else None

    def _open_index(self) -> LexicalIndex | None:
        """The index in use (reopened if another process switched to a new one)."""
        name = self._current_name()
        if name is None:
            self._index, self._index_name = None, None
            return None
        if name != self._index_name or self._index is None:
            assert self.base is not None
            try:
                self._index, self._index_name = LexicalIndex.open(self.base / name), name
            except (ValueError, OSError) as exc:  # tantivy: "Data corrupted", missing files
                if cannot_write(exc):
                    raise  # a full disk or a folder it may not write: not damaged
                if name not in _DAMAGED:
                    _DAMAGED.add(name)
                    logger.warning("the lexical index %s is damaged (%s): rebuilding", name, exc)
                self._index, self._index_name = None, None
                return None
        return self._index

    def sync(self, max_age: float | None = None) -> LexicalIndex | None:
        """The lexical index, brought up to the collection's head if it is behind."""
        snap = self.snapshot(max_age)
        # The folder in use is looked up again at each state read (`_after_refresh`); an
        # index already open is used as it is (`LexicalIndex.__len__` would reload it).
        index = self._index if self._index is not None else self._open_index()
        if index is not None and self._fresh(index, snap):
            return index
        if self.chroma_collection() is None or self.base is None:
            return None
        with self._index_lock():
            caught_up = self._catch_up_locked(snap)
        if not caught_up:
            self.rebuild()
        return self._index

    def _fresh(self, index: LexicalIndex, snap: Snapshot) -> bool:
        cursor = index.cursor()
        return cursor is not None and cursor >= snap.head

    def _after_refresh(self, snap: Snapshot) -> bool:
        """On each state read: reopen a switched index; index what a killed writer left.

        The index holds every chunk of the collection (those of a write under way too),
        so its count must equal the collection's. A write marked under way while no
        writer holds the store's lock was killed: what it did is indexed now, as the
        dense side already finds it (and on a Chroma server, where the writer's lease
        tells, the write is finished: `finish_abandoned`; then True, and the state must
        be read again). A count that still differs while no write is under way means the
        collection was changed outside hyde_lc (a chunk added or deleted by another
        program), and the index is rebuilt.
        """
        gone = snap.writing is not None and self._abandoned(snap.head, marked=True)
        if gone:
            return self.finish_abandoned()
        if self.base is None:
            return False
        rebuild = False
        with self._index_lock():  # a rebuild elsewhere may switch folders meanwhile
            index = self._open_index()
            if index is None:
                return False
            index.reload()
            cursor = index.cursor()
            if cursor is None or cursor < snap.head:
                return False  # the search's catch-up comes next
            differs = snap.count >= 0 and len(index) != snap.count
            if not differs and snap.writing is None:
                return False
            if self._write_under_way(snap.head):
                return False  # its end moves the head, and readers catch up then
            deleted, added = self.changes_since(cursor)
            if not self._apply(index, added, deleted):
                rebuild = True
            elif snap.count >= 0 and len(index) != snap.count:
                logger.warning(
                    "%s: the lexical index holds %d chunks and the collection %d: the "
                    "collection was changed outside hyde_lc; rebuilding the index",
                    self.chroma.name,
                    len(index),
                    snap.count,
                )
                rebuild = True
        if rebuild:
            self.rebuild()
        return False

    def _apply(
        self,
        index: LexicalIndex,
        added: Sequence[tuple[str, str, dict[str, Any]]],
        deleted: Sequence[str],
    ) -> bool:
        """Apply changes; False if the index failed (damaged, e.g. by a kill mid-commit).

        A folder that cannot be written (full, read-only) raises its ``OSError``: the
        index is as it was, and a rebuild would fail the same way.
        """
        try:
            index.apply(added, deleted)
        except (ValueError, OSError) as exc:
            if cannot_write(exc):
                raise
            logger.warning("the lexical index failed to take a change (%s): rebuilding it", exc)
            return False
        return True

    def _write_under_way(self, head: int) -> bool:
        """Whether a write is under way.

        In a store folder the writer's lock tells, and for a Chroma server the writer's
        lease (`hyde_lc.store.lease`): a killed writer's lock is released at once, its
        lease counts until it is stale (``HYDE_LC_WRITER_LEASE`` seconds and a margin
        for clocks).
        """
        folder = self.chroma.folder
        if folder is not None:
            return is_locked(folder / LOCK_FILE)
        lease = read_lease(self.chroma.client(), self.chroma.name)
        return lease is not None and not lease.stale()

    def _abandoned(self, head: int, marked: bool) -> bool:
        """Whether a server write past ``head`` (or ``marked``) has no writer left."""
        if self.chroma.server is None or self._write_under_way(head):
            return False
        # No lease: the writer is gone, or has just finished (head moved, then lease given
        # back). The state read again tells them apart.
        fresh = self.chroma.fresh_metadata()
        if head_of(fresh) != head:
            return False
        if marked:
            return fresh.get(META_WRITING) is not None
        past = {SEQ: {"$gt": head}}
        collection = self.chroma_collection()
        if collection is not None and collection.get(where=past, limit=1, include=[])["ids"]:
            return True
        feed = self.feed(create=False)
        return feed is not None and bool(feed.get(where=past, limit=1, include=[])["ids"])

    def finish_abandoned(self) -> bool:
        """Finish a write whose writer is gone (killed, or lost the server); whether done.

        The next writer would do it anyway (`writing` rolls a killed write forward): a
        reader of a Chroma server that finds one does it at once, so that readers never
        wait for another writer to see the collection whole. Nothing is done (False) if
        another client is writing, or is finishing it already.
        """
        try:
            with self.writing(wait=0):
                pass
        except StoreBusyError:
            return False
        except IndexNotWritableError as exc:  # the next writer finishes it then
            logger.warning("%s", exc)
            return False
        logger.info("finished a write to %s whose writer is gone", self.chroma.name)
        return True

    def _catch_up_locked(self, snap: Snapshot | None = None) -> bool:
        """Under the index lock: bring the index to the head; False if it must be rebuilt."""
        index = self._open_index()
        if index is not None:
            index.reload()  # another process may have caught it up meanwhile
        metadata = self.chroma.fresh_metadata()
        head = head_of(metadata)
        cursor = index.cursor() if index is not None else None
        if index is None or cursor is None or cursor < int(metadata.get(META_FEED_FLOOR) or 0):
            return False
        if cursor >= head:
            return True
        deleted, added = self.changes_since(cursor)
        if not self._apply(index, added, deleted):
            return False
        index.mark(head)
        logger.info(
            "lexical index of %s caught up from write %d to %d (%d written, %d deleted)",
            self.chroma.name,
            cursor,
            head,
            len(added),
            len(deleted),
        )
        return True

    # -- the audit ----------------------------------------------------------------------------

    def _audit_if_due(self) -> None:
        """Start `audit` in a background thread when the last one is `audit_interval` old."""
        interval = audit_interval()
        now = time.monotonic()
        if not interval or self.base is None or now < self._audit_check_at:
            return
        self._audit_check_at = now + min(interval, 60.0)  # the state file read at most this often
        index = self._index
        state = read_state(index.path) if index is not None else None
        if state is None or not audit_due(state.audited_at, interval):
            return
        with _PROCESS_LOCK:
            if self._key in _AUDITING:
                return
            _AUDITING.add(self._key)
        assert index is not None
        try:
            with self._index_lock():  # claimed: other processes wait for the next interval
                index.mark_audited()
        except OSError:  # an index that cannot be written: searches say so, not the audit
            _AUDITING.discard(self._key)
            return
        except BaseException:
            _AUDITING.discard(self._key)
            raise
        thread = threading.Thread(
            target=self._audit_in_background, name="hyde_lc-audit", daemon=True
        )
        thread.start()

    def _audit_in_background(self) -> None:
        try:
            self.audit()
        except Exception as exc:  # a background check must never take the process down
            if self.released or sys.is_finalizing():
                return  # the store was let go, or the program is ending: nothing to check
            logger.warning(
                "could not compare the lexical index of %s with its collection (%s); "
                "the next audit tries again",
                self.chroma.name,
                exc,
            )
        finally:
            _AUDITING.discard(self._key)

    def audit(self) -> AuditResult | None:
        """Compare every chunk's fingerprint in Chroma with the index's; index the difference.

        Finds what the change feed and the count cannot: a change made outside hyde_lc
        that keeps the count (a chunk deleted and another added with chromadb, a text
        rewritten in place). Costs one read of every chunk's text and metadata (in pages)
        and no embedding; searches go on meanwhile. Changes are applied only if no write
        began or finished while the collection was read (else None: nothing was decided,
        and the next audit tries again). Runs by itself every `audit_interval` seconds;
        call it to check at once.

        Example:
            >>> hybrid = HybridCollection.of(store)  # doctest: +SKIP
            >>> hybrid.audit().changed  # doctest: +SKIP
            False

        """
        collection = self.chroma_collection()
        if collection is None or self.base is None:
            return None
        self._audit_check_at = time.monotonic() + audit_interval()  # none started meanwhile
        index = self.sync(max_age=0)
        quiet = self._quiet_head()
        if index is None or quiet is None:
            return None
        name, cursor = self._index_name, index.cursor()
        held = index.contents()
        ids = [str(i) for i in collection.get(include=[])["ids"]]
        changed: list[tuple[str, str, dict[str, Any]]] = []
        step = _PAGE * 5
        for start in range(0, len(ids), step):
            got = collection.get(ids=ids[start : start + step], include=["documents", "metadatas"])
            for id_, text, meta in zip(
                got["ids"], got["documents"] or [], got["metadatas"] or [], strict=True
            ):
                chunk = (str(id_), text or "", dict(meta or {}))
                if held.pop(chunk[0], None) != chunk_digest(chunk[1], chunk[2]):
                    keep = len(changed) < AUDIT_MAX_CHANGES  # past it: rebuilt, ids only
                    changed.append(chunk if keep else (chunk[0], "", {}))
        removed = list(held)  # what the index holds and the collection no longer has
        result = AuditResult(len(ids), [c[0] for c in changed], removed)
        many = len(changed) + len(removed) > AUDIT_MAX_CHANGES
        with self._index_lock():
            if self._open_index() is not index or self._index_name != name:
                return None  # switched to a rebuilt index meanwhile
            index.reload()
            if self._quiet_head() != quiet or index.cursor() != cursor:
                return None  # a write came meanwhile: its own changes keep the index right
            if not result.changed:
                index.mark_audited()
                return result
            if not many and not self._apply(index, changed, removed):
                many = True
            if not many:
                index.mark_audited()
        logger.warning(
            "%s: %d chunks were added or changed and %d deleted outside hyde_lc (with "
            "chromadb directly?); the lexical index %s",
            self.chroma.name,
            len(changed),
            len(removed),
            "is rebuilt" if many else "took them",
        )
        if many:
            self.rebuild()
            return AuditResult(len(ids), result.indexed, result.removed, rebuilt=True)
        self.forget_snapshot()
        return result

    def _quiet_head(self) -> int | None:
        """The head, or None while a write is under way (marked, or past the head).

        A server write whose writer is gone is finished first (`finish_abandoned`).
        """
        metadata = self.chroma.fresh_metadata()
        head = head_of(metadata)
        marked = metadata.get(META_WRITING) is not None
        if self._abandoned(head, marked) and self.finish_abandoned():
            metadata = self.chroma.fresh_metadata()
            head, marked = head_of(metadata), metadata.get(META_WRITING) is not None
        if marked or self._write_under_way(head):
            return None
        return head

    def rebuild(self) -> None:
        """Index every chunk of the collection afresh in a new folder, then switch to it.

        The folder in use keeps serving searches (and taking writes) while the new one is
        built; the ids are listed in one read (a consistent list, where pages by offset
        would shift under a concurrent delete) and the texts read by id, then what was
        written meanwhile is caught up under the lock and the new folder switched to in
        one rename.
        """
        base = self.base
        assert base is not None
        with self._index_lock():
            _clear_other_layout(base)
        collection = self.chroma_collection()
        assert collection is not None
        head = self._head()
        name = f"idx-{uuid.uuid4().hex[:12]}"
        logger.info("building the lexical index of %s", self.chroma.name)
        index = LexicalIndex.create(base / name)
        try:
            ids = [str(i) for i in collection.get(include=[])["ids"]]
            step = _PAGE * 5
            for start in range(0, len(ids), step):
                got = collection.get(
                    ids=ids[start : start + step], include=["documents", "metadatas"]
                )
                index.add(
                    (str(i), text or "", dict(meta or {}))
                    for i, text, meta in zip(
                        got["ids"], got["documents"] or [], got["metadatas"] or [], strict=True
                    )
                )
            with self._index_lock():
                now = self._head()
                deleted, added = self.changes_since(head)
                index.apply(added, deleted)
                index.mark(now)
                old = self._switch_locked(base, name, index)
        except BaseException:
            shutil.rmtree(base / name, ignore_errors=True)
            raise
        self.forget_snapshot()
        # The folder replaced stays for readers still searching it; the next rebuild
        # removes folders replaced long enough ago (`_clear_other_layout`).
        if old and old != name:
            os.utime(base / old)

    def _head(self) -> int:
        return head_of(self.chroma.fresh_metadata())

    # -- searching --------------------------------------------------------------------------

    def lexical_note(self) -> str | None:
        """What the last search's results say of the BM25 side (None: nothing to say).

        Each client of a Chroma server keeps its own BM25 index, and takes another client's
        write into it when that write ends (its head moves). While one is under way, the
        chunks it has already made searchable are found by dense search only, and this
        says so. A writer that is gone stops counting as under way once its lease runs
        out, and the next search finishes its write.
        """
        snap = self._snapshot
        if self.chroma.server is None or snap is None or snap.writing is None:
            return None
        if self._lease_key in _LEASES:
            return None  # this process's own write: indexed as it goes
        return (
            "another client is writing this collection: the chunks its write has made "
            "searchable so far are found by dense search only, until the write ends"
        )

    def search(
        self, weights: Counter[str], k: int, where: Where = None, max_age: float | None = None
    ) -> list[tuple[str, float]]:
        """BM25 hits ``(chunk id, score)`` among the chunks searches may see, best first.

        ``where`` is a Chroma-style filter (`LexicalIndex.filter_query`). The index is
        derived data: a damaged one is rebuilt and searched again. One that cannot be
        written where it lives (a full disk, no permission) leaves the search dense only,
        said once in the log with what to do. ``max_age`` is how old (seconds) the
        collection's state may be (default: `refresh_interval`).
        """
        if callable(where):
            raise InvalidSettingError(
                "a Chroma collection's search filter is a dict (Chroma's where syntax), "
                f"not {type(where).__name__}"
            )
        self.lexical_trouble = None
        try:
            index = self.sync(max_age)
            if index is None:
                return []
            snap = self._snapshot or self.snapshot(max_age)
            hide = {DOC_VERSION: {"$in": list(snap.pending)}} if snap.pending else None
            try:
                return index.search(weights, k, where=where or None, hide=hide)
            except InvalidSettingError:
                raise
            except ValueError as exc:  # tantivy found a damaged segment
                logger.warning("the lexical index is damaged (%s): rebuilding it", exc)
                self.rebuild()
                index = self._open_index()
                return [] if index is None else index.search(weights, k, where or None, hide)
        except OSError as exc:
            self.lexical_trouble = dense_only_note(self.base, exc)
            if self._key not in _UNWRITABLE:
                _UNWRITABLE.add(self._key)
                logger.warning(
                    "the lexical index of %s cannot be kept at %s (%s): searching dense "
                    "only. Free space there, make it writable, or set HYDE_LC_CACHE_DIR "
                    "to a writable folder (for a server or read-only store).",
                    self.chroma.name,
                    self.base,
                    exc.strerror or exc,
                )
            return []

    def dense_hits(
        self, vector: Sequence[float], k: int, where: Where = None, max_age: float | None = None
    ) -> list[tuple[str, float]]:
        """The ``k`` nearest visible chunks as ``(id, relevance)``, without reading their texts.

        The dense candidates of a hybrid search: most of them are never returned, so only
        the ones that make the fused ranking are read afterwards (`documents`). ``where``
        is the caller's filter; pending versions are left out under the state this search
        uses (refreshed at most every `refresh_interval` seconds).
        """
        extra: dict[str, Any] = {"where": where} if where else {}
        pending = self.snapshot(max_age).pending if self.chroma.records_model() else None
        got = self.chroma.query_visible(
            k, pending, query_embeddings=[list(vector)], include=["distances"], **extra
        )
        to_relevance = self.chroma.relevance()
        ids, distances = got["ids"][0], got["distances"][0]
        return [(str(i), float(to_relevance(d))) for i, d in zip(ids, distances, strict=True)]

    def documents(self, ids: Sequence[str]) -> list[Document]:
        """The chunks with these ids that searches may see now (one Chroma read), unordered."""
        collection = self.chroma_collection()
        if collection is None or not ids:
            return []
        snap = self._snapshot or self.snapshot()  # the one this search used
        unique = list(dict.fromkeys(str(i) for i in ids))  # Chroma refuses repeated ids
        got = collection.get(ids=unique, include=["documents", "metadatas"])
        metas = [dict(meta or {}) for meta in got["metadatas"] or []]
        if any(seq_of(meta) > snap.head for meta in metas):
            # Written after the state this search used: read the state again, so that the
            # pending versions are the ones of now (a large document just begun is hidden).
            snap = self.snapshot(max_age=0)
        return [
            Document(page_content=text or "", metadata=user_metadata(meta), id=id_)
            for id_, text, meta in zip(got["ids"], got["documents"] or [], metas, strict=True)
            if visible(meta, snap)
        ]


def audit_due(audited_at: float | None, interval: float, now: float | None = None) -> bool:
    """Whether an index last audited at ``audited_at`` (``time.time()``) is due again.

    A time further ahead than `CLOCK_SKEW_S` (a clock set back, a state file from a machine
    whose clock ran ahead) counts as due, and the audit records the time of now: otherwise
    no audit would run until that time came.

    Example:
        >>> audit_due(1000.0, 600, now=1300.0), audit_due(1000.0, 600, now=1700.0)
        (False, True)
        >>> audit_due(1000.0 + 10 * 365 * 86400, 600, now=1000.0), audit_due(float("nan"), 600)
        (True, True)

    """
    age = (time.time() if now is None else now) - (audited_at or 0.0)
    return not -CLOCK_SKEW_S <= age < interval  # a time that is not a number is due too


FEED_KEEP_WRITES = 10_000
"""Deletions stay in the feed for this many writes: an index further behind is rebuilt."""
FEED_TRIM_EVERY = 100


def visible(metadata: dict[str, Any], snap: Snapshot) -> bool:
    """Whether a chunk is one searches may return under ``snap`` (not of a pending version)."""
    return not (snap.pending and metadata.get(DOC_VERSION) in snap.pending)


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def feed_name(collection: str) -> str:
    """The name of the companion collection logging ``collection``'s deletions."""
    name = f"{collection}.hyde_lc_feed"
    if len(name) <= 512:
        return name
    digest = hashlib.sha256(collection.encode("utf-8")).hexdigest()[:16]
    return f"{collection[:480]}-{digest}.hyde_lc_feed"


def _clear_other_layout(base: Path, keep_replaced_s: float = 600) -> None:
    """Remove what no search uses in ``base``.

    That is an index of an older layout kept in ``base`` itself, and index folders replaced
    more than ``keep_replaced_s`` seconds ago (or left by a rebuild that was killed).
    """
    if not base.exists():
        base.mkdir(parents=True)
        return
    try:
        current = (base / CURRENT_FILE).read_text(encoding="utf-8").strip()
    except OSError:
        current = ""
    now = time.time()
    for entry in base.iterdir():
        keep = entry.name == CURRENT_FILE or entry.name.startswith(f"{CURRENT_FILE}.")
        if entry.is_dir() and entry.name.startswith("idx-"):
            try:
                recent = now - entry.stat().st_mtime < keep_replaced_s
            except OSError:
                recent = False
            keep = entry.name == current or recent
        if not keep:
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
