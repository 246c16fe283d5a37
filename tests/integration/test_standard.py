"""LangChain's standard retriever suite, run on `HyDERetriever` with real components.

One real Chroma collection (the bundled lighthouse PDF, embedded with the local
MiniLM ONNX model) is built once for the module; each test then only constructs a
retriever over it, with the real SmolLM2-135M (llama.cpp) writing the hypotheses.

The suite (``langchain_tests.integration_tests.RetrieversIntegrationTests``) reads the
constructor parameters from a *property*, not a fixture, so an autouse fixture hands
the module's store and LLM to the test instance before the suite's ``retriever``
fixture (or a test building retrievers itself) reads them.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_chroma import Chroma
from langchain_core.language_models import BaseLanguageModel
from langchain_tests.integration_tests import RetrieversIntegrationTests

from hyde_lc import (
    HyDERetriever,
    NeighborExpandingRetriever,
    ingest_paths,
    load_embeddings,
    load_llm,
    open_store,
)
from tests.conftest import SAMPLE_PDF

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def lighthouse_store(tmp_path_factory: pytest.TempPathFactory) -> Chroma:
    """A persistent Chroma collection holding the sample PDF, built once per module."""
    store = open_store(
        tmp_path_factory.mktemp("chroma"),
        collection="standard_suite",
        embeddings=load_embeddings("local:minilm"),
    )
    ingest_paths([SAMPLE_PDF], store, progress=False)
    # The k tests ask for up to 3 documents: the collection must hold more.
    assert store._collection.count() > 3
    return store


@pytest.fixture(scope="module")
def hypothesis_llm() -> BaseLanguageModel:
    """The real tiny local writer, capped at a few tokens to keep the module fast.

    One llama.cpp thread: with one thread per core (the default) a 48-token reply
    took 0.5-60 s on a busy 2-core machine, against a steady 0.4 s with one thread.
    """
    return load_llm("local:smollm2-135m", role="hypothesis", max_tokens=48, threads=1)


class _HyDEStandardTests(RetrieversIntegrationTests):
    """Shared wiring; subclasses set the HyDE options under test in ``hyde_params``."""

    hyde_params: dict[str, Any] = {}  # noqa: RUF012 - read-only class configuration
    store: Chroma
    llm: BaseLanguageModel

    @pytest.fixture(autouse=True)
    def _bind_components(self, lighthouse_store: Chroma, hypothesis_llm: BaseLanguageModel) -> None:
        self.store = lighthouse_store
        self.llm = hypothesis_llm

    @property
    def retriever_constructor(self) -> type[HyDERetriever]:
        return HyDERetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {
            "vectorstore": self.store,
            "hypothesis_llm": self.llm,
            "k": 2,
            **self.hyde_params,
        }

    @property
    def retriever_query_example(self) -> str:
        return "Who invented the Fresnel lens used in lighthouses?"

    def test_hypotheses_used(self, retriever: HyDERetriever) -> None:
        """Not in the standard suite: it passes even if every call falls back to the query."""
        details = retriever.retrieve_with_details(self.retriever_query_example)
        assert details.fallback is None
        assert len(details.hypotheses) == self.hyde_params["n_hypotheses"]
        assert len(details.documents) == 2
        for doc in details.documents:
            assert doc.metadata["retrieval_mode"] == f"hyde:{self.hyde_params['fusion']}"
            assert "hyde_fallback" not in doc.metadata


class TestHyDEMeanStandard(_HyDEStandardTests):
    """The paper's setting: one hypothesis, mean of query and hypothesis embeddings."""

    hyde_params = {"n_hypotheses": 1, "fusion": "mean"}  # noqa: RUF012


class TestHyDERRFStandard(_HyDEStandardTests):
    """Two hypotheses, one search each plus the query's, fused by reciprocal rank."""

    hyde_params = {"n_hypotheses": 2, "fusion": "rrf"}  # noqa: RUF012


class TestHyDEConcatStandard(_HyDEStandardTests):
    """Query and hypothesis embedded as one concatenated passage."""

    hyde_params = {"n_hypotheses": 1, "fusion": "concat"}  # noqa: RUF012


class TestNeighborExpandingStandard(RetrieversIntegrationTests):
    """The standard suite for NeighborExpandingRetriever over a plain Chroma retriever.

    A deterministic base: the suite asserts exactly k documents, and with a sampled HyDE
    hypothesis the ranking occasionally chains windows across this one 27-chunk document
    (fewer, larger windows, by design). HyDE as the base is tested in test_neighbors.py and
    through the CLI.
    """

    @pytest.fixture(autouse=True)
    def _bind_store(self, lighthouse_store: Chroma) -> None:
        self.store = lighthouse_store

    @property
    def retriever_constructor(self) -> type[NeighborExpandingRetriever]:
        return NeighborExpandingRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {
            "base_retriever": self.store.as_retriever(),
            "vectorstore": self.store,
            "k": 2,
            "window": 1,
        }

    @property
    def retriever_query_example(self) -> str:
        return "How did keepers look after the lamp?"
