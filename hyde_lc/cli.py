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
import os
import sys
import textwrap
import time
import warnings
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from hyde_lc.errors import HydeLcError
from hyde_lc.fusion import FUSION_MODES
from hyde_lc.prompts import DEFAULT_PROMPT, PROMPTS

SAMPLE_QUESTION = "How did the Fresnel lens change lighthouses?"


def sample_files() -> list[Path]:
    """The bundled sample document(s), inside the installed package."""
    return [Path(str(resources.files("hyde_lc") / "sample" / "lighthouses.pdf"))]


def _store_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("store")
    group.add_argument("--store", help="Chroma folder (default: $HYDE_LC_STORE or ./.hyde_lc)")
    group.add_argument(
        "--chroma-url", help="Chroma server URL instead of a folder ($HYDE_LC_CHROMA_URL)"
    )
    group.add_argument(
        "--collection", help="collection name (default: $HYDE_LC_COLLECTION or hyde_lc)"
    )
    group.add_argument(
        "--embeddings", help="embedding model spec (default: $HYDE_LC_EMBEDDINGS or local:minilm)"
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


def _print_json(payload: Any) -> None:
    print(json.dumps(payload, indent=2, ensure_ascii=False, default=str))


_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0, 9), *range(11, 32), 127, *range(0x80, 0xA0))}


def _shown(text: str) -> str:
    r"""Text for the terminal, with control characters shown as ``\xNN``.

    A document or a question is data: it cannot move the cursor, clear the screen or
    recolour the terminal. Newlines and tabs are kept.
    """
    return text.translate(_CONTROL)


def cmd_ingest(args: argparse.Namespace) -> int:
    """``hyde-lc ingest``: files, folders or the bundled sample into the collection.

    Returns 1 (after ingesting the rest) when a file had no text to index.
    """
    from hyde_lc.ingest import MAX_FILE_BYTES, check_file_size, discover_files, ingest_paths

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
        print(_shown(report.summary()))
        print(f"done in {elapsed:.1f} s; collection now holds {store._collection.count()} chunks")
    empty = [f.source for f in report.files if f.status == "empty"]
    if empty:
        print(
            f"hyde-lc: {len(empty)} file(s) had no text to index, so nothing is stored for "
            f"them (see their notes): {_shown(', '.join(empty))}",
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
        f"{info['location']}\nembedding model: {info['embedding_model']} "
        f"({info['embedding_dimension']} dimensions)\nchunks: {info['chunks']}"
    )
    for doc in info["documents"]:
        print(f"  {doc['chunks']:5} chunks, {doc['pages']:3} pages  {doc['source']}")
    return 0


def _build_retriever(args: argparse.Namespace, store: Any, writer: Any) -> Any:
    from hyde_lc.retriever import HyDERetriever

    return HyDERetriever(
        vectorstore=store,
        hypothesis_llm=writer,
        k=args.k,
        n_hypotheses=0 if writer is None else args.n_hypotheses,
        fusion=args.fusion,
        prompt=args.prompt,
        include_query=not args.hypotheses_only,
        timeout=args.timeout,
        hypothesis_cache=_hypothesis_cache(args.hypothesis_cache),
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
        print(f"Note: {result.query_note}")
    if result.fallback:
        print(f"HyDE fell back to the plain query: {_shown(result.fallback)}")
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
            f"[{i}] {_shown(citation(doc))}  ({where}"
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
            print("Sources: " + _shown("; ".join(sources)))
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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs)."""
    parser = argparse.ArgumentParser(
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
        type=_positive_int,
        default=4,
        help="chunks to retrieve (a k above the collection's size returns them all)",
    )
    ask.add_argument("--fusion", choices=FUSION_MODES, default="mean")
    ask.add_argument("--n-hypotheses", type=_positive_int, default=1)
    ask.add_argument("--prompt", choices=sorted(PROMPTS), default=DEFAULT_PROMPT)
    ask.add_argument(
        "--hypotheses-only", action="store_true", help="leave the question out of the fusion"
    )
    ask.add_argument(
        "--timeout",
        type=_positive_float,
        default=120.0,
        help="seconds to wait for hypotheses before using the plain question",
    )
    ask.add_argument(
        "--hypothesis-cache",
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
    ask.add_argument("--hypothesis-llm", help="model spec ($HYDE_LC_HYPOTHESIS_LLM)")
    ask.add_argument("--answer-llm", help="model spec ($HYDE_LC_ANSWER_LLM)")
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

    numbers = {
        "positive_int": _positive_int,
        "positive_float": _positive_float,
        "non_negative_int": _non_negative_int,
        "unit_interval": _unit_interval,
    }
    add_speed_command(sub, numbers)
    add_commands(sub, _store_args, numbers)

    info = sub.add_parser("info", help="facts about the collection")
    info.add_argument("--json", action="store_true")
    _store_args(info)
    info.set_defaults(func=cmd_info)
    return parser


def _number(kind: type, minimum: float, strict: bool, rule: str) -> Any:
    """An argparse type: a number of ``kind`` at least (or above) ``minimum``."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            expected = "a whole number" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if value < minimum or (strict and value == minimum):
            raise argparse.ArgumentTypeError(f"must be {rule}, got {value}")
        return value

    return parse


_positive_int = _number(int, 1, strict=False, rule="at least 1")
_positive_float = _number(float, 0, strict=True, rule="positive")
_non_negative_int = _number(int, 0, strict=False, rule="0 or more")


def _unit_interval(text: str) -> float:
    """An argparse type: a number strictly between 0 and 1."""
    value = _positive_float(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"must be below 1, got {value}")
    return float(value)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code.

    0: done. 2: a mistake the user can fix (bad argument, missing file, unknown model,
    ...), with a message saying what to do and nothing stored changed. 1: an unexpected
    error, or work left undone (an ingested file with no text, a failed evaluation).
    """
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    # langchain-community's SQLiteCache warns about a future default on every lookup.
    warnings.filterwarnings("ignore", message="The default value of `allowed_objects`")
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except HydeLcError as exc:
        print(f"hyde-lc: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("hyde-lc: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # no user should meet a bare traceback
        if os.environ.get("HYDE_LC_DEBUG"):
            raise
        print(
            f"hyde-lc: error: {type(exc).__name__}: {exc}\n"
            "(set HYDE_LC_DEBUG=1 to see the traceback)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
