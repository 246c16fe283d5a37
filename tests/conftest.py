"""Shared fixtures: fake models for unit tests, real ones for integration tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding

os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_PDF = ROOT / "hyde_lc" / "sample" / "lighthouses.pdf"
SHARED = ROOT.parent / "shared"


class FakeEmbeddings(DeterministicFakeEmbedding):
    """Deterministic hash embeddings with a model id, so stores can record it."""

    model_id: str = "fake:hash-32"


@pytest.fixture
def fake_embeddings() -> FakeEmbeddings:
    return FakeEmbeddings(size=32)


def make_pdf(path: Path, pages: list[str]) -> Path:
    """Write a real PDF (via fpdf2) with one text page per item ('' = blank page)."""
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_font("Helvetica", size=11)
    for text in pages:
        pdf.add_page()
        if text:
            pdf.multi_cell(0, 6, text)
    pdf.output(str(path))
    return path
