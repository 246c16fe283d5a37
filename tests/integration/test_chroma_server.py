"""Client/server mode against a real `chroma run` on 127.0.0.1, started by the fixtures.

Ingest, HyDE retrieval, neighbour expansion and evaluation through a server; a server
that is down; and one that goes away in the middle of an evaluation run or an ingest,
then comes back on the same data folder: the run stops with an error naming the server,
and the same command run again completes the work with nothing written twice.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel

from benchmarks.soak import CHROMA, free_port, start_chroma_server
from hyde_lc import (
    HyDERetriever,
    NeighborExpandingRetriever,
    cli,
    collection_info,
    ingest_paths,
    load_embeddings,
    load_llm,
    open_store,
)
from hyde_lc.errors import StoreError, StoreUnavailableError
from hyde_lc.evaluation import read_records
from hyde_lc.store.chroma_collection import SEQ
from tests.fakes import (
    ROOT,
    SAMPLE_PDF,
    FakeEmbeddings,
    default_embedding_id,
    recorded_threads,
)
from tests.integration.corpus import CHUNK_OVERLAP, CHUNK_SIZE, half_written, write_corpus

pytestmark = pytest.mark.integration
HYDE_LC = str(Path(sys.executable).parent / "hyde-lc")
SAMPLE_QUESTIONS = ROOT / "hyde_lc" / "sample" / "questions.jsonl"


def _start(path: Path, port: int | None = None):
    """A `chroma run` over ``path`` (on ``port``); the test is skipped without the binary."""
    if not Path(CHROMA).exists():
        pytest.skip("the `chroma` command (chromadb's server) is not installed")
    return start_chroma_server(path, port)


@pytest.fixture(scope="module")
def server_url(tmp_path_factory):
    server = _start(tmp_path_factory.mktemp("chroma-server"))
    yield server.url
    server.stop()


@pytest.fixture(scope="module")
def embeddings():
    return load_embeddings()


@pytest.fixture(scope="module")
def sample_on_server(server_url, embeddings):
    """The sample PDF ingested into the collection ``sample`` on the shared server."""
    store = open_store(url=server_url, collection="sample", embeddings=embeddings)
    ingest_paths([SAMPLE_PDF], store, progress=False)
    return server_url


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "HYDE_LC_HYPOTHESIS_LLM": "local:smollm2-135m",
        "HYDE_LC_ANSWER_LLM": "local:smollm2-135m",
        "HYDE_LC_THREADS": os.environ.get("HYDE_LC_THREADS", "1"),
        "ANONYMIZED_TELEMETRY": "False",
    }


def _questions(path: Path, count: int) -> Path:
    lines = SAMPLE_QUESTIONS.read_text("utf-8").splitlines(keepends=True)[:count]
    path.write_text("".join(lines), "utf-8")
    return path


def test_ingest_and_hyde_retrieval_through_a_server(server_url):
    store = open_store(url=server_url, collection="served")
    report = ingest_paths([SAMPLE_PDF], store, progress=False)
    assert report.files[0].status == "added"
    again = ingest_paths(
        [SAMPLE_PDF], open_store(url=server_url, collection="served"), progress=False
    )
    assert again.files[0].status == "unchanged"
    info = collection_info(open_store(url=server_url, collection="served"))
    assert info["embedding_model"] == default_embedding_id() and info["chunks"] > 20
    writer = load_llm("local:smollm2-135m", role="hypothesis", max_tokens=48)
    result = HyDERetriever(vectorstore=store, hypothesis_llm=writer, k=3).retrieve_with_details(
        "Who designed the Pharos of Alexandria?"
    )
    assert result.fallback is None and len(result.documents) == 3


def test_a_server_that_is_down_gives_a_clear_error():
    with pytest.raises(StoreError, match="cannot reach the Chroma server"):
        open_store(url=f"http://127.0.0.1:{free_port()}")


def test_neighbour_expansion_through_a_server_matches_the_embedded_store(
    sample_on_server, embeddings, sample_store
):
    served = open_store(url=sample_on_server, collection="sample", embeddings=embeddings)
    local = sample_store  # the same PDF, same settings, in an embedded store

    def expand(store):
        base = HyDERetriever(vectorstore=store, n_hypotheses=0)
        wide = NeighborExpandingRetriever(base_retriever=base, k=3, window=1)
        return wide.invoke("How did the Fresnel lens change lighthouses?")

    windows = expand(served)
    assert len(windows) == 3
    for doc in windows:
        meta = doc.metadata
        assert meta["window_start"] <= meta["hit_chunk_index"] <= meta["window_end"]
        assert meta["window_end"] > meta["window_start"]  # the hit was widened
    # The server holds and returns exactly what the embedded store does.
    expected = expand(local)
    assert [d.page_content for d in windows] == [d.page_content for d in expected]
    assert [d.metadata for d in windows] == [_close(d.metadata) for d in expected]


def _close(metadata: dict[str, Any]) -> dict[str, Any]:
    """Metadata with its scores compared to 1e-5 (server and embedded index differ slightly)."""
    return {
        key: pytest.approx(value, abs=1e-5) if isinstance(value, float) else value
        for key, value in metadata.items()
    }


def test_cli_evaluate_with_expansion_through_a_server(sample_on_server, tmp_path):
    questions = _questions(tmp_path / "q.jsonl", 2)
    out = tmp_path / "out.jsonl"
    done = subprocess.run(
        [
            HYDE_LC, "evaluate", str(questions), "--out", str(out), "--k", "2", "--window", "1",
            "--chroma-url", sample_on_server, "--collection", "sample",
        ],
        env=_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "2 answered, 0 already in" in done.stdout
    records = read_records(out)
    assert len(records) == 2
    chunks = open_store(url=sample_on_server, collection="sample")._collection.get()["documents"]
    for record in records:
        meta = record["metadata"]
        assert meta["retrieval_method"] == "hybrid-hyde+window=1" and not meta.get("error")
        assert meta["hypothetical_documents"] and record["response"]
        assert 1 <= len(record["retrieved_contexts"]) <= 2
        # Each context is a widened window: two chunks or more that the server holds.
        for context in record["retrieved_contexts"]:
            assert sum(chunk in context for chunk in chunks) >= 2


@pytest.fixture
def own_server(tmp_path):
    """A server of this test's own, which the test stops and starts again."""
    server = _start(tmp_path / "server-data")
    yield server
    server.stop()


