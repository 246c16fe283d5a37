"""A document scored by its best chunk (MaxP) against its whole-document vector, on BEIR.

The retrieval benchmark (`hyde_lc.bench.retrieval.corpus_index`) embeds each document
(``title + " " + text``) as one vector, and MiniLM reads only its first 256 tokens, so the
end of a long abstract never reaches the dense side. Ingestion instead splits a document
into chunks (`hyde_lc.ingest.files.split_document`: 1,000 characters with an overlap of 200 for
Latin text). Here every document of the corpus is split as ingestion splits it, each chunk
is embedded once with the package's default embedder (``local:minilm-dq``; the chunk
matrix is cached beside the whole-document one, keyed by corpus, model and chunking), and
a document's MaxP score is the largest cosine of its chunks with the query.

Each dense list gives its 100 best documents: ``whole`` (the whole-document vector, as
today), ``maxp`` (chunks ranked, reduced to documents by their best chunk), ``both`` (the
sum of the two cosines). Hybrid rows fuse a dense list with BM25 (`corpus_lexical`, the
query as the package's default sends it) through `hyde_lc.core.fusion.score_fusion`, the
package's min-max fusion, at the default dense weight 0.5; ``three`` fuses BM25 0.5,
whole 0.25 and MaxP 0.25. Every row's nDCG@10 is paired by query (95% bootstrap,
`hyde_lc.bench.paired_bootstrap`) with the default hybrid (BM25 + whole, 0.5) and, for
dense rows, with dense ``whole``; the results file keeps per-query nDCG@10 and the
corpus' chunk statistics (documents of more than one chunk, documents beyond the model's
token window). ``scifact`` is the BEIR SciFact folder; ``--rows`` picks rows (the default
hybrid always runs).

    python -m benchmarks.chunk_maxp scifact --split train \\
        --out benchmarks/results/chunk_maxp/train.json
    python -m benchmarks.chunk_maxp scifact --split test --rows three dense-both \\
        --out benchmarks/results/chunk_maxp/test.json
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.ceiling import paired
from benchmarks.provenance import head_commit
from hyde_lc.bench.beir import BeirDataset, load_beir
from hyde_lc.bench.retrieval import (
    DEPTH,
    ExactIndex,
    cached_matrix,
    corpus_index,
    corpus_lexical,
    ir_metrics,
    paired_cell,
    top_k,
)
from hyde_lc.core.fusion import score_fusion
from hyde_lc.core.language import dominant_script
from hyde_lc.ingest.files import resolve_chunking, split_document
from hyde_lc.ingest.reading import LoadedDocument
from hyde_lc.models.loading import embedding_model_id, load_embeddings
from hyde_lc.models.weights import cache_dir
from hyde_lc.store.lexical_index import DEFAULT_QUERY_REPEATS, lexical_query

MODEL = "local:minilm-dq"
ROWS: dict[str, dict[str, float]] = {
    "dense": {"whole": 1.0},
    "dense-maxp": {"maxp": 1.0},
    "dense-both": {"both": 1.0},
    "hybrid": {"whole": 0.5, "bm25": 0.5},
    "hybrid-maxp": {"maxp": 0.5, "bm25": 0.5},
    "hybrid-both": {"both": 0.5, "bm25": 0.5},
    "three": {"whole": 0.25, "maxp": 0.25, "bm25": 0.5},
}
"""Each row's lists and weights, dense lists first (the retriever passes [dense, lexical])."""
DEFAULT_ROW = "hybrid"
DENSE_ROW = "dense"
NAMES = {
    "dense": "dense, whole document (today)",
    "dense-maxp": "dense, MaxP (best chunk)",
    "dense-both": "dense, whole + MaxP cosines",
    "hybrid": "hybrid default: BM25 0.5 + whole 0.5",
    "hybrid-maxp": "hybrid: BM25 0.5 + MaxP 0.5",
    "hybrid-both": "hybrid: BM25 0.5 + (whole + MaxP) 0.5",
    "three": "BM25 0.5 + whole 0.25 + MaxP 0.25",
}


