import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes import default_embedding_id, tree_digest

pytestmark = pytest.mark.integration
HYDE_LC = str(Path(sys.executable).parent / "hyde-lc")
QUESTION = "Who designed the Pharos of Alexandria?"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    home = tmp_path_factory.mktemp("cli")
    return {
        **os.environ,
        "HYDE_LC_STORE": str(home / "store"),
        "HYDE_LC_HYPOTHESIS_LLM": "local:smollm2-135m",
        "HYDE_LC_ANSWER_LLM": "local:smollm2-135m",
        "HOME_FOR_TEST": str(home),
    }


def run(env, *args, cwd=None):
    return subprocess.run(
        [HYDE_LC, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def ingested(env):
    first = run(env, "ingest", "--sample")
    assert first.returncode == 0, first.stderr
    return first


def test_ingest_sample_then_again_is_unchanged(env, ingested):
    assert "added" in ingested.stdout and "lighthouses.pdf" in ingested.stdout
    again = run(env, "ingest", "--sample", "--json")
    assert again.returncode == 0, again.stderr
    (file,) = json.loads(again.stdout)["files"]
    assert file["status"] == "unchanged"


def test_info_json(env, ingested):
    out = run(env, "info", "--json")
    info = json.loads(out.stdout)
    assert info["embedding_model"] == default_embedding_id() and info["embedding_dimension"] == 384
    assert info["chunks"] == info["documents"][0]["chunks"] > 20


def test_ask_hyde_json_record(env, ingested):
    out = run(env, "ask", QUESTION, "--json", "--k", "3")
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout)
    assert record["label"] == record["mode"] == "hybrid-hyde" and record["fallback"] is None
    assert record["lexical"] is True and all(d["found_by"] for d in record["documents"])
    assert len(record["hypotheses"]) == 1 and record["hypotheses"][0]
    assert len(record["documents"]) == 3
    assert all(d["citation"].startswith("lighthouses.pdf, p") for d in record["documents"])
    assert record["answer"] and "context_note" in record and "dropped_documents" in record
    assert record["sources"] or "enough information" in record["answer"].lower()
    assert all("lighthouses.pdf, p" in source for source in record["sources"])
    assert {"hypothesis_s", "embedding_s", "search_s", "answer_s", "total_s"} <= set(
        record["timings"]
    )
    assert record["models"]["hypothesis_llm"] == "local:smollm2-135m"


def test_ask_standard_mode(env, ingested):
    out = run(env, "ask", QUESTION, "--mode", "standard", "--json", "--no-answer")
    record = json.loads(out.stdout)
    assert record["label"] == "hybrid" and record["hypotheses"] == []
    dense = run(env, "ask", QUESTION, "--mode", "standard", "--lexical", "off", "--json",
                "--no-answer")  # fmt: skip
    assert json.loads(dense.stdout)["label"] == "standard"
    assert record["answer"] is None and record["models"]["hypothesis_llm"] is None
    assert record["documents"][0]["page"] == 0  # PyPDFLoader's convention: from 0
    assert record["documents"][0]["page_label"] == "1"  # as printed


def test_ask_text_output_shows_every_stage(env, ingested):
    out = run(env, "ask", QUESTION, "--n-hypotheses", "2", "--fusion", "rrf")
    assert out.returncode == 0, out.stderr
    for heading in (
        "Hypothetical document 1",
        "Hypothetical document 2",
        "Retrieved chunks",
        "--- Answer",
        "--- Timings",
    ):
        assert heading in out.stdout
    assert "Mode: hybrid-hyde(fusion=rrf,n=2)" in out.stdout
    assert out.stdout.index("Hypothetical document 1") < out.stdout.index("--- Answer")
    assert "found by " in out.stdout


def test_ask_with_windows_and_settings(env, ingested):
    out = run(
        env,
        "ask",
        QUESTION,
        "--mode",
        "standard",
        "--window",
        "1",
        "--k",
        "2",
        "--order",
        "document",
        "--json",
        "--no-answer",
    )
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout)
    assert record["settings"]["window"] == 1 and record["settings"]["order"] == "document"
    docs = record["documents"]
    assert len(docs) == 2
    assert all(d["window_start"] <= d["hit_chunk_index"] <= d["window_end"] for d in docs)
    assert docs[0]["window_start"] < docs[1]["window_start"]  # reading order
    assert "expansion_s" in record["timings"]
    text = run(env, "ask", QUESTION, "--mode", "standard", "--window", "1", "--no-answer")
    assert "--- Retrieved windows ---" in text.stdout and ", hit " in text.stdout


