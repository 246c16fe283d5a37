"""Speed and cost of the pipeline, each figure a ratio or breakdown measured in one run.

Four measurements, each comparing against a floor measured in the same process so machine
noise cancels:

- **ingest**: chunks/second of the whole ingest path (read, split, embed, write to a
  persistent Chroma collection) against the bare embedding model on the same chunk texts;
- **query**: per-stage latency (hypothesis, embedding, search, neighbour expansion,
  answer) with p50/p95 through `EvaluationPipeline`, with the package's default retriever
  configuration (hybrid HyDE) widened by ``window``, and the retrieval overhead outside
  the LLM; the same run's prompts give the **cost** per query on remote models, by the
  pricing table (tokens counted with each model's tiktoken encoding);
- **concurrency**: throughput of the HyDE answer chain's ``abatch`` against sequential
  ``invoke``, with a simulated remote LLM (a fixed network latency, no CPU) so the ratio
  shows what concurrency buys for I/O-bound models;
- **scale**: vector-search latency through ``langchain_chroma.Chroma`` at growing
  collection sizes, on synthetic clustered unit vectors, with the HNSW index's recall@10
  against exact search.

Example:
    >>> from hyde_lc.bench.speed import run_speed
    >>> report = run_speed("scifact", docs=100, queries=3,
    ...                    scale_sizes=[2000])  # doctest: +SKIP
    >>> print(report.markdown())  # doctest: +SKIP

"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from tqdm.auto import tqdm

from hyde_lc.bench.beir import load_beir
from hyde_lc.core.settings import settings
from hyde_lc.evaluation.pricing import Price, PricingTable
from hyde_lc.evaluation.usage import UsageRecorder, encoding_for, estimate_tokens

SECTIONS = ("ingest", "query", "concurrency", "scale")
REMOTE_MODELS = ("gpt-4o-mini", "gpt-4.1-mini", "gpt-5-mini", "gpt-4o")
REMOTE_EMBEDDINGS = "text-embedding-3-small"


def percentiles(values: Sequence[float], qs: Sequence[int] = (50, 95)) -> dict[str, float]:
    """``p<q>_ms`` for each of ``qs``, ``mean_ms``, ``max_ms`` and ``n`` (input in seconds)."""
    ms = np.asarray(values, dtype=float) * 1000.0
    out = {f"p{q}_ms": round(float(np.percentile(ms, q)), 2) for q in qs}
    out |= {"mean_ms": round(float(ms.mean()), 2), "max_ms": round(float(ms.max()), 2)}
    return {**out, "n": len(ms)}


def add_in_batches(
    collection: Any,
    batch: int,
    ids: Sequence[str],
    vectors: Any,
    documents: Sequence[str],
    metadatas: Sequence[dict[str, Any]] | None = None,
    desc: str | None = None,
) -> float:
    """Add records to a Chroma collection ``batch`` at a time (Chroma caps one call's size).

    Returns the seconds it took; ``desc`` shows a progress bar.
    """
    start = time.perf_counter()
    steps = range(0, len(ids), max(1, batch))
    for i in tqdm(steps, desc=desc, unit="batch", disable=desc is None):
        end = i + max(1, batch)
        collection.add(
            ids=list(ids[i:end]),
            embeddings=vectors[i:end],
            documents=list(documents[i:end]),
            **({} if metadatas is None else {"metadatas": list(metadatas[i:end])}),
        )
    return time.perf_counter() - start


class SimulatedRemoteChat(BaseChatModel):
    """A chat model that waits ``latency`` seconds (without using the CPU) and replies.

    Stands in for a remote API in the concurrency measurement: the wait is I/O, as a
    network round trip is, so the figure shows what overlapping requests buys.

    Example:
        >>> SimulatedRemoteChat(latency=0.0, reply="ok").invoke("hi").content
        'ok'

    """

    latency: float = 0.5
    reply: str = "A passage that answers the question."

    @property
    def _llm_type(self) -> str:
        return "simulated-remote"

    def _result(self) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=self.reply))])

    def _generate(self, *args: Any, **kwargs: Any) -> ChatResult:
        time.sleep(self.latency)
        return self._result()

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        await asyncio.sleep(self.latency)
        return self._result()


@dataclass
class SpeedReport:
    """What `run_speed` measured: one dict per section, plus the run's settings."""

    meta: dict[str, Any]
    sections: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"meta": self.meta, **self.sections}

    def markdown(self) -> str:
        """The tables BENCHMARKS.md shows."""
        parts: list[str] = []
        for name, table in _TABLES.items():
            if section := self.sections.get(name):
                parts += table(section)
        return "\n".join(parts).rstrip() + "\n"


