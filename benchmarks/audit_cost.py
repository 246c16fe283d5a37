"""The cost of auditing a collection's lexical index against its chunks, at 5k and 50k chunks.

The audit (`hyde_lc.store.collection.HybridCollection.audit`) reads every chunk's text and
metadata from Chroma in pages and compares a fingerprint of each with the index's; it runs
in a background thread every ``HYDE_LC_AUDIT_INTERVAL`` seconds. Measured here, on an
embedded store folder: one audit of an unchanged collection, one after another program
swapped a chunk with chromadb (delete one, add one: the count stays the same), and, for
scale, a full rebuild of the index. Chunks are BEIR SciFact abstracts cycled with a
numbered suffix, each with metadata shaped like an ingested chunk's, and random unit
vectors (nothing is embedded: the audit reads no vectors).

    python -m benchmarks.audit_cost path/to/scifact --sizes 5000 50000 \\
        --out benchmarks/results/audit_cost.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.lexical_scale import chunk_metadata, peak_rss_mb
from hyde_lc.bench.beir import load_beir
from hyde_lc.models.local_embeddings import MiniLMEmbeddings
from hyde_lc.store.collection import HybridCollection
from hyde_lc.store.vectorstore import open_store

BATCH = 2000


def timed(call) -> tuple[float, float, object]:
    """(wall seconds, CPU seconds of this process, result)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = call()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--sizes", type=int, nargs="+", default=[5000, 50000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    texts = list(load_beir(args.data, split="test").corpus.values())
    rng = np.random.default_rng(0)
    rows = []
    for size in args.sizes:
        work = Path(tempfile.mkdtemp(prefix="audit-cost-"))
        store = open_store(work / "store", embeddings=MiniLMEmbeddings())
        hybrid = HybridCollection.of(store)
        for begin in range(0, size, BATCH):
            ids = [f"c{i}" for i in range(begin, min(size, begin + BATCH))]
            vectors = rng.normal(size=(len(ids), 384)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            with hybrid.writing() as write:
                write.upsert(
                    ids,
                    vectors.tolist(),
                    [chunk_metadata(int(i[1:])) for i in ids],
                    [
                        f"{texts[int(i[1:]) % len(texts)]} part {int(i[1:]) // len(texts)}"
                        for i in ids
                    ],
                )
        hybrid.sync()
        row: dict[str, object] = {"chunks": size}
        quiet = [timed(hybrid.audit) for _ in range(args.repeats)]
        assert all(r is not None and not r.changed for _, _, r in quiet)  # type: ignore[union-attr]
        row["audit_unchanged_s"] = round(statistics.median(w for w, _, _ in quiet), 2)
        row["audit_unchanged_cpu_s"] = round(statistics.median(c for _, c, _ in quiet), 2)

        raw = store.existing_collection()  # chromadb's own collection object: no hyde_lc path
        raw.delete(ids=["c7"])
        raw.add(
            ids=["outsider"],
            documents=["Lighthouse tenders carried supplies to remote stations."],
            embeddings=[vectors[0].tolist()],
            metadatas=[chunk_metadata(7)],
        )
        rss = peak_rss_mb()
        wall, cpu, result = timed(hybrid.audit)
        assert result is not None and result.indexed == ["outsider"], result
        row["audit_swap_s"], row["audit_swap_cpu_s"] = round(wall, 2), round(cpu, 2)
        row["audit_peak_rss_growth_mb"] = round(peak_rss_mb() - rss, 1)
        wall, cpu, _ = timed(hybrid.rebuild)
        row["rebuild_s"], row["rebuild_cpu_s"] = round(wall, 2), round(cpu, 2)
        rows.append(row)
        print(row, flush=True)
        del store, hybrid, raw
        shutil.rmtree(work, ignore_errors=True)
    result = {"date": time.strftime("%Y-%m-%d"), "rows": rows}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
