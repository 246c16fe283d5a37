"""Regression tests for the defects found in review (one test per defect)."""

import subprocess
import sys

import pytest
from langchain_core.documents import Document
from pydantic import ValidationError

from hyde_lc.errors import EmbeddingMismatchError, IngestError
from hyde_lc.ingest import ingest_paths, load_document
from hyde_lc.neighbors import NeighborExpandingRetriever, join_chunks, trim_to_budget
from hyde_lc.retriever import HyDERetriever
from hyde_lc.store import iter_metadatas, open_store
from tests.conftest import FakeEmbeddings
from tests.unit.test_ingest import long_text, tree_digest
from tests.unit.test_neighbors import FixedHits, unique_text
from tests.unit.test_retriever import ScriptedChat


class FailingEmbeddings(FakeEmbeddings):
    fail_after: int = 10**9
    seen: int = 0

    def embed_documents(self, texts):
        object.__setattr__(self, "seen", self.seen + 1)
        if self.seen > self.fail_after:
            raise RuntimeError("embedding service went away")
        return super().embed_documents(texts)


def test_a_failed_replacement_is_undone_and_the_old_version_kept(tmp_path):
    doc = tmp_path / "d.txt"
    doc.write_text(long_text(20, "old"))
    embeddings = FailingEmbeddings(size=32)
    store = open_store(tmp_path / "store", embeddings=embeddings)
    ingest_paths([doc], store, chunk_size=200, chunk_overlap=40, batch_size=4, progress=False)
    digest = tree_digest(tmp_path / "store")
    doc.write_text(long_text(20, "new"))
    object.__setattr__(embeddings, "fail_after", embeddings.seen + 1)  # 2nd batch fails
    with pytest.raises(IngestError, match="partial write was undone"):
        ingest_paths([doc], store, chunk_size=200, chunk_overlap=40, batch_size=4, progress=False)
    assert tree_digest(tmp_path / "store") == digest


def test_a_file_gone_blank_keeps_its_previous_version(tmp_path, fake_embeddings):
    doc = tmp_path / "d.txt"
    doc.write_text(long_text(5))
    store = open_store(tmp_path / "store", embeddings=fake_embeddings)
    ingest_paths([doc], store, progress=False)
    before = store._collection.count()
    doc.write_text("   \n  ")
    report = ingest_paths([doc], store, progress=False)
    assert report.files[0].status == "empty"
    assert "previously ingested version is kept" in report.files[0].notes[-1]
    assert store._collection.count() == before


def test_chunks_without_spaces_rebuild_exactly(tmp_path, fake_embeddings):
    text = "灯塔" * 60
    (tmp_path / "cjk.txt").write_text(text)
    store = open_store(tmp_path / "store", embeddings=fake_embeddings)
    ingest_paths([tmp_path / "cjk.txt"], store, chunk_size=50, chunk_overlap=0, progress=False)
    got = store._collection.get(include=["documents", "metadatas"])
    chunks = sorted(
        (Document(t, metadata=m) for t, m in zip(got["documents"], got["metadatas"], strict=True)),
        key=lambda d: d.metadata["chunk_index"],
    )
    assert join_chunks(chunks) == load_document(tmp_path / "cjk.txt").text == text


def test_budget_trimming_takes_the_next_chunk_first():
    chunks = [
        Document("x" * 10, metadata={"chunk_index": i, "start_index": 11 * i, "gap_before": " "})
        for i in range(5)
    ]
    kept = trim_to_budget(chunks, {2}, max_chars=21)
    assert [c.metadata["chunk_index"] for c in kept] == [2, 3]


@pytest.fixture
def corpus(tmp_path, fake_embeddings):
    (tmp_path / "a.txt").write_text(unique_text("alpha", 10))
    store = open_store(tmp_path / "store", embeddings=fake_embeddings)
    ingest_paths([tmp_path / "a.txt"], store, chunk_size=120, chunk_overlap=40, progress=False)
    return store