def _table(title: str, columns: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """The lines of a Markdown table under ``title``, then a blank line.

    A cell is its value formatted as an f-string would; an empty one is written ``| |``.
    """

    def line(cells: Iterable[object]) -> str:
        texts = [f"{cell}" for cell in cells]
        return "|" + "|".join(f" {text} " if text else " " for text in texts) + "|"

    return [title, "", line(columns), "|" + "---|" * len(columns), *map(line, rows), ""]


def _paths_table(
    title: str, rate: str, paths: Sequence[tuple[str, object, object]], ratio: tuple[str, str]
) -> list[str]:
    """`_table` of ways to do one job: each path's seconds and ``rate``, then a ratio.

    ``ratio`` is the bold last row's name and value, e.g. ``("speed-up", "4.0x")``.
    """
    name, value = ratio
    return _table(title, ("path", "seconds", rate), [*paths, (f"**{name}**", "", f"**{value}**")])


def _ingest_table(ingest: dict[str, Any]) -> list[str]:
    bare = f"bare embedding model (batch {ingest['batch_size']})"
    return _paths_table(
        f"**Ingest** ({ingest['documents']} documents, {ingest['chunks']} chunks)",
        "chunks/s",
        [
            (bare, ingest["embed_seconds"], ingest["embed_chunks_per_s"]),
            ("whole ingest path", ingest["ingest_seconds"], ingest["ingest_chunks_per_s"]),
        ],
        ("ratio", f"{ingest['ratio']:.0%}"),
    )


def _query_table(query: dict[str, Any]) -> list[str]:
    return _table(
        f"**Query latency per stage** ({query['queries']} queries, "
        f"{query['collection_chunks']} chunks, {query['retrieval_method']}, "
        f"writer/answerer {query['llm']})",
        ("stage", "p50 ms", "p95 ms", "mean ms"),
        [
            (stage, stats["p50_ms"], stats["p95_ms"], stats["mean_ms"])
            for stage, stats in query["stages"].items()
        ],
    )


_COST_COLUMNS = {
    "hypothesis": "HyDE: hypotheses",
    "answer": "answer",
    "embedding": "embeddings",
    "hyde_total": "HyDE total",
    "standard_total": "standard total",
}
"""The USD columns of the cost table: key in a row -> heading."""


def _cost_table(cost: dict[str, Any]) -> list[str]:
    return _table(
        f"**Cost per 1,000 queries** (USD, {cost['pricing']}; tokens of this run's "
        f"prompts and outputs counted with each model's encoding; embeddings on "
        f"{cost['embedding_model']})",
        ("model", *_COST_COLUMNS.values(), "HyDE extra"),
        [
            (
                row["model"],
                *(f"{row[key]:.4f}" for key in _COST_COLUMNS),
                f"{row['hyde_extra']:.0%}",
            )
            for row in cost["models"]
        ],
    )


def _concurrency_table(conc: dict[str, Any]) -> list[str]:
    return _paths_table(
        f"**Concurrency** ({conc['queries']} queries, simulated remote LLM with "
        f"{conc['latency_s']} s latency per call, max_concurrency {conc['max_concurrency']})",
        "queries/s",
        [
            ("sequential invoke", conc["sequential_s"], conc["sequential_qps"]),
            ("abatch", conc["abatch_s"], conc["abatch_qps"]),
        ],
        ("speed-up", f"{conc['speedup']:.1f}x"),
    )


def _scale_table(scale: dict[str, Any]) -> list[str]:
    return _table(
        f"**Search latency by collection size** (synthetic {scale['dim']}-d clustered "
        f"unit vectors, Chroma HNSW cosine, k={scale['k']}, {scale['queries']} queries)",
        ("chunks", "insert s", "search p50 ms", "search p95 ms", "recall@10 vs exact"),
        [
            (f"{r['size']:,}", r["insert_s"], r["p50_ms"], r["p95_ms"], f"{r['recall_at_k']:.3f}")
            for r in scale["rows"]
        ],
    )


_TABLES: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "ingest": _ingest_table,
    "query": _query_table,
    "cost": _cost_table,
    "concurrency": _concurrency_table,
    "scale": _scale_table,
}
"""The report's tables, in order: section -> its table."""