def test_hypothesis_cache_makes_the_second_ask_reuse_hypotheses(env, ingested, tmp_path):
    args = [
        "ask",
        QUESTION,
        "--no-answer",
        "--json",
        "--hypotheses-only",
        "--n-hypotheses",
        "2",
        "--hypothesis-cache",
        str(tmp_path / "hyp" / "cache.sqlite"),
    ]
    first, second = (json.loads(run(env, *args).stdout) for _ in range(2))
    assert first["cache_hits"] == 0 and second["cache_hits"] == 2
    assert second["hypotheses"] == first["hypotheses"]
    assert second["settings"]["include_query"] is False


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ask", QUESTION, "--fusion", "max"], "choose from 'mean', 'concat', 'rrf'"),
        (["ask", QUESTION, "--prompt", "poem"], "invalid choice: 'poem'"),
        (["ask", QUESTION, "--k", "0"], "must be at least 1"),
        (["ask", QUESTION, "--window", "-1"], "must be 0 or more"),
        (["ask", "   "], "the question is empty"),
        (["ask", QUESTION, "--hypothesis-llm", "local:gpt-9"], "unknown local model"),
        (["ingest", "/no/such/file.pdf"], "no such file"),
        (
            ["ask", QUESTION, "--embeddings", "openai:text-embedding-3-small"],
            f"was built with embedding model '{default_embedding_id()}'",
        ),
        (["ask", QUESTION, "--mode", "standard", "--timeout", "nan"], "expected a finite number"),
        (["ask", QUESTION, "--mode", "standard", "--timeout", "inf"], "expected a finite number"),
        (["ask", QUESTION, "--timeout", "1e300"], "--timeout: must be at most 86400"),
        (["ingest", "--sample", "--max-file-mb", "nan"], "expected a finite number"),
        (["ingest", "--sample", "--max-file-mb", "inf"], "expected a finite number"),
        (
            ["ask", QUESTION, "--mode", "standard", "--k", "100000000000000000000"],
            "--k: must be at most 10000 (a k above the collection's size already returns",
        ),
        (
            ["ask", QUESTION, "--mode", "standard", "--n-hypotheses", "65"],
            "--n-hypotheses: must be at most 64",
        ),
        (["ask", QUESTION, "--store", ""], "--store: is empty: give a folder"),
        (["ask", QUESTION, "--chroma-url", ""], "--chroma-url: is empty"),
        (["ingest", "--sample", "--collection", ""], "--collection: is empty"),
        (["ask", QUESTION, "--answer-llm", " "], "--answer-llm: is empty"),
        (
            ["ask", QUESTION, "--mode", "standard", "--hypotheses-only", "--no-answer"],
            "--hypotheses-only leaves the question out of the search",
        ),
    ],
    ids=[
        "fusion",
        "prompt",
        "k",
        "window",
        "empty-question",
        "model",
        "missing-file",
        "mismatch",
        "timeout-nan",
        "timeout-inf",
        "timeout-huge",
        "max-file-mb-nan",
        "max-file-mb-inf",
        "k-huge",
        "n-hypotheses-above-64",
        "empty-store",
        "empty-chroma-url",
        "empty-collection",
        "empty-answer-llm",
        "hypotheses-only-standard",
    ],
)
def test_bad_input_exits_non_zero_with_a_clear_message(env, ingested, args, message):
    digest = tree_digest(Path(env["HYDE_LC_STORE"]))
    out = run({**env, "OPENAI_API_KEY": "sk-test-not-used"}, *args)
    assert out.returncode == 2
    assert message in out.stderr
    assert "Traceback" not in out.stderr
    assert tree_digest(Path(env["HYDE_LC_STORE"])) == digest


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ask", QUESTION, "--answer-llm", "openai:gpt-4o-mini"], "needs an OpenAI API key"),
        (["ask", QUESTION, "--collection", "typo"], "no collection 'typo'"),
        (["ask", QUESTION, "--timeout", "-1"], "must be positive"),
        (
            ["ask", QUESTION, "--hypothesis-cache", "/proc/nope/c.sqlite"],
            "cannot use /proc/nope/c.sqlite",
        ),
    ],
    ids=["no-openai-key", "unknown-collection", "timeout", "cache-path"],
)
def test_mistakes_without_side_effects(env, ingested, args, message):
    clean = {k: v for k, v in env.items() if k != "OPENAI_API_KEY"}
    digest = tree_digest(Path(env["HYDE_LC_STORE"]))
    out = run(clean, *args)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr and "Traceback" not in out.stderr
    assert tree_digest(Path(env["HYDE_LC_STORE"])) == digest  # no "typo" collection made


