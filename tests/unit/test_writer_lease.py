"""The writer lease of a server collection, on a real (embedded) Chroma client.

The lease only needs what every Chroma client offers (collections created atomically,
their metadata), so an embedded client exercises the same code as a server's; the server
itself, with writers in separate processes, is in tests/integration.
"""

from __future__ import annotations

import logging
import threading
import time

import chromadb
import pytest
from chromadb.config import Settings as ChromaSettings

from hyde_lc.errors import StoreBusyError, WriterLeaseLostError
from hyde_lc.store import lease as lease_module
from hyde_lc.store.lease import WriterLease, companion_name, lease_name, read_lease


@pytest.fixture
def client(tmp_path):
    return chromadb.PersistentClient(
        str(tmp_path / "chroma"), settings=ChromaSettings(anonymized_telemetry=False)
    )


def _lease(client, owner: str = "host-a:1") -> WriterLease:
    lease = WriterLease(client, "docs", "http://chroma.test:8000")
    lease.owner = owner
    return lease


def _until(condition, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.05)


def test_one_holder_at_a_time_and_the_second_is_told_who_holds_it(client):
    first, second = _lease(client, "host-a:1"), _lease(client, "host-b:2")
    with first.held(wait=0):
        assert read_lease(client, "docs").owner == "host-a:1"
        with pytest.raises(StoreBusyError, match=r"host-a:1.*HYDE_LC_WRITE_WAIT"):
            second.acquire(wait=0)
        first.check()  # held and renewed: nothing to refuse
    assert read_lease(client, "docs") is None  # given back
    with second.held(wait=0):
        assert read_lease(client, "docs").owner == "host-b:2"


def test_a_waiting_writer_takes_the_lease_when_it_is_given_back(client):
    first, second = _lease(client, "host-a:1"), _lease(client, "host-b:2")
    first.acquire(wait=0)
    got = []
    waiter = threading.Thread(target=lambda: got.append(second.acquire(wait=60)))
    waiter.start()
    time.sleep(0.3)
    assert not got  # still waiting
    first.release()
    waiter.join(timeout=60)
    assert got == [None] and read_lease(client, "docs").owner == "host-b:2"
    second.release()


def test_a_stale_lease_is_taken_over_once_and_said(client, caplog):
    now = time.time()
    client.create_collection(  # a holder killed long ago: never renewed, never given back
        lease_name("docs"),
        metadata={"owner": "host-dead:9", "beat": 3, "since": now - 900, "expires": now - 600},
    )
    stale = read_lease(client, "docs")
    assert stale is not None and stale.stale()
    taker = _lease(client, "host-b:2")
    with caplog.at_level(logging.WARNING, logger="hyde_lc.store.lease"):
        taker.acquire(wait=0)
    assert read_lease(client, "docs").owner == "host-b:2"
    assert "from host-dead:9" in caplog.text
    # The takeover of that stale lease is recorded: a second waiter that saw it stale too
    # cannot remove the lease the first one has just taken.
    late = _lease(client, "host-c:3")
    assert late._take_over(stale) is False
    assert read_lease(client, "docs").owner == "host-b:2"
    taker.release()


def test_a_fresh_lease_of_another_clock_is_not_stale_within_the_skew(client):
    now = time.time()
    client.create_collection(
        lease_name("docs"),
        metadata={"owner": "host-a:1", "beat": 1, "since": now, "expires": now - 1},
    )
    assert not read_lease(client, "docs").stale()  # one second late: clocks may differ
    with pytest.raises(StoreBusyError):
        _lease(client, "host-b:2").acquire(wait=0)


def test_the_holder_renews_and_a_holder_that_lost_the_lease_writes_nothing(client, monkeypatch):
    monkeypatch.setenv("HYDE_LC_WRITER_LEASE", "3")
    holder = _lease(client)
    holder.acquire(wait=0)
    try:
        _until(lambda: read_lease(client, "docs").beat >= 1)  # renewed in the background
        holder.check()
        client.delete_collection(lease_name("docs"))  # taken over by another client
        client.create_collection(lease_name("docs"), metadata={"owner": "host-b:2"})
        _until(lambda: holder._lost)
        with pytest.raises(WriterLeaseLostError, match="lost its writer lease on 'docs'"):
            holder.check()
    finally:
        holder.release()
    assert read_lease(client, "docs").owner == "host-b:2"  # not the holder's to give back


def test_a_holder_stalled_past_its_lease_refuses_before_any_renewal(client, monkeypatch):
    monkeypatch.setenv("HYDE_LC_WRITER_LEASE", "30")
    holder = _lease(client)
    holder.acquire(wait=0)
    try:
        holder._renewed_at -= 26  # as after a pause of 26 s: others may take over soon
        with pytest.raises(WriterLeaseLostError, match="not renewed for 26 s"):
            holder.check()
    finally:
        holder.release()


def test_companion_names_stay_within_chromas_limit():
    assert lease_name("docs") == "docs.hyde_lc_lease"
    long_name = "d" * 500
    names = {companion_name(long_name, "hyde_lc_lease"), companion_name("e" * 500, "hyde_lc_lease")}
    assert len(names) == 2 and all(len(n) <= 512 for n in names)


def test_takeover_markers_older_than_a_day_are_cleared(client, monkeypatch):
    old = companion_name("docs", "hyde_lc_takeover-0123456789abc")
    client.create_collection(old, metadata={"at": time.time() - 2 * lease_module.TAKEOVER_KEEP_S})
    recent = companion_name("docs", "hyde_lc_takeover-fedcba9876543")
    client.create_collection(recent, metadata={"at": time.time()})
    _lease(client)._clear_old_markers()
    names = {c.name for c in client.list_collections()}
    assert old not in names and recent in names


def test_a_writer_writing_again_leaves_the_next_turn_to_one_that_waited(client):
    first, waiter = _lease(client, "host-a:1"), _lease(client, "host-b:2")
    first.acquire(wait=0)
    got = threading.Event()

    def wait_for_it() -> None:
        waiter.acquire(wait=60)
        got.set()

    thread = threading.Thread(target=wait_for_it)
    thread.start()
    _until(lambda: read_lease(client, "docs").waiting_at > 0)  # the waiter said so
    first.release()
    again = _lease(client, "host-a:1")
    releaser = threading.Timer(1.5, waiter.release)  # the waiter writes, then gives it back
    releaser.start()
    again.acquire(wait=60)  # at once, as a client writing file after file does
    try:
        assert got.is_set(), "the writer that waited did not get the next turn"
    finally:
        again.release()
        releaser.join()
        thread.join(timeout=60)


def test_a_writer_alone_takes_the_lease_again_at_once(client):
    first = _lease(client)
    first.acquire(wait=0)
    first.release()
    second = _lease(client)
    second.acquire(wait=0)  # nobody waited: no turn to leave
    second.release()