# -- ingest -------------------------------------------------------------------------------


def _corpus_files(corpus: dict[str, str], work: Path, embeddings: Any) -> tuple[Path, Any]:
    """Write ``corpus`` as one text file per document; open an empty store beside it."""
    from hyde_lc.store.vectorstore import open_store

    folder = work / "docs"
    folder.mkdir(parents=True)
    for doc_id, text in corpus.items():
        (folder / f"{doc_id}.txt").write_text(text, "utf-8")
    return folder, open_store(work / "store", embeddings=embeddings)


def ingest_speed(
    corpus: dict[str, str], work: Path, embeddings: Any, batch_size: int = 64
) -> tuple[dict[str, Any], Any]:
    """Ingest ``corpus`` (one text file per document) and time it against bare embedding.

    The bare model embeds the very chunk texts the ingest wrote, in ``batch_size`` batches,
    once before and once after the ingest; the floor is the faster of the two, so a warm
    cache cannot flatter the ingest path. Returns the section and the ingested store.
    """
    from hyde_lc.ingest.files import ingest_paths
    from hyde_lc.store.collection import HybridCollection

    folder, store = _corpus_files(corpus, work, embeddings)
    embeddings.embed_documents(["warm up the model"] * 4)
    # Measure the floor on the same texts the ingest path splits out; we only know those
    # after splitting, so split first (cheap, and part of the timed ingest again below).
    from hyde_lc.ingest.files import discover_files, load_document, split_document
    from hyde_lc.models.loading import embedding_model_id

    model_id = embedding_model_id(embeddings)
    texts = [
        chunk.text
        for path in discover_files([folder])
        for chunk in split_document(load_document(path), model_id)
    ]

    def bare() -> float:
        start = time.perf_counter()
        for i in range(0, len(texts), batch_size):
            embeddings.embed_documents(texts[i : i + batch_size])
        return time.perf_counter() - start

    before = bare()
    start = time.perf_counter()
    report = ingest_paths([folder], store, batch_size=batch_size, progress=False)
    ingest_s = time.perf_counter() - start
    after = bare()
    chunks = HybridCollection.of(store).chroma.count()
    if chunks != len(texts):
        raise RuntimeError(f"ingest wrote {chunks} chunks, the splitter made {len(texts)}")
    floor = min(before, after)
    section = {
        "documents": len(report.files),
        "chunks": chunks,
        "batch_size": batch_size,
        "embed_seconds": round(floor, 2),
        "embed_seconds_runs": [round(before, 2), round(after, 2)],
        "embed_chunks_per_s": round(chunks / floor, 1),
        "ingest_seconds": round(ingest_s, 2),
        "ingest_chunks_per_s": round(chunks / ingest_s, 1),
        "ratio": round(floor / ingest_s, 3),
    }
    return section, store


# -- query latency and cost ---------------------------------------------------------------


