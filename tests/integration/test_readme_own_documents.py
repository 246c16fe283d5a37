"""The README's recipe for your own documents and stores runs as written."""

import os

import pytest

from tests.readme import own_block

pytestmark = pytest.mark.integration


def test_the_recipe_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # "my-store" is made here
    exec(compile(own_block(__file__), "README.md", "exec"), {"__name__": "readme"})
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("added") and out[0].endswith("lighthouses.pdf")
    assert "lexical" in out[1]  # the hybrid collection's BM25 side found something
    windows = [line.split() for line in out[2:]]
    assert len(windows) == 2 and all(int(end) >= int(start) for _, start, end in windows)
    assert (tmp_path / "my-store").is_dir() and os.listdir(tmp_path / "my-store")
