"""The ``hyde-lc`` command: ingest, ask, info, bench, speed, evaluate, compare.

Example:
    $ hyde-lc ingest --sample
    $ hyde-lc ask "Who designed the Pharos of Alexandria?"
    $ hyde-lc ask "Who designed the Pharos of Alexandria?" --mode standard --json
    $ hyde-lc info --json

"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import textwrap
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

from hyde_lc.errors import HydeLcError, InvalidSettingError
from hyde_lc.fusion import FUSION_MODES
from hyde_lc.prompts import DEFAULT_PROMPT, PROMPTS

SAMPLE_QUESTION = "How did the Fresnel lens change lighthouses?"

MAX_K = 10_000
"""The most chunks ``hyde-lc ask`` retrieves for one question. More could not reach an
answer model's window anyway; a ``--k`` above the collection's size already returns every
chunk there is."""
MAX_HYPOTHESES = 64
"""The most hypothetical passages per question (``--n-hypotheses``): each one is an LLM
call for every question."""
# TODO(retriever owner): once HyDERetriever refuses more than 64 hypotheses with
# InvalidSettingError, import its constant here instead of repeating the number.
MAX_TIMEOUT_S = 86_400.0
"""The longest ``--timeout``: one day (the thread join behind it refuses far larger
numbers with an OverflowError)."""
SIGPIPE_EXIT = 141
"""Exit code when the reader of standard output goes away (``hyde-lc info | head -1``):
128 + SIGPIPE, what a shell reports for any program a closed pipe stops."""


def sample_files() -> list[Path]:
    """The bundled sample document(s), inside the installed package."""
    return [Path(str(resources.files("hyde_lc") / "sample" / "lighthouses.pdf"))]


def _given(what: str, example: str) -> Callable[[str], str]:
    """An argparse type: text that is not empty, so ``--store ""`` is not taken for "unset".

    An empty value usually comes from an unset shell variable (``--store "$DIR"``); taking
    it for the default would silently read or write somewhere else.
    """

    def parse(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(
                f"is empty: give {what} (e.g. {example}), or leave the option out for the default"
            )
        return text

    return parse


def _store_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("store")
    group.add_argument(
        "--store",
        type=_given("a folder", "--store ./.hyde_lc"),
        help="Chroma folder (default: $HYDE_LC_STORE or ./.hyde_lc)",
    )
    group.add_argument(
        "--chroma-url",
        type=_given("a server URL", "--chroma-url http://127.0.0.1:8000"),
        help="Chroma server URL instead of a folder ($HYDE_LC_CHROMA_URL)",
    )
    group.add_argument(
        "--collection",
        type=_given("a collection name", "--collection hyde_lc"),
        help="collection name (default: $HYDE_LC_COLLECTION or hyde_lc)",
    )
    group.add_argument(
        "--embeddings",
        type=_given("a model spec", "--embeddings local:minilm"),
        help="embedding model spec (default: $HYDE_LC_EMBEDDINGS or local:minilm)",
    )


def _open(args: argparse.Namespace, must_exist: bool) -> Any:
    from hyde_lc.models import load_embeddings
    from hyde_lc.store import StoreLocation, collection_exists, open_store

    location = StoreLocation.resolve(args.store, args.chroma_url, args.collection)
    if must_exist and not collection_exists(location):
        raise HydeLcError(
            f"no collection {location.collection!r} at "
            f"{location.url or location.path}: run `hyde-lc ingest PATH...` first (or "
            "`hyde-lc ingest --sample`), or point --store / --collection at it"
        )
    store = open_store(
        location.path,
        url=location.url,
        collection=location.collection,
        embeddings=load_embeddings(args.embeddings),
    )
    if must_exist and store._collection.count() == 0:
        raise HydeLcError(f"{location.describe()} is empty: run `hyde-lc ingest PATH...` first")
    return store


# JSON escapes C0 controls itself; DEL and the C1 controls (U+0080-U+009F, which some
# terminals obey as escape sequences) are written as \u escapes too, still valid JSON.
_JSON_UNSAFE = {c: f"\\u{c:04x}" for c in (127, *range(0x80, 0xA0))}


def _print_json(payload: Any) -> None:
    print(json.dumps(payload, indent=2, ensure_ascii=False, default=str).translate(_JSON_UNSAFE))


_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0, 9), *range(11, 32), 127, *range(0x80, 0xA0))}
_CONTROL_IN_LINE = {**_CONTROL, 9: "\\t", 10: "\\n"}


def _shown(text: str) -> str:
    r"""Text for the terminal, with control characters shown as ``\xNN``.

    A document or a question is data: it cannot move the cursor, clear the screen or
    recolour the terminal. Newlines and tabs are kept.
    """
    return text.translate(_CONTROL)


def _shown_line(text: str) -> str:
    r"""One line for the terminal: `_shown`, with newlines and tabs shown as ``\n``, ``\t``.

    For file names, citations and error messages: a name with a newline in it cannot
    forge a second line of output.
    """
    return text.translate(_CONTROL_IN_LINE)


def cmd_ingest(args: argparse.Namespace) -> int:
    """``hyde-lc ingest``: files, folders or the bundled sample into the collection.

    Returns 1 (after ingesting the rest) when a file had no text to index.
    """
    from hyde_lc.ingest import (
        MAX_FILE_BYTES,
        IngestReport,
        check_file_size,
        discover_files,
        ingest_paths,
    )

    paths = list(args.paths) + (sample_files() if args.sample else [])
    if not paths:
        raise HydeLcError("nothing to ingest: give files or folders, or --sample")
    if args.chunk_overlap >= args.chunk_size:
        raise HydeLcError(
            f"--chunk-overlap ({args.chunk_overlap}) must be smaller than --chunk-size "
            f"({args.chunk_size})"
        )
    max_bytes = MAX_FILE_BYTES if args.max_file_mb is None else int(args.max_file_mb * 2**20)
    # Paths are checked before the store is opened: a typo creates no store.
    for path in discover_files(paths):
        check_file_size(path, max_bytes)
    store = _open(args, must_exist=False)
    start = time.perf_counter()
    report = ingest_paths(
        paths,
        store,
        chunk_size=args.chunk_size,
        chunk_overlap=args.chunk_overlap,
        progress=not args.json,
        max_file_bytes=max_bytes,
    )
    elapsed = time.perf_counter() - start
    if args.json:
        _print_json({"files": [vars(f) for f in report.files], "seconds": round(elapsed, 3)})
    else:
        shown = [
            replace(f, source=_shown_line(f.source), notes=[_shown_line(n) for n in f.notes])
            for f in report.files
        ]
        print(IngestReport(shown).summary())
        print(f"done in {elapsed:.1f} s; collection now holds {store._collection.count()} chunks")
    empty = [f.source for f in report.files if f.status == "empty"]
    if empty:
        print(
            f"hyde-lc: {len(empty)} file(s) had no text to index, so nothing is stored for "
            f"them (see their notes): {_shown_line(', '.join(empty))}",
            file=sys.stderr,
        )
        return 1
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    """``hyde-lc info``: chunk count, documents, embedding model and dimension."""
    from hyde_lc.store import StoreLocation, collection_info

    info = collection_info(_open(args, must_exist=True))
    info["location"] = StoreLocation.resolve(
        args.store, args.chroma_url, args.collection
    ).describe()
    if args.json:
        _print_json(info)
        return 0
    print(
        f"{_shown_line(info['location'])}\n"
        f"embedding model: {_shown_line(str(info['embedding_model']))} "
        f"({info['embedding_dimension']} dimensions)\nchunks: {info['chunks']}"
    )
    for doc in info["documents"]:
        print(f"  {doc['chunks']:5} chunks, {doc['pages']:3} pages  {_shown_line(doc['source'])}")
    return 0


@contextmanager
def settings_checked() -> Iterator[None]:
    """Turn a retriever's or pipeline's refusal of its settings into `InvalidSettingError`.

    Pydantic wraps whatever a validator raises (even a `HydeLcError`) in a
    ``ValidationError``, which would otherwise end the command as an unexpected error
    (exit 1). The CLI checks its arguments first; this catches any setting those checks
    let through, so it still exits 2 with the validator's own message.

    Example:
        >>> from hyde_lc.retriever import HyDERetriever
        >>> with settings_checked():  # doctest: +SKIP
        ...     HyDERetriever(vectorstore=store, n_hypotheses=0, k=0)
        Traceback (most recent call last):
        InvalidSettingError: invalid settings for HyDERetriever: k must be at least 1, ...

    """
    from pydantic import ValidationError

    try:
        yield
    except ValidationError as exc:
        raise InvalidSettingError(_validation_message(exc)) from exc


def _validation_message(exc: Any) -> str:
    """A ``ValidationError`` as one line: each refused field with its validator's message."""
    parts = []
    for error in exc.errors():
        cause = (error.get("ctx") or {}).get("error")
        text = str(cause) if isinstance(cause, BaseException) else str(error["msg"])
        field = ".".join(str(part) for part in error["loc"])
        parts.append(text if not field or field in text else f"{field}: {text}")
    return f"invalid settings for {exc.title}: " + "; ".join(parts)