def query_speed(
    store: Any,
    questions: Sequence[str],
    *,
    llm_spec: str | None = None,
    window: int = 1,
    k: int = 4,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Per-stage latency of the default retriever + neighbour expansion + answer.

    Returns the section and, per question, the LLM calls made (hypotheses first, the
    answer last) for `cost_per_query`.
    """
    from hyde_lc.evaluation import EvaluationPipeline
    from hyde_lc.models.loading import load_llm, resolve_llm_spec
    from hyde_lc.store.collection import HybridCollection

    calls = UsageRecorder()
    pipeline = EvaluationPipeline.from_settings(
        store=store,
        mode="hyde",
        custom_hyde_llm=load_llm(llm_spec, role="hypothesis"),
        custom_answer_llm=load_llm(llm_spec, role="answer"),
        k=k,
        window=window,
        callbacks=[calls],
    )
    stages: dict[str, list[float]] = {}
    per_query: list[dict[str, Any]] = []
    for question in tqdm(questions, desc="query latency", unit="q"):
        calls.calls.clear()
        record = pipeline.run(question)
        meta = record["metadata"]
        for name, seconds in meta["timings"].items():
            stages.setdefault(name.removesuffix("_s"), []).append(seconds)
        outside = meta["retrieval_time"]
        stages.setdefault("retrieval outside the LLM", []).append(outside)
        stages.setdefault("retrieval outside the LLM and embedder", []).append(
            max(outside - meta["timings"]["embedding_s"], 0.0)
        )
        stages.setdefault("total", []).append(meta["execution_time"])
        assert pipeline.hyde_retriever is not None  # built by from_settings: hyde_lc's own
        n = pipeline.hyde_retriever.n_hypotheses
        if len(calls.calls) != n + 1:
            raise RuntimeError(f"expected {n} hypothesis calls and one answer, saw {calls.calls}")
        per_query.append(
            {
                "question": question,
                "hypotheses": [(c.prompt, c.output) for c in calls.calls[:-1]],
                "answer": (calls.calls[-1].prompt, calls.calls[-1].output),
                "embedded": [question, *meta["hypothetical_documents"]],
            }
        )
    section = {
        "queries": len(questions),
        "collection_chunks": HybridCollection.of(store).chroma.count(),
        "retrieval_method": pipeline.retrieval_method,
        "llm": resolve_llm_spec(llm_spec, "answer"),
        "stages": {name: percentiles(values) for name, values in stages.items()},
    }
    return section, per_query


def cost_per_query(
    per_query: Sequence[dict[str, Any]],
    models: Sequence[str] = REMOTE_MODELS,
    embedding_model: str = REMOTE_EMBEDDINGS,
    pricing: PricingTable | None = None,
) -> dict[str, Any]:
    """USD per 1,000 queries if the hypothesis and answer stages ran on each of ``models``.

    Tokens are this run's prompts and outputs counted with each model's encoding (a remote
    model would write different outputs; their length is the assumption). Standard
    retrieval costs the answer call and one query embedding.
    """
    table = pricing or PricingTable.load()
    embed_price = table.price(embedding_model)
    if embed_price is None:
        raise ValueError(f"no price for {embedding_model!r} in the pricing table")
    rows = []
    for model in models:
        price = table.price(model)
        if price is None:
            raise ValueError(f"no price for {model!r} in the pricing table")
        enc = encoding_for("openai", model)
        embed_enc = encoding_for("openai", embedding_model)

        def usd(inputs: int, outputs: int, p: Price = price) -> float:
            return (inputs * p.input_per_million + outputs * p.output_per_million) / 1e6

        hyp = answer = embed = std_embed = 0.0
        for q in per_query:
            hyp += sum(
                usd(estimate_tokens(p, enc), estimate_tokens(o, enc)) for p, o in q["hypotheses"]
            )
            prompt, output = q["answer"]
            answer += usd(estimate_tokens(prompt, enc), estimate_tokens(output, enc))
            embed += sum(usd(estimate_tokens(t, embed_enc), 0, embed_price) for t in q["embedded"])
            std_embed += usd(estimate_tokens(q["question"], embed_enc), 0, embed_price)
        scale = 1000 / len(per_query)
        hyde_total = (hyp + answer + embed) * scale
        standard_total = (answer + std_embed) * scale
        rows.append(
            {
                "model": model,
                "hypothesis": hyp * scale,
                "answer": answer * scale,
                "embedding": embed * scale,
                "hyde_total": hyde_total,
                "standard_total": standard_total,
                "hyde_extra": hyde_total / standard_total - 1,
            }
        )
    return {"pricing": table.label, "embedding_model": embedding_model, "models": rows}


# -- concurrency --------------------------------------------------------------------------


def concurrency_speed(
    store: Any,
    questions: Sequence[str],
    *,
    latency: float = 0.5,
    max_concurrency: int = 8,
    k: int = 4,
) -> dict[str, Any]:
    """Throughput of the HyDE answer chain: ``abatch`` against sequential ``invoke``."""
    from hyde_lc.answer import build_answer_chain
    from hyde_lc.retrievers.hyde import HyDERetriever

    remote = SimulatedRemoteChat(latency=latency)
    chain = build_answer_chain(HyDERetriever(vectorstore=store, hypothesis_llm=remote, k=k), remote)
    chain.invoke(questions[0])  # warm up embeddings and the collection
    start = time.perf_counter()
    sequential = [chain.invoke(q) for q in questions]
    sequential_s = time.perf_counter() - start
    start = time.perf_counter()
    batched = asyncio.run(chain.abatch(list(questions), {"max_concurrency": max_concurrency}))
    batch_s = time.perf_counter() - start
    same = [[d.id for d in r["documents"]] for r in sequential] == [
        [d.id for d in r["documents"]] for r in batched
    ]
    return {
        "queries": len(questions),
        "latency_s": latency,
        "max_concurrency": max_concurrency,
        "sequential_s": round(sequential_s, 2),
        "sequential_qps": round(len(questions) / sequential_s, 2),
        "abatch_s": round(batch_s, 2),
        "abatch_qps": round(len(questions) / batch_s, 2),
        "speedup": round(sequential_s / batch_s, 2),
        "same_documents": same,
    }


# -- index scale --------------------------------------------------------------------------


def clustered_vectors(
    n: int, dim: int, rng: np.random.Generator, clusters: int = 1000, spread: float = 0.5
) -> np.ndarray:
    """``n`` unit vectors around ``clusters`` random centres.

    Closer to text embeddings' structure than uniform noise (on which HNSW recall is
    unrepresentatively poor); ``spread`` is the noise's norm relative to a centre's.
    """
    centres = rng.standard_normal((clusters, dim)).astype(np.float32)
    vectors = centres[rng.integers(0, clusters, n)]
    vectors += spread * rng.standard_normal((n, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


def _near(points: np.ndarray, rng: np.random.Generator, distance: float = 0.3) -> np.ndarray:
    """Unit vectors a random step of length ``distance`` away from ``points``."""
    step = rng.standard_normal(points.shape).astype(np.float32)
    step *= distance / np.linalg.norm(step, axis=1, keepdims=True)
    moved = points + step
    unit: np.ndarray = moved / np.linalg.norm(moved, axis=1, keepdims=True)
    return unit


def scale_speed(
    sizes: Sequence[int],
    work: Path,
    *,
    dim: int = 384,
    queries: int = 100,
    k: int = 10,
    seed: int = 0,
) -> dict[str, Any]:
    """Search latency and HNSW recall@k at each collection size, on synthetic vectors."""
    from langchain_chroma import Chroma

    from hyde_lc.store.location import StoreLocation

    rng = np.random.default_rng(seed)
    rows = []
    for size in sizes:
        vectors = clustered_vectors(size, dim, rng)
        client = StoreLocation(work / f"scale-{size}", None, "scale").client()
        collection = client.create_collection(
            "scale", configuration={"hnsw": {"space": "cosine"}}, embedding_function=None
        )
        insert_s = add_in_batches(
            collection,
            client.get_max_batch_size(),
            [str(j) for j in range(size)],
            vectors,
            [f"chunk {j}" for j in range(size)],
            desc=f"insert {size:,}",
        )
        store = Chroma(client=client, collection_name="scale")
        probes = _near(vectors[rng.integers(0, size, queries)], rng)
        store.similarity_search_by_vector(probes[0].tolist(), k=k)  # load the index
        times, recalls = [], []
        for probe in probes:
            start = time.perf_counter()
            docs = store.similarity_search_by_vector(probe.tolist(), k=k)
            times.append(time.perf_counter() - start)
            exact = np.argpartition(-(vectors @ probe), k)[:k]
            recalls.append(len({int(d.id) for d in docs if d.id} & set(exact.tolist())) / k)
        stats = percentiles(times)
        rows.append(
            {
                "size": size,
                "insert_s": round(insert_s, 1),
                "p50_ms": stats["p50_ms"],
                "p95_ms": stats["p95_ms"],
                "recall_at_k": float(np.mean(recalls)),
            }
        )
        del client, store, collection
    return {"dim": dim, "k": k, "queries": queries, "rows": rows}


# -- all together -------------------------------------------------------------------------


def run_speed(
    folder: str | Path,
    *,
    sections: Sequence[str] = SECTIONS,
    docs: int = 1000,
    queries: int = 20,
    split: str = "test",
    llm_spec: str | None = None,
    window: int = 1,
    k: int = 4,
    latency: float = 0.5,
    concurrency_queries: int = 16,
    max_concurrency: int = 8,
    scale_sizes: Sequence[int] = (5_000, 50_000, 500_000),
    remote_models: Sequence[str] = REMOTE_MODELS,
    work_dir: str | Path | None = None,
) -> SpeedReport:
    """Run the chosen ``sections`` on the BEIR dataset in ``folder``; see the module doc.

    ``query`` and ``concurrency`` search a collection of the first ``docs`` corpus
    documents: the one ``ingest`` builds, or, without that section, one ingested untimed.
    """
    from hyde_lc.models.loading import load_embeddings

    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        raise ValueError(f"unknown sections {unknown}: choose from {', '.join(SECTIONS)}")
    started = time.perf_counter()
    data = load_beir(folder, split=split)
    embeddings = load_embeddings()
    questions = [data.queries[q] for q in list(data.queries)]
    report = SpeedReport(
        meta={
            "dataset": data.name,
            "date": date.today().isoformat(),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "threads": str(settings().threads or "all cores"),
        }
    )
    with tempfile.TemporaryDirectory(prefix="hyde-speed-", dir=work_dir) as tmp:
        work = Path(tmp)
        store = None
        corpus = dict(list(sorted(data.corpus.items()))[:docs])
        if "ingest" in sections:
            report.sections["ingest"], store = ingest_speed(corpus, work, embeddings)
        elif {"query", "concurrency"} & set(sections):
            from hyde_lc.ingest.files import ingest_paths

            folder, store = _corpus_files(corpus, work, embeddings)
            ingest_paths([folder], store, progress=False)
        if "query" in sections:
            section, per_query = query_speed(
                store, questions[:queries], llm_spec=llm_spec, window=window, k=k
            )
            report.sections["query"] = section
            report.sections["cost"] = cost_per_query(per_query, remote_models)
        if "concurrency" in sections:
            report.sections["concurrency"] = concurrency_speed(
                store,
                questions[:concurrency_queries],
                latency=latency,
                max_concurrency=max_concurrency,
                k=k,
            )
        if "scale" in sections:
            report.sections["scale"] = scale_speed(scale_sizes, work)
    report.meta["seconds"] = round(time.perf_counter() - started, 1)
    return report


def write_speed_report(report: SpeedReport, out: Path) -> dict[str, Path]:
    """Write ``speed.json`` and ``speed.md`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "speed.json", "markdown": out / "speed.md"}
    paths["json"].write_text(json.dumps(report.to_json(), indent=1))
    paths["markdown"].write_text(report.markdown())
    return paths
