"""Shared fixtures: fake models for unit tests, real ones for integration tests.

Fakes and helpers live in tests/fakes.py; fixtures over a store live in the conftest of
tests/unit (a store of fake embeddings) and tests/integration (the sample PDF, real models).
"""

from __future__ import annotations

import os

import pytest

from tests.fakes import ROOT, SAMPLE_PDF, SHARED, FakeEmbeddings, make_pdf

os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
# Tests import onnxruntime and ragas themselves too; hyde_lc switches their telemetry off
# only on its own imports of them.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
os.environ.setdefault("ORT_TELEMETRY_DISABLED", "1")
os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")
# A hypothesis model configured in the caller's shell would turn HyDE on by default.
os.environ.pop("HYDE_LC_HYPOTHESIS_LLM", None)

# Names other test modules still import from here.
__all__ = ["ROOT", "SAMPLE_PDF", "SHARED", "FakeEmbeddings", "make_pdf"]


@pytest.fixture
def fake_embeddings() -> FakeEmbeddings:
    return FakeEmbeddings(size=32)
