"""The lexical index at 5k, 50k and 500k chunks: build time, size on disk, memory, query time.

Chunks are SciFact abstracts (title + text, about 1,500 characters), cycled with a
numbered suffix to reach each size, so term statistics stay realistic. Each size is built
in a fresh folder with `hyde_lc.search.lexical.LexicalIndex` exactly as ingestion builds it
(texts and each chunk's metadata, 15 fields shaped like an ingested chunk's)
(5,000 chunks per commit), then queried with the 300 SciFact test claims alone and with
their cached hypothesis (the hybrid default's lexical query: the claim's terms 5 times,
plus the hypothesis). Memory is the process's peak RSS growth while building.

    python -m benchmarks.lexical_scale scifact --sizes 5000 50000 500000 \\
        --hypotheses benchmarks/results/hypotheses/scifact-test-generic-sample0.json \\
        --out benchmarks/results/lexical_scale.json
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from hyde_lc.bench.beir import load_beir
from hyde_lc.store.lexical_index import LexicalIndex, lexical_query

BATCH = 5000


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def folder_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def chunk_metadata(i: int) -> dict[str, object]:
    """Metadata shaped like an ingested chunk's (the index holds it for search filters)."""
    document, position = divmod(i, 20)
    return {
        "source": f"/docs/paper-{document}.pdf",
        "file_name": f"paper-{document}.pdf",
        "doc_id": f"{document:020x}",
        "doc_version": f"{document:032x}",
        "chunk_index": position,
        "chunk_count": 20,
        "page": 1 + position // 3,
        "page_end": 1 + (position + 1) // 3,
        "start_index": position * 800,
        "gap_before": " ",
        "chunk_size": 1000,
        "chunk_overlap": 200,
        "script": "latin",
        "embedding_model": "local:minilm",
        "hyde_lc_seq": 1 + document // 50,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--sizes", type=int, nargs="+", default=[5000, 50000, 500000])
    parser.add_argument("--hypotheses", type=Path, help="JSON {query id: hypothesis} (optional)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    data = load_beir(args.data, split="test")
    texts = list(data.corpus.values())
    queries = list(data.queries.items())
    hypotheses = json.loads(args.hypotheses.read_text()) if args.hypotheses else {}
    rows = []
    for size in args.sizes:
        work = Path(tempfile.mkdtemp(prefix="lexical-scale-"))
        rss_before = peak_rss_mb()
        start = time.perf_counter()
        index = LexicalIndex.create(work / "index")
        for begin in range(0, size, BATCH):
            batch = [
                (f"c{i}", f"{texts[i % len(texts)]} part {i // len(texts)}", chunk_metadata(i))
                for i in range(begin, min(size, begin + BATCH))
            ]
            index.add(batch)
        build_s = time.perf_counter() - start
        row = {
            "chunks": size,
            "build_s": round(build_s, 1),
            "chunks_per_s": round(size / build_s),
            "disk_mb": round(folder_mb(work / "index"), 1),
            "peak_rss_growth_mb": round(peak_rss_mb() - rss_before, 1),
        }
        for name, with_hypothesis in (("query", False), ("query+hypothesis", True)):
            times = []
            for query_id, text in queries:
                extra = [hypotheses[query_id]] if with_hypothesis and query_id in hypotheses else []
                if with_hypothesis and not extra:
                    continue
                t0 = time.perf_counter()
                index.search(lexical_query(text, extra), k=100)
                times.append(1000 * (time.perf_counter() - t0))
            if times:
                row[f"{name}_p50_ms"] = round(statistics.median(times), 2)
                row[f"{name}_p95_ms"] = round(statistics.quantiles(times, n=20)[-1], 2)
        rows.append(row)
        print(row, flush=True)
        shutil.rmtree(work, ignore_errors=True)
    result = {"date": time.strftime("%Y-%m-%d"), "rows": rows}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
