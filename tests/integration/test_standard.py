"""LangChain's standard retriever suite on hyde_lc's retrievers, over several stores.

``langchain_tests.integration_tests.RetrieversIntegrationTests`` runs on:

* `HyDERetriever` over a LangChain ``InMemoryVectorStore`` and over a collection made with
  plain ``langchain_chroma.Chroma.from_documents`` (embeddings passed, and taken from the
  store), and over a hyde_lc collection (hybrid dense + BM25 by default; also ``rrf`` and
  ``concat`` fusion);
* `NeighborExpandingRetriever` over each of those stores, and over a store whose chunks
  lack both hyde_lc's ids and ``start_index``, where it returns the hits unexpanded with a
  note (its documented fallback).

``langchain_tests.integration_tests.VectorStoreIntegrationTests`` runs on the store
`open_store` returns (`HydeChroma`), sync and async, ``get_by_ids`` included: a fresh
folder per test, embedded with the suite's own fake embeddings.

Real components throughout the retriever suite: the chunks of the bundled lighthouse PDF
embedded with the local MiniLM ONNX model (the session's sample store, read only; the
other stores hold copies of its chunks), and the real SmolLM2-135M (llama.cpp) writing
hypotheses.

The retriever suite reads the constructor parameters from a *property*, not a fixture, so
an autouse fixture hands the module's components to the test instance before the suite's
``retriever`` fixture (or a test building retrievers itself) reads them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseLanguageModel
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore
from langchain_tests.integration_tests import (
    RetrieversIntegrationTests,
    VectorStoreIntegrationTests,
)

from hyde_lc import (
    HyDERetriever,
    NeighborExpandingRetriever,
    load_embeddings,
    load_llm,
    open_store,
)
from hyde_lc.store.vectorstore import HydeChroma

pytestmark = pytest.mark.integration

QUERY = "Who invented the Fresnel lens used in lighthouses?"


@pytest.fixture(scope="module")
def minilm() -> Embeddings:
    return load_embeddings("local:minilm")


@pytest.fixture(scope="module")
def hypothesis_llm() -> BaseLanguageModel:
    """The real tiny local writer, capped at a few tokens to keep the module fast.

    One llama.cpp thread: with one thread per core (the default) a 48-token reply
    took 0.5-60 s on a busy 2-core machine, against a steady 0.4 s with one thread.
    """
    return load_llm("local:smollm2-135m", role="hypothesis", max_tokens=48, threads=1)


@pytest.fixture(scope="module")
def chunks(sample_store: HydeChroma) -> list[Document]:
    """The sample PDF's chunks as hyde_lc stored them (ids and metadata included)."""
    got = sample_store.get(include=["documents", "metadatas"])
    docs = [
        Document(id=i, page_content=text, metadata=meta)
        for i, text, meta in zip(got["ids"], got["documents"], got["metadatas"], strict=True)
    ]
    assert len(docs) > 3  # the suite asks for up to 3 documents
    return docs


@pytest.fixture(scope="module")
def memory_store(chunks: list[Document], minilm: Embeddings) -> InMemoryVectorStore:
    return InMemoryVectorStore.from_documents(chunks, minilm)