def _restart(server):
    """The same server again: same data folder, same port (so the same URL)."""
    return _start(server.path, server.port)


def test_evaluation_stops_when_the_server_goes_away_and_a_rerun_resumes(
    own_server, embeddings, tmp_path
):
    url = own_server.url
    ingest_paths([SAMPLE_PDF], open_store(url=url, embeddings=embeddings), progress=False)
    questions = _questions(tmp_path / "q.jsonl", 6)
    out = tmp_path / "out.jsonl"
    command = [HYDE_LC, "evaluate", str(questions), "--out", str(out), "--mode", "standard"]
    command += ["--k", "2", "--chroma-url", url]
    proc = subprocess.Popen(
        command, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if out.exists() and len(read_records(out)) >= 2:
            break
        time.sleep(0.05)
    own_server.stop()  # mid-run: two questions done, four to go
    _, err = proc.communicate(timeout=300)
    kept = read_records(out)
    assert 2 <= len(kept) < 6, "the server should have gone away part-way"
    # One clear error naming the server and the way on, not a failure per question.
    assert proc.returncode == 2, err
    assert f"lost the Chroma server at {url}" in err
    assert "Start it again" in err and "rerun the same command" in err
    assert all(not r["metadata"].get("error") for r in kept)

    server = _restart(own_server)
    try:
        again = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=600)
    finally:
        server.stop()
    assert again.returncode == 0, again.stderr
    assert f"{6 - len(kept)} answered, {len(kept)} already in" in again.stdout
    records = read_records(out)
    keys = [r["metadata"]["question_key"] for r in records]
    assert len(keys) == len(set(keys)) == 6  # every question once, none twice
    wanted = [json.loads(line)["question"] for line in questions.read_text("utf-8").splitlines()]
    assert [r["user_input"] for r in records] == wanted
    assert all(not r["metadata"].get("error") and r["retrieved_contexts"] for r in records)


