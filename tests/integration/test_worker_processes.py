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
import os
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hyde_lc import HyDEEmbeddings, HyDERetriever, NeighborExpandingRetriever, load_llm
from hyde_lc.store.vectorstore import HydeChroma
from tests.fakes import ROOT

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


# The fork cases run in a process of their own, as a user's script does: forking the test
# runner's worker (which has threads of its own, mid-call) can copy a lock another thread
# holds, and the child then waits on it for ever, whatever hyde_lc does.
FORKED = """
import multiprocessing
import sys
from concurrent.futures import ProcessPoolExecutor

from langchain_core.vectorstores import InMemoryVectorStore

from hyde_lc import HyDERetriever, load_llm, open_store
from hyde_lc.errors import NotPortableError

QUESTION, TEXTS = sys.argv[2], sys.argv[3:]


def hits(retriever):
    return len(retriever.invoke(QUESTION))


def hyde_run(retriever):
    details = retriever.retrieve_with_details(QUESTION)
    return len(details.documents), details.hypotheses, details.fallback


if __name__ == "__main__":
    store = open_store(sys.argv[1])
    fork = multiprocessing.get_context("fork")
    retriever = HyDERetriever(vectorstore=store, k=2)
    retriever.invoke(QUESTION)  # the parent has used the store
    with ProcessPoolExecutor(1, mp_context=fork) as pool:
        try:
            pool.submit(hits, retriever).result(timeout=120)
        except NotPortableError as exc:
            print("refused:", exc)
    # over a store that is not Chroma: the parent's llama.cpp engine and ONNX sessions,
    # copied by fork, would never answer; the child loads its own
    memory = InMemoryVectorStore(store.embeddings)
    memory.add_texts(TEXTS)
    writer = load_llm("local:smollm2-135m", role="hypothesis", max_tokens=16, threads=1)
    hyde = HyDERetriever(vectorstore=memory, hypothesis_llm=writer, n_hypotheses=1, k=1)
    assert hyde_run(hyde)[0] == 1  # the parent's engine and sessions are loaded
    with ProcessPoolExecutor(1, mp_context=fork) as pool:
        count, hypotheses, fallback = pool.submit(hyde_run, hyde).result(timeout=300)
    print("forked hyde:", count, fallback, bool(hypotheses and hypotheses[0].strip()))
"""


def test_forked_workers_say_to_spawn_over_a_folder_and_load_their_own_engines(
    sample_store_dir: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", FORKED, str(sample_store_dir), QUESTION, *TEXTS],
        capture_output=True,
        text=True,
        timeout=600,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        },
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    refused = [line for line in done.stdout.splitlines() if line.startswith("refused:")]
    assert refused and "'spawn'" in refused[0], done.stdout
    assert "forked hyde: 1 None True" in done.stdout, done.stdout