@pytest.fixture(scope="module")
def plain_chroma_dir(
    chunks: list[Document], minilm: Embeddings, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """A collection made by langchain_chroma alone, as a LangChain user would make it."""
    folder = tmp_path_factory.mktemp("plain-chroma")
    Chroma.from_documents(
        chunks,
        minilm,
        ids=[d.id for d in chunks],
        collection_name="plain",
        persist_directory=str(folder),
    )
    return folder


@pytest.fixture(scope="module")
def plain_chroma(plain_chroma_dir: Path, minilm: Embeddings) -> Chroma:
    """The plain collection, opened with its embedding function."""
    return Chroma("plain", minilm, persist_directory=str(plain_chroma_dir))


@pytest.fixture(scope="module")
def plain_chroma_bare(plain_chroma_dir: Path) -> Chroma:
    """The plain collection, opened without an embedding function."""
    return Chroma("plain", persist_directory=str(plain_chroma_dir))


@pytest.fixture(scope="module")
def anonymous_store(chunks: list[Document], minilm: Embeddings) -> InMemoryVectorStore:
    """The chunks numbered, but without hyde_lc's ids (chunk_size, doc_id...) nor the
    ``start_index`` windows can also be built from."""
    kept = ("source", "page", "chunk_index")
    docs = [
        Document(page_content=d.page_content, metadata={k: d.metadata[k] for k in kept})
        for d in chunks
    ]
    return InMemoryVectorStore.from_documents(docs, minilm)


STORES = ("memory_store", "plain_chroma", "plain_chroma_bare", "sample_store", "anonymous_store")


class _Components(RetrieversIntegrationTests):
    """Binds the module's stores, embeddings and writer to the test instance."""

    stores: dict[str, VectorStore]
    minilm: Embeddings
    llm: BaseLanguageModel

    @pytest.fixture(autouse=True)
    def _bind_components(
        self, request: pytest.FixtureRequest, minilm: Embeddings, hypothesis_llm: BaseLanguageModel
    ) -> None:
        self.stores = {name: request.getfixturevalue(name) for name in self.store_names()}
        self.minilm = minilm
        self.llm = hypothesis_llm

    def store_names(self) -> tuple[str, ...]:
        return ()

    @property
    def retriever_query_example(self) -> str:
        return QUERY


class _HyDEStandardTests(_Components):
    """HyDERetriever over ``store``; ``pass_embeddings`` passes MiniLM explicitly."""

    store: ClassVar[str]
    pass_embeddings: ClassVar[bool] = False
    hyde_params: ClassVar[dict[str, Any]] = {}
    label: ClassVar[str]

    def store_names(self) -> tuple[str, ...]:
        return (self.store,)

    @property
    def retriever_constructor(self) -> type[HyDERetriever]:
        return HyDERetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        params: dict[str, Any] = {
            "vectorstore": self.stores[self.store],
            "hypothesis_llm": self.llm,
            "k": 2,
            **self.hyde_params,
        }
        if self.pass_embeddings:
            params["embeddings"] = self.minilm
        return params

    def test_hypotheses_used(self, retriever: HyDERetriever) -> None:
        """Not in the standard suite: it passes even if every call falls back to the query."""
        details = retriever.retrieve_with_details(QUERY)
        assert details.fallback is None
        assert len(details.hypotheses) == self.hyde_params.get("n_hypotheses", 1)
        assert details.label == self.label
        assert len(details.documents) == 2
        for doc in details.documents:
            assert doc.metadata["retrieval_mode"] == self.label
            assert "hyde_fallback" not in doc.metadata
            assert "Fresnel" in doc.page_content or "lens" in doc.page_content.lower()


class TestHyDEInMemoryStandard(_HyDEStandardTests):
    """A LangChain InMemoryVectorStore, embeddings taken from the store."""

    store = "memory_store"
    label = "hyde"


class TestHyDEInMemoryEmbeddingsPassedStandard(_HyDEStandardTests):
    store = "memory_store"
    pass_embeddings = True
    label = "hyde"


class TestHyDEPlainChromaStandard(_HyDEStandardTests):
    """A collection made by langchain_chroma, opened with its embedding function."""

    store = "plain_chroma"
    label = "hyde"


class TestHyDEPlainChromaEmbeddingsPassedStandard(_HyDEStandardTests):
    """The same collection opened without an embedding function: embeddings passed."""

    store = "plain_chroma_bare"
    pass_embeddings = True
    label = "hyde"


class TestHyDECollectionStandard(_HyDEStandardTests):
    """A hyde_lc collection: dense + BM25 (its lexical index) by default."""

    store = "sample_store"
    label = "hybrid-hyde"


class TestHyDECollectionRRFStandard(_HyDEStandardTests):
    """Two hypotheses, one dense search each plus the query's, fused by reciprocal rank."""

    store = "sample_store"
    hyde_params: ClassVar[dict[str, Any]] = {"n_hypotheses": 2, "fusion": "rrf"}
    label = "hybrid-hyde(fusion=rrf,n=2)"


class TestHyDECollectionConcatStandard(_HyDEStandardTests):
    """Query and hypothesis embedded as one concatenated passage."""

    store = "sample_store"
    hyde_params: ClassVar[dict[str, Any]] = {"fusion": "concat"}
    label = "hybrid-hyde(fusion=concat)"


class _NeighborStandardTests(_Components):
    """NeighborExpandingRetriever over a deterministic base on ``store``.

    A deterministic base: the suite asserts exactly k documents, and with a sampled HyDE
    hypothesis the ranking occasionally chains windows across this one 27-chunk document
    (fewer, larger windows, by design). HyDE as the base is tested in test_neighbors.py and
    through the CLI.
    """

    store: ClassVar[str]
    expanded: ClassVar[bool] = True

    def store_names(self) -> tuple[str, ...]:
        return (self.store,)

    @property
    def retriever_constructor(self) -> type[NeighborExpandingRetriever]:
        return NeighborExpandingRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"base_retriever": self.stores[self.store].as_retriever(), "k": 2, "window": 1}

    @property
    def retriever_query_example(self) -> str:
        return "How did keepers look after the lamp?"

    def test_windows_or_the_documented_fallback(self, retriever: NeighborExpandingRetriever):
        """Not in the standard suite: windows where the store allows, else noted bare hits."""
        docs = retriever.invoke(self.retriever_query_example)
        assert len(docs) == 2
        for doc in docs:
            if self.expanded:
                assert doc.metadata["window_end"] > doc.metadata["window_start"]
                assert "neighbors_note" not in doc.metadata
            else:
                assert "lacks start_index" in doc.metadata["neighbors_note"]


class TestNeighborInMemoryStandard(_NeighborStandardTests):
    store = "memory_store"


class TestNeighborPlainChromaStandard(_NeighborStandardTests):
    store = "plain_chroma"


class TestNeighborCollectionStandard(_NeighborStandardTests):
    store = "sample_store"


class TestNeighborFallbackStandard(_NeighborStandardTests):
    """Chunks without hyde_lc's ids nor start_index: the hits come back unexpanded, noted."""

    store = "anonymous_store"
    expanded = False


class TestHydeChromaVectorStoreStandard(VectorStoreIntegrationTests):
    """The standard VectorStore suite on `open_store`'s store, as langchain-chroma runs it.

    Each test gets a new folder: `open_store` creates nothing, the suite's first write
    makes the collection and records the suite's fake embedding model in it. Sync and
    async methods (LangChain's async defaults run the sync ones in an executor) and
    ``get_by_ids`` are all supported, and enabled explicitly below.
    """

    @pytest.fixture
    def vectorstore(self, tmp_path: Path) -> Iterator[HydeChroma]:
        store = open_store(tmp_path / "store", embeddings=self.get_embeddings())
        assert isinstance(store, HydeChroma)
        yield store

    @property
    def has_sync(self) -> bool:
        return True

    @property
    def has_async(self) -> bool:
        return True

    @property
    def has_get_by_ids(self) -> bool:
        return True
