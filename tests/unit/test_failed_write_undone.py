"""A Chroma call that fails after Chroma logged it is undone (`Write._undo`).

Embedded Chroma logs a write before applying it; when applying fails (a full disk), it
applies the write later. The fake below does the same: it lets the write through, then
raises. The undo must leave the collection as it was: records the call created are
gone, records it replaced have their old text, metadata and vector back.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from hyde_lc.store.collection import HybridCollection, Write
from hyde_lc.store.vectorstore import open_store
from tests.fakes import FakeEmbeddings, chroma_of


class _LoggedThenFailed:
    """A chromadb collection whose upsert and update are applied, then report a failure."""

    def __init__(self, real: Any) -> None:
        self.real = real

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.real, name)
        if name not in ("upsert", "update"):
            return attr

        def applied_then_failed(**kwargs: Any) -> None:
            attr(**kwargs)
            raise RuntimeError("Error in compaction: Failed to apply logs to the hnsw segment")

        return applied_then_failed


@pytest.fixture
def store(tmp_path):
    st = open_store(tmp_path / "store", embeddings=FakeEmbeddings(size=32))
    st.add_texts(["the old lamp text"], metadatas=[{"source": "a", "kept": 1}], ids=["old"])
    return st


def _state(store) -> dict[str, Any]:
    got = chroma_of(store).get(include=["documents", "metadatas", "embeddings"])
    return {
        i: (text, {k: v for k, v in (meta or {}).items()}, np.round(vector, 6).tolist())
        for i, text, meta, vector in zip(
            got["ids"], got["documents"], got["metadatas"], got["embeddings"], strict=True
        )
    }


@pytest.mark.parametrize("how", ["upsert", "update"])
def test_a_write_failing_after_chroma_logged_it_is_undone(store, monkeypatch, how) -> None:
    before = _state(store)
    ids = ["old", "new"] if how == "upsert" else ["old"]
    monkeypatch.setattr(
        Write, "collection", property(lambda self: _LoggedThenFailed(store.existing_collection()))
    )
    with pytest.raises(RuntimeError, match="compaction"), HybridCollection.of(store).writing() as w:
        getattr(w, how)(
            ids,
            np.ones((len(ids), 32), np.float32),
            [{"source": "b", "added": "x"}] * len(ids),
            ["a replacing text"] * len(ids),
        )
    monkeypatch.undo()
    assert _state(store) == before  # the old record's sequence number too
