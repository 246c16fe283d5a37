"""Neighbour expansion on the real sample PDF, with real MiniLM retrieval."""

import itertools

import pytest

from hyde_lc import HyDERetriever, NeighborExpandingRetriever
from hyde_lc.ingest.files import load_document
from tests.fakes import SAMPLE_PDF, FixedHits, chroma_of

pytestmark = pytest.mark.integration


@pytest.fixture
def store(sample_store):
    return sample_store


@pytest.fixture(scope="module")
def document_text():
    return load_document(SAMPLE_PDF).text


@pytest.mark.parametrize(
    "question",
    [
        "How did the Fresnel lens change lighthouses?",
        "What did Grace Darling do in 1838?",
        "Why were lighthouse keepers withdrawn?",
    ],
)
def test_windows_are_exact_spans_of_the_pdf_text(store, document_text, question):
    retriever = NeighborExpandingRetriever(
        base_retriever=store.as_retriever(), vectorstore=store, k=3, window=1
    )
    docs = retriever.invoke(question)
    assert len(docs) == 3
    for doc in docs:
        start = doc.metadata["start_index"]
        assert doc.page_content == document_text[start : start + len(doc.page_content)]
        assert doc.metadata["window_start"] <= doc.metadata["hit_chunk_index"]
        assert doc.metadata["hit_chunk_index"] <= doc.metadata["window_end"]
    spans = sorted(
        (d.metadata["start_index"], d.metadata["start_index"] + len(d.page_content)) for d in docs
    )
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in itertools.pairwise(spans))


def test_a_window_across_a_page_break_lists_both_pages(store, document_text):
    metas = sorted((m for _, m in chroma_of(store).metadatas()), key=lambda m: m["chunk_index"])
    boundary = next(m for m, n in itertools.pairwise(metas) if n["page"] > m["page"])
    hit = store.get_by_ids(
        [
            next(
                i
                for i, m in chroma_of(store).metadatas()
                if m["chunk_index"] == boundary["chunk_index"]
            )
        ]
    )[0]
    (doc,) = NeighborExpandingRetriever(
        base_retriever=FixedHits(hits=[hit]), vectorstore=store, k=1, before=0, after=1
    ).invoke("q")
    assert doc.metadata["pages"] == [boundary["page"], boundary["page"] + 1]
    start = doc.metadata["start_index"]
    assert doc.page_content == document_text[start : start + len(doc.page_content)]


def test_expansion_adds_context_at_equal_k(store):
    plain = store.as_retriever(search_kwargs={"k": 3}).invoke("Grace Darling rescue")
    wide = NeighborExpandingRetriever(
        base_retriever=store.as_retriever(), vectorstore=store, k=3
    ).invoke("Grace Darling rescue")
    assert sum(map(len, (d.page_content for d in wide))) > sum(
        map(len, (d.page_content for d in plain))
    )


def test_hybrid_hyde_base_windows_the_pdf(store, document_text):
    base = HyDERetriever(vectorstore=store, n_hypotheses=0, k=3)
    result = NeighborExpandingRetriever(base_retriever=base, k=2).retrieve_with_details(
        "What did Grace Darling do in 1838?"
    )
    assert result.label == "hybrid+window=1" and result.lexical
    assert any("Grace Darling" in d.page_content for d in result.documents)
    for doc in result.documents:
        start = doc.metadata["start_index"]
        assert doc.page_content == document_text[start : start + len(doc.page_content)]
