"""``hyde-lc ask``: one question through the retriever and the answer model, every stage shown.

The command builds a `hyde_lc.retrievers.hyde.HyDERetriever` (or a
`hyde_lc.retrievers.neighbors.NeighborExpandingRetriever` around it, for ``--window``) from its
options and asks it for `HyDEResult` details; it does no retrieval of its own. It prints
the hypotheses and the retrieved passages (with how each was found: dense, lexical or
both, and its scores), then streams the answer as the model writes it, then its sources.
``--json`` prints one record instead.

Example:
    $ hyde-lc ask "Who designed the Pharos of Alexandria?"
    $ hyde-lc ask "Who designed the Pharos of Alexandria?" --mode standard --lexical off --json
    $ hyde-lc ask "Why were keepers withdrawn?" --window 1 --order document --no-answer

"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from hyde_lc.cli.options import (
    LEXICAL_CHOICES,
    MODE_HELP,
    add_hypothesis_options,
    add_k_option,
    add_store_options,
    non_negative_int,
    open_collection,
    open_hypothesis_cache,
    question_text,
    resolve_mode,
)
from hyde_lc.cli.render import (
    WIDTH,
    WrappedStream,
    document_heading,
    json_text,
    passage_preview,
    passages_payload,
    shown,
    shown_line,
    timings_line,
)
from hyde_lc.errors import HydeLcError

SAMPLE_QUESTION = "How did the Fresnel lens change lighthouses?"


def build_retriever(args: argparse.Namespace, store: Any, writer: Any) -> Any:
    """The retriever the options describe (the library's; settings checked by it)."""
    from hyde_lc.retrievers.hyde import HyDERetriever
    from hyde_lc.retrievers.neighbors import NeighborExpandingRetriever

    hyde = HyDERetriever(
        vectorstore=store,
        hypothesis_llm=writer,
        k=args.k,
        n_hypotheses=0 if writer is None else args.n_hypotheses,
        fusion=args.fusion,
        prompt=args.prompt,
        include_query=not args.hypotheses_only,
        timeout=args.timeout,
        hypothesis_cache=open_hypothesis_cache(args.hypothesis_cache),
        lexical="off" if args.lexical == "off" else "auto",
    )
    if args.window is None:
        return hyde
    return NeighborExpandingRetriever(
        base_retriever=hyde, vectorstore=store, k=args.k, window=args.window, order=args.order
    )


class _NotTheFallback(logging.Filter):
    """Leaves out the hypothesis writer's fallback warning: ``ask`` prints the fallback itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("HyDE fell back to the plain query")


@contextmanager
def _fallback_shown_once() -> Iterator[None]:
    log = logging.getLogger("hyde_lc.hyde.hypotheses")
    quiet = _NotTheFallback()
    log.addFilter(quiet)
    try:
        yield
    finally:
        log.removeFilter(quiet)


@dataclass
class Answered:
    """The answer and the passages the answer model was given."""

    text: str
    context: list[Any]
    dropped: list[Any] = field(default_factory=list)
    note: str | None = None
    ending: str | None = None
    """``repeated_sentence`` or ``token_cap`` when the answer was ended early, else None."""
    ending_note: str | None = None


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _answer(llm: Any, result: Any, stream: bool) -> Answered:
    """Answer from the retrieved passages (`answer_with_context`: fitted to the model's window).

    With ``stream`` the answer is printed as the model writes it: wrapped at the terminal's
    width on a terminal, as written otherwise.
    """
    from hyde_lc.answer import answer_with_context
    from hyde_lc.models.endpoint_errors import endpoint_errors

    chain = answer_with_context(llm)
    inputs = {"question": result.query, "documents": result.documents}
    with endpoint_errors(llm, role="answer"):
        if not stream:
            out = chain.invoke(inputs)
        else:
            width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None
            wrapped = WrappedStream(_write, width)
            out = {}
            for chunk in chain.stream(inputs):
                for key, value in chunk.items():
                    if key == "answer":
                        wrapped.feed(value)
                    else:
                        out[key] = value
            wrapped.close()
            out["answer"] = wrapped.text
    return Answered(
        out["answer"],
        out["context_documents"],
        out["dropped_documents"],
        out["context_note"],
        out["answer_ending"],
        out["answer_note"],
    )


def cmd_ask(args: argparse.Namespace) -> int:
    """``hyde-lc ask``: hypotheses, retrieved passages, the answer (streamed) and timings."""
    from hyde_lc.answer import citation, cited_sources
    from hyde_lc.models.endpoint_errors import endpoint_errors
    from hyde_lc.models.loading import (
        embedding_model_id,
        llm_model_name,
        load_llm,
        resolve_llm_spec,
    )
    from hyde_lc.store.location import server_lost_as_error

    if not args.question.strip():
        raise HydeLcError(
            f'the question is empty: ask something, e.g. hyde-lc ask "{SAMPLE_QUESTION}"'
        )
    resolve_mode(args)
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
    store = open_collection(args, must_exist=True)
    retriever = build_retriever(args, store, writer)
    with (
        server_lost_as_error(store.location, "ask again"),  # it may stop after the store opened
        endpoint_errors(store.embeddings, role="embedding"),
        _fallback_shown_once(),
    ):
        result = retriever.retrieve_with_details(args.question)
    models = {
        "hypothesis_llm": None if standard else resolve_llm_spec(args.hypothesis_llm, "hypothesis"),
        "answer_llm": None if llm is None else resolve_llm_spec(args.answer_llm, "answer"),
        "embeddings": embedding_model_id(store.embeddings),
    }
    timings = dict(result.timings)
    if not args.json:
        header = f"Question: {shown(result.query)}\nMode: {result.label}"
        if writer is not None:
            header += f"  (hypothesis model: {shown_line(llm_model_name(writer))})"
        print(header)
        if result.query_note:
            print(f"Note: {shown_line(result.query_note)}")
        lexical_note = next(
            (d.metadata["lexical_note"] for d in result.documents if "lexical_note" in d.metadata),
            None,
        )
        if lexical_note:
            print(f"Note: {shown_line(str(lexical_note))}")
        if result.fallback:
            print(f"HyDE fell back to the plain query: {shown_line(result.fallback)}")
        for i, hypothesis in enumerate(result.hypotheses, start=1):
            print(f"\n--- Hypothetical document {i} ---")
            print(textwrap.fill(shown(hypothesis), WIDTH))
        print(f"\n--- Retrieved {'chunks' if args.window is None else 'windows'} ---")
        for i, doc in enumerate(result.documents, start=1):
            print(document_heading(i, doc, citation(doc)))
            print(passage_preview(doc.page_content))
    answered = None
    if llm is not None:
        if not args.json:
            print(f"\n--- Answer ({shown_line(str(models['answer_llm']))}) ---", flush=True)
        start = time.perf_counter()
        answered = _answer(llm, result, stream=not args.json)
        timings["answer_s"] = time.perf_counter() - start
    timings["total_s"] = time.perf_counter() - started
    sources = [] if answered is None else cited_sources(answered.text, answered.context)
    if args.json:
        first_dropped = 1 + (len(answered.context) if answered else 0)
        print(
            json_text(
                {
                    "question": result.query,
                    "query_note": result.query_note,
                    "label": result.label,
                    "mode": result.label,
                    "lexical": result.lexical,
                    "fallback": result.fallback,
                    "cache_hits": result.cache_hits,
                    "settings": {
                        "k": args.k,
                        "n_hypotheses": 0 if standard else args.n_hypotheses,
                        "fusion": args.fusion,
                        "prompt": args.prompt,
                        "include_query": not args.hypotheses_only,
                        "lexical": args.lexical,
                        "window": args.window,
                        "order": args.order,
                    },
                    "hypotheses": result.hypotheses,
                    "documents": passages_payload(result.documents, citation),
                    "answer": None if answered is None else answered.text,
                    "sources": sources,
                    "context_note": None if answered is None else answered.note,
                    "answer_ending": None if answered is None else answered.ending,
                    "answer_note": None if answered is None else answered.ending_note,
                    "dropped_documents": [
                        {"rank": rank, "citation": citation(doc), "id": doc.id}
                        for rank, doc in enumerate(
                            answered.dropped if answered else [], start=first_dropped
                        )
                    ],
                    "timings": {k: round(v, 4) for k, v in timings.items()},
                    "models": models,
                }
            )
        )
        return 0
    if answered is not None:
        for note in (answered.ending_note, answered.note):
            if note:
                print(f"Note: {shown_line(note)}")
        if sources:
            print("Sources: " + shown_line("; ".join(sources)))
    print("\n--- Timings ---")
    print(timings_line(timings))
    return 0


def add_command(sub: Any, prompts: list[str], default_prompt: str) -> None:
    """Register ``ask`` on the ``hyde-lc`` subparsers."""
    ask = sub.add_parser(
        "ask",
        help="answer a question from the collection",
        description="Answer a question from the collection: hypothetical passages (HyDE), "
        "the passages retrieved (dense and BM25, fused), then the answer, streamed, with its "
        "sources.",
    )
    ask.add_argument(
        "question",
        type=question_text,
        help="the question to answer, in quotes; a question longer than 4,000 characters "
        "is cut to fit the models, with a note saying so",
    )
    group = ask.add_argument_group("retrieval")
    group.add_argument(
        "--mode",
        choices=("hyde", "standard"),
        default=None,
        help=MODE_HELP,
    )
    group.add_argument(
        "--lexical",
        choices=LEXICAL_CHOICES,
        default="on",
        help="on (default): BM25 search next to the vectors, the two lists fused; "
        "off: vectors only",
    )
    add_k_option(group)
    group.add_argument(
        "--window",
        type=non_negative_int,
        metavar="N",
        help="widen each hit with N neighbouring chunks on each side",
    )
    group.add_argument(
        "--order",
        choices=("relevance", "document"),
        default="relevance",
        help="with --window: windows by relevance or in reading order",
    )
    add_hypothesis_options(group, prompts, default_prompt)
    ask.add_argument("--no-answer", action="store_true", help="retrieve only")
    ask.add_argument("--json", action="store_true", help="print one JSON record")
    add_store_options(ask)
    ask.set_defaults(func=cmd_ask)
