"""hyde_lc next to LangChain's and LlamaIndex's HyDE: the same vectors, the same hypotheses.

LangChain's ``HypotheticalDocumentEmbedder`` (langchain-classic) searches with the mean of
the hypotheses' embeddings (the question left out); LlamaIndex's ``HyDEQueryTransform``
(llama-index-core) with the equal-weight mean of the hypothesis and the question. Both
are run here as their libraries run them, against hyde_lc's dense HyDE (query weight 0.8)
and its default configuration with a hypothesis model (hybrid HyDE), on:

* the same corpus vectors: SciFact embedded once with local:minilm, searched exactly
  (`hyde_lc.bench.retrieval.ExactIndex`) by every system;
* the same hypotheses: each system's LLM is a stand-in that returns the hypothesis cached
  for the question (``--hypothesis-cache``, as ``hyde-lc bench`` wrote it), so nothing is
  generated and every system embeds the very same passage.

Quality: nDCG@10 and Recall@100 on the test queries, each row against hyde_lc's dense
HyDE and its default by a paired bootstrap over queries. Two hyde_lc configurations that
should reproduce the peers exactly (``hypotheses-only``, ``w=paper``) check the setup.

Overhead outside the LLM: time per query of everything but generation (prompt, embedding,
search), measured in one run that interleaves the systems query by query (the order
rotates) so machine load hits them alike; reported as medians, as ratios to LangChain's,
and as the median per-query difference to LangChain's with a bootstrap interval. The
stand-in writer is instant by default; ``--writer-seconds S`` makes every system's writer
sleep S seconds first, as a real one takes seconds, and the time the writer measured
itself spending is taken off each query's wall time: what is left is the work not hidden
behind generation (hyde_lc embeds the question while the hypothesis is written).
Garbage is collected before each timed call and not during it (as ``timeit`` does), so
one system's garbage is not collected on another's clock.
The quality run always uses the instant writer.

    pip install "hyde-lc[peers]"
    python -m benchmarks.peers scifact \\
        --hypothesis-cache benchmarks/results/hypotheses/scifact-qwen2.5-coder-1.5b.sqlite \\
        --out benchmarks/results/peers
    # a writer that takes half a second (as every real one takes longer):
    python -m benchmarks.peers ... --writer-seconds 0.5 --out benchmarks/results/peers-writer-0.5s
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.prompts import PromptTemplate

from hyde_lc.bench.beir import load_beir
from hyde_lc.bench.retrieval import (
    DEPTH,
    ExactIndex,
    corpus_index,
    corpus_lexical,
    ir_metrics,
    paired_bootstrap,
    paired_cell,
)
from hyde_lc.hyde.hypotheses import llm_identity, sample_keys
from hyde_lc.hyde.hypothesis_cache import HypothesisCache
from hyde_lc.hyde.prompts import get_prompt
from hyde_lc.models.loading import load_embeddings, load_llm
from hyde_lc.retrievers.hyde import HyDERetriever
from hyde_lc.search.lexical import LexicalSearch

TIMED_K = 10
"""Documents per query in the timed run (the quality run ranks DEPTH)."""


def question_of(prompt: str) -> str:
    """The question inside a rendered hypothesis prompt (``...Question: Q\\nPassage:``)."""
    head = prompt.rpartition("\nPassage:")[0]
    return head.partition("Question: ")[2]


class WriterClock:
    """The stand-in writers' latency, and the seconds they have spent on it so far."""

    def __init__(self, seconds: float = 0.0) -> None:
        self.seconds = seconds
        self.spent = 0.0

    def write(self, text: str) -> str:
        """``text``, after ``seconds`` of sleep (timed, and added to ``spent``)."""
        if self.seconds > 0:
            start = time.perf_counter()
            time.sleep(self.seconds)
            self.spent += time.perf_counter() - start
        return text


class CachedWriter(BaseChatModel):
    """A chat model that returns the cached hypothesis for the question in its prompt."""

    hypotheses: dict[str, str]
    clock: WriterClock

    @property
    def _llm_type(self) -> str:
        return "cached-writer"

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any):
        text = self.clock.write(self.hypotheses[question_of(messages[-1].text)])
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])