def test_a_hit_missing_from_the_store_is_returned_as_found(corpus):
    ghost = Document(
        "a hit from elsewhere",
        metadata={
            "source": "/elsewhere.txt",
            "chunk_index": 3,
            "start_index": 0,
            "doc_id": "x",
            "score": 0.5,
        },
    )
    (doc,) = NeighborExpandingRetriever(
        base_retriever=FixedHits(hits=[ghost]), vectorstore=corpus, k=1, max_chars=100
    ).invoke("q")
    assert doc.page_content == "a hit from elsewhere" and doc.metadata["score"] == 0.5


def test_a_hyde_base_writes_hypotheses_once_per_call_across_top_up_rounds(corpus):
    llm = ScriptedChat(replies=["one passage", "another passage"])
    hyde = HyDERetriever(vectorstore=corpus, hypothesis_llm=llm)
    wide = NeighborExpandingRetriever(base_retriever=hyde, k=3, candidates=1)
    assert len(wide.invoke("q")) == 3  # needed several rounds (1, 2, 4, ... hits)
    assert len(llm.log) == 1
    wide.invoke("q")
    assert len(llm.log) == 2  # a new call samples afresh


def test_retriever_settings_checked_at_construction(corpus):
    llm = ScriptedChat()
    assert (
        HyDERetriever(vectorstore=corpus, hypothesis_llm=llm, search_kwargs={"k": 2})
        .invoke("q")
        .__len__()
        == 2
    )
    with pytest.raises(ValueError, match="k must be at least 1"):
        HyDERetriever(vectorstore=corpus, hypothesis_llm=llm).invoke("q", k=0)
    with pytest.raises(EmbeddingMismatchError):
        HyDERetriever(
            vectorstore=corpus,
            hypothesis_llm=llm,
            embeddings=FakeEmbeddings(size=32, model_id="fake:other"),
        )
    for bad in ({"prompt": []}, {"timeout": 0}, {"hypothesis_llm": None}):
        with pytest.raises(ValidationError):
            HyDERetriever(vectorstore=corpus, **{"hypothesis_llm": llm, **bad})


def test_mmr_results_carry_a_score(corpus):
    docs = HyDERetriever(
        vectorstore=corpus, hypothesis_llm=ScriptedChat(), search_type="mmr", k=3
    ).invoke("alpha paragraph")
    assert all(isinstance(d.metadata["score"], float) for d in docs)


def test_a_timed_out_hypothesis_does_not_hold_the_process_at_exit():
    # The abandoned calls sleep ten minutes; the process must exit without them. The
    # limit below leaves minutes for a slow import on a loaded machine, and still
    # fails long before the abandoned calls could end.
    script = (
        "import time\n"
        "from langchain_core.language_models import BaseChatModel\n"
        "from hyde_lc.hypotheses import write_hypotheses\n"
        "class Slow(BaseChatModel):\n"
        "    _llm_type = 'slow'\n"
        "    def _generate(self, *a, **k):\n"
        "        time.sleep(600)\n"
        "out = write_hypotheses(Slow(), ['q', 'q', 'q'], timeout=0.3)\n"
        "assert out.fallback.startswith('timeout'), out\n"
        "print('done', flush=True)\n"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the process waited for the abandoned calls at exit: {exc.stdout!r}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "done"


def test_pages_count_includes_pages_inside_chunks(tmp_path, fake_embeddings):
    from hyde_lc.store import collection_info
    from tests.conftest import make_pdf

    short = "A short page about the lamp room and the lens, with a few words. " * 2
    pdf = make_pdf(tmp_path / "s.pdf", [short, short, short])
    store = open_store(tmp_path / "store", embeddings=fake_embeddings)
    ingest_paths([pdf], store, chunk_size=1000, chunk_overlap=100, progress=False)
    assert len(list(iter_metadatas(store))) == 1
    assert collection_info(store)["documents"][0]["pages"] == 3
