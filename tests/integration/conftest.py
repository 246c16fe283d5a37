"""Fixtures for integration tests: the bundled sample PDF ingested once with real models."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.soak import CHROMA, ChromaServer, start_chroma_server
from hyde_lc.ingest.files import ingest_paths
from hyde_lc.store.vectorstore import HydeChroma, open_store
from tests.fakes import SAMPLE_PDF, tree_digest

# llama.cpp on every core stalls when the machine has other work (BENCHMARKS.md, "llama.cpp
# threads and polling on 2 cores"), and CI shares its machine: the real local models run on
# one thread here, in this process and in the commands it starts, unless the shell says so.
os.environ.setdefault("HYDE_LC_THREADS", "1")


@pytest.fixture(scope="session")
def sample_store_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A store folder holding hyde_lc/sample/lighthouses.pdf, embedded with local:minilm-dq.

    Built once per test session with the default ingest settings and shared by every test
    that asks for it: tests read it and never write to it (checked when the session ends).
    A test that writes makes its own store.
    """
    folder = tmp_path_factory.mktemp("sample-store")
    report = ingest_paths([SAMPLE_PDF], open_store(folder), progress=False)
    assert [f.status for f in report.files] == ["added"]
    before = tree_digest(folder)
    yield folder
    assert tree_digest(folder) == before, "a test wrote to the shared sample store"


@pytest.fixture(scope="session")
def sample_store(sample_store_dir: Path) -> HydeChroma:
    """The shared sample store, opened with the model it records (read it, never write to it)."""
    return open_store(sample_store_dir)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ChromaServer]:
    """A real ``chroma run`` of this test's own, stopped at its end."""
    if not Path(CHROMA).exists():
        pytest.skip("the `chroma` command (chromadb's server) is not installed")
    running = start_chroma_server(tmp_path / "server-data")
    yield running
    running.stop()