def llama_index_parts(
    embeddings: Embeddings, hypotheses: dict[str, str], clock: WriterClock
) -> tuple[Any, Any]:
    """LlamaIndex's stand-in LLM and an embedding model over ``embeddings``.

    Hand-written adapters: llama-index-embeddings-langchain would add a package for the
    two methods used here.
    """
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.llms import CompletionResponse, CustomLLM, LLMMetadata

    class CachedLlamaWriter(CustomLLM):
        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata(model_name="cached-writer")

        def complete(self, prompt: str, formatted: bool = False, **kw: Any) -> CompletionResponse:
            return CompletionResponse(text=clock.write(hypotheses[question_of(prompt)]))

        def stream_complete(self, prompt: str, formatted: bool = False, **kw: Any) -> Any:
            yield self.complete(prompt)

    class LangChainEmbedding(BaseEmbedding):
        def _get_query_embedding(self, query: str) -> list[float]:
            return embeddings.embed_query(query)

        def _get_text_embedding(self, text: str) -> list[float]:
            return embeddings.embed_documents([text])[0]

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return self._get_query_embedding(query)

    return CachedLlamaWriter(), LangChainEmbedding(model_name="local:minilm")


def cached_hypotheses(path: Path, llm_spec: str, prompt: str, questions: list[str]) -> dict:
    """The first cached hypothesis of every question; refuses a cache that lacks some."""
    cache = HypothesisCache(path)
    llm_string = llm_identity(load_llm(llm_spec, role="hypothesis", max_tokens=256))
    found: dict[str, str] = {}
    for question in questions:
        (key,) = sample_keys([get_prompt(prompt).render(question)])
        texts = cache.texts(key, llm_string)
        if texts:
            found[question] = texts[0]
    missing = len(questions) - len(found)
    if missing:
        raise SystemExit(
            f"{path} lacks a {prompt!r} hypothesis of {llm_spec} for {missing} questions: "
            f"write them first with hyde-lc bench --llm {llm_spec} --hypothesis-cache {path}"
        )
    return found


def systems(
    index: ExactIndex,
    lexical: LexicalSearch,
    embeddings: Embeddings,
    hypotheses: dict[str, str],
    prompt: str,
    k: int,
    clock: WriterClock,
) -> dict[str, Callable[[str], list[str]]]:
    """Each system as question -> ranked document ids."""
    from langchain_classic.chains import HypotheticalDocumentEmbedder
    from llama_index.core.indices.query.query_transform.base import HyDEQueryTransform
    from llama_index.core.prompts import PromptTemplate as LlamaPrompt

    template = get_prompt(prompt).template
    writer = CachedWriter(hypotheses=hypotheses, clock=clock)
    langchain = HypotheticalDocumentEmbedder.from_llm(
        writer, embeddings, custom_prompt=PromptTemplate.from_template(template)
    )
    llama_writer, llama_embeddings = llama_index_parts(embeddings, hypotheses, clock)
    llama = HyDEQueryTransform(
        llm=llama_writer,
        hyde_prompt=LlamaPrompt(template.replace("{question}", "{context_str}")),
        include_original=True,
    )

    def ids(vector: list[float]) -> list[str]:
        return [str(d.id) for d in index.similarity_search_by_vector(vector, k=k)]

    def hyde_lc(**fields: Any) -> Callable[[str], list[str]]:
        side = fields.pop("lexical", lexical)
        retriever = HyDERetriever(
            vectorstore=index, hypothesis_llm=writer, k=k, prompt=prompt, lexical=side, **fields
        )
        return lambda q: [str(d.id) for d in retriever.retrieve_with_details(q).documents]

    return {
        "LangChain HypotheticalDocumentEmbedder": lambda q: ids(langchain.embed_query(q)),
        "LlamaIndex HyDEQueryTransform": lambda q: ids(
            llama_embeddings.get_agg_embedding_from_queries(llama.run(q).embedding_strs)
        ),
        "hyde_lc hyde (dense, w=0.8)": hyde_lc(lexical="off"),
        "hyde_lc hybrid-hyde (HyDE default)": hyde_lc(),
        "hyde_lc hyde(hypotheses-only)": hyde_lc(lexical="off", include_query=False),
        "hyde_lc hyde(w=paper)": hyde_lc(lexical="off", query_weight=None),
        "hyde_lc standard (no LLM)": hyde_lc(lexical="off", n_hypotheses=0),
    }


