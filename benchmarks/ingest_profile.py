"""Where ingest time goes: cProfile of `ingest_paths` over the first N documents of a BEIR set.

Each document is written as a text file (title, blank line, text), ingested into a new
store with the default embeddings (``HYDE_LC_EMBEDDINGS`` to choose another), after one
warm-up call of the model; the calls that take the most cumulative time are printed.

    python -m benchmarks.ingest_profile scifact --docs 400
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
import time
from pathlib import Path

from hyde_lc import ingest_paths, open_store
from hyde_lc.bench.beir import load_beir


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("data", type=Path, help="a folder in BEIR's layout")
    parser.add_argument("--docs", type=int, default=400)
    parser.add_argument("--top", type=int, default=30, help="calls printed")
    args = parser.parse_args()
    corpus = load_beir(args.data).corpus
    with tempfile.TemporaryDirectory() as work:
        docs = Path(work) / "docs"
        docs.mkdir()
        for doc_id in sorted(corpus)[: args.docs]:
            (docs / f"{doc_id}.txt").write_text(corpus[doc_id])
        store = open_store(Path(work) / "store")
        store.embeddings.embed_documents(["warm up the model"] * 4)
        profile = cProfile.Profile()
        start = time.perf_counter()
        profile.enable()
        ingest_paths([docs], store, progress=False)
        profile.disable()
        print(f"{args.docs} documents ingested in {time.perf_counter() - start:.1f} s")
        pstats.Stats(profile).sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
