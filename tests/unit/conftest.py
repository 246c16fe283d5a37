"""Fixtures for unit tests: a real on-disk Chroma store of short topics, fake embeddings."""

from __future__ import annotations

import pytest

from hyde_lc.ingest.files import ingest_paths
from hyde_lc.store.vectorstore import HydeChroma, open_store
from tests.fakes import TOPICS, FakeEmbeddings


@pytest.fixture
def store(tmp_path, fake_embeddings: FakeEmbeddings) -> HydeChroma:
    """A hyde_lc collection holding each of TOPICS as one file (t0.txt ... t7.txt)."""
    folder = tmp_path / "docs"
    folder.mkdir()
    for i, text in enumerate(TOPICS):
        (folder / f"t{i}.txt").write_text(text)
    st = open_store(tmp_path / "store", embeddings=fake_embeddings)
    ingest_paths([folder], st, progress=False)
    return st
