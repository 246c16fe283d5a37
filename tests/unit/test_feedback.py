"""Pseudo-relevance feedback: Rocchio and RM3 as pure functions, and as a retriever step."""

import asyncio
from collections import Counter

import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.language_models import FakeListChatModel
from langchain_core.vectorstores import InMemoryVectorStore

from hyde_lc.errors import InvalidSettingError
from hyde_lc.retrievers.hyde import HyDERetriever
from hyde_lc.search.backend import backend_for
from hyde_lc.search.feedback import (
    DEFAULT_FEEDBACK_DOCS,
    expand_query,
    expansion_terms,
    rocchio,
)
from hyde_lc.search.lexical import LexicalSearch
from hyde_lc.store.lexical_index import analyze
from tests.fakes import TOPICS, FakeEmbeddings

# -- the pure functions ------------------------------------------------------------------


def test_rocchio_moves_the_unit_query_toward_the_mean_of_the_unit_chunk_vectors():
    query = [3.0, 0.0, 0.0]  # lengths differ: each vector counts at unit length
    chunks = [[0.0, 2.0, 0.0], [0.0, 0.0, 5.0]]
    moved = rocchio(query, chunks, beta=0.4)
    assert moved == pytest.approx([0.6, 0.2, 0.2])


def test_rocchio_without_feedback_or_weight_returns_the_query_as_is():
    assert rocchio([3.0, 4.0], [], beta=0.5) == [3.0, 4.0]
    assert rocchio([3.0, 4.0], [[1.0, 0.0]], beta=0.0) == [3.0, 4.0]


def test_expansion_terms_are_the_chunks_own_index_terms_by_relevance_model():
    texts = ["The keepers wound the clockwork", "keepers trimmed wicks"]
    terms = expansion_terms(texts, terms=3)
    # P(w|R): keeper 1/3*1/2 + 1/3*1/2; every other term 1/3*1/2 or less
    assert next(iter(sorted(terms, key=terms.get, reverse=True))) == "keeper"
    assert set(terms) <= set(analyze(" ".join(texts)))  # stemmed, stop words left out
    assert "the" not in terms and len(terms) == 3
    assert sum(terms.values()) == pytest.approx(1.0)
    assert expansion_terms(list(reversed(texts)), terms=3) == terms  # order does not matter


def test_expansion_terms_weight_chunks_when_asked():
    terms = expansion_terms(["bees honey", "volcano magma"], terms=2, weights=[3.0, 1.0])
    assert set(terms) == {"bee", "honey"}


def test_expand_query_gives_the_expansion_its_share_and_keeps_the_original_terms():
    original = Counter({"lens": 5, "light": 5})
    out = expand_query(original, {"prism": 0.75, "lens": 0.25}, weight=0.5)
    assert sum(out.values()) == pytest.approx(2 * sum(original.values()))
    assert out["prism"] == pytest.approx(7.5) and out["lens"] == pytest.approx(7.5)
    assert out["light"] == 5
    assert expand_query(original, {"prism": 1.0}, weight=0.0) == original


# -- the retriever step, over fakes -------------------------------------------------------

QUESTION = "keepers wound the clockwork of the lens"


@pytest.fixture
def memory():
    embeddings = FakeEmbeddings(size=16)
    docs = [Document(text, id=f"t{i}") for i, text in enumerate(TOPICS)]
    store = InMemoryVectorStore(embeddings)
    store.add_documents(docs)
    return store, LexicalSearch.from_documents(store, docs)


def make(memory, **fields):
    store, lexical = memory
    return HyDERetriever(vectorstore=store, lexical=lexical, n_hypotheses=0, k=4, **fields)


def ranking(result):
    return [(d.id, d.metadata["score"]) for d in result.documents]


def test_off_is_the_search_as_without_feedback(memory):
    plain = make(memory).retrieve_with_details(QUESTION)
    off = make(memory, feedback="off").retrieve_with_details(QUESTION)
    assert ranking(off) == ranking(plain) and off.feedback is None
    assert off.label == plain.label == "hybrid"
    assert "feedback_s" not in off.timings


def test_dense_feedback_searches_the_rocchio_vector_of_the_first_rankings_best_chunks(memory):
    store, _ = memory
    first = make(memory).retrieve_with_details(QUESTION)
    result = make(
        memory, feedback="dense", feedback_docs=3, feedback_vector_weight=0.3
    ).retrieve_with_details(QUESTION)
    fed = result.feedback
    assert fed is not None and fed.mode == "dense" and not fed.expansion
    assert fed.chunk_ids == [d.id for d in first.documents[:3]]
    assert fed.first_ranking[:4] == [d.id for d in first.documents]
    expected = rocchio(
        store.embeddings.embed_query(QUESTION),
        backend_for(store, "off").vectors(fed.chunk_ids),
        beta=0.3,
    )
    assert result.search_vectors[0] == pytest.approx(expected)
    assert fed.vector_shift is not None and fed.vector_shift < 0.9999
    assert result.label == "hybrid(feedback=dense,fb-docs=3,fb-beta=0.3)"
    assert "feedback_s" in result.timings


