"""A large text file is ingested in bounded memory: about one segment of text at a time.

Real embedded Chroma on disk; the embeddings are a fast stand-in (no model), since what
is measured is what ingestion itself holds (tracemalloc: Python allocations, which is
where the text, the chunks and the vectors live).
"""

from __future__ import annotations

import random
import tracemalloc
from pathlib import Path

import pytest
from langchain_core.embeddings import Embeddings

from hyde_lc import collection_info, ingest_paths, open_store
from hyde_lc.ingest.reading import SEGMENT_CHARS

pytestmark = pytest.mark.integration

WORDS = [
    "lamp", "lens", "keeper", "tower", "reef", "beacon", "flash", "signal", "harbour", "storm",
    "fog", "horn", "prism", "oil",
]  # fmt: skip


class FastEmbeddings(Embeddings):
    """Eight-number vectors from the text's length: instant, deterministic."""

    model_id = "fake:fast-8"
    dimension = 8

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        n = len(text)
        return [1.0, float(n % 7), float(n % 11), float(n % 13), 0.5, float(n % 3), 0.25, 1.0]


def write_text(path: Path, megabytes: int) -> Path:
    """Numbered paragraphs of 20-120 words, ``megabytes`` of them."""
    rng = random.Random(7)
    pool = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 120))) for _ in range(500)]
    with path.open("w", encoding="utf-8") as fh:
        written, i = 0, 0
        while written < megabytes * 2**20:
            para = f"{i}. {pool[i % len(pool)]}.\n\n"
            fh.write(para)
            written += len(para)
            i += 1
    return path


def test_a_30_mb_file_is_ingested_holding_about_one_segment(tmp_path):
    path = write_text(tmp_path / "big.txt", 30)
    size = path.stat().st_size
    store = open_store(tmp_path / "store", embeddings=FastEmbeddings())
    tracemalloc.start()
    try:
        report = ingest_paths([path], store, chunk_size=2000, chunk_overlap=200, progress=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    (result,) = report.files
    assert result.status == "added" and result.embedded == result.chunks > 10_000
    info = collection_info(store)
    assert info["chunks"] == result.chunks and info["incomplete"] == []
    # The segment being split (its text and its chunks, while the next is read), one
    # write's chunks, Chroma's copies of them: a few segments, whatever the file size.
    # Holding the whole file's text, chunks and vectors took about 13x its size.
    bound = 3 * SEGMENT_CHARS + 16 * 2**20
    assert peak < bound, f"peak {peak / 2**20:.1f} MB for a {size / 2**20:.0f} MB file"
    # Less than the file's own text, which holding it whole would take (ASCII: a byte per
    # character). Run alone the peak is about 22 MB for this 30 MB file; within the whole
    # suite (set-up done once per process already counted) a little less.
    assert peak < size