class Chunks:
    """Every document's chunks as ingestion splits them, and their cached vectors."""

    def __init__(self, data: BeirDataset, index: ExactIndex):
        embeddings = index.embeddings
        assert embeddings is not None
        self.model = embedding_model_id(embeddings)
        self.ids = index.ids  # the whole-document matrix's order
        texts: list[str] = []
        owners: list[int] = []
        settings = set()
        for position, doc_id in enumerate(self.ids):
            text = data.corpus[doc_id]
            doc = LoadedDocument(source=doc_id, text=text, page_starts=[0], page_numbers=[1])
            settings.add(resolve_chunking(dominant_script(text), self.model))
            for chunk in split_document(doc, self.model):
                texts.append(chunk.text)
                owners.append(position)
        self.texts = texts
        self.owner = np.asarray(owners)
        # chunks are grouped by document, in order: a document's first chunk starts a run
        self.starts = np.flatnonzero(np.r_[True, np.diff(self.owner) != 0])
        if len(self.starts) != len(self.ids):
            raise RuntimeError("a document gave no chunk")
        self.counts = np.diff(np.r_[self.starts, len(texts)])
        chunking = "_".join(f"{s}-{o}" for s, o in sorted(settings))
        model = self.model.replace(":", "_").replace("/", "_")
        window = getattr(embeddings, "max_tokens", "")
        path = (
            cache_dir()
            / "bench"
            / f"{data.name}-{data.fingerprint()}-{model}-max{window}-chunks{chunking}.npy"
        )
        self.chunking = chunking
        fresh = not path.is_file()
        started = time.perf_counter()
        # the model sorts each batch by length: larger batches, less padding
        self.matrix = cached_matrix(path, texts, embeddings, 256, "embedding chunks")
        self.embed_seconds = round(time.perf_counter() - started, 1) if fresh else None
        if len(self.matrix) != len(texts):
            raise RuntimeError(f"{path} holds {len(self.matrix)} rows, not {len(texts)}")

    def maxp(self, query: np.ndarray) -> np.ndarray:
        """Every document's best chunk cosine with ``query`` (unit vector)."""
        return np.maximum.reduceat(self.matrix @ query, self.starts)


def statistics(data: BeirDataset, index: ExactIndex, chunks: Chunks) -> dict[str, Any]:
    """How many documents are several chunks, and how many pass the model's token window."""
    from tokenizers import Tokenizer

    embeddings = index.embeddings
    _, tokenizer_file = embeddings.model_files()  # type: ignore[union-attr]
    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    tokenizer.no_truncation()
    window = int(embeddings.max_tokens)  # type: ignore[union-attr]
    doc_tokens = np.asarray(
        [len(e.ids) for e in tokenizer.encode_batch([data.corpus[i] for i in chunks.ids])]
    )
    chunk_tokens = np.asarray([len(e.ids) for e in tokenizer.encode_batch(chunks.texts)])
    single = np.flatnonzero(chunks.counts == 1)
    same_text = sum(chunks.texts[chunks.starts[i]] == data.corpus[chunks.ids[i]] for i in single)
    # cosine of a one-chunk document's chunk vector with its whole-document vector
    cos = np.einsum("ij,ij->i", chunks.matrix[chunks.starts[single]], index.matrix[single])
    return {
        "documents": len(chunks.ids),
        "chunks": len(chunks.texts),
        "chunking": chunks.chunking,
        "documents_with_several_chunks": int((chunks.counts > 1).sum()),
        "max_chunks_per_document": int(chunks.counts.max()),
        "token_window": window,
        "documents_beyond_window": int((doc_tokens > window).sum()),
        "documents_several_chunks_and_beyond_window": int(
            ((doc_tokens > window) & (chunks.counts > 1)).sum()
        ),
        "document_tokens_median_p90_max": [
            int(np.median(doc_tokens)),
            int(np.percentile(doc_tokens, 90)),
            int(doc_tokens.max()),
        ],
        "chunks_beyond_window": int((chunk_tokens > window).sum()),
        "one_chunk_documents_with_identical_text": int(same_text),
        "one_chunk_documents_min_cosine_chunk_vs_whole": float(cos.min()) if len(cos) else None,
    }