def _build_retriever(args: argparse.Namespace, store: Any, writer: Any) -> Any:
    from hyde_lc.retriever import HyDERetriever

    cache = _hypothesis_cache(args.hypothesis_cache)
    with settings_checked():
        return HyDERetriever(
            vectorstore=store,
            hypothesis_llm=writer,
            k=args.k,
            n_hypotheses=0 if writer is None else args.n_hypotheses,
            fusion=args.fusion,
            prompt=args.prompt,
            include_query=not args.hypotheses_only,
            timeout=args.timeout,
            hypothesis_cache=cache,
        )


def _hypothesis_cache(path: str | None) -> Any:
    if not path:
        return None
    from langchain_community.cache import SQLiteCache

    file = Path(path).expanduser()
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        return SQLiteCache(database_path=str(file))
    except Exception as exc:
        raise HydeLcError(f"cannot use {file} as the hypothesis cache: {exc}") from exc


def _expanded(args: argparse.Namespace, store: Any, retriever: Any) -> Any:
    """HyDE (or standard) hits widened into windows; the result keeps the hypotheses."""
    from hyde_lc.neighbors import NeighborExpandingRetriever
    from hyde_lc.retriever import HyDERetriever

    with settings_checked():
        expander = NeighborExpandingRetriever(
            base_retriever=retriever,
            vectorstore=store,
            k=args.k,
            window=args.window,
            order=args.order,
        )
    base: HyDERetriever = expander.base_for_call()  # type: ignore[assignment]
    # (the CLI's base is always a HyDERetriever; later rounds reuse its first hypotheses)
    results: list[Any] = []

    def fetch(n: int) -> list[Any]:
        results.append(base.retrieve_with_details(args.question, k=n))
        return results[-1].documents

    started = time.perf_counter()
    windows = expander.gather(fetch)
    elapsed = time.perf_counter() - started
    result = results[0]
    result.documents = windows
    stages = ("hypothesis_s", "embedding_s", "search_s")
    result.timings = {key: sum(r.timings[key] for r in results) for key in stages}
    result.timings["expansion_s"] = max(0.0, elapsed - sum(result.timings.values()))
    return result