def test_info_on_a_missing_store_creates_nothing(env, tmp_path):
    out = run({**env, "HYDE_LC_STORE": str(tmp_path / "nowhere")}, "info")
    assert out.returncode == 2 and "hyde-lc ingest" in out.stderr
    assert not (tmp_path / "nowhere").exists()


def test_not_a_pdf_named_pdf(env, ingested, tmp_path):
    fake = tmp_path / "report.pdf"
    fake.write_text("this is plain text")
    out = run(env, "ingest", str(fake))
    assert out.returncode == 2 and "is not a PDF" in out.stderr


def test_ask_before_ingest_says_what_to_do(env, tmp_path):
    out = run({**env, "HYDE_LC_STORE": str(tmp_path / "nothing")}, "ask", QUESTION)
    assert out.returncode == 2 and "hyde-lc ingest" in out.stderr
    assert not (tmp_path / "nothing").exists()


def test_default_store_is_in_the_working_directory(env, tmp_path):
    clean = {k: v for k, v in env.items() if k != "HYDE_LC_STORE"}
    out = run(clean, "ingest", str(Path(__file__).parents[2] / "README.md"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / ".hyde_lc").is_dir()


def test_the_largest_k_and_hypothesis_count_are_accepted(env, ingested):
    out = run(env, "ask", QUESTION, "--mode", "standard", "--no-answer", "--json", "--k", "10000")
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout)
    assert len(record["documents"]) == json.loads(run(env, "info", "--json").stdout)["chunks"]
    help_text = run(env, "ask", "--help").stdout
    assert "1 to 10000" in help_text and "1 to 64" in help_text


def test_help_through_the_console_script_and_python_m(env):
    for command in ([HYDE_LC, "--help"], [sys.executable, "-m", "hyde_lc.cli", "ask", "--help"]):
        out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert "usage: hyde-lc" in out.stdout