class Lists:
    """Each query's candidate lists: BM25, whole-document, MaxP and summed dense."""

    def __init__(self, data: BeirDataset, index: ExactIndex, chunks: Chunks):
        self.data = data
        self.index = index
        self.chunks = chunks
        self.lexical = corpus_lexical(index, data)
        embeddings = index.embeddings
        assert embeddings is not None
        self.vectors = {
            q: np.asarray(embeddings.embed_query(text), dtype=np.float32)
            for q, text in data.queries.items()
        }
        self.cache: dict[tuple[str, str], list[tuple[str, float]]] = {}

    def _top(self, scores: np.ndarray) -> list[tuple[str, float]]:
        return [(self.index.ids[i], score) for i, score in top_k(scores, DEPTH)]  # as ExactIndex

    def get(self, name: str, q: str) -> list[tuple[str, float]]:
        key = (name, q)
        if key not in self.cache:
            if name == "bm25":
                terms = lexical_query(self.data.queries[q], [], DEFAULT_QUERY_REPEATS)
                self.cache[key] = self.lexical.search(terms, DEPTH)
            else:
                vector = self.vectors[q]
                vector = vector / max(float(np.linalg.norm(vector)), 1e-12)
                whole = self.index.matrix @ vector
                scores = {
                    "whole": lambda: whole,
                    "maxp": lambda: self.chunks.maxp(vector),
                    "both": lambda: whole + self.chunks.maxp(vector),
                }[name]()
                self.cache[key] = self._top(scores)
        return self.cache[key]

    def rank(self, row: str, q: str) -> list[tuple[str, float]]:
        weights = ROWS[row]
        ranked = score_fusion([self.get(name, q) for name in weights], list(weights.values()))
        return [(doc, float(DEPTH - r)) for r, (doc, _) in enumerate(ranked[:DEPTH])]


def paired_rows(base: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """``other``'s nDCG@10 against ``base``'s, paired by query (`benchmarks.ceiling.paired`)."""
    return paired(base["per_query_ndcg"], other["per_query_ndcg"], base["name"])


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--split", default="train")
    parser.add_argument("--limit", type=int, help="the first N judged queries")
    parser.add_argument(
        "--rows", nargs="*", choices=list(ROWS), help=f"rows to run (default: all of {list(ROWS)})"
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    started = time.perf_counter()
    data = load_beir(args.data, split=args.split, limit=args.limit)
    rows = list(dict.fromkeys([DEFAULT_ROW, *(args.rows or ROWS)]))
    if any(r.startswith("dense-") for r in rows):
        rows.insert(1, DENSE_ROW)
        rows = list(dict.fromkeys(rows))
    index = corpus_index(data, load_embeddings(MODEL))
    chunks = Chunks(data, index)
    if chunks.embed_seconds is not None:
        print(f"{len(chunks.texts)} chunks embedded in {chunks.embed_seconds:.0f} s", flush=True)
    stats = statistics(data, index, chunks)
    print(json.dumps(stats), flush=True)
    lists = Lists(data, index, chunks)
    print(f"query vectors ready in {time.perf_counter() - started:.0f} s", flush=True)

    results: dict[str, dict[str, Any]] = {}
    for row in rows:
        runs = {q: lists.rank(row, q) for q in data.queries}
        metrics, per_query = ir_metrics(data.qrels, runs)
        results[row] = {
            "row": row,
            "name": NAMES[row],
            "weights": ROWS[row],
            "metrics": metrics,
            "per_query_ndcg": per_query,
        }
        print(f"{NAMES[row]:45} nDCG@10 {100 * metrics['nDCG@10']:.1f}", flush=True)
    for row, r in results.items():
        if row != DEFAULT_ROW:
            r["vs_default"] = paired_rows(results[DEFAULT_ROW], r)
        if row.startswith("dense-") and DENSE_ROW in results:
            r["vs_dense"] = paired_rows(results[DENSE_ROW], r)

    meta = {
        "dataset": data.name,
        "split": args.split,
        "limit": args.limit,
        "queries": len(data.queries),
        "corpus": len(data.corpus),
        "embeddings": MODEL,
        "depth": DEPTH,
        "chunk_statistics": stats,
        "chunk_embedding_seconds": chunks.embed_seconds,
        "date": date.today().isoformat(),
        "commit": head_commit(),
        "machine": platform.machine(),
        "seconds": round(time.perf_counter() - started, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "rows": list(results.values())}, indent=1))
    table = markdown(list(results.values()))
    args.out.with_suffix(".md").write_text(table + "\n")
    print(table)


def markdown(results: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table (metrics x 100)."""
    lines = [
        "| row | nDCG@10 | R@100 | vs default hybrid (95% CI) | vs dense whole (95% CI) |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        m = r["metrics"]
        cells = " | ".join(paired_cell(r.get(key)) for key in ("vs_default", "vs_dense"))
        lines.append(
            f"| {r['name']} | {100 * m['nDCG@10']:.1f} | {100 * m['R@100']:.1f} | {cells} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