def cmd_ask(args: argparse.Namespace) -> int:
    """``hyde-lc ask``: hypotheses, retrieved chunks, answer and timings."""
    from hyde_lc.answer import answer_from_documents, citation, cited_sources
    from hyde_lc.models import llm_model_name, load_llm, resolve_llm_spec
    from hyde_lc.store import server_lost_as_error

    if not args.question.strip():
        raise HydeLcError(
            f'the question is empty: ask something, e.g. hyde-lc ask "{SAMPLE_QUESTION}"'
        )
    if args.hypotheses_only and args.mode == "standard":
        raise HydeLcError(
            "--hypotheses-only leaves the question out of the search, so it needs "
            "hypotheses: use --mode hyde, or drop --hypotheses-only"
        )
    started = time.perf_counter()
    # Models first: a bad spec fails before the store is opened.
    standard = args.mode == "standard"
    writer = None if standard else load_llm(args.hypothesis_llm, role="hypothesis")
    llm = None if args.no_answer else load_llm(args.answer_llm, role="answer")
    store = _open(args, must_exist=True)
    retriever = _build_retriever(args, store, writer)
    with server_lost_as_error(store, "ask again"):  # it may stop after the store opened
        if args.window is None:
            result = retriever.retrieve_with_details(args.question)
        else:
            result = _expanded(args, store, retriever)
    timings = dict(result.timings)
    answer = None
    if llm is not None:
        start = time.perf_counter()
        # TODO(timeouts owner): wrap this call in hyde_lc.endpoint_errors.endpoint_errors(
        # llm, role="answer") once that module is committed, so an endpoint that never
        # replies ends with exit 2 naming the URL instead of the OpenAI client's error (exit 1).
        # TODO(context-budget owner): use hyde_lc.answer.answer_with_context(llm) once it is
        # committed; print its context_note as "Note: ..." after the answer (escaped with
        # _shown_line) and put "context_note" and the dropped passages in the --json record.
        answer = answer_from_documents(llm).invoke(
            {"question": result.query, "documents": result.documents}
        )
        timings["answer_s"] = time.perf_counter() - start
    timings["total_s"] = time.perf_counter() - started
    models = {
        "hypothesis_llm": None
        if args.mode == "standard"
        else resolve_llm_spec(args.hypothesis_llm, "hypothesis"),
        "answer_llm": None if args.no_answer else resolve_llm_spec(args.answer_llm, "answer"),
        "embeddings": store._collection.metadata.get("hyde_lc_embedding_model"),
    }
    if args.json:
        _print_json(
            {
                "question": result.query,
                "query_note": result.query_note,
                "mode": result.mode,
                "fallback": result.fallback,
                "cache_hits": result.cache_hits,
                "settings": {
                    "k": args.k,
                    "n_hypotheses": retriever.n_hypotheses,
                    "fusion": args.fusion,
                    "prompt": args.prompt,
                    "include_query": not args.hypotheses_only,
                    "window": args.window,
                    "order": args.order,
                },
                "hypotheses": result.hypotheses,
                "documents": [
                    {"text": d.page_content, "citation": citation(d), **d.metadata}
                    for d in result.documents
                ],
                "answer": answer,
                "sources": [] if answer is None else cited_sources(answer, result.documents),
                "timings": {k: round(v, 4) for k, v in timings.items()},
                "models": models,
            }
        )
        return 0
    width = 88
    print(
        f"Question: {_shown(result.query)}\nMode: {result.mode}"
        + (
            f"  (hypothesis model: {llm_model_name(retriever.hypothesis_llm)})"
            if retriever.hypothesis_llm
            else ""
        )
    )
    if result.query_note:
        print(f"Note: {_shown_line(result.query_note)}")
    if result.fallback:
        print(f"HyDE fell back to the plain query: {_shown_line(result.fallback)}")
    for i, hypothesis in enumerate(result.hypotheses, start=1):
        print(f"\n--- Hypothetical document {i} ---")
        print(textwrap.fill(_shown(hypothesis), width))
    print(
        "\n--- Retrieved windows ---" if args.window is not None else "\n--- Retrieved chunks ---"
    )
    for i, doc in enumerate(result.documents, start=1):
        score = doc.metadata.get("score")
        meta = doc.metadata
        where = (
            f"chunks {meta['window_start']}-{meta['window_end']}, hit {meta['hit_chunk_index']}"
            if "window_start" in meta
            else f"chunk {meta.get('chunk_index')}"
        )
        print(
            f"[{i}] {_shown_line(citation(doc))}  ({where}"
            + (f", score {score:.3f})" if isinstance(score, float) else ")")
        )
        preview = _shown(" ".join(doc.page_content.split()))
        print(
            textwrap.indent(
                textwrap.fill(preview[:300] + ("..." if len(preview) > 300 else ""), width - 4),
                "    ",
            )
        )
    if answer is not None:
        print(f"\n--- Answer ({models['answer_llm']}) ---")
        print(textwrap.fill(_shown(answer), width, replace_whitespace=False))
        sources = cited_sources(answer, result.documents)
        if sources:
            print("Sources: " + _shown_line("; ".join(sources)))
    print("\n--- Timings ---")
    print("  ".join(f"{k.removesuffix('_s')} {v:.2f} s" for k, v in timings.items()))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    """``hyde-lc bench``: retrieval quality of standard and HyDE modes on a BEIR dataset."""
    from hyde_lc.bench import default_modes, run_benchmark, write_report

    modes = [
        m
        for m in default_modes(args.n, args.prompts, args.query_weights, args.gates)
        if m.kind in args.modes
    ]
    if "standard" not in args.modes:
        modes = [m for m in modes if m.n_hypotheses]
    if not modes:
        raise HydeLcError("no modes selected: --modes takes " + ", ".join(BENCH_MODES))
    report = run_benchmark(
        args.data,
        split=args.split,
        limit=args.limit,
        modes=modes,
        llm_spec=args.llm,
        embeddings_spec=args.embeddings,
        max_tokens=args.max_tokens,
        concurrency=args.concurrency,
        hypothesis_cache=args.hypothesis_cache,
    )
    paths = write_report(report, Path(args.out))
    print(report.markdown())
    print(
        f"\n{report.meta['queries']} queries in {report.meta['seconds']} s; wrote "
        + ", ".join(str(p) for p in paths.values())
    )
    return 0


