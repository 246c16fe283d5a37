"""The README's Python examples run, in order, as a user would paste them.

Every ```python block of README.md is executed in one namespace (top-level ``await``
allowed, as in Jupyter), in a fresh folder holding a small ``reports/`` folder, with the
small local model standing in for both LLM roles (short answers) so that the test needs no
1.5 GB of weights. A block preceded by ``<!-- ... tested: <test file> -->`` has a test of
its own that also checks what it prints; it is left to that test. A renamed function, a
wrong signature or a stale example fails here.
"""

from __future__ import annotations

import ast
import asyncio
import shutil

import pytest

from hyde_lc.models import loading as models
from tests.fakes import ROOT, SAMPLE_PDF
from tests.readme import python_blocks

pytestmark = pytest.mark.integration

SMALL_MODEL = "local:smollm2-135m"


def test_the_readme_has_python_examples_and_their_own_tests_exist():
    blocks = python_blocks()
    assert len(blocks) >= 6
    for line, _, own_test in blocks:
        assert own_test is None or (ROOT / own_test).is_file(), f"README.md:{line}: {own_test}"


def test_every_python_example_in_the_readme_runs(tmp_path, monkeypatch):
    reports = tmp_path / "reports"
    reports.mkdir()
    shutil.copy(SAMPLE_PDF, reports / SAMPLE_PDF.name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HYDE_LC_HYPOTHESIS_LLM", SMALL_MODEL)
    monkeypatch.setenv("HYDE_LC_ANSWER_LLM", SMALL_MODEL)
    monkeypatch.setitem(models.ROLE_MAX_TOKENS, "answer", 48)  # short texts: a faster test
    monkeypatch.setitem(models.ROLE_MAX_TOKENS, "hypothesis", 32)
    namespace: dict = {"__name__": "readme"}
    for line, source, own_test in python_blocks():
        if own_test is not None:
            continue
        code = compile(source, f"README.md:{line}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        try:
            outcome = eval(code, namespace)  # our own README, as a user runs it
            if asyncio.iscoroutine(outcome):
                asyncio.run(outcome)
        except Exception as exc:  # name the block: the traceback's file is README.md:<line>
            pytest.fail(f"the README example at line {line} failed: {exc!r}")
