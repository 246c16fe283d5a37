"""Does tantivy's one-byte document length cost the hybrid default anything?

Tantivy (the engine of `hyde_lc.search.lexical`) stores each document's length in one byte, as
Lucene does: exact up to a few dozen terms, then in steps of a few percent. This script
scores the same queries with the same terms (`hyde_lc.search.lexical.analyze`), the same BM25
(Lucene's idf, k1 1.2, b 0.75) and exact lengths, and reports BM25 alone and the hybrid
default (min-max score fusion with the same dense list, dense weight 0.5, 100 candidates
per list) both ways, with a paired bootstrap over queries. Only the document lengths
differ between the two columns.

    python -m benchmarks.bm25_lengths scifact --split train \\
        --out benchmarks/results/bm25-lengths-scifact-train.json
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

import numpy as np

from hyde_lc.bench.beir import load_beir
from hyde_lc.bench.retrieval import (
    DEPTH,
    corpus_index,
    corpus_lexical,
    ir_metrics,
    paired_bootstrap,
)
from hyde_lc.core.fusion import score_fusion
from hyde_lc.models.loading import load_embeddings
from hyde_lc.store.lexical_index import analyze, lexical_query

K1, B = 1.2, 0.75


class ExactBM25:
    """BM25 with exact document lengths over `analyze`'s terms.

    Hand-written on purpose: the comparison must change nothing but the lengths, and the
    libraries that score with exact lengths (bm25s, SQLite FTS5) tokenise their own way.

    Example:
        >>> index = ExactBM25({"a": "fog horns", "b": "tide tables"})
        >>> index.search(lexical_query("fog"), k=1)[0][0]
        'a'

    """

    def __init__(self, corpus: dict[str, str]) -> None:
        self.ids = list(corpus)
        postings: dict[str, tuple[list[int], list[int]]] = {}
        lengths = []
        for row, doc_id in enumerate(self.ids):
            terms = analyze(corpus[doc_id])
            lengths.append(len(terms))
            for term, count in Counter(terms).items():
                rows, counts = postings.setdefault(term, ([], []))
                rows.append(row)
                counts.append(count)
        self.lengths = np.asarray(lengths, dtype=np.float64)
        self.norm = K1 * (1 - B + B * self.lengths / self.lengths.mean())
        n = len(self.ids)
        self.postings = {
            term: (np.asarray(rows), np.asarray(counts, dtype=np.float64))
            for term, (rows, counts) in postings.items()
        }
        self.idf = {
            term: float(np.log(1 + (n - len(rows) + 0.5) / (len(rows) + 0.5)))
            for term, (rows, _) in postings.items()
        }

    def search(self, weights: Counter[str], k: int) -> list[tuple[str, float]]:
        """The ``k`` best documents as ``(id, score)``, best first (as `LexicalSearch`)."""
        scores = np.zeros(len(self.ids))
        for term, weight in weights.items():
            if term not in self.postings:
                continue
            rows, tf = self.postings[term]
            scores[rows] += weight * self.idf[term] * tf * (K1 + 1) / (tf + self.norm[rows])
        top = np.argsort(-scores, kind="stable")[:k]
        return [(self.ids[i], float(scores[i])) for i in top if scores[i] > 0]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("data", type=Path, help="BEIR folder (SciFact)")
    parser.add_argument("--split", default="train")
    parser.add_argument("--limit", type=int)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    started = time.perf_counter()
    data = load_beir(args.data, split=args.split, limit=args.limit)
    embeddings = load_embeddings("local:minilm")
    dense_index = corpus_index(data, embeddings)
    tantivy = corpus_lexical(dense_index, data)
    exact = ExactBM25(data.corpus)
    vectors = dict(
        zip(data.queries, embeddings.embed_documents(list(data.queries.values())), strict=True)
    )
    runs: dict[str, dict[str, list[tuple[str, float]]]] = {}
    for q, text in data.queries.items():
        dense = [
            (str(d.id), float(d.metadata["score"]))
            for d in dense_index.similarity_search_by_vector(vectors[q], k=DEPTH)
        ]
        terms = lexical_query(text)
        for engine, index in (("tantivy", tantivy), ("exact lengths", exact)):
            lexical = index.search(terms, DEPTH)
            hybrid = score_fusion([dense, lexical], [0.5, 0.5])
            for name, ranked in ((f"BM25, {engine}", lexical), (f"hybrid, {engine}", hybrid)):
                runs.setdefault(name, {})[q] = [
                    (doc, float(DEPTH - rank)) for rank, (doc, _) in enumerate(ranked[:DEPTH])
                ]
    order = sorted(data.queries)
    rows = {}
    for name, run in runs.items():
        metrics, per_query = ir_metrics(data.qrels, run)
        rows[name] = {"metrics": metrics, "per_query_ndcg": per_query}
    for kind in ("BM25", "hybrid"):
        delta, (low, high) = paired_bootstrap(
            [rows[f"{kind}, tantivy"]["per_query_ndcg"][q] for q in order],
            [rows[f"{kind}, exact lengths"]["per_query_ndcg"][q] for q in order],
        )
        rows[f"{kind}, exact lengths"]["vs tantivy"] = {"delta": delta, "ci": [low, high]}
    print(f"{data.name} {args.split}, {len(order)} queries")
    print("| run | nDCG@10 | R@100 | exact lengths vs tantivy (95% CI) |")
    print("|---|---|---|---|")
    for name, row in rows.items():
        m, vs = row["metrics"], row.get("vs tantivy")
        change = ""
        if vs:
            low, high = vs["ci"]
            change = f"{100 * vs['delta']:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}]"
        print(f"| {name} | {100 * m['nDCG@10']:.1f} | {100 * m['R@100']:.1f} | {change} |")
    meta = {
        "dataset": data.name,
        "split": args.split,
        "queries": len(order),
        "date": time.strftime("%Y-%m-%d"),
        "seconds": round(time.perf_counter() - started, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
