"""How fast can neighbour expansion fetch its windows from Chroma? Three read shapes.

`NeighborExpandingRetriever` fetches every chunk its windows cover in one Chroma ``get``.
Written as an ``$or`` of one ``{doc, chunk_index range}`` clause per window, that query
took most of the retrieval time outside the LLM (76 ms p50 at 5k chunks in `hyde-lc
speed`); two ``$in`` lists (the windows' documents x their chunk indexes, a small superset
filtered in Python) are what the retriever still uses for collections ingested before
chunk ids could be derived; reading the windows' chunks by id (`hyde_lc.ingest.files.chunk_id`)
is what it uses now. This script times the three reads, and the retriever end to end with
and without derivable ids, on a collection shaped like SciFact (about two chunks per
document) plus one 1,000-chunk document.

    python benchmarks/expansion_fetch.py --chunks 5000 --repeats 50
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import chromadb
import numpy as np
from chromadb.config import Settings
from langchain_chroma import Chroma
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.retrievers import BaseRetriever

from hyde_lc import NeighborExpandingRetriever
from hyde_lc.bench.speed import add_in_batches
from hyde_lc.ingest.files import chunk_id

WINDOWS = 4
LONG = 1000
CHUNK_SIZE, CHUNK_OVERLAP = 1000, 200


class RandomHits(BaseRetriever):
    """Returns ``hits`` stored chunks at random (the expansion is what is timed)."""

    chunks: list[Document]
    hits: int = WINDOWS
    older: bool = False
    """Hits as from a collection ingested before chunk ids could be derived."""

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        hits = [d.model_copy(deep=True) for d in random.sample(self.chunks, self.hits)]
        for hit in hits if self.older else []:
            del hit.metadata["chunk_size"], hit.metadata["chunk_overlap"]
        return hits


def build(folder: str, chunks: int) -> tuple[Chroma, list[Document]]:
    client = chromadb.PersistentClient(folder, settings=Settings(anonymized_telemetry=False))
    collection = client.create_collection("expansion", configuration={"hnsw": {"space": "cosine"}})
    layout = [(f"d{n:05d}", 2) for n in range((chunks - LONG) // 2)] + [("dlong", LONG)]
    docs: list[Document] = []
    for doc_id, count in layout:
        for index in range(count):
            meta = {
                "source": f"/data/{doc_id}.txt",
                "doc_id": doc_id,
                "chunk_index": index,
                "chunk_count": count,
                "start_index": index * 800,
                "gap_before": "",
                "chunk_size": CHUNK_SIZE,
                "chunk_overlap": CHUNK_OVERLAP,
            }
            id_ = chunk_id(str(meta["source"]), doc_id, CHUNK_SIZE, CHUNK_OVERLAP, index)
            docs.append(Document(page_content="word " * 200, metadata=meta, id=id_))
    vectors = np.random.default_rng(0).random((len(docs), 384), dtype=np.float32)
    add_in_batches(
        collection,
        client.get_max_batch_size(),
        [str(d.id) for d in docs],
        vectors,
        [d.page_content for d in docs],
        [d.metadata for d in docs],
    )
    store = Chroma(
        client=client,
        collection_name="expansion",
        embedding_function=DeterministicFakeEmbedding(size=384),
    )
    return store, docs


def windows(docs: list[Document]) -> list[tuple[str, str, int, int]]:
    """Three short documents and a window in the middle of the long one."""
    short = random.sample([d for d in docs if d.metadata["doc_id"] != "dlong"], WINDOWS - 1)
    spans = [(d.metadata["source"], d.metadata["doc_id"], 0, 1) for d in short]
    return [*spans, ("/data/dlong.txt", "dlong", 499, 501)]


def median_ms(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(1000 * (time.perf_counter() - start))
    return round(statistics.median(times), 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--chunks", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--out", help="write the figures as JSON here")
    args = parser.parse_args()
    random.seed(0)
    with tempfile.TemporaryDirectory() as folder:
        store, docs = build(folder, args.chunks)
        spans = windows(docs)
        collection = store.existing_collection()
        include: Any = ["documents", "metadatas"]
        or_of_ranges = {
            "$or": [
                {
                    "$and": [
                        {"source": s},
                        {"doc_id": d},
                        {"chunk_index": {"$gte": a}},
                        {"chunk_index": {"$lte": b}},
                    ]
                }
                for s, d, a, b in spans
            ]
        }
        two_in_lists = {
            "$and": [
                {"doc_id": {"$in": sorted({d for _, d, _, _ in spans})}},
                {
                    "chunk_index": {
                        "$in": sorted({i for *_, a, b in spans for i in range(a, b + 1)})
                    }
                },
            ]
        }
        by_id = [
            chunk_id(s, d, CHUNK_SIZE, CHUNK_OVERLAP, i)
            for s, d, a, b in spans
            for i in range(a, b + 1)
        ]

        expanders = {
            older: NeighborExpandingRetriever(
                base_retriever=RandomHits(chunks=docs, older=older),
                vectorstore=store,
                window=1,
                k=WINDOWS,
            )
            for older in (True, False)
        }

        result = {
            "chunks": len(docs),
            "repeats": args.repeats,
            "get, $or of ranges (before) ms": median_ms(
                lambda: collection.get(where=or_of_ranges, include=include), args.repeats
            ),
            "get, two $in lists (older collections) ms": median_ms(
                lambda: collection.get(where=two_in_lists, include=include), args.repeats
            ),
            "get by ids (now) ms": median_ms(
                lambda: collection.get(ids=by_id, include=include), args.repeats
            ),
            "NeighborExpandingRetriever.invoke, 4 windows, older collection ms": median_ms(
                lambda: expanders[True].invoke("q"), args.repeats
            ),
            "NeighborExpandingRetriever.invoke, 4 windows, by ids ms": median_ms(
                lambda: expanders[False].invoke("q"), args.repeats
            ),
        }
    print(json.dumps(result, indent=1))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
