"""Retrievers and HyDE embeddings handed to real worker processes, as a user scales out.

A ``concurrent.futures.ProcessPoolExecutor`` with the ``spawn`` start method (macOS's and
Windows' default, and how Ray and Spark start their workers): each worker unpickles the
retriever, reopens the collection on disk, and loads the local models itself at their
first use. With the hypotheses off the search is deterministic, so the workers must find
exactly what the parent finds; with HyDE on (the writer samples at 0.7) a worker must
write a hypothesis and return documents. With ``fork`` (Linux's default before Python
3.14), a child of a process that opened an embedded Chroma store says what to do; over a
store that is not Chroma, the child loads its own llama.cpp engine and ONNX sessions.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np
import pytest
from langchain_core.vectorstores import InMemoryVectorStore

from hyde_lc import HyDEEmbeddings, HyDERetriever, NeighborExpandingRetriever, load_llm
from hyde_lc.errors import NotPortableError
from hyde_lc.store.vectorstore import HydeChroma

pytestmark = pytest.mark.integration

QUESTION = "How did lighthouse keepers keep the lamp burning?"
TEXTS = ["Keepers trimmed the wick every night.", "Fresnel lenses bend light into a beam."]


def hits(retriever: Any, query: str) -> list[tuple[str, str, float]]:
    return [(str(d.id), d.page_content, d.metadata["score"]) for d in retriever.invoke(query)]


def hyde_run(retriever: Any, query: str) -> tuple[int, list[str], str | None]:
    details = retriever.retrieve_with_details(query)
    return len(details.documents), details.hypotheses, details.fallback


def embedded(embeddings: Any) -> tuple[list[list[float]], int, int]:
    details = embeddings.embed_query_with_details(QUESTION)
    return embeddings.embed_documents(TEXTS), len(details.vector), len(details.hypotheses)


@pytest.fixture(scope="module")
def writer() -> Any:
    """The small local writer: 16 tokens, one thread (two workers share two cores)."""
    return load_llm("local:smollm2-135m", role="hypothesis", max_tokens=16, threads=1)


@pytest.fixture(scope="module")
def spawned() -> Any:
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield pool


def test_two_spawned_workers_find_what_the_parent_finds(
    sample_store: HydeChroma, writer: Any, spawned: ProcessPoolExecutor
) -> None:
    plain = HyDERetriever(vectorstore=sample_store, hypothesis_llm=writer, n_hypotheses=0, k=4)
    wide = NeighborExpandingRetriever(base_retriever=plain, k=2, window=1)
    here = hits(plain, QUESTION)
    here_wide = hits(wide, QUESTION)
    there = [spawned.submit(hits, plain, QUESTION) for _ in range(2)]
    there_wide = spawned.submit(hits, wide, QUESTION)
    assert [f.result(timeout=300) for f in there] == [here, here]
    assert there_wide.result(timeout=300) == here_wide
    assert len(here) == 4 and all("window_start" in d.metadata for d in wide.invoke(QUESTION))


def test_a_spawned_worker_writes_hypotheses_and_embeds_as_the_parent(
    sample_store: HydeChroma, writer: Any, spawned: ProcessPoolExecutor
) -> None:
    hyde = HyDERetriever(vectorstore=sample_store, hypothesis_llm=writer, n_hypotheses=1, k=3)
    embeddings = HyDEEmbeddings.from_llm(writer, sample_store.embeddings)
    run = spawned.submit(hyde_run, hyde, QUESTION)
    vectors, length, written = spawned.submit(embedded, embeddings).result(timeout=300)
    count, hypotheses, fallback = run.result(timeout=300)
    assert (count, fallback) == (3, None) and hypotheses and hypotheses[0].strip()
    assert np.allclose(vectors, embeddings.embed_documents(TEXTS), atol=1e-5)
    assert (length, written) == (len(vectors[0]), 1)


def test_a_forked_worker_says_to_spawn_when_the_parent_opened_the_folder(
    sample_store: HydeChroma,
) -> None:
    retriever = HyDERetriever(vectorstore=sample_store, k=2)
    retriever.invoke(QUESTION)  # the parent has used the store
    forked = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork"))
    with forked as pool, pytest.raises(NotPortableError, match="'spawn'"):
        pool.submit(hits, retriever, QUESTION).result(timeout=120)


def test_a_forked_worker_loads_its_own_engines_over_another_store(
    sample_store: HydeChroma, writer: Any
) -> None:
    """The parent's llama.cpp engine and ONNX sessions, copied by fork, would never answer."""
    store = InMemoryVectorStore(sample_store.embeddings)
    store.add_texts(TEXTS)
    hyde = HyDERetriever(vectorstore=store, hypothesis_llm=writer, n_hypotheses=1, k=1)
    assert hyde_run(hyde, QUESTION)[0] == 1  # the parent's engine and sessions are loaded
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
        count, hypotheses, fallback = pool.submit(hyde_run, hyde, QUESTION).result(timeout=300)
    assert (count, fallback) == (1, None) and hypotheses