TIMED = (
    "LangChain HypotheticalDocumentEmbedder",
    "LlamaIndex HyDEQueryTransform",
    "hyde_lc hyde (dense, w=0.8)",
    "hyde_lc hybrid-hyde (HyDE default)",
)
REFERENCES = ("hyde_lc hyde (dense, w=0.8)", "hyde_lc hybrid-hyde (HyDE default)")
SAME_AS = {
    "LangChain HypotheticalDocumentEmbedder": "hyde_lc hyde(hypotheses-only)",
    "LlamaIndex HyDEQueryTransform": "hyde_lc hyde(w=paper)",
}
"""Each peer, and the hyde_lc configuration that computes the same search vector."""


def quality(data: Any, run: dict[str, Callable[[str], list[str]]]) -> dict[str, dict]:
    """nDCG@10 and Recall@100 per system, with paired-bootstrap deltas to the references."""
    rows: dict[str, dict] = {}
    top10: dict[str, dict[str, list[str]]] = {}
    for name, search in run.items():
        ranked = {q: search(text) for q, text in data.queries.items()}
        runs = {q: [(d, float(DEPTH - r)) for r, d in enumerate(ids)] for q, ids in ranked.items()}
        metrics, per_query = ir_metrics(data.qrels, runs)
        rows[name] = {"metrics": metrics, "per_query_ndcg": per_query}
        top10[name] = {q: ids[:10] for q, ids in ranked.items()}
        print(f"{name:45} nDCG@10 {100 * metrics['nDCG@10']:.1f}", flush=True)
    for peer, twin in SAME_AS.items():
        same = sum(top10[peer][q] == top10[twin][q] for q in data.queries)
        rows[peer]["same_top10_as"] = {"system": twin, "queries": same, "of": len(data.queries)}
    order = sorted(data.queries)
    for name, row in rows.items():
        for ref in REFERENCES:
            if ref == name:
                continue
            delta, (low, high) = paired_bootstrap(
                [rows[ref]["per_query_ndcg"][q] for q in order],
                [row["per_query_ndcg"][q] for q in order],
            )
            row[f"vs {ref}"] = {"delta": delta, "ci": [low, high]}
    return rows


def overhead(
    questions: list[str], run: dict[str, Callable[[str], list[str]]], clock: WriterClock
) -> dict:
    """Seconds per query of each system outside its writer, interleaved query by query
    (rotating order)."""
    names = list(TIMED)
    for name in names:  # warm up: models loaded, first-call costs paid
        run[name](questions[0])
    seconds: dict[str, list[float]] = {name: [] for name in names}
    writing: dict[str, list[float]] = {name: [] for name in names}
    for i, question in enumerate(questions):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            # As timeit does: no garbage collection inside a timed call, so that one
            # system's garbage is not collected on another's clock.
            gc.collect()
            gc.disable()
            try:
                spent, start = clock.spent, time.perf_counter()
                run[name](question)
                wall, written = time.perf_counter() - start, clock.spent - spent
            finally:
                gc.enable()
            seconds[name].append(wall - written)
            writing[name].append(written)
    base = statistics.median(seconds[names[0]])
    return {
        name: {
            "median_ms": round(1000 * statistics.median(values), 2),
            "p95_ms": round(1000 * float(np.percentile(values, 95)), 2),
            "ratio_to_langchain": round(statistics.median(values) / base, 3),
            "vs_langchain_ms": paired_median_difference(seconds[names[0]], values),
            "writer_median_ms": round(1000 * statistics.median(writing[name]), 2),
            "queries": len(values),
        }
        for name, values in seconds.items()
    }


def paired_median_difference(base: list[float], other: list[float]) -> dict:
    """Median over queries of ``other - base`` in ms, with its 95% bootstrap interval.

    Each query is timed for every system in the same round, so the difference per query
    leaves out what the question itself costs (its hypothesis's length, the machine's
    load at that moment); a ratio of two medians does not.
    """
    median, (low, high) = paired_bootstrap(
        [1000 * x for x in base], [1000 * x for x in other], statistic=np.median
    )
    return {"median": round(median, 2), "ci": [round(low, 2), round(high, 2)]}


EMBEDDED_TEXTS = {
    "LangChain HypotheticalDocumentEmbedder": "1 (the hypothesis)",
    "LlamaIndex HyDEQueryTransform": "2 (hypothesis, question)",
    "hyde_lc hyde (dense, w=0.8)": "2 (question, hypothesis)",
    "hyde_lc hybrid-hyde (HyDE default)": "2 (question, hypothesis) + BM25 search",
}


