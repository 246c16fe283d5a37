"""One writer at a time for a collection on a Chroma server, across every client.

A store folder has a file lock (`hyde_lc.core.locks`); clients of one Chroma server share
no file system, so their writers take a *lease* kept in the server itself: a small
companion collection (`lease_name`) whose metadata names the holder and when its hold
runs out. Creating a collection is the one operation Chroma does atomically (a second
``create_collection`` of the same name fails), so exactly one client gets the lease.

* The holder renews it every third of `Settings.writer_lease` seconds from a background
  thread, and deletes it when its write ends.
* Another writer waits for it (``HYDE_LC_WRITE_WAIT`` seconds, then `StoreBusyError`
  naming the holder).
* A lease not renewed in time is *stale*: its holder was killed, lost the server, or is
  stuck. A waiter takes it over; the takeover is itself made atomic by creating a marker
  collection named after the stale lease's id, so two waiters never both take over.
* Every change a writer makes is preceded by `WriterLease.check`, which refuses
  (`WriterLeaseLostError`) once the holder's last renewal is older than the lease: a
  writer paused past its lease cannot write over the one that took it over.

Staleness is judged on two clocks: the holder's renewal time against the reader's wall
clock (clients' clocks must agree within `CLOCK_SKEW_S`), and, for a waiter, no renewal
seen for a lease's length on its own clock (which needs no agreement at all).

Example:
    >>> lease = WriterLease(client, "docs", "http://chroma:8000")  # doctest: +SKIP
    >>> with lease.held(wait=60):  # doctest: +SKIP
    ...     lease.check()  # before each change

"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from hyde_lc.core.settings import settings
from hyde_lc.errors import StoreBusyError, WriterLeaseLostError

logger = logging.getLogger(__name__)

CLOCK_SKEW_S = 10.0
"""How far apart (seconds) the clocks of a server's clients may be: a lease counts as stale
only this long after the time its holder set."""
TAKEOVER_KEEP_S = 86_400.0
"""Takeover markers older than this are removed (by the next takeover)."""
_POLL_S = 0.25
"""How often (seconds) a waiting writer looks at the lease again."""
_MARK_S = 1.0
"""How often (seconds) a waiting writer marks the lease as waited for."""
_YIELD_S = 1.0
"""How long (seconds) a writer that gave the lease back to a waiter leaves it to the waiter."""
_YIELDS: dict[str, float] = {}
"""Leases this process gave back while another writer waited: until when (monotonic) it
leaves the next turn to that writer (see `WriterLease.acquire`)."""
_YIELDS_LOCK = threading.Lock()
LEASE_SUFFIX = "hyde_lc_lease"
TAKEOVER_SUFFIX = "hyde_lc_takeover"


def companion_name(collection: str, suffix: str) -> str:
    """The name of ``collection``'s companion collection ending in ``suffix`` (≤ 512 chars)."""
    name = f"{collection}.{suffix}"
    if len(name) <= 512:
        return name
    digest = hashlib.sha256(collection.encode("utf-8")).hexdigest()[:16]
    return f"{collection[: 510 - len(suffix) - 17]}-{digest}.{suffix}"


def lease_name(collection: str) -> str:
    """The name of the companion collection holding ``collection``'s writer lease."""
    return companion_name(collection, LEASE_SUFFIX)


@dataclass(frozen=True)
class LeaseState:
    """A lease as read from the server."""

    id: str
    """The lease collection's id: a new one each time the lease is taken."""
    owner: str
    """Who holds it: ``host:pid``."""
    beat: int
    """How many times the holder renewed it."""
    expires: float
    """When it runs out, on the holder's clock (``time.time()``)."""
    since: float
    """When it was taken, on the holder's clock."""
    waiting_at: float = 0.0
    """When another writer last said it waits for the lease (its clock; 0: none did)."""

    def stale(self, now: float | None = None) -> bool:
        """Whether its holder stopped renewing it (judged on this client's wall clock)."""
        return (time.time() if now is None else now) > self.expires + CLOCK_SKEW_S

    @classmethod
    def of(cls, collection: Any) -> LeaseState:
        """The lease a chromadb lease collection holds."""
        meta = dict(collection.metadata or {})
        return cls(
            id=str(collection.id),
            owner=str(meta.get("owner", "another client")),
            beat=int(meta.get("beat") or 0),
            expires=float(meta.get("expires") or 0.0),
            since=float(meta.get("since") or 0.0),
            waiting_at=float(meta.get("waiting_at") or 0.0),
        )


