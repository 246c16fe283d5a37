"""The ``hyde-lc`` parser: what it accepts, what it refuses (exit 2, before any model or
store is opened), and that its choices are the library's own names."""

from __future__ import annotations

import pytest

from hyde_lc import cli
from hyde_lc.cli import bench, collection, evaluate, options

QUESTION = "What is a lens?"


def parse(*args: str):
    return cli.build_parser().parse_args(list(args))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ask", QUESTION, "--timeout", "nan"], "--timeout: expected a finite number"),
        (["ask", QUESTION, "--timeout=-inf"], "--timeout: expected a finite number"),
        (["ask", QUESTION, "--timeout", "1e400"], "--timeout: expected a finite number"),
        (["ask", QUESTION, "--timeout", "86401"], "--timeout: must be at most 86400 (one day)"),
        (["ingest", "--sample", "--max-file-mb", "inf"], "--max-file-mb: expected a finite"),
        (["ingest", "--sample", "--max-file-mb", "NaN"], "--max-file-mb: expected a finite"),
        (["ask", QUESTION, "--k", "10001"], "--k: must be at most 10000"),
        (["ask", QUESTION, "--k", "9" * 5000], "--k: must be at most 10000 (a k above the"),
        (["ask", QUESTION, "--n-hypotheses", "1000"], "--n-hypotheses: must be at most 64"),
        (["ask", QUESTION, "--lexical", "maybe"], "--lexical: invalid choice: 'maybe'"),
        (["ask", QUESTION, "--store", ""], "--store: is empty: give a folder"),
        (["info", "--store", "   "], "--store: is empty"),
        (["info", "--collection", ""], "--collection: is empty"),
        (["info", "--embeddings", ""], "--embeddings: is empty"),
        (["ask", QUESTION, "--hypothesis-cache", ""], "--hypothesis-cache: is empty"),
        (["info", "\x1b]0;pwned\x07"], "unrecognized arguments: \\x1b]0;pwned\\x07"),
        (["ingest", "--sample", "fr"], "--sample: expected a sample language (en, zh)"),
        (["evaluate", "q.jsonl", "--out", "r.jsonl", "--k", "10001"], "--k: must be at most"),
        (["evaluate", "q.jsonl", "--out", "r.jsonl", "--n-hypotheses", "65"], "at most 64"),
        (["evaluate", "q.jsonl", "--out", "r.jsonl", "--timeout", "nan"], "--timeout: expected"),
        (["evaluate", "q.jsonl", "--out", ""], "--out: is empty"),
        (["evaluate", "q.jsonl", "--out", "r.jsonl", "--judge", ""], "--judge: is empty"),
        (["compare", "q.jsonl", "--out-dir", " "], "--out-dir: is empty"),
        (["compare", "q.jsonl", "--out-dir", "d", "--k", "0"], "--k: must be at least 1"),
        (["bench", "data", "--out", ""], "--out: is empty"),
        (["speed", "data", "--out", ""], "--out: is empty"),
    ],
)
def test_refused_in_the_parser_before_anything_opens(tmp_path, capsys, args, message):
    """Exit 2 from the parser itself: no model is loaded, no store is opened or made."""
    with pytest.raises(SystemExit) as exited:
        cli.main([*args, "--store", str(tmp_path / "store")] if "--store" not in args else args)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and message in err, err
    assert "\x1b" not in err and "\x07" not in err
    assert not (tmp_path / "store").exists()


