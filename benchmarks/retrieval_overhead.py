"""Retrieval overhead outside the LLM, with an instant fake hypothesis writer.

`hyde-lc speed` times the real pipeline, where llama.cpp runs in the same process. This
script isolates what the package itself costs around the LLM: the same
`EvaluationPipeline` (with a hypothesis model: the HyDE default, hybrid HyDE with one
hypothesis, or dense HyDE with ``--lexical off``; without one, ``--no-writer``: the default
configuration, hybrid on the question alone; retrieval only) over the first ``--docs``
SciFact abstracts, with a fake writer that answers instantly, with and without neighbour
expansion. ``retrieval_time`` is the record's wall time minus the hypothesis.

Only the public API is used, so that `benchmarks/paired_overhead.py` runs this same
script on an older revision of the package too. ``--reload-index-per-search`` puts back
a cost the package no longer has (the BM25 index reloaded by each search), to measure
what removing it saved.

``--writer local:qwen2.5-coder-1.5b`` uses the real writer instead, and ``--poll`` sets
llama.cpp's busy-wait level, to test whether the engine's spinning threads slow the
embedding and search that follow each generation. ``--work DIR`` keeps the ingested
collection for the next run (ingesting 5k chunks takes about 5 minutes on 2 cores).

    python benchmarks/retrieval_overhead.py scifact --docs 2500 --queries 50
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from langchain_core.language_models.fake_chat_models import FakeListChatModel

from hyde_lc import collection_info, ingest_paths, load_embeddings, load_llm, open_store
from hyde_lc.bench.beir import load_beir
from hyde_lc.evaluation import EvaluationPipeline

HYPOTHESIS = (
    "Tissue-resident macrophages arise from embryonic progenitors in the yolk sac and the "
    "fetal liver and persist into adulthood by local self-renewal."
)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--docs", type=int, default=2500)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--writer", help="a real hypothesis model spec (default: instant fake)")
    parser.add_argument("--poll", type=int, default=50, help="llama.cpp busy-wait, 0-100")
    parser.add_argument("--windows", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--work", type=Path, help="keep the ingested collection here")
    parser.add_argument("--lexical", choices=("auto", "off"), default="auto")
    parser.add_argument(
        "--no-writer", action="store_true", help="no hypothesis model: the default configuration"
    )
    parser.add_argument(
        "--reload-index-per-search",
        action="store_true",
        help="reload the BM25 index at every search, as the package once did",
    )
    args = parser.parse_args()
    if args.reload_index_per_search:
        reload_index_per_search()

    data = load_beir(args.data)
    work = args.work or Path(tempfile.mkdtemp(prefix="hyde-overhead-"))
    (work / "docs").mkdir(parents=True, exist_ok=True)
    for doc_id, text in sorted(data.corpus.items())[: args.docs]:
        (work / "docs" / f"{doc_id}.txt").write_text(text, "utf-8")
    store = open_store(work / "store", embeddings=load_embeddings())
    ingest_paths([work / "docs"], store, progress=False)
    chunks = collection_info(store)["chunks"]
    writer = (
        None
        if args.no_writer
        else load_llm(args.writer, role="hypothesis", poll=args.poll)
        if args.writer
        else FakeListChatModel(responses=[HYPOTHESIS])
    )
    questions = list(data.queries.values())[: args.queries + 1]
    rows = []
    for window in args.windows:
        pipeline = EvaluationPipeline.from_settings(
            store=store,
            custom_hyde_llm=writer,
            retrieval_only=True,
            window=window,
            lexical=args.lexical,
        )
        pipeline.run(questions[0])  # warm-up
        times = [1000 * pipeline.run(q)["metadata"]["retrieval_time"] for q in questions[1:]]
        cuts = statistics.quantiles(times, n=20)
        rows.append(
            {
                "window": window,
                "retrieval_method": pipeline.retrieval_method,
                "p50_ms": round(statistics.median(times), 1),
                "p95_ms": round(cuts[-1], 1),
                "mean_ms": round(statistics.fmean(times), 1),
            }
        )
        print(f"chunks {chunks}, {pipeline.retrieval_method}: {rows[-1]}")
    if args.out:
        writer_name = (
            "none (no hypotheses)"
            if args.no_writer
            else f"{args.writer} (poll {args.poll})"
            if args.writer
            else "instant fake"
        )
        result = {"chunks": chunks, "queries": args.queries, "writer": writer_name, "rows": rows}
        args.out.write_text(json.dumps(result, indent=1))


def reload_index_per_search() -> None:
    """Make every search reload the collection's BM25 index (tantivy), as it once did."""
    from hyde_lc.store.collection import HybridCollection

    sync = HybridCollection.sync

    def reloading(self: HybridCollection, max_age: float | None = None) -> object:
        index = sync(self, max_age)
        if index is not None:
            len(index)  # LexicalIndex.__len__ reloads the index
        return index

    HybridCollection.sync = reloading  # type: ignore[method-assign]


if __name__ == "__main__":
    main()