class StopsServer(FakeEmbeddings):
    """Fake embeddings that stop the server at the start of their ``stop_at``-th call."""

    calls: int = 0
    stop_at: int = 0
    server: Any = None

    def embed_documents(self, texts):
        self.calls += 1
        if self.calls == self.stop_at:
            self.server.stop()
        return super().embed_documents(texts)


def _contents(url: str) -> dict[str, tuple[str, dict]]:
    got = open_store(url=url, embeddings=FakeEmbeddings(size=32))._collection.get(
        include=["documents", "metadatas"]
    )
    return _by_id(got)


def _by_id(got: dict) -> dict[str, tuple[str, dict]]:
    """Each chunk's text and metadata, without the number of the write that wrote it."""
    return {
        id_: (text, {k: v for k, v in meta.items() if k != SEQ})
        for id_, text, meta in zip(got["ids"], got["documents"], got["metadatas"], strict=True)
    }


def test_ingest_stops_when_the_server_goes_away_and_a_rerun_completes(own_server, tmp_path):
    paths = write_corpus(tmp_path / "docs", [f"note{i}.md" for i in range(8)])
    options = {"chunk_size": CHUNK_SIZE, "chunk_overlap": CHUNK_OVERLAP, "progress": False}
    # batch_size 2: about three embedding calls per document; the 10th is in the 4th document.
    dying = StopsServer(size=32, stop_at=10, server=own_server)
    with pytest.raises(StoreUnavailableError) as caught:
        ingest_paths(
            paths, open_store(url=own_server.url, embeddings=dying), batch_size=2, **options
        )
    message = str(caught.value)
    assert f"lost the Chroma server at {own_server.url}" in message
    assert "Start it again" in message and "ingest the same files again" in message

    server = _restart(own_server)
    try:
        partial = _contents(server.url)
        assert half_written(partial) == []  # whole documents only
        finished = {meta["source"] for _, meta in partial.values()}
        assert 1 <= len(finished) < len(paths)
        report = ingest_paths(
            paths, open_store(url=server.url, embeddings=FakeEmbeddings(size=32)), **options
        )
        statuses = {Path(r.source).name: r.status for r in report.files}
        assert sorted(s for s in statuses.values()) == sorted(
            ["unchanged"] * len(finished) + ["added"] * (len(paths) - len(finished))
        )
        items = _contents(server.url)
    finally:
        server.stop()
    reference = open_store(tmp_path / "reference", embeddings=FakeEmbeddings(size=32))
    ingest_paths(paths, reference, **options)
    expected = _by_id(reference._collection.get(include=["documents", "metadatas"]))
    assert half_written(items) == []
    assert items == expected  # every chunk of every file, once


class StopsServerThenWrites(FakeListChatModel):
    """A hypothesis writer that stops the server while it writes (after the store opened)."""

    server: Any = None

    def _call(self, *args: Any, **kwargs: Any) -> str:
        self.server.stop()
        return super()._call(*args, **kwargs)


def test_ask_names_a_server_lost_mid_question(own_server, embeddings, monkeypatch, capsys):
    ingest_paths(
        [SAMPLE_PDF], open_store(url=own_server.url, embeddings=embeddings), progress=False
    )
    writer = StopsServerThenWrites(responses=["Lamps burned whale oil."], server=own_server)
    monkeypatch.setattr("hyde_lc.models.loading.load_llm", lambda *args, **kwargs: writer)
    code = cli.main(
        [
            "ask",
            "How were lamps fuelled?",
            "--no-answer",
            "--mode",
            "hyde",
            "--chroma-url",
            own_server.url,
        ]
    )
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"lost the Chroma server at {own_server.url}" in err and "then ask again" in err


