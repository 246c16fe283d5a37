"""Embedding models compared on a BEIR set: dense and hybrid retrieval, and ingest cost.

Each model (the reference, then a candidate at each ``--windows`` token window) runs the
package's no-LLM configurations through `hyde_lc.bench.run_benchmark` (``standard``:
dense; ``bm25``; ``hybrid``: both fused, the default without a hypothesis model), so
queries go through ``embed_query`` and documents through ``embed_documents`` as users
run them (``scifact``: the BEIR SciFact folder). ``--dense-weights`` adds hybrid rows
at other dense weights, for every model. Every row's nDCG@10 is paired by query with
the reference model's same configuration (95% bootstrap interval) and with the
candidate's first window; the results file keeps per-query nDCG@10 for other pairings.

Ingest cost: the first run embeds the whole corpus (cached afterwards per corpus, model
and window in ``~/.cache/hyde_lc/bench``); its CPU seconds (all threads of this process)
and wall time are recorded. ``--speed-docs N`` also embeds the same N random documents
(seed 0), then the same documents cut as ingest cuts them by default (1,000-character
chunks), with each model, the models alternating round by round (``--speed-rounds``)
so that all see the same machine load; CPU seconds per document is the figure to read
on a shared machine, documents per second the one a user sees.

    python -m benchmarks.embedders scifact --split train \\
        --candidate local:bge-small-en-v1.5 --windows 256 512 \\
        --out benchmarks/results/embedders/scifact-train.json
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import time
from datetime import date
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings

from benchmarks.provenance import head_commit
from hyde_lc.bench.beir import load_beir
from hyde_lc.bench.retrieval import (
    HYBRID,
    BenchMode,
    corpus_index,
    paired_bootstrap,
    paired_cell,
    run_benchmark,
)
from hyde_lc.ingest.splitting import LATIN_CHUNK_SIZE, make_splitter
from hyde_lc.models.loading import load_embeddings


def model(spec: str, window: int | None) -> tuple[str, Embeddings]:
    """A label and the embeddings for ``spec`` cut at ``window`` tokens (None: default)."""
    overrides = {} if window is None else {"max_tokens": window}
    embeddings = load_embeddings(spec, **overrides)
    used = getattr(embeddings, "max_tokens", None)
    return (f"{spec} (max {used})" if used else spec), embeddings


def untruncated_token_counts(embeddings: Embeddings, texts: list[str]) -> list[int]:
    """Tokens of each text before the model's window cuts it (its tokenizer, uncut)."""
    from tokenizers import Tokenizer

    _, tokenizer_file = embeddings.model_files()  # type: ignore[attr-defined]
    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return [len(encoding.ids) for encoding in tokenizer.encode_batch(texts)]


def timed(action: Any) -> tuple[Any, float, float]:
    """``action()``, its CPU seconds (every thread of the process) and wall seconds."""
    cpu, wall = time.process_time(), time.perf_counter()
    out = action()
    return out, time.process_time() - cpu, time.perf_counter() - wall


def speed(models: list[tuple[str, Embeddings]], texts: list[str], rounds: int) -> dict:
    """CPU and wall seconds per model for embedding ``texts``, models alternating."""
    for _, embeddings in models:  # load sessions outside the timed region
        embeddings.embed_documents(texts[:2])
    runs: dict[str, list[dict[str, float]]] = {label: [] for label, _ in models}
    for r in range(rounds):
        order = models if r % 2 == 0 else models[::-1]
        for label, embeddings in order:
            _, cpu, wall = timed(lambda e=embeddings: e.embed_documents(texts))
            runs[label].append({"cpu_s": cpu, "wall_s": wall})
            print(f"speed round {r}: {label}: {cpu:.1f} CPU-s, {wall:.1f} s", flush=True)
    out = {}
    first = runs[models[0][0]]
    for label, items in runs.items():
        cpu = sum(i["cpu_s"] for i in items)
        wall = sum(i["wall_s"] for i in items)
        n = len(texts) * len(items)
        out[label] = {
            "rounds": items,
            "cpu_s_per_doc": cpu / n,
            "docs_per_s": n / wall,
            # Throughput against the first model, round by round (same load, same texts).
            "speedup": {
                key: spread([a[key] / b[key] for a, b in zip(first, items, strict=True)])
                for key in ("cpu_s", "wall_s")
            },
        }
    return out