BENCH_MODES = ("standard", "mean+q", "mean (hyp only)", "concat", "rrf")


class _Parser(argparse.ArgumentParser):
    """argparse, with the offending argument in an error shown as one escaped line.

    argparse quotes some arguments with ``repr`` but prints others (unrecognised
    arguments) as they are, so a pasted escape sequence would reach the terminal.
    """

    def error(self, message: str) -> Any:  # argparse's signature says NoReturn
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {_shown_line(message)}\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs)."""
    parser = _Parser(
        prog="hyde-lc", description="HyDE retrieval-augmented question answering, offline."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    ingest = sub.add_parser("ingest", help="ingest PDF, .txt and .md files into the collection")
    ingest.add_argument("paths", nargs="*", help="files or folders (folders recurse)")
    ingest.add_argument("--sample", action="store_true", help="ingest the bundled sample PDF")
    ingest.add_argument("--chunk-size", type=_positive_int, default=1000)
    ingest.add_argument("--chunk-overlap", type=_non_negative_int, default=200)
    ingest.add_argument(
        "--max-file-mb",
        type=_positive_float,
        help="refuse files larger than this many MB (default: 512)",
    )
    ingest.add_argument("--json", action="store_true", help="print one JSON record")
    _store_args(ingest)
    ingest.set_defaults(func=cmd_ingest)

    ask = sub.add_parser("ask", help="answer a question from the collection")
    ask.add_argument("question")
    ask.add_argument(
        "--mode",
        choices=("hyde", "standard"),
        default="hyde",
        help="hyde (default) or standard (query embedding only)",
    )
    ask.add_argument(
        "--k",
        type=_k_count,
        default=4,
        help=f"chunks to retrieve, 1 to {MAX_K} (above the collection's size: all of them)",
    )
    ask.add_argument("--fusion", choices=FUSION_MODES, default="mean")
    ask.add_argument(
        "--n-hypotheses",
        type=_hypothesis_count,
        default=1,
        help=f"hypothetical passages per question, 1 to {MAX_HYPOTHESES} (default 1)",
    )
    ask.add_argument("--prompt", choices=sorted(PROMPTS), default=DEFAULT_PROMPT)
    ask.add_argument(
        "--hypotheses-only", action="store_true", help="leave the question out of the fusion"
    )
    ask.add_argument(
        "--timeout",
        type=_timeout_seconds,
        default=120.0,
        help="seconds to wait for hypotheses before using the plain question (default 120, "
        f"at most {MAX_TIMEOUT_S:.0f})",
    )
    ask.add_argument(
        "--hypothesis-cache",
        type=_given("a file", "--hypothesis-cache hypotheses.sqlite"),
        metavar="FILE",
        help="SQLite file caching hypotheses (a rerun costs no LLM call)",
    )
    ask.add_argument(
        "--window",
        type=_non_negative_int,
        metavar="N",
        help="widen each hit with N neighbouring chunks on each side",
    )
    ask.add_argument(
        "--order",
        choices=("relevance", "document"),
        default="relevance",
        help="with --window: windows by relevance or in reading order",
    )
    ask.add_argument(
        "--hypothesis-llm",
        type=_given("a model spec", "--hypothesis-llm local:smollm2-135m"),
        help="model spec ($HYDE_LC_HYPOTHESIS_LLM)",
    )
    ask.add_argument(
        "--answer-llm",
        type=_given("a model spec", "--answer-llm local:smollm2-135m"),
        help="model spec ($HYDE_LC_ANSWER_LLM)",
    )
    ask.add_argument("--no-answer", action="store_true", help="retrieve only")
    ask.add_argument("--json", action="store_true", help="print one JSON record")
    _store_args(ask)
    ask.set_defaults(func=cmd_ask)

    bench = sub.add_parser("bench", help="retrieval quality on a BEIR dataset")
    bench.add_argument("data", help="BEIR folder (corpus.jsonl, queries.jsonl, qrels/)")
    bench.add_argument("--split", default="test")
    bench.add_argument("--limit", type=_positive_int, help="first N judged queries only")
    bench.add_argument("--modes", nargs="+", choices=BENCH_MODES, default=list(BENCH_MODES))
    bench.add_argument(
        "--n", type=_positive_int, nargs="+", default=[1, 4], help="hypotheses per query"
    )
    bench.add_argument(
        "--prompts", nargs="+", choices=sorted(PROMPTS), default=["scifact", "generic"]
    )
    bench.add_argument(
        "--query-weights",
        type=_unit_interval,
        nargs="+",
        default=[],
        metavar="W",
        help="also run mean+q and rrf with the query's share of the fusion set to W",
    )
    bench.add_argument(
        "--gates",
        type=_unit_interval,
        nargs="+",
        default=[],
        metavar="T",
        help="also run mean+q keeping only hypotheses with cosine >= T to the query",
    )
    bench.add_argument("--llm", help="hypothesis model spec ($HYDE_LC_HYPOTHESIS_LLM)")
    bench.add_argument("--embeddings", help="embedding model spec (default local:minilm)")
    bench.add_argument("--max-tokens", type=_positive_int, default=256)
    bench.add_argument("--concurrency", type=_positive_int, default=4)
    bench.add_argument(
        "--hypothesis-cache",
        metavar="FILE",
        help="SQLite hypothesis cache (default in the hyde_lc cache dir)",
    )
    bench.add_argument("--out", default="bench-results", help="folder for JSON, Markdown, PNG")
    bench.set_defaults(func=cmd_bench)

    from hyde_lc.bench.commands import add_command as add_speed_command
    from hyde_lc.evaluation.commands import add_commands

    # TODO(evaluation owner): evaluate/compare's --k, --n-hypotheses and --timeout still use
    # positive_int/positive_float; switch them to numbers["k"], numbers["n_hypotheses"] and
    # numbers["timeout"] (same limits as `ask`), and type --out / --out-dir with
    # numbers["given_path"] so an empty value is refused by the parser.
    numbers = {
        "positive_int": _positive_int,
        "positive_float": _positive_float,
        "non_negative_int": _non_negative_int,
        "unit_interval": _unit_interval,
        "k": _k_count,
        "n_hypotheses": _hypothesis_count,
        "timeout": _timeout_seconds,
        "given_path": _given("a path", "--out results.jsonl"),
    }
    add_speed_command(sub, numbers)
    add_commands(sub, _store_args, numbers)

    info = sub.add_parser("info", help="facts about the collection")
    info.add_argument("--json", action="store_true")
    _store_args(info)
    info.set_defaults(func=cmd_info)
    return parser


def _number(
    kind: type,
    minimum: float,
    strict: bool,
    rule: str,
    maximum: float | None = None,
    why: str = "",
) -> Any:
    """An argparse type: a finite number of ``kind`` at least (or above) ``minimum``.

    ``nan`` and ``inf`` are refused (``float()`` accepts them, and every comparison with
    nan is false, so a nan would pass any range check); so is anything above ``maximum``
    (``why`` says why there is one).
    """
    most = "" if maximum is None else f"at most {maximum:g}"
    tail = f" ({why})" if why else ""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            if kind is int and text.strip().lstrip("+").isdigit():  # beyond int()'s digit limit
                raise argparse.ArgumentTypeError(
                    f"must be {most or 'smaller'}{tail}, got a {len(text.strip())}-digit number"
                ) from None
            expected = "a whole number" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(
                f"expected a finite number{f', {most}' if most else ''}, got {text.strip()!r}"
            )
        if value < minimum or (strict and value == minimum):
            raise argparse.ArgumentTypeError(f"must be {rule}, got {value}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"must be {most}{tail}, got {value}")
        return value

    return parse


_positive_int = _number(int, 1, strict=False, rule="at least 1")
_positive_float = _number(float, 0, strict=True, rule="positive")
_non_negative_int = _number(int, 0, strict=False, rule="0 or more")
_k_count = _number(
    int,
    1,
    strict=False,
    rule="at least 1",
    maximum=MAX_K,
    why="a k above the collection's size already returns every chunk there is",
)
_hypothesis_count = _number(
    int,
    1,
    strict=False,
    rule="at least 1",
    maximum=MAX_HYPOTHESES,
    why="each hypothesis is one LLM call per question",
)
_timeout_seconds = _number(
    float, 0, strict=True, rule="positive", maximum=MAX_TIMEOUT_S, why="one day"
)


def _unit_interval(text: str) -> float:
    """An argparse type: a number strictly between 0 and 1."""
    value = _positive_float(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"must be below 1, got {value}")
    return float(value)


def main(argv: Sequence[str] | None = None) -> int:
    r"""Run the CLI; returns the exit code.

    0: done. 2: a mistake the user can fix (bad argument, missing file, unknown model,
    ...), with a message saying what to do and nothing stored changed. 1: an unexpected
    error, or work left undone (an ingested file with no text, a failed evaluation).
    141 (128 + SIGPIPE): standard output was closed early (``hyde-lc info | head -1``);
    the command stops quietly, as other Unix tools do, and keeps the work it had done.

    Text from documents, file names and error messages is printed with control
    characters escaped (an ESC byte shows as ``\x1b``), so it cannot drive the terminal.
    """
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    log = _TerminalLog(logging.WARNING)
    logging.getLogger("hyde_lc").addHandler(log)
    try:
        try:
            with warnings.catch_warnings():  # restores the caller's warning settings
                warnings.showwarning = _show_warning
                # langchain-community's SQLiteCache warns about a future default on every lookup.
                warnings.filterwarnings("ignore", message="The default value of `allowed_objects`")
                return _run(argv)
        finally:
            logging.getLogger("hyde_lc").removeHandler(log)
            sys.stdout.flush()  # a closed pipe shows here when the output was buffered
    except BrokenPipeError:
        _stdout_to_devnull()
        return SIGPIPE_EXIT


def _run(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except HydeLcError as exc:
        print(f"hyde-lc: error: {_shown_line(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("hyde-lc: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        raise  # the reader of our output left: main() exits quietly
    except Exception as exc:  # no user should meet a bare traceback
        if os.environ.get("HYDE_LC_DEBUG"):
            raise
        print(
            f"hyde-lc: error: {type(exc).__name__}: {_shown_line(str(exc))}\n"
            "(set HYDE_LC_DEBUG=1 to see the traceback)",
            file=sys.stderr,
        )
        return 1


def _stdout_to_devnull() -> None:
    """Point standard output at /dev/null, so the flush at exit cannot fail again.

    Python's documented recipe for a closed pipe (the signal module's "Note on SIGPIPE").
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a real file (captured in-process)
        pass


class _TerminalLog(logging.Handler):
    """The package's warnings (``store is being written by ...``) as escaped lines."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            print(f"hyde-lc: {_shown_line(record.getMessage())}", file=sys.stderr)
        except Exception:
            self.handleError(record)


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    """`warnings.showwarning` for the CLI: one escaped line (a warning may quote data)."""
    print(
        f"hyde-lc: warning: {_shown_line(str(message))} "
        f"({category.__name__}, {_shown_line(filename)}:{lineno})",
        file=file or sys.stderr,
    )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
