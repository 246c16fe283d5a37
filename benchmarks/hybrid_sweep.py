"""Dense, lexical and hybrid retrieval on a BEIR set, with and without HyDE, from caches.

Every configuration is scored on the same query vectors, the same BM25 index
(`hyde_lc.search.lexical`) and the same cached hypotheses, so configurations differ only in
what they fuse. Nothing is generated: hypotheses come from the hypothesis cache
(``--hypothesis-cache``, as written by ``hyde-lc bench``) and a query without enough
cached hypotheses is reported and left out of the HyDE rows. Used to choose the hybrid
default on a train split, then to report every configuration once on test.

    python -m benchmarks.hybrid_sweep scifact --split train --limit 120 \\
        --hypothesis-cache benchmarks/results/hypotheses/scifact-qwen2.5-coder-1.5b.sqlite \\
        --out benchmarks/results/hybrid-sweep-train
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hyde_lc.bench.beir import load_beir
from hyde_lc.bench.retrieval import corpus_index, ir_metrics, paired_bootstrap, paired_cell
from hyde_lc.core.fusion import fuse_mean, reciprocal_rank_fusion, score_fusion
from hyde_lc.hyde.hypotheses import llm_identity, sample_keys
from hyde_lc.hyde.hypothesis_cache import HypothesisCache
from hyde_lc.hyde.prompts import get_prompt
from hyde_lc.models.loading import load_embeddings, load_llm
from hyde_lc.store.lexical_index import LexicalIndex, lexical_query

DEPTH = 100  # candidates per list (and the depth of R@100)


@dataclass(frozen=True)
class Config:
    """One retrieval configuration: what each side searches with, and how they fuse."""

    name: str
    dense: str | None  # None | "query" | "hyde"
    lexical: str | None  # None | "query" | "hyde"
    n: int = 0  # hypotheses used (0: no LLM)
    query_weight: float | None = 0.8  # dense HyDE: the query's share of the mean
    repeats: int = 5  # lexical HyDE: question repeats against the hypotheses
    fusion: str = "score"  # "score" | "zscore" | "rrf"
    alpha: float = 0.5  # dense weight in the fusion (lexical: 1 - alpha)
    depth: int = DEPTH  # candidates taken from each list before fusing


def zscore_fusion(
    scored: list[list[tuple[str, float]]], weights: list[float]
) -> list[tuple[str, float]]:
    """Each list standardised over its own candidates (mean 0, sd 1), missing = its minimum."""
    fused: dict[str, float] = {}
    for items, weight in zip(scored, weights, strict=True):
        values = np.asarray([v for _, v in items], dtype=float)
        mean, sd = float(values.mean()), float(values.std()) or 1.0
        floor = (float(values.min()) - mean) / sd
        seen = dict(items)
        for item in set(fused) | set(seen):
            z = (seen[item] - mean) / sd if item in seen else floor
            fused[item] = fused.get(item, 0.0) + weight * z
    return sorted(fused.items(), key=lambda pair: pair[1], reverse=True)


def cached_hypotheses(cache, llm_string: str, prompt: str, question: str, n: int) -> list[str]:
    """The first ``n`` cached samples for a question (fewer if the cache holds fewer)."""
    rendered = get_prompt(prompt).render(question)
    texts = []
    for key in sample_keys([rendered] * n):
        hit = cache.lookup(key, llm_string)
        if not hit:
            break
        texts.append(str(hit[0].text))
    return texts


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--split", default="test")
    parser.add_argument("--embeddings", default="local:minilm", help="embedding model spec")
    parser.add_argument("--limit", type=int)
    parser.add_argument("--hypothesis-cache", type=Path, required=True)
    parser.add_argument("--llm", default="local:qwen2.5-coder-1.5b")
    parser.add_argument("--prompt", default="generic")
    parser.add_argument("--max-n", type=int, default=4)
    parser.add_argument(
        "--grid", action="store_true", help="the full grid (train); else a short list"
    )
    parser.add_argument(
        "--truncate-tokens",
        type=int,
        help="cut each cached hypothesis to its first N tokens (the writer's own tokenizer): "
        "what generating with max_tokens=N would have given, since sampling stops there",
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    started = time.perf_counter()
    data = load_beir(args.data, split=args.split, limit=args.limit)
    embeddings = load_embeddings(args.embeddings)
    dense_index = corpus_index(data, embeddings)
    lexical = LexicalIndex.in_memory()
    lexical.add(data.corpus.items())
    cache = HypothesisCache(args.hypothesis_cache)  # reads hyde-lc bench's files of any age
    llm_string = llm_identity(load_llm(args.llm, role="hypothesis", max_tokens=256))

    questions = list(data.queries.items())
    hyps = {
        q: cached_hypotheses(cache, llm_string, args.prompt, text, args.max_n)
        for q, text in questions
    }
    if args.truncate_tokens:
        cut = truncator(args.llm, args.truncate_tokens)
        hyps = {q: [cut(h) for h in texts] for q, texts in hyps.items()}
    have = {n: [q for q, _ in questions if len(hyps[q]) >= n] for n in range(1, args.max_n + 1)}
    print({n: len(qs) for n, qs in have.items()}, "queries with n cached hypotheses")
    # embed_query: an asymmetric model (bge, e5) gives queries their own prefix
    qvec = {q: embeddings.embed_query(text) for q, text in data.queries.items()}
    flat = [(q, i, h) for q in data.queries for i, h in enumerate(hyps[q])]
    hvec_rows = embeddings.embed_documents([h for _, _, h in flat]) if flat else []
    hvec: dict[str, list] = {q: [] for q in data.queries}
    for (q, _, _), row in zip(flat, hvec_rows, strict=True):
        hvec[q].append(row)

    def dense(q: str, cfg: Config) -> list[tuple[str, float]]:
        if cfg.dense == "hyde" and cfg.n:
            vectors = [qvec[q], *hvec[q][: cfg.n]]
            w = cfg.query_weight
            weights = None if w is None else [w] + [(1 - w) / cfg.n] * cfg.n
            vector = fuse_mean(vectors, weights)
        else:
            vector = qvec[q]
        docs = dense_index.similarity_search_by_vector(vector, k=max(cfg.depth, DEPTH))
        return [(str(d.id), float(d.metadata["score"])) for d in docs]

    def lex(q: str, cfg: Config) -> list[tuple[str, float]]:
        used = hyps[q][: cfg.n] if cfg.lexical == "hyde" else []
        return lexical.search(
            lexical_query(data.queries[q], used, cfg.repeats), k=max(cfg.depth, DEPTH)
        )

    def run(cfg: Config) -> dict[str, list[tuple[str, float]]]:
        out = {}
        for q in data.queries:
            lists = []
            if cfg.dense:
                lists.append(dense(q, cfg))
            if cfg.lexical:
                lists.append(lex(q, cfg))
            if len(lists) == 1:
                ranked = lists[0]
            elif cfg.fusion == "zscore":
                ranked = zscore_fusion(
                    [lst[: cfg.depth] for lst in lists], [cfg.alpha, 1 - cfg.alpha]
                )
            elif cfg.fusion == "rrf":
                ranked = reciprocal_rank_fusion(
                    [[i for i, _ in lst] for lst in lists], weights=[cfg.alpha, 1 - cfg.alpha]
                )
            else:
                ranked = score_fusion(
                    [lst[: cfg.depth] for lst in lists], [cfg.alpha, 1 - cfg.alpha]
                )
            out[q] = [(doc, float(DEPTH - r)) for r, (doc, _) in enumerate(ranked[:DEPTH])]
        return out

    configs = build_configs(args.grid, args.max_n)
    results = []
    baseline: dict[str, dict[str, float]] = {}
    for cfg in configs:
        needs = cfg.n if (cfg.dense == "hyde" or cfg.lexical == "hyde") else 0
        keep = set(have.get(needs, [])) if needs else set(data.queries)
        if needs and len(keep) < len(data.queries):
            print(f"{cfg.name}: {len(data.queries) - len(keep)} queries lack hypotheses; skipped")
            continue
        metrics, per_query = ir_metrics(data.qrels, run(cfg))
        baseline.setdefault(cfg.name, per_query)
        results.append({"config": cfg.__dict__, "metrics": metrics, "per_query": per_query})
        print(f"{cfg.name:60} nDCG@10 {100 * metrics['nDCG@10']:.1f}")
    write(results, args, data, time.perf_counter() - started, compare_to)


def truncator(llm_spec: str, tokens: int) -> Callable[[str], str]:
    """A function cutting text to its first ``tokens`` tokens of the local writer's tokenizer."""
    llm = load_llm(llm_spec, role="hypothesis")
    engine = llm._engine()  # the loaded llama.cpp engine: its own /tokenize and /detokenize

    def cut(text: str) -> str:
        ids = engine.post("/tokenize", {"content": text})["tokens"]
        if len(ids) <= tokens:
            return text
        return str(engine.post("/detokenize", {"tokens": ids[:tokens]})["content"]).strip()

    return cut


