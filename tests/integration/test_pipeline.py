"""The whole pipeline on the sample PDF with real local models: ingest, retrieve, answer."""

import shutil

import pytest
from langchain_core.documents import Document

from hyde_lc import (
    HyDERetriever,
    build_answer_chain,
    collection_info,
    ingest_documents,
    ingest_paths,
    load_embeddings,
    load_llm,
    open_store,
)
from hyde_lc.errors import EmbeddingMismatchError
from tests.fakes import SAMPLE_PDF, default_embedding_id, tree_digest

pytestmark = pytest.mark.integration


@pytest.fixture
def store_dir(sample_store_dir):
    return sample_store_dir  # the session's sample store (ingested once, read only)


SLOW = 600
"""Seconds a real local writer may take (a loaded 2-core machine; the default is 120)."""


@pytest.fixture(scope="module")
def writer():
    return load_llm("local:smollm2-135m", role="hypothesis", max_tokens=64)


def test_sample_pdf_is_ingested_page_by_page(store_dir, tmp_path):
    info = collection_info(open_store(store_dir))  # a new client: persisted on disk
    assert info["embedding_model"] == default_embedding_id() and info["embedding_dimension"] == 384
    (doc,) = info["documents"]
    assert doc["source"] == str(SAMPLE_PDF) and doc["pages"] == 7
    assert info["chunks"] == doc["chunks"] > 20
    copy = shutil.copytree(store_dir, tmp_path / "copy")  # ingesting again: not the shared one
    digest = tree_digest(copy)
    again = ingest_paths([SAMPLE_PDF], open_store(copy), progress=False)
    assert again.files[0].status == "unchanged" and again.files[0].embedded == 0
    assert tree_digest(copy) == digest


@pytest.mark.parametrize(
    ("question", "page"),
    [
        ("Who designed the Pharos of Alexandria?", 1),
        ("In which lighthouse was the first Fresnel lens installed?", 2),
    ],
)
def test_standard_retrieval_finds_the_right_page(store_dir, question, page):
    retriever = HyDERetriever(vectorstore=open_store(store_dir), n_hypotheses=0, k=3)
    assert str(page) in [d.metadata["page_label"] for d in retriever.invoke(question)]


def test_hyde_with_a_real_local_model(store_dir, writer):
    retriever = HyDERetriever(
        vectorstore=open_store(store_dir), hypothesis_llm=writer, k=4, timeout=SLOW
    )
    result = retriever.retrieve_with_details("How did the Fresnel lens change lighthouses?")
    assert result.fallback is None and len(result.hypotheses) == 1
    assert len(result.hypotheses[0]) > 40
    assert result.hypothesis_messages[0].usage_metadata["output_tokens"] > 0
    assert len(result.documents) == 4
    assert result.label == "hybrid-hyde" and result.lexical
    assert all(d.metadata["retrieval_mode"] == "hybrid-hyde" for d in result.documents)
    stages = {"hypothesis_s", "embedding_s", "search_s"}
    assert stages <= set(result.timings) <= stages | {"writer_load_s"}  # the writer loaded then


async def test_async_hyde_with_several_hypotheses(store_dir, writer):
    retriever = HyDERetriever(
        vectorstore=open_store(store_dir),
        hypothesis_llm=writer,
        n_hypotheses=3,
        fusion="rrf",
        k=3,
        timeout=SLOW,
    )
    result = await retriever.aretrieve_with_details("What replaced lighthouse keepers?")
    assert len(set(result.hypotheses)) == 3  # three different samples
    assert len(result.documents) == 3


def test_answer_chain_answers_from_context(store_dir, writer):
    retriever = HyDERetriever(
        vectorstore=open_store(store_dir), hypothesis_llm=writer, k=3, timeout=SLOW
    )
    answerer = load_llm("local:smollm2-135m", role="answer", max_tokens=64)
    out = build_answer_chain(retriever, answerer).invoke("Who designed the Pharos?")
    assert set(out) == {
        "question",
        "documents",
        "answer",
        "sources",
        "context_documents",
        "dropped_documents",
        "context_note",
        "answer_ending",
        "answer_note",
    }
    assert len(out["documents"]) == 3 and out["answer"].strip()


def test_mismatched_embeddings_refused_and_store_untouched(store_dir, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used")
    digest = tree_digest(store_dir)
    with pytest.raises(EmbeddingMismatchError, match=r"local:minilm.*text-embedding-3-small"):
        open_store(store_dir, embeddings=load_embeddings("openai:text-embedding-3-small"))
    assert tree_digest(store_dir) == digest


def test_a_lone_surrogate_in_the_query_is_replaced_and_said(store_dir, caplog):
    """Through the Python API (the CLI refuses one): the real tokenizer refused it before."""
    retriever = HyDERetriever(vectorstore=open_store(store_dir), n_hypotheses=0, k=3)
    with caplog.at_level("WARNING", logger="hyde_lc"):
        result = retriever.retrieve_with_details("Who designed the Pharos \ud800 of Alexandria?")
    assert result.query == "Who designed the Pharos \ufffd of Alexandria?"
    assert result.query_note == (
        "query held 1 lone surrogate (not valid Unicode), replaced with U+FFFD"
    )
    assert "1" in [d.metadata["page_label"] for d in result.documents]
    assert all(d.metadata["hyde_query_truncated"] == result.query_note for d in result.documents)
    warned = [r for r in caplog.records if "lone surrogate" in r.getMessage()]
    assert len(warned) == 1 and warned[0].levelname == "WARNING"
    docs = retriever.invoke("lens \udcff prism")  # LangChain's own entry point
    assert docs and "lone surrogate" in docs[0].metadata["hyde_query_truncated"]


def test_a_document_with_a_lone_surrogate_is_ingested_with_a_note(tmp_path, caplog):
    store = open_store(tmp_path / "store", embeddings=load_embeddings(default_embedding_id()))
    doc = Document(
        "Fog horns \ud800 warned ships off the reef.", metadata={"source": "fog\udcff.txt"}
    )
    with caplog.at_level("WARNING", logger="hyde_lc"):
        report = ingest_documents([doc], store)
    (result,) = report.files
    assert (result.source, result.status, result.chunks) == ("fog\ufffd.txt", "added", 1)
    assert result.notes == [
        "2 lone surrogates (not valid Unicode) in the Documents' text or metadata replaced "
        "with U+FFFD"
    ]
    assert any("lone surrogates" in r.getMessage() for r in caplog.records)
    (found,) = HyDERetriever(vectorstore=store, n_hypotheses=0, k=1).invoke("fog horns")
    assert found.page_content == "Fog horns \ufffd warned ships off the reef."
    assert found.metadata["source"] == "fog\ufffd.txt"
    again = ingest_documents([doc], store)  # the same Documents: the same chunk, kept
    assert [f.status for f in again.files] == ["unchanged"]