def test_help_states_the_limits_and_the_exit_codes(capsys):
    with pytest.raises(SystemExit):
        cli.main(["ask", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert f"1 to {options.MAX_K}" in out and f"1 to {options.MAX_HYPOTHESES}" in out
    assert (options.MAX_K, options.MAX_HYPOTHESES) == (10_000, 64)
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    for code in ("0 ", "1 ", "2 ", "130 ", "141 "):
        assert f"\n  {code}" in out
    assert "HYDE_LC_STORE" in out and "HYDE_LC_REQUEST_TIMEOUT" in out


def test_every_environment_variable_the_package_reads_is_in_the_help():
    import re
    from pathlib import Path

    import hyde_lc

    package = Path(hyde_lc.__file__).parent
    read = {
        name
        for path in package.rglob("*.py")
        for name in re.findall(r"HYDE_LC_[A-Z_]+", path.read_text(encoding="utf-8"))
    }
    assert read and read <= set(re.findall(r"HYDE_LC_[A-Z_]+", cli.EPILOG))


def test_ask_is_hybrid_without_a_hypothesis_model_and_hybrid_hyde_with_one(monkeypatch):
    from hyde_lc.cli.options import resolve_mode

    monkeypatch.delenv("HYDE_LC_HYPOTHESIS_LLM", raising=False)
    args = parse("ask", QUESTION)
    resolve_mode(args)
    assert (args.mode, args.lexical, args.k, args.n_hypotheses, args.fusion) == (
        "standard",
        "on",
        4,
        1,
        "mean",
    )
    assert args.window is None and args.json is False
    for extra in (["--hypothesis-llm", "local:smollm2-135m"], ["--n-hypotheses", "2"]):
        args = parse("ask", QUESTION, *extra)
        resolve_mode(args)
        assert args.mode == "hyde", extra
    monkeypatch.setenv("HYDE_LC_HYPOTHESIS_LLM", "local:smollm2-135m")
    args = parse("ask", QUESTION)
    resolve_mode(args)
    assert args.mode == "hyde"
    args = parse("ask", QUESTION, "--mode", "standard")
    resolve_mode(args)
    assert args.mode == "standard"


@pytest.mark.parametrize(
    ("argv", "sample", "paths"),
    [
        (["ingest", "--sample"], "en", []),
        (["ingest", "--sample", "zh"], "zh", []),
        (["ingest", "docs", "--sample"], "en", ["docs"]),
        (["ingest", "docs", "notes.md", "--sample", "zh"], "zh", ["docs", "notes.md"]),
        (["ingest", "docs"], None, ["docs"]),
    ],
)
def test_ingest_sample_takes_an_optional_language(argv, sample, paths):
    args = parse(*argv)
    assert (args.sample, args.paths) == (sample, paths)


def test_evaluate_query_weight_words_and_numbers():
    assert parse("evaluate", "q", "--out", "r").query_weight == "default"
    assert parse("evaluate", "q", "--out", "r", "--query-weight", "paper").query_weight is None
    assert parse("evaluate", "q", "--out", "r", "--query-weight", "0.5").query_weight == 0.5


# -- the parser's choices are the library's names -------------------------------------------


def test_fusion_and_hypothesis_limits_match_the_retriever():
    from hyde_lc.core.fusion import FUSION_MODES
    from hyde_lc.retrievers.hyde import MAX_HYPOTHESES

    assert options.FUSION_MODES == FUSION_MODES
    assert options.MAX_HYPOTHESES == MAX_HYPOTHESES


def test_metric_names_match_the_evaluation():
    from hyde_lc.evaluation.ragas_metrics import JUDGED_METRICS, OFFLINE_METRICS

    assert tuple(OFFLINE_METRICS) == evaluate.OFFLINE_METRICS
    assert tuple(JUDGED_METRICS) == evaluate.JUDGED_METRICS


def test_bench_and_speed_names_match_the_harness():
    from hyde_lc.bench.retrieval import MODE_KINDS
    from hyde_lc.bench.speed import REMOTE_MODELS, SECTIONS

    assert bench.BENCH_MODES == MODE_KINDS
    assert bench.SPEED_SECTIONS == SECTIONS
    assert bench.REMOTE_MODELS == REMOTE_MODELS


def test_tune_names_match_the_configurations():
    from hyde_lc.bench.tune import TUNE_CONFIGS
    from hyde_lc.cli import testset

    assert tuple(c.name for c in TUNE_CONFIGS) == testset.TUNE_NAMES


def test_sample_languages_match_the_samples():
    from hyde_lc.ingest.samples import SAMPLE_LANGUAGES, sample_files, sample_questions

    assert collection.SAMPLE_LANGUAGES == SAMPLE_LANGUAGES
    for language in SAMPLE_LANGUAGES:
        assert all(path.is_file() for path in sample_files(language))
        assert sample_questions(language).is_file()


def test_an_unknown_sample_language_is_refused():
    from hyde_lc.errors import InvalidSettingError
    from hyde_lc.ingest.samples import sample_files

    with pytest.raises(InvalidSettingError, match="no sample in 'fr': choose one of en, zh"):
        sample_files("fr")


def test_every_option_and_argument_of_every_command_says_what_it_does():
    import argparse

    from hyde_lc.cli import build_parser

    silent = []

    def walk(parser, path):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, [*path, name])
            elif action.dest != "help" and not action.help:
                silent.append(f"{' '.join(path)} {(action.option_strings or [action.dest])[0]}")

    walk(build_parser(), ["hyde-lc"])
    assert silent == []


def test_version_prints_the_installed_version(capsys):
    from importlib.metadata import version

    from hyde_lc.cli import main

    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"hyde-lc {version('hyde-lc')}"


def test_testset_takes_a_rephraser_or_none(monkeypatch, tmp_path):
    from hyde_lc.cli import build_parser
    from hyde_lc.cli import testset as cli_testset
    from hyde_lc.evaluation import question_writer, testset

    seen, loaded = {}, []

    def make_testset(source, out, **kwargs):
        seen.update(kwargs)
        return testset.TestsetSummary(kept=0, resumed=0, out=out, rejected_file=out)

    monkeypatch.setattr(cli_testset, "open_collection", lambda args, must_exist: None)
    monkeypatch.setattr(testset.ChunkSource, "of_store", classmethod(lambda cls, store: None))
    monkeypatch.setattr(testset, "make_testset", make_testset)
    monkeypatch.setattr(question_writer, "default_writer", lambda spec: "writer")
    monkeypatch.setattr(question_writer, "default_rephraser", lambda spec: loaded.append(spec))
    out = str(tmp_path / "q.jsonl")
    args = build_parser().parse_args(["testset", "--out", out, "--rephraser", "none"])
    assert args.func(args) == 0 and seen["rephraser"] is None and loaded == []
    args = build_parser().parse_args(["testset", "--out", out])
    args.func(args)
    assert loaded == [None]  # the default: the answer model in force
    args = build_parser().parse_args(["testset", "--out", out, "--rephraser", "openai:gpt-x"])
    args.func(args)
    assert loaded == [None, "openai:gpt-x"]