def test_lexical_feedback_adds_the_feedback_chunks_terms_to_the_bm25_query(memory, monkeypatch):
    _, lexical = memory
    seen: list[Counter] = []
    search = lexical.search
    monkeypatch.setattr(
        lexical, "search", lambda weights, k, where=None: seen.append(weights) or search(weights, k)
    )
    result = make(
        memory, feedback="lexical", feedback_docs=2, feedback_terms=4
    ).retrieve_with_details(QUESTION)
    fed = result.feedback
    assert fed is not None and len(fed.chunk_ids) == 2 and len(fed.expansion) == 4
    fed_texts = [TOPICS[int(i[1:])] for i in fed.chunk_ids]
    assert set(fed.expansion) <= set(analyze(" ".join(fed_texts)))
    assert fed.expansion == expansion_terms(fed_texts, terms=4)
    first_query, second_query = seen
    assert second_query == expand_query(first_query, fed.expansion, 0.5)
    assert fed.vector_shift is None  # the dense side searched the question's vector again


def test_both_sides_together_with_hyde(memory):
    store, lexical = memory
    retriever = HyDERetriever(
        vectorstore=store,
        lexical=lexical,
        hypothesis_llm=FakeListChatModel(responses=["Bees make honey in hives."]),
        n_hypotheses=1,
        k=3,
        feedback="both",
        feedback_docs=2,
    )
    result = retriever.retrieve_with_details("what do bees make")
    fed = result.feedback
    assert result.hypotheses == ["Bees make honey in hives."]
    assert fed is not None and fed.expansion and fed.vector_shift is not None
    assert result.label.startswith("hybrid-hyde(") and "feedback=both" in result.label
    assert len(result.documents) == 3


def test_bad_feedback_settings_are_refused_with_what_to_do(memory):
    store, _ = memory
    with pytest.raises(InvalidSettingError, match="unknown feedback 'rm3'"):
        make(memory, feedback="rm3")
    with pytest.raises(InvalidSettingError, match="feedback_docs must be a whole number"):
        make(memory, feedback="dense", feedback_docs=0)
    with pytest.raises(InvalidSettingError, match=r"feedback_term_weight must lie in \[0, 1\)"):
        make(memory, feedback="lexical", feedback_term_weight=1.0)
    with pytest.raises(InvalidSettingError, match="has no lexical side"):
        HyDERetriever(vectorstore=store, lexical="off", n_hypotheses=0, feedback="lexical")
    retriever = make(memory)
    retriever.feedback = "both"
    with pytest.raises(InvalidSettingError, match="feedback_docs"):
        retriever.feedback_docs = -1  # changed after construction: refused as it is assigned
    assert retriever.feedback_docs == DEFAULT_FEEDBACK_DOCS and retriever.invoke(QUESTION)


def test_dense_feedback_needs_a_store_that_returns_vectors(memory):
    store, lexical = memory

    class NoVectors(InMemoryVectorStore):
        def __init__(self, embedding):
            super().__init__(embedding)
            del self.store  # a store that keeps its vectors to itself

    with pytest.raises(InvalidSettingError, match="cannot return them"):
        HyDERetriever(vectorstore=NoVectors(store.embeddings), lexical=lexical, feedback="dense")


# -- on a real Chroma collection ----------------------------------------------------------


def test_feedback_on_a_chroma_collection_reads_its_stored_vectors(store):
    retriever = HyDERetriever(
        vectorstore=store, n_hypotheses=0, k=3, feedback="both", feedback_docs=2
    )
    result = retriever.retrieve_with_details(QUESTION)
    fed = result.feedback
    assert fed is not None and result.lexical and len(fed.chunk_ids) == 2
    got = store.get(ids=fed.chunk_ids, include=["embeddings", "documents"])
    stored = dict(zip(got["ids"], got["embeddings"], strict=True))
    expected = rocchio(
        store.embeddings.embed_query(QUESTION), [stored[i] for i in fed.chunk_ids], beta=0.5
    )
    assert np.allclose(result.search_vectors[0], expected)
    assert fed.expansion == expansion_terms(
        [dict(zip(got["ids"], got["documents"], strict=True))[i] for i in fed.chunk_ids],
        terms=10,
    )
    again = asyncio.run(retriever.aretrieve_with_details(QUESTION))
    assert ranking(again) == ranking(result) and again.feedback == fed