def spread(values: list[float]) -> dict[str, float]:
    """Median, minimum and maximum of per-round figures."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    return {"median": median, "min": ordered[0], "max": ordered[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--split", default="test")
    parser.add_argument("--limit", type=int)
    parser.add_argument("--reference", default="local:minilm")
    parser.add_argument("--candidate", default="local:bge-small-en-v1.5")
    parser.add_argument("--windows", type=int, nargs="+", default=[512])
    parser.add_argument(
        "--dense-weights",
        type=float,
        nargs="*",
        default=[],
        help="also run hybrid with these dense weights (the default's is 0.5)",
    )
    parser.add_argument("--speed-docs", type=int, default=0)
    parser.add_argument("--speed-rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    started = time.perf_counter()
    data = load_beir(args.data, split=args.split, limit=args.limit)
    models = [model(args.reference, None)] + [model(args.candidate, w) for w in args.windows]
    runs: dict[str, dict] = {}
    for label, embeddings in models:
        _, cpu, wall = timed(lambda e=embeddings: corpus_index(data, e))
        print(f"{label}: corpus ready in {wall:.0f} s, {cpu:.0f} CPU-s", flush=True)
        weighted = [BenchMode({"n_hypotheses": 0, "dense_weight": w}) for w in args.dense_weights]
        report = run_benchmark(args.data, split=args.split, limit=args.limit,
                               modes=[HYBRID, *weighted], embeddings=embeddings)  # fmt: skip
        runs[label] = {
            "corpus_cpu_s": cpu,  # about 0 when the matrix came from the cache
            "corpus_wall_s": wall,
            "results": {r.mode.label: r for r in report.results},
        }
        print(report.markdown(), flush=True)

    reference = models[0][0]
    first = models[1][0] if len(models) > 1 else None
    rows = []
    for label, run in runs.items():
        for mode, result in run["results"].items():
            row: dict[str, Any] = {
                "model": label,
                "configuration": mode,
                "metrics": result.metrics,
                "per_query_ndcg": result.per_query_ndcg,
            }
            for name, other in (("vs_reference", reference), ("vs_first_window", first)):
                if other is None or label in (other, reference):
                    continue
                results = runs[other]["results"]
                base = (results.get(mode) or results[HYBRID.label]).per_query_ndcg
                order = sorted(base)
                delta, ci = paired_bootstrap(
                    [base[q] for q in order], [result.per_query_ndcg[q] for q in order]
                )
                compared = mode if mode in results else HYBRID.label
                row[name] = {"reference": f"{other} {compared}", "delta": delta, "ci": list(ci)}
            rows.append(row)

    timing = None
    if args.speed_docs:
        ids = random.Random(0).sample(sorted(data.corpus), args.speed_docs)
        texts = [data.corpus[i] for i in ids]
        splitter = make_splitter()  # the ingest default
        chunks = [chunk for text in texts for chunk in splitter.split_text(text)]
        timing = {}
        for name, batch in (("documents", texts), (f"{LATIN_CHUNK_SIZE}-char chunks", chunks)):
            tokens = untruncated_token_counts(models[-1][1], batch)
            print(f"speed: {len(batch)} {name}", flush=True)
            timing[name] = {
                "texts": len(batch),
                "over_256_tokens": sum(n > 256 for n in tokens) / len(tokens),
                "models": speed(models, batch, args.speed_rounds),
            }

    commit = head_commit()
    meta = {
        "dataset": data.name,
        "split": args.split,
        "queries": len(data.queries),
        "corpus": len(data.corpus),
        "date": date.today().isoformat(),
        "commit": commit,
        "machine": platform.machine(),
        "seconds": round(time.perf_counter() - started, 1),
        "corpus_embedding": {
            label: {"cpu_s": run["corpus_cpu_s"], "wall_s": run["corpus_wall_s"]}
            for label, run in runs.items()
        },
        "speed": timing,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(markdown(rows, meta))


def markdown(rows: list[dict], meta: dict) -> str:
    """The rows as a Markdown table, then the ingest figures."""
    lines = [
        "| model | configuration | nDCG@10 | R@100 | vs reference (95% CI) | vs first window |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        m = row["metrics"]
        lines.append(
            f"| {row['model']} | {row['configuration']} | {100 * m['nDCG@10']:.1f} "
            f"| {100 * m['R@100']:.1f} | {paired_cell(row.get('vs_reference'))} "
            f"| {paired_cell(row.get('vs_first_window'))} |"
        )
    lines += ["", "| model | corpus CPU-s | corpus wall s |", "|---|---|---|"]
    for label, t in meta["corpus_embedding"].items():
        lines.append(f"| {label} | {t['cpu_s']:.0f} | {t['wall_s']:.0f} |")
    for name, timing in (meta["speed"] or {}).items():
        share = f"{100 * timing['over_256_tokens']:.0f}% over 256 tokens"
        lines += [
            "",
            f"| model | {timing['texts']} {name} ({share}): CPU-s per text | texts/s "
            "| throughput vs first model per CPU-s, median [min, max] over rounds | per wall s |",
            "|---|---|---|---|---|",
        ]
        for label, t in timing["models"].items():
            ratio = t.get("speedup") or {}
            cells = [
                f"{r['median']:.2f}x [{r['min']:.2f}, {r['max']:.2f}]" if r else ""
                for r in (ratio.get("cpu_s"), ratio.get("wall_s"))
            ]
            lines.append(
                f"| {label} | {t['cpu_s_per_doc']:.3f} | {t['docs_per_s']:.1f} "
                f"| {cells[0]} | {cells[1]} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
