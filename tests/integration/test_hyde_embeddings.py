"""HyDEEmbeddings with the real local models, inside a plain LangChain vector store."""

from __future__ import annotations

from operator import itemgetter

import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore

from hyde_lc import load_embeddings, load_llm
from hyde_lc.hyde.embeddings import HyDEEmbeddings
from hyde_lc.store.vectorstore import HydeChroma

pytestmark = pytest.mark.integration

QUESTION = "Who invented the Fresnel lens used in lighthouses?"


@pytest.fixture(scope="module")
def hyde_store(sample_store: HydeChroma) -> tuple[HyDEEmbeddings, InMemoryVectorStore]:
    """The sample PDF's chunks in an InMemoryVectorStore whose embeddings are HyDE's."""
    base = load_embeddings("local:minilm")
    writer = load_llm("local:smollm2-135m", role="hypothesis", max_tokens=48, threads=1)
    embeddings = HyDEEmbeddings.from_llm(writer, base, prompt="web_search")
    got = sample_store.get(include=["documents", "metadatas"])
    docs = [
        Document(page_content=text, metadata=meta)
        for text, meta in zip(got["documents"], got["metadatas"], strict=True)
    ]
    return embeddings, InMemoryVectorStore.from_documents(docs, embeddings)


def test_real_models_write_a_hypothesis_and_fuse_it(hyde_store):
    embeddings, _ = hyde_store
    details = embeddings.embed_query_with_details(QUESTION)
    assert details.fallback is None and len(details.hypotheses) == 1
    assert details.hypotheses[0].strip()
    vector = np.asarray(details.vector)
    query = np.asarray(embeddings.base_embeddings.embed_query(QUESTION))
    assert vector.shape == query.shape == (384,)
    # the hypothesis moved the vector, but the query (weight 0.8) still dominates it
    cosine = float(vector @ query / (np.linalg.norm(vector) * np.linalg.norm(query)))
    assert 0.8 < cosine < 0.9999


def test_a_vector_store_retriever_finds_the_fresnel_passage(hyde_store):
    _, store = hyde_store
    chain = itemgetter("question") | store.as_retriever(search_kwargs={"k": 3})
    docs = chain.invoke({"question": QUESTION})
    assert len(docs) == 3
    assert any("Fresnel" in d.page_content for d in docs)


async def test_async_search_with_the_real_models(hyde_store):
    _, store = hyde_store
    docs = await store.asimilarity_search(QUESTION, k=3)
    assert any("Fresnel" in d.page_content for d in docs)