def run_into_closed_pipe(env, *args):
    """Run with standard output a pipe nobody reads any more (``| head -1`` once it exits)."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        return subprocess.run(
            [HYDE_LC, *args], env=env, stdout=writer, stderr=subprocess.PIPE, text=True,
            timeout=600,
        )  # fmt: skip
    finally:
        os.close(writer)


@pytest.mark.parametrize(
    "args",
    [
        ["info"],
        ["info", "--json"],
        ["ask", QUESTION, "--mode", "standard", "--no-answer"],
        ["ask", QUESTION, "--mode", "standard", "--no-answer", "--json"],
    ],
    ids=["info", "info-json", "ask", "ask-json"],
)
def test_output_into_a_closed_pipe_stops_quietly_with_141(env, ingested, args):
    digest = tree_digest(Path(env["HYDE_LC_STORE"]))
    out = run_into_closed_pipe(env, *args)
    assert out.returncode == 141, out.stderr
    assert out.stderr.strip() == "", out.stderr  # no BrokenPipeError, no traceback
    assert tree_digest(Path(env["HYDE_LC_STORE"])) == digest


HOSTILE = "\x1b]0;pwned\x07\nnotes.txt"  # sets the terminal title; the newline forges a line


def test_control_characters_in_file_names_never_reach_the_terminal(env, tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / HOSTILE).write_text("The keeper trimmed the wick of the lamp every night. " * 20)
    (folder / ("\x1b[2Jphoto.txt")).write_bytes(
        b"\x89PNG\r\n\x1a\n\x00\x00" + bytes(range(32)) * 64
    )
    store = ["--store", str(tmp_path / "store"), "--embeddings", "local:minilm"]
    refused = run(env, "ingest", str(folder), *store)  # the binary file is refused, by name
    assert refused.returncode == 2 and "photo.txt is named .txt" in refused.stderr
    assert "\\x1b[2Jphoto.txt" in refused.stderr
    (folder / "\x1b[2Jphoto.txt").unlink()
    ingest = run(env, "ingest", str(folder), *store)
    info = run(env, "info", *store)
    ask = run(env, "ask", "Who trimmed the wick?", "--mode", "standard", "--no-answer", *store)
    missing = run(env, "ingest", str(folder / "\x1b[31mgone.txt"), *store)
    unknown = run(env, "info", "\x1b]0;pwned\x07", *store)  # argparse's own error
    for out in (refused, ingest, info, ask, missing, unknown):
        for stream in (out.stdout, out.stderr):
            assert "\x1b" not in stream and "\x07" not in stream, stream
    assert ingest.returncode == info.returncode == ask.returncode == 0
    shown = "\\x1b]0;pwned\\x07\\nnotes.txt"
    assert any(
        line.startswith("added") and line.endswith(shown) for line in ingest.stdout.splitlines()
    )
    listed = f"pages  {folder}/{shown}  [latin]"  # the document's script follows its name
    assert any(line.endswith(listed) for line in info.stdout.splitlines())
    assert f"[1] {shown}" in ask.stdout
    assert missing.returncode == 2 and "\\x1b[31mgone.txt" in missing.stderr
    assert (
        unknown.returncode == 2 and "unrecognized arguments: \\x1b]0;pwned\\x07" in unknown.stderr
    )


def test_ingest_remove_missing_keeps_a_folder_in_sync(env, tmp_path):
    synced = {**env, "HYDE_LC_STORE": str(tmp_path / "store")}
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "lamps.txt").write_text("The keeper trimmed the lamp wicks every evening.")
    (folder / "fog.md").write_text("Fog signals sounded every thirty seconds in thick weather.")
    assert run(synced, "ingest", str(folder)).returncode == 0
    (folder / "lamps.txt").rename(folder / "wicks.txt")
    out = run(synced, "ingest", str(folder), "--remove-missing", "--json")
    assert out.returncode == 0, out.stderr
    files = {Path(f["source"]).name: f["status"] for f in json.loads(out.stdout)["files"]}
    assert files == {"wicks.txt": "added", "fog.md": "unchanged", "lamps.txt": "removed"}
    (folder / "fog.md").unlink()
    text = run(synced, "ingest", str(folder), "--remove-missing")
    assert text.returncode == 0, text.stderr
    assert "removed" in text.stdout and "fog.md" in text.stdout
    info = json.loads(run(synced, "info", "--json").stdout)
    assert [Path(d["source"]).name for d in info["documents"]] == ["wicks.txt"]