def test_a_warm_hybrid_query_through_a_server_makes_two_requests(
    sample_on_server, embeddings, monkeypatch
):
    from tests.unit.test_hybrid import CallCounter

    monkeypatch.setenv("HYDE_LC_REFRESH_INTERVAL", "60")
    monkeypatch.setenv("HYDE_LC_AUDIT_INTERVAL", "0")  # the query's calls, not an audit's
    counter = CallCounter(monkeypatch)
    store = open_store(url=sample_on_server, collection="sample", embeddings=embeddings)
    retriever = HyDERetriever(vectorstore=store, n_hypotheses=0, k=3)
    retriever.invoke("Who designed the Pharos of Alexandria?")  # warm: the state is read
    counter.active = True
    docs = retriever.invoke("How did the Fresnel lens change lighthouses?")
    assert len(docs) == 3 and any("lexical" in d.metadata["found_by"] for d in docs)
    assert sorted(counter.calls) == ["get", "query"]


def test_a_change_keeping_the_count_made_with_chromadb_reaches_bm25(
    server_url, embeddings, monkeypatch, tmp_path
):
    # Another program swaps one chunk for another on the server (same count): no count
    # check or change feed can see it; the background audit of a reader finds it.
    import chromadb

    from hyde_lc.store.collection import _AUDITING, HybridCollection

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "fog.txt").write_text("Fog signals used horns, bells and guns in thick weather.")
    (docs / "keeper.txt").write_text("Keepers trimmed wicks and wound the clockwork nightly.")
    store = open_store(url=server_url, collection="audited", embeddings=embeddings)
    ingest_paths([docs], store, progress=False)
    reader = open_store(url=server_url, collection="audited", embeddings=embeddings)
    retriever = HyDERetriever(vectorstore=reader, n_hypotheses=0, k=1)
    assert "clockwork" in retriever.invoke("who wound the clockwork")[0].page_content

    host, port = server_url.removeprefix("http://").rsplit(":", 1)
    raw = chromadb.HttpClient(host=host, port=int(port)).get_collection("audited")
    (keeper,) = raw.get(where={"file_name": "keeper.txt"})["ids"]
    raw.delete(ids=[keeper])
    text = "Lighthouse tenders carried supplies to remote stations."
    raw.add(
        ids=["outsider"],
        documents=[text],
        embeddings=embeddings.embed_documents([text]),
        metadatas=[{"source": "outsider", "file_name": "outsider.txt"}],
    )
    assert raw.count() == 2

    def lexical_ids(query: str) -> list[str]:
        details = HyDERetriever(vectorstore=reader, n_hypotheses=0, k=2).retrieve_with_details(
            query
        )
        return [d.id for d in details.documents if "lexical" in d.metadata["found_by"]]

    assert "outsider" not in lexical_ids("tenders supplies stations")
    monkeypatch.setenv("HYDE_LC_AUDIT_INTERVAL", "0.05")
    monkeypatch.setenv("HYDE_LC_REFRESH_INTERVAL", "0")
    time.sleep(0.1)  # the last audit (the index's build) is now older than the interval
    made = recorded_threads(monkeypatch)
    reader = open_store(url=server_url, collection="audited", embeddings=embeddings)
    lexical_ids("tenders supplies stations")  # this reader's first search starts the audit
    started = [t for t in made if t.name == "hyde_lc-audit"]
    assert started, "no background audit was started"
    for thread in started:
        thread.join()
    assert not _AUDITING
    assert "outsider" in lexical_ids("tenders supplies stations")
    assert keeper not in lexical_ids("clockwork wicks keepers")
    monkeypatch.setenv("HYDE_LC_AUDIT_INTERVAL", "0")
    assert HybridCollection.of(reader).audit().changed is False
