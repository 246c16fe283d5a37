"""The query path's units: one HyDE transform for the retriever and HyDEEmbeddings, one
hybrid search, settings checked at every call, and results LangChain's wrappers dedupe."""

from __future__ import annotations

import numpy as np
import pytest
from langchain_classic.retrievers import EnsembleRetriever, MultiQueryRetriever
from langchain_core.documents import Document
from langchain_core.language_models import FakeListChatModel
from langchain_core.load import dumpd, load

from hyde_lc.core.chunks import RetrievedChunk
from hyde_lc.errors import InvalidSettingError
from hyde_lc.hyde.embeddings import HyDEEmbeddings
from hyde_lc.hyde.transform import HyDETransform
from hyde_lc.retrievers.hyde import HyDERetriever
from hyde_lc.retrievers.neighbors import NeighborExpandingRetriever
from tests.fakes import TOPICS, ScriptedChat

QUESTION = "How do lighthouses focus light?"
PASSAGE = "Fresnel lenses bend the lamp's light into a beam with rings of prisms."


def test_the_retriever_and_hyde_embeddings_search_the_same_vector(store, fake_embeddings):
    """Same settings, same unit: HyDEEmbeddings' query vector is the retriever's search vector."""
    retriever = HyDERetriever(
        vectorstore=store, hypothesis_llm=ScriptedChat(replies=[PASSAGE]), n_hypotheses=2
    )
    embeddings = HyDEEmbeddings.from_llm(
        ScriptedChat(replies=[PASSAGE]), fake_embeddings, n_hypotheses=2
    )
    searched = retriever.retrieve_with_details(QUESTION).search_vectors
    details = embeddings.embed_query_with_details(QUESTION)
    assert searched == [details.vector]
    assert details.weights == pytest.approx([0.8, 0.1, 0.1])
    assert isinstance(retriever.hyde_transform, HyDETransform)
    assert isinstance(embeddings.hyde_transform, HyDETransform)


async def test_the_async_transform_gives_the_sync_vector(fake_embeddings):
    transform = HyDETransform(fake_embeddings, llm=ScriptedChat(replies=[PASSAGE]), n_hypotheses=3)
    written, embedded, fused = transform.run(QUESTION)
    awritten, aembedded, afused = await transform.arun(QUESTION)
    assert written.texts == awritten.texts == [PASSAGE] * 3
    assert embedded.texts == aembedded.texts == [QUESTION, PASSAGE, PASSAGE, PASSAGE]
    assert np.allclose(fused.vectors, afused.vectors)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("fusion", "max", "unknown fusion 'max'"),
        ("hybrid_fusion", "max", "unknown hybrid_fusion 'max'"),
        ("dense_weight", 3.0, "dense_weight must lie between 0 and 1"),
        ("query_weight", 1.5, "query_weight must lie strictly between 0 and 1"),
        ("n_hypotheses", 1000, "n_hypotheses must be between 0"),
        ("hybrid_candidates", 0, "hybrid_candidates must be at least 1"),
    ],
)
def test_a_setting_changed_after_construction_is_refused_and_changes_nothing(
    store, field, value, message
):
    retriever = HyDERetriever(
        vectorstore=store, hypothesis_llm=ScriptedChat(replies=[PASSAGE] * 2), n_hypotheses=1
    )
    before = getattr(retriever, field)
    with pytest.raises(InvalidSettingError, match=message):
        setattr(retriever, field, value)  # checked as it is assigned, before any model runs
    assert getattr(retriever, field) == before
    assert retriever.retrieve_with_details(QUESTION).documents  # the retriever still works
    assert retriever.invoke(QUESTION)


# -- LangChain's wrappers: one chunk, one Document -------------------------------------------


def test_multi_query_keeps_each_chunk_once(store):
    """Each rewritten query scores a chunk differently; MultiQuery must still keep it once."""
    k = len(TOPICS)  # every query returns every chunk, each with its own scores
    rewrites = FakeListChatModel(
        responses=["Why do lighthouses use lenses?\nWho built the first lighthouse lens?"]
    )
    wrapper = MultiQueryRetriever.from_llm(
        retriever=HyDERetriever(vectorstore=store, k=k), llm=rewrites, include_original=True
    )
    docs = wrapper.invoke(QUESTION)
    ids = [d.id for d in docs]
    assert len(ids) == len(set(ids)) == k
    assert len({d.metadata["score"] for d in docs}) > 1  # the scores are still there


def test_multi_query_keeps_each_window_once(store):
    """Windows of neighbour expansion too: one span of chunks is one Document."""
    k = len(TOPICS)
    rewrites = FakeListChatModel(responses=["Why do lighthouses use lenses?"])
    wide = NeighborExpandingRetriever(base_retriever=HyDERetriever(vectorstore=store), k=k)
    docs = MultiQueryRetriever.from_llm(retriever=wide, llm=rewrites).invoke(QUESTION)
    ids = [d.id for d in docs]
    assert len(ids) == len(set(ids)) == k


def test_ensemble_keeps_each_chunk_once(store):
    k = len(TOPICS)
    wrapper = EnsembleRetriever(
        retrievers=[
            HyDERetriever(vectorstore=store, k=k),
            HyDERetriever(vectorstore=store, k=k, lexical="off"),
        ],
        weights=[0.5, 0.5],
        id_key=None,
    )
    ids = [d.id for d in wrapper.invoke(QUESTION)]
    assert len(ids) == len(set(ids)) == k


@pytest.mark.filterwarnings("ignore::langchain_core._api.beta_decorator.LangChainBetaWarning")
def test_a_retrieved_chunk_is_a_plain_document_when_serialised(store):
    doc = HyDERetriever(vectorstore=store, k=1).invoke(QUESTION)[0]
    assert isinstance(doc, RetrievedChunk)
    loaded = load(dumpd(doc))
    assert type(loaded) is Document
    assert loaded.page_content == doc.page_content and loaded.metadata == doc.metadata


def test_chunks_that_differ_in_stored_metadata_stay_apart():
    a = RetrievedChunk.of(Document("same text", id="c1", metadata={"page": 1, "score": 0.9}))
    b = RetrievedChunk.of(Document("same text", id="c1", metadata={"page": 2, "score": 0.9}))
    c = RetrievedChunk.of(Document("same text", id="c2", metadata={"page": 1, "score": 0.1}))
    assert a != b and a != c
    assert a == Document("same text", id="c1", metadata={"page": 1})