def markdown(rows: dict[str, dict], timing: dict[str, dict], meta: dict) -> str:
    """The two tables of the results."""
    lines = [
        f"**Quality** ({meta['dataset']} {meta['split']}, {meta['queries']} queries, "
        f"{meta['embeddings']}, hypotheses of {meta['llm']} from the cache, prompt "
        f"{meta['prompt']})",
        "",
        "| system | nDCG@10 | R@100 | vs hyde_lc dense HyDE | vs hyde_lc HyDE default |",
        "|---|---|---|---|---|",
    ]
    for name, row in rows.items():
        cells = []
        for ref in REFERENCES:
            v = row.get(f"vs {ref}")
            cells.append(paired_cell(v))
        m = row["metrics"]
        lines.append(
            f"| {name} | {100 * m['nDCG@10']:.1f} | {100 * m['R@100']:.1f} "
            f"| {cells[0]} | {cells[1]} |"
        )
    lines.append("")
    for peer in SAME_AS:
        same = rows[peer]["same_top10_as"]
        lines.append(
            f"{peer}: the same top 10 as {same['system']} on {same['queries']} of "
            f"{same['of']} queries."
        )
    writer = (
        "an instant stand-in writer"
        if not meta["writer_seconds"]
        else f"a stand-in writer that sleeps {meta['writer_seconds']:g} s, its measured time "
        "taken off each query's wall time"
    )
    lines += [
        "",
        f"**Time per query outside the LLM** ({writer}; prompt, embedding and search of "
        f"{meta['corpus']:,} documents, k={TIMED_K}; {meta['timed_queries']} queries, the "
        f"systems interleaved; {meta['machine']})",
        "",
        "| system | texts embedded | median ms | p95 ms | ratio to LangChain "
        "| per query vs LangChain, ms (95% CI) |",
        "|---|---|---|---|---|---|",
    ]
    for name, t in timing.items():
        vs = t["vs_langchain_ms"]
        paired = (
            ""
            if name == TIMED[0]
            else f"{vs['median']:+.2f} [{vs['ci'][0]:+.2f}, {vs['ci'][1]:+.2f}]"
        )
        lines.append(
            f"| {name} | {EMBEDDED_TEXTS[name]} | {t['median_ms']} | {t['p95_ms']} "
            f"| {t['ratio_to_langchain']:.2f} | {paired} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("data", type=Path, help="BEIR folder (SciFact)")
    parser.add_argument("--split", default="test")
    parser.add_argument("--limit", type=int)
    parser.add_argument("--hypothesis-cache", type=Path, required=True)
    parser.add_argument("--llm", default="local:qwen2.5-coder-1.5b", help="whose hypotheses")
    parser.add_argument("--prompt", default="generic")
    parser.add_argument("--timed-queries", type=int, default=300)
    parser.add_argument(
        "--writer-seconds",
        type=float,
        default=0.0,
        help="the stand-in writer's latency in the timed run (default 0: instant)",
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    started = time.perf_counter()
    data = load_beir(args.data, split=args.split, limit=args.limit)
    embeddings = load_embeddings("local:minilm")
    index = corpus_index(data, embeddings)
    lexical = corpus_lexical(index, data)
    questions = list(data.queries.values())
    hypotheses = cached_hypotheses(args.hypothesis_cache, args.llm, args.prompt, questions)
    ranked = systems(index, lexical, embeddings, hypotheses, args.prompt, DEPTH, WriterClock())
    rows = quality(data, ranked)
    clock = WriterClock(args.writer_seconds)
    timed = systems(index, lexical, embeddings, hypotheses, args.prompt, TIMED_K, clock)
    timing = overhead(questions[: args.timed_queries], timed, clock)
    meta = {
        "dataset": data.name,
        "split": args.split,
        "queries": len(questions),
        "corpus": len(data.corpus),
        "embeddings": "local:minilm",
        "llm": args.llm,
        "prompt": args.prompt,
        "hypothesis_cache": str(args.hypothesis_cache),
        "timed_queries": min(args.timed_queries, len(questions)),
        "writer_seconds": args.writer_seconds,
        "versions": _versions(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "date": time.strftime("%Y-%m-%d"),
        "seconds": round(time.perf_counter() - started, 1),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    results = {"meta": meta, "quality": rows, "overhead": timing}
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    table = markdown(rows, timing, meta)
    (args.out / "results.md").write_text(table)
    print(table)


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    return {p: version(p) for p in ("hyde-lc", "langchain-classic", "llama-index-core")}


if __name__ == "__main__":
    main()
