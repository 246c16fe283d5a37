"""The README's Python examples run, in order, as a user would paste them.

Every ```python block of README.md is executed in one namespace (top-level ``await``
allowed, as in Jupyter), in a fresh folder holding a small ``reports/`` folder, with the
small local model standing in for both LLM roles so that the test needs no 1.5 GB of
weights. A renamed function, a wrong signature or a stale example fails here.
"""

from __future__ import annotations

import ast
import asyncio
import re
import shutil
from pathlib import Path

import pytest

from tests.fakes import SAMPLE_PDF

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
SMALL_MODEL = "local:smollm2-135m"


def python_blocks() -> list[tuple[int, str]]:
    """Each block with the README line it starts on."""
    text = README.read_text("utf-8")
    return [(text[: m.start()].count("\n") + 1, m.group(1)) for m in BLOCK.finditer(text)]


def test_the_readme_has_python_examples():
    assert len(python_blocks()) >= 4


def test_every_python_example_in_the_readme_runs(tmp_path, monkeypatch):
    reports = tmp_path / "reports"
    reports.mkdir()
    shutil.copy(SAMPLE_PDF, reports / SAMPLE_PDF.name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HYDE_LC_HYPOTHESIS_LLM", SMALL_MODEL)
    monkeypatch.setenv("HYDE_LC_ANSWER_LLM", SMALL_MODEL)
    namespace: dict = {"__name__": "readme"}
    for line, source in python_blocks():
        code = compile(
            source, f"README.md:{line}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        )
        try:
            outcome = eval(code, namespace)  # noqa: S307  (our own README)
            if asyncio.iscoroutine(outcome):
                asyncio.run(outcome)
        except Exception as exc:  # name the block: the traceback's file is README.md:<line>
            pytest.fail(f"the README example at line {line} failed: {exc!r}")
