"""The Chinese sample PDF in a real on-disk Chroma collection with the real e5 model:
script-aware chunks with their pages, info's scripts, a Chinese search, CJK windows."""

from __future__ import annotations

import pytest

from hyde_lc import load_embeddings
from hyde_lc.ingest.files import ingest_paths, load_document
from hyde_lc.ingest.samples import sample_files
from hyde_lc.models.multilingual_embeddings import E5_MAX_TOKENS, E5_MODEL_ID
from hyde_lc.retrievers.neighbors import NeighborExpandingRetriever
from hyde_lc.store.vectorstore import collection_info, open_store
from tests.fakes import chroma_of

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def e5_store(tmp_path_factory):
    embeddings = load_embeddings(E5_MODEL_ID, threads=2)
    store = open_store(tmp_path_factory.mktemp("zh") / "store", embeddings=embeddings)
    report = ingest_paths(sample_files("zh"), store, progress=False)
    assert [f.status for f in report.files] == ["added"] and report.warnings == []
    return store


def test_chunks_are_split_for_chinese_and_fit_the_window(e5_store):
    metas = [m for _, m in chroma_of(e5_store).metadatas()]
    assert {(m["script"], m["chunk_size"], m["chunk_overlap"]) for m in metas} == {("cjk", 450, 90)}
    assert {m["embedding_model"] for m in metas} == {E5_MODEL_ID}
    assert {m["page"] for m in metas} == {0, 1, 2, 3, 4}
    assert {m["page_label"] for m in metas} == {"1", "2", "3", "4", "5"}
    got = e5_store.get(include=["documents"])
    counts = [e5_store.embeddings.count_tokens(text) for text in got["documents"]]
    assert max(counts) <= E5_MAX_TOKENS
    info = collection_info(e5_store)
    assert info["scripts"] == {"cjk": len(metas)} and info["embedding_model"] == E5_MODEL_ID


def test_a_chinese_question_finds_its_page_and_windows_read_as_the_document(e5_store):
    question = "被称为“远东第一灯塔”的是哪座灯塔？"
    (hit,) = e5_store.similarity_search(question, k=1)
    assert "远东第一灯塔" in hit.page_content.replace("\n", "")
    retriever = NeighborExpandingRetriever(
        base_retriever=e5_store.as_retriever(search_kwargs={"k": 1}),
        vectorstore=e5_store,
        k=1,
        window=1,
    )
    (window,) = retriever.invoke(question)
    assert window.metadata["window_end"] > window.metadata["window_start"]
    text = load_document(sample_files("zh")[0]).text
    assert window.page_content in text  # joined as the document reads: no added spaces
