"""HypothesisCache: plain text in and out, and SQLiteCache files read without loads()."""

import importlib
import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from langchain_community.cache import SQLiteCache
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, Generation

from hyde_lc.hyde.hypotheses import llm_identity, sample_keys, write_hypotheses
from hyde_lc.hyde.hypothesis_cache import HypothesisCache, HypothesisCacheError
from hyde_lc.hyde.prompts import get_prompt
from hyde_lc.models.local_llm import LocalChatModel

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = ROOT / "benchmarks" / "results" / "hypotheses" / "scifact-qwen2.5-coder-1.5b.sqlite"
LLM = "[('_type', 'scripted'), ('temperature', 0.7)]"

Instantiated: list[str] = []


def test_text_round_trips_through_a_file(tmp_path):
    path = tmp_path / "h.sqlite"
    HypothesisCache(path).update("prompt", LLM, [Generation(text="Ünïcode passage 🌊.")])
    found = HypothesisCache(path).lookup("prompt", LLM)
    assert [g.text for g in found] == ["Ünïcode passage 🌊."]
    assert isinstance(found[0], ChatGeneration) and found[0].message.content == found[0].text
    assert HypothesisCache(path).lookup("prompt", "another llm") is None
    row = sqlite3.connect(path).execute("SELECT texts FROM hyde_lc_hypotheses").fetchone()
    assert json.loads(row[0]) == ["Ünïcode passage 🌊."]  # stored as plain JSON text


def test_write_hypotheses_uses_it(tmp_path):
    from langchain_core.language_models import FakeListChatModel

    calls: list[str] = []

    class Counted(FakeListChatModel):
        def _call(self, *args, **kwargs):
            calls.append("call")
            return super()._call(*args, **kwargs)

    cache = HypothesisCache(tmp_path / "h.sqlite")
    llm = Counted(responses=["A.", "B."])
    first = write_hypotheses(llm, ["q", "q"], cache=cache, config={"max_concurrency": 1})
    again = write_hypotheses(llm, ["q", "q"], cache=HypothesisCache(tmp_path / "h.sqlite"))
    assert first.texts == again.texts == ["A.", "B."]
    assert again.cache_hits == 2 and len(calls) == 2


def _legacy_file(path: Path, response: str, prompt: str = "prompt") -> Path:
    legacy = SQLiteCache(database_path=str(path))
    legacy.update(prompt, LLM, [ChatGeneration(message=AIMessage(content="ok"))])
    with sqlite3.connect(path) as db:
        db.execute("UPDATE full_llm_cache SET response = ? WHERE prompt = ?", (response, prompt))
    return path


class Trap:
    """Records every construction: a cache that builds stored objects would call it."""

    def __init__(self, **kwargs):
        Instantiated.append(repr(kwargs))


def test_a_crafted_row_is_never_instantiated(tmp_path, monkeypatch):
    import langchain_community.cache as community_cache
    import langchain_core.load as lc_package

    lc_load = importlib.import_module("langchain_core.load.load")

    def refuse(*args, **kwargs):
        raise AssertionError("the cache deserialised a stored object")

    for module in (lc_load, lc_package, community_cache):
        monkeypatch.setattr(module, "loads", refuse)
    monkeypatch.setattr(lc_load.Reviver, "__call__", refuse)
    payload = {
        "lc": 1,
        "type": "constructor",
        "id": ["tests", "unit", "test_hypothesis_cache", "Trap"],
        "kwargs": {"text": "looks like a passage"},
    }
    nested = {
        "lc": 1,
        "type": "constructor",
        "id": ["langchain", "schema", "output", "ChatGeneration"],
        "kwargs": {"text": {"lc": 1, "type": "secret", "id": ["OPENAI_API_KEY"]}},
    }
    path = _legacy_file(tmp_path / "old.sqlite", json.dumps(payload))
    _legacy_file(path, json.dumps(nested), prompt="nested")
    cache = HypothesisCache(path)
    assert cache.lookup("prompt", LLM) is None  # another class: a miss, not an object
    assert cache.lookup("nested", LLM) is None  # a secret where text should be: a miss
    assert Instantiated == []


def test_files_written_by_sqlitecache_are_read(tmp_path):
    path = tmp_path / "old.sqlite"
    SQLiteCache(database_path=str(path)).update(
        "prompt", LLM, [ChatGeneration(message=AIMessage(content="Old passage."))]
    )
    before = path.read_bytes()
    cache = HypothesisCache(path)
    assert [g.text for g in cache.lookup("prompt", LLM)] == ["Old passage."]
    assert path.read_bytes() == before  # reading leaves the file untouched


def test_the_published_benchmark_cache_reads_as_text(tmp_path):
    copy = tmp_path / "published.sqlite"
    shutil.copy(PUBLISHED, copy)
    writer = LocalChatModel(
        model_path="unused.gguf", model_name="qwen2.5-coder-1.5b", temperature=0.7, max_tokens=256
    )
    cache = HypothesisCache(copy)
    identity = llm_identity(writer)  # unchanged, or every published hypothesis is a miss
    generic = sample_keys(
        [get_prompt("generic").render("1 in 5 million in UK have abnormal PrP positivity.")]
    )
    assert cache.texts(generic[0], identity) == [
        "1 in 5 million in the UK has abnormal PrP positivity."
    ]
    claim = sample_keys(
        [get_prompt("scifact").render("0-dimensional biomaterials show inductive properties.")]
    )
    text = cache.texts(claim[0], identity)[0]
    assert text.startswith("Certainly! Below is a scientific paper passage that refutes the claim")
    rows = sqlite3.connect(copy).execute("SELECT prompt, llm FROM full_llm_cache").fetchall()
    assert len(rows) >= 1618 and all(cache.texts(p, llm) for p, llm in rows)


def test_a_file_that_is_not_sqlite_is_refused_clearly(tmp_path):
    bad = tmp_path / "notes.txt"
    bad.write_text("not a database\n" * 100)
    with pytest.raises(
        HypothesisCacheError, match=r"cannot use .*notes\.txt as the hypothesis cache"
    ):
        HypothesisCache(bad)
    assert bad.read_text() == "not a database\n" * 100
