"""The audit: changes made outside hyde_lc that keep the chunk count reach the lexical side."""

import json
import logging
import time

import chromadb
import pytest

from hyde_lc.errors import InvalidSettingError
from hyde_lc.ingest.files import ingest_paths
from hyde_lc.search.lexical import lexical_search_for
from hyde_lc.store.collection import AUDIT_ENV, HybridCollection, audit_interval
from hyde_lc.store.lexical_index import LexicalIndex, lexical_query, read_state
from hyde_lc.store.vectorstore import open_store
from tests.fakes import FIVE_FILES, FakeEmbeddings, recorded_threads, write_files

TEXTS = FIVE_FILES


@pytest.fixture
def store(tmp_path):
    docs = write_files(tmp_path / "docs")
    st = open_store(tmp_path / "store", embeddings=FakeEmbeddings(size=32))
    ingest_paths([docs], st, progress=False)
    return st


def raw_collection(store):
    """The collection as another program sees it: chromadb, no hyde_lc."""
    return chromadb.PersistentClient(path=str(store.location.path)).get_collection("hyde_lc")


def found(store, text: str, where=None) -> set[str]:
    """file_name of the chunks the lexical side finds for ``text`` (this store's view)."""
    search = lexical_search_for(store)
    assert search is not None
    ids = [chunk_id for chunk_id, _ in search.search(lexical_query(text), 10, where)]
    return {d.metadata["file_name"] for d in search.documents(ids)}


def swap_one(store, raw) -> str:
    """Delete fog.txt's chunk and add another, with chromadb: the count stays the same."""
    (fog,) = raw.get(where={"file_name": "fog.txt"})["ids"]
    raw.delete(ids=[fog])
    raw.add(
        ids=["outsider"],
        documents=["Lighthouse tenders carried supplies to remote stations."],
        embeddings=[store.embeddings.embed_query("tenders")],
        metadatas=[{"source": "outsider", "file_name": "outsider.txt"}],
    )
    return fog


def test_a_swap_keeping_the_count_is_found_by_the_audit(store):
    hybrid = HybridCollection.of(store)
    before = found(store, "tenders supplies")  # the count check has run: counts agree
    raw = raw_collection(store)
    fog = swap_one(store, raw)
    assert raw.count() == len(TEXTS)
    assert found(store, "tenders supplies") == before == set()  # the count cannot tell

    result = hybrid.audit()

    assert result is not None and result.changed and not result.rebuilt
    assert result.indexed == ["outsider"] and result.removed == [fog]
    assert result.checked == len(TEXTS)
    assert found(store, "tenders supplies") == {"outsider.txt"}
    assert found(store, "horns bells guns") == set()
    # A new process's reader sees the repaired index without auditing again.
    fresh = open_store(store.location.path, embeddings=store.embeddings)
    assert found(fresh, "tenders supplies") == {"outsider.txt"}


def test_text_and_metadata_rewritten_in_place_are_found(store):
    raw = raw_collection(store)
    (keeper,) = raw.get(where={"file_name": "keeper.txt"})["ids"]
    raw.update(
        ids=[keeper],
        documents=["Radio beacons replaced the keepers' lamps."],
        embeddings=[store.embeddings.embed_query("beacons")],
    )
    (lens,) = raw.get(where={"file_name": "lens.txt"})["ids"]
    lens_meta = raw.get(ids=[lens], include=["metadatas"])["metadatas"][0]
    raw.update(ids=[lens], metadatas=[{**lens_meta, "topic": "optics"}])

    result = HybridCollection.of(store).audit()

    assert result is not None and sorted(result.indexed) == sorted([keeper, lens])
    assert result.removed == []
    assert found(store, "radio beacons") == {"keeper.txt"}
    assert found(store, "clockwork wicks") == set()
    assert found(store, "Fresnel lens", where={"topic": "optics"}) == {"lens.txt"}


def test_writes_through_hyde_lc_leave_nothing_for_the_audit(store, tmp_path):
    # The fingerprints taken when hyde_lc writes equal those of what Chroma gives back:
    # ingest, LangChain's add/update/delete, a replaced file.
    from langchain_core.documents import Document

    ids = store.add_documents([Document("Tide tables for the harbour.", metadata={"page": 3})])
    store.update_document(ids[0], Document("Tide tables, revised.", metadata={"page": 3.0}))
    (tmp_path / "docs" / "fog.txt").write_text("Foghorns gave way to electric emitters.")
    ingest_paths([tmp_path / "docs"], store, progress=False)
    store.delete(ids=store.get(where={"file_name": "bees.txt"})["ids"])

    result = HybridCollection.of(store).audit()

    assert result is not None and not result.changed
    assert result.checked == len(TEXTS)  # 5 - bees + the added chunk


def test_an_audit_during_a_write_decides_nothing(store):
    hybrid = HybridCollection.of(store)
    raw = raw_collection(store)
    swap_one(store, raw)
    with hybrid.writing() as write:
        write.set_pending(add=["some-version"])  # a write under way (marked in the metadata)
        assert hybrid.audit() is None
    assert found(store, "tenders supplies") == set()
    assert hybrid.audit().indexed == ["outsider"]