def compare_to(results: list[dict]) -> None:
    """Add paired-bootstrap deltas against the dense and the best no-LLM configurations."""
    by_name = {r["config"]["name"]: r for r in results}
    no_llm = [r for r in results if r["config"]["n"] == 0]
    best = max(no_llm, key=lambda r: r["metrics"]["nDCG@10"])
    refs = {"dense": by_name.get("dense"), "best_no_llm": best}
    for r in results:
        for label, ref in refs.items():
            if ref is None or ref is r:
                continue
            order = sorted(ref["per_query"])
            delta, (low, high) = paired_bootstrap(
                [ref["per_query"][q] for q in order], [r["per_query"][q] for q in order]
            )
            r[f"vs_{label}"] = {
                "reference": ref["config"]["name"],
                "delta": delta,
                "ci": [low, high],
            }


def build_configs(grid: bool, max_n: int) -> list[Config]:
    """The short list (baselines and candidates), or the train grid."""
    configs = [
        Config("dense", "query", None),
        Config("bm25", None, "query"),
        Config("hybrid rrf", "query", "query", fusion="rrf"),
        Config("hybrid score a=0.5", "query", "query"),
    ]
    alphas = (0.3, 0.4, 0.5, 0.6, 0.7) if grid else (0.5,)
    if grid:
        configs += [
            Config(f"hybrid score a={a}", "query", "query", alpha=a) for a in alphas if a != 0.5
        ]
        configs += [
            Config(f"hybrid score a={a} depth={d}", "query", "query", alpha=a, depth=d)
            for a in (0.4, 0.5, 0.6)
            for d in (20, 50, 200, 1000)
        ]
        configs += [
            Config(f"hybrid zscore a={a}", "query", "query", fusion="zscore", alpha=a)
            for a in (0.3, 0.4, 0.5, 0.6, 0.7)
        ]
    ns = range(1, max_n + 1) if grid else sorted({1, max_n})
    for n in ns:
        configs += [
            Config(f"dense hyde w=0.8 n={n}", "hyde", None, n),
            Config(f"bm25 q2d r=5 n={n}", None, "hyde", n),
        ]
        weights: tuple[float | None, ...] = (None, 0.6, 0.8) if grid else (0.8,)
        repeats = (1, 3, 5, 10) if grid else (5,)
        for w, r, a in itertools.product(weights, repeats, alphas):
            wname = "paper" if w is None else f"{w:g}"
            configs += [
                Config(
                    f"hybrid score hyde both w={wname} r={r} a={a} n={n}",
                    "hyde",
                    "hyde",
                    n,
                    w,
                    r,
                    "score",
                    a,
                ),
            ]
        configs += [
            Config(f"hybrid score hyde dense-only w=0.8 a=0.5 n={n}", "hyde", "query", n),
            Config(f"hybrid score hyde lexical-only r=5 a=0.5 n={n}", "query", "hyde", n),
            Config(f"hybrid rrf hyde both w=0.8 r=5 n={n}", "hyde", "hyde", n, fusion="rrf"),
        ]
    return configs


def write(
    results: list[dict], args: argparse.Namespace, data, seconds: float, finish: Callable
) -> None:
    finish(results)
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {
        "dataset": data.name,
        "split": args.split,
        "embeddings": args.embeddings,
        "queries": len(data.queries),
        "hypothesis_cache": str(args.hypothesis_cache),
        "llm": args.llm,
        "prompt": args.prompt,
        "truncate_tokens": args.truncate_tokens,
        "seconds": round(seconds, 1),
        "date": time.strftime("%Y-%m-%d"),
    }
    (args.out / "results.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    lines = [
        "| configuration | nDCG@10 | R@100 | vs dense | vs best no-LLM |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        cells = []
        for label in ("vs_dense", "vs_best_no_llm"):
            v = r.get(label)
            cells.append(paired_cell(v))
        m = r["metrics"]
        lines.append(
            f"| {r['config']['name']} | {100 * m['nDCG@10']:.1f} | {100 * m['R@100']:.1f}"
            f" | {cells[0]} | {cells[1]} |"
        )
    (args.out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
