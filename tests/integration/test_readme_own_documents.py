"""The README's recipe for your own documents and stores runs as written."""

import os
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

README = Path(__file__).resolve().parents[2] / "README.md"  # tests/integration/..


def recipe() -> str:
    text = README.read_text(encoding="utf-8")
    found = re.search(r"<!-- readme-own-documents[^>]*-->\n```python\n(.*?)```", text, re.S)
    assert found, "the README's own-documents recipe is missing"
    return found.group(1)


def test_the_recipe_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # "my-store" is made here
    exec(compile(recipe(), "README.md", "exec"), {"__name__": "readme"})
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("added") and out[0].endswith("lighthouses.pdf")
    assert "lexical" in out[1]  # the hybrid collection's BM25 side found something
    windows = [line.split() for line in out[2:]]
    assert len(windows) == 2 and all(int(end) >= int(start) for _, start, end in windows)
    assert (tmp_path / "my-store").is_dir() and os.listdir(tmp_path / "my-store")