def test_many_changes_rebuild_the_index(store, caplog, monkeypatch):
    monkeypatch.setattr("hyde_lc.store.collection.AUDIT_MAX_CHANGES", 3)
    raw = raw_collection(store)
    got = raw.get(include=["metadatas", "documents"])
    raw.update(
        ids=got["ids"],
        documents=[f"rewritten {t}" for t in got["documents"]],
        embeddings=store.embeddings.embed_documents(got["documents"]),
    )
    with caplog.at_level(logging.WARNING, logger="hyde_lc.store.collection"):
        result = HybridCollection.of(store).audit()
    assert result is not None and result.rebuilt
    assert "5 chunks were added or changed and 0 deleted outside hyde_lc" in caplog.text
    assert len(found(store, "rewritten")) == len(TEXTS)


def test_the_audit_runs_by_itself_in_the_background(store, monkeypatch):
    found(store, "fog")  # the index is open and current
    raw = raw_collection(store)
    swap_one(store, raw)
    monkeypatch.setenv(AUDIT_ENV, "0.05")
    time.sleep(0.1)  # the last audit (the index's build) is now older than the interval
    made = recorded_threads(monkeypatch)
    fresh = open_store(store.location.path, embeddings=store.embeddings)
    monkeypatch.setenv("HYDE_LC_REFRESH_INTERVAL", "0")  # this search reads the state afresh
    found(fresh, "fog")  # and so starts the audit
    started = [t for t in made if t.name == "hyde_lc-audit"]
    assert started, "no background audit was started"
    for thread in started:
        thread.join()
    assert found(fresh, "tenders supplies") == {"outsider.txt"}
    state = read_state(HybridCollection.of(fresh)._index.path)
    assert state is not None and state.audited_at is not None


def test_the_audit_waits_for_its_interval_across_processes(store, monkeypatch):
    found(store, "fog")
    hybrid = HybridCollection.of(store)
    path = hybrid._index.path
    built = read_state(path).audited_at
    swap_one(store, raw_collection(store))
    monkeypatch.setenv(AUDIT_ENV, "3600")  # the index was built (so audited) just now
    fresh = open_store(store.location.path, embeddings=store.embeddings)
    assert found(fresh, "tenders supplies") == set()
    assert read_state(path).audited_at == built
    monkeypatch.setenv(AUDIT_ENV, "0")  # off
    assert audit_interval() == 0


@pytest.mark.parametrize("raw", ["-1", "soon", "1e9"])
def test_a_bad_audit_interval_names_the_variable(monkeypatch, raw):
    monkeypatch.setenv(AUDIT_ENV, raw)
    with pytest.raises(InvalidSettingError, match=AUDIT_ENV):
        audit_interval()


def _set_audited_at(path, when: float) -> None:
    """Write ``when`` as the last audit's time into the index's state file."""
    state_file = path / LexicalIndex.STATE_FILE
    state = json.loads(state_file.read_text(encoding="utf-8"))
    state["audited_at"] = when
    state_file.write_text(json.dumps(state), encoding="utf-8")


def test_an_audit_time_in_the_future_counts_as_due(store, monkeypatch):
    """A clock set back (or a state file copied from a machine ahead) must not stop audits."""
    found(store, "fog")
    path = HybridCollection.of(store)._index.path
    ten_years = 10 * 365 * 24 * 3600.0
    _set_audited_at(path, time.time() + ten_years)
    swap_one(store, raw_collection(store))
    monkeypatch.setenv(AUDIT_ENV, "1")
    monkeypatch.setenv("HYDE_LC_REFRESH_INTERVAL", "0")
    made = recorded_threads(monkeypatch)
    fresh = open_store(store.location.path, embeddings=store.embeddings)
    found(fresh, "fog")  # the state is read, and the audit is due
    started = [t for t in made if t.name == "hyde_lc-audit"]
    assert started, "an audit time ten years ahead kept the audit from running"
    for thread in started:
        thread.join()
    assert found(fresh, "tenders supplies") == {"outsider.txt"}
    audited = read_state(path).audited_at
    assert audited is not None and audited <= time.time()  # rewritten with now


def test_a_small_clock_skew_is_not_an_audit_time_in_the_future(store, monkeypatch):
    """Another machine's clock a few seconds ahead does not make every search audit."""
    found(store, "fog")
    path = HybridCollection.of(store)._index.path
    ahead = time.time() + 5
    _set_audited_at(path, ahead)
    monkeypatch.setenv(AUDIT_ENV, "3600")
    monkeypatch.setenv("HYDE_LC_REFRESH_INTERVAL", "0")
    made = recorded_threads(monkeypatch)
    fresh = open_store(store.location.path, embeddings=store.embeddings)
    found(fresh, "fog")
    assert not [t for t in made if t.name == "hyde_lc-audit"]
    assert read_state(path).audited_at == ahead
