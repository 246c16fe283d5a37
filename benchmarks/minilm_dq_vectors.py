"""How far `local:minilm-dq` vectors are from the shipped MiniLM graph's, and its first use.

Embeds the first ``--docs`` abstracts of a BEIR corpus with both graphs, in one batch and
one by one, and reports cosines: the quantised graph against the shipped one (batched),
and each graph's batched vectors against the same texts embedded alone (a dynamically
quantised graph picks one activation scale per batch). First use is timed in an empty
cache folder: make the graph, hash it, write it; then a cached load.

    python -m benchmarks.minilm_dq_vectors scifact --docs 64
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--docs", type=int, default=64)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as cache:
        os.environ["HYDE_LC_CACHE_DIR"] = cache
        from hyde_lc.models.loading import load_embeddings
        from hyde_lc.models.minilm_quantized import MINILM_DYNAMIC

        cpu, wall = time.process_time(), time.perf_counter()
        MINILM_DYNAMIC.path()
        print(
            f"first use (make, hash, write): {time.process_time() - cpu:.2f} CPU-s, "
            f"{time.perf_counter() - wall:.2f} s"
        )
        wall = time.perf_counter()
        MINILM_DYNAMIC.path()
        print(f"cached use: {1000 * (time.perf_counter() - wall):.1f} ms")

        with (args.data / "corpus.jsonl").open() as fh:
            texts = [json.loads(line)["text"] for line in itertools.islice(fh, args.docs)]
        batched = {}
        for spec in ("local:minilm", "local:minilm-dq"):
            embeddings = load_embeddings(spec)
            batched[spec] = np.array(embeddings.embed_documents(texts))
            alone = np.array([embeddings.embed_documents([t])[0] for t in texts])
            cos = (batched[spec] * alone).sum(axis=1)
            print(f"{spec}: alone vs batched cosine min {cos.min():.4f} mean {cos.mean():.4f}")
        cos = (batched["local:minilm"] * batched["local:minilm-dq"]).sum(axis=1)
        print(f"minilm-dq vs minilm, {len(texts)} texts: min {cos.min():.4f} mean {cos.mean():.4f}")


if __name__ == "__main__":
    main()