def read_lease(client: Any, collection: str) -> LeaseState | None:
    """The lease on ``collection`` now (None: no writer holds it)."""
    try:
        return LeaseState.of(client.get_collection(lease_name(collection)))
    except Exception as exc:  # chromadb's NotFoundError (ValueError in older versions)
        if _not_found(exc):
            return None
        raise


def _not_found(exc: Exception) -> bool:
    return type(exc).__name__ == "NotFoundError" or "does not exist" in str(exc)


class WriterLease:
    """The writer lease of one collection on one Chroma server, for this process.

    `held` takes it (waiting for another holder), renews it in the background and gives it
    back; `check` refuses once it may have been taken over.

    Example:
        >>> lease = WriterLease(client, "docs", "http://chroma:8000")  # doctest: +SKIP
        >>> with lease.held(wait=600):  # doctest: +SKIP
        ...     lease.check()

    """

    def __init__(self, client: Any, collection: str, server: str) -> None:
        self.client = client
        self.collection = collection
        self.server = server
        self.name = lease_name(collection)
        self.owner = f"{socket.gethostname()}:{os.getpid()}"
        self.ttl = settings().writer_lease
        self._id: str | None = None
        self._renewed_at = 0.0
        self._lost = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- taking and giving back -------------------------------------------------------------

    @contextmanager
    def held(self, wait: float) -> Iterator[WriterLease]:
        """Hold the lease while the block runs (waiting up to ``wait`` seconds for it)."""
        self.acquire(wait)
        try:
            yield self
        finally:
            self.release()

    def acquire(self, wait: float) -> None:
        """Take the lease, waiting up to ``wait`` seconds; raises `StoreBusyError`."""
        deadline = time.monotonic() + wait
        self._leave_turn()
        seen: tuple[str, int] | None = None
        seen_at = time.monotonic()
        told = False
        while True:
            if self._try_create():
                return
            try:
                lease = self.client.get_collection(self.name)
            except Exception as exc:
                if _not_found(exc):
                    continue  # given back meanwhile: try again at once
                raise
            state = LeaseState.of(lease)
            self._say_waiting(lease)
            now = time.monotonic()
            if seen != (state.id, state.beat):
                seen, seen_at = (state.id, state.beat), now
            silent = now - seen_at > self.ttl + CLOCK_SKEW_S  # on this client's own clock
            if (state.stale() or silent) and self._take_over(state):
                continue
            if now >= deadline:
                raise StoreBusyError(
                    f"the collection {self.collection!r} on {self.server} is being written by "
                    f"{state.owner} (for {_ago(state.since)}); waited {wait:g} s. Try again "
                    "when it is done, or wait longer with HYDE_LC_WRITE_WAIT (seconds)"
                )
            if not told:
                told = True
                logger.warning(
                    "waiting for %s to finish writing %r on %s (one writer at a time)",
                    state.owner,
                    self.collection,
                    self.server,
                )
            time.sleep(min(_POLL_S, max(0.0, deadline - now)))

    def _leave_turn(self) -> None:
        """Let a writer that waited while this process wrote take the lease first.

        Without it, a client writing one file after another takes the lease again within
        milliseconds of giving it back, and a waiter, looking every `_POLL_S`, could wait
        for as long as that client writes. A writer alone never waits here.
        """
        with _YIELDS_LOCK:
            until = _YIELDS.pop(self._key, 0.0)
        while time.monotonic() < until and read_lease(self.client, self.collection) is None:
            time.sleep(0.05)

    def _say_waiting(self, lease: Any) -> None:
        """Mark the lease as waited for, so that its holder leaves the next turn (best effort)."""
        meta = dict(lease.metadata or {})
        if time.time() - float(meta.get("waiting_at") or 0.0) < _MARK_S:
            return
        meta["waiting_at"] = time.time()
        try:
            lease.modify(metadata=meta)
        except Exception as exc:  # given back meanwhile, or the server busy: only a hint
            logger.debug("could not mark the writer lease of %r waited for: %s", self.name, exc)

    @property
    def _key(self) -> str:
        return f"{self.server}/{self.name}"

    def _try_create(self) -> bool:
        now = time.time()
        meta = {
            "hyde_lc_lease_of": self.collection,
            "owner": self.owner,
            "beat": 0,
            "since": now,
            "expires": now + self.ttl,
        }
        started = time.monotonic()
        try:
            created = self.client.create_collection(self.name, metadata=meta)
        except Exception as exc:
            if _not_found(exc) or "already exists" not in str(exc):
                raise
            return False
        self._id, self._renewed_at, self._lost = str(created.id), started, False
        self._stop.clear()
        self._thread = threading.Thread(target=self._renew, name="hyde_lc-lease", daemon=True)
        self._thread.start()
        return True

    def _take_over(self, state: LeaseState) -> bool:
        """Remove a stale lease, if this client is the one to; whether it was removed."""
        marker = companion_name(self.collection, f"{TAKEOVER_SUFFIX}-{state.id[:13]}")
        try:
            self.client.create_collection(
                marker, metadata={"hyde_lc_lease_of": self.collection, "at": time.time()}
            )
        except Exception as exc:
            if "already exists" not in str(exc):
                raise
            return False  # another waiter is taking it over
        current = read_lease(self.client, self.collection)
        if current is not None and current.id == state.id:
            logger.warning(
                "taking over the writer lease of %r on %s from %s, which stopped renewing it "
                "(killed, or lost the server); its unfinished write is finished now",
                self.collection,
                self.server,
                state.owner,
            )
            self._delete(self.name)
        self._clear_old_markers()
        return True

    def _clear_old_markers(self) -> None:
        prefix = companion_name(self.collection, TAKEOVER_SUFFIX)
        try:
            names = [getattr(c, "name", c) for c in self.client.list_collections()]
        except Exception:  # only housekeeping
            return
        for name in names:
            if not str(name).startswith(prefix):
                continue
            try:
                at = float((self.client.get_collection(name).metadata or {}).get("at") or 0)
                if time.time() - at > TAKEOVER_KEEP_S:
                    self._delete(name)
            except Exception:  # only housekeeping
                continue

    def _delete(self, name: str) -> None:
        try:
            self.client.delete_collection(name)
        except Exception as exc:
            if not _not_found(exc):
                raise

    def release(self) -> None:
        """Give the lease back (deleting it, if it is still this writer's)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        mine, self._id = self._id, None
        if mine is None:
            return
        try:
            current = read_lease(self.client, self.collection)
            if current is not None and current.id == mine:
                self._delete(self.name)
                if time.time() - current.waiting_at < 2 * _MARK_S + 1:  # someone waits
                    with _YIELDS_LOCK:
                        _YIELDS[self._key] = time.monotonic() + _YIELD_S
        except Exception as exc:  # the server is gone: the lease runs out by itself
            logger.debug("could not give the writer lease of %r back: %s", self.collection, exc)

    # -- holding ------------------------------------------------------------------------------

    def _renew(self) -> None:
        """Renew the lease every third of its length until released (a daemon thread)."""
        beat = 0
        while not self._stop.wait(self.ttl / 3):
            started = time.monotonic()
            try:
                lease = self.client.get_collection(self.name)
                if str(lease.id) != self._id:
                    self._lost = True
                    return
                beat += 1
                now = time.time()
                meta = dict(lease.metadata or {})
                meta.update(beat=beat, expires=now + self.ttl)
                lease.modify(metadata=meta)
                self._renewed_at = started
            except Exception as exc:
                if _not_found(exc):
                    self._lost = True
                    return
                logger.debug("renewing the writer lease of %r failed: %s", self.collection, exc)

    def check(self) -> None:
        """Refuse (`WriterLeaseLostError`) unless this writer surely still holds the lease.

        Called before every change: costs no request. A renewal older than the lease (less
        a margin for the change about to be made) means another client may have taken over.
        """
        if self._id is None:
            return
        age = time.monotonic() - self._renewed_at
        if self._lost or age > self.ttl * 5 / 6:
            raise WriterLeaseLostError(
                f"this process lost its writer lease on {self.collection!r} at {self.server} "
                f"(not renewed for {age:.0f} s: the process was stalled or the server "
                "unreachable), so another client may be writing; nothing more was written. "
                "Run the same command again: what was written is kept and completed"
            )


def _ago(since: float) -> str:
    if not since:
        return "a while"
    seconds = max(0.0, time.time() - since)
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"
