"""A write on a full disk, on a real size-limited filesystem (see test_full_disk.py).

Run as a script inside a folder where a small filesystem is mounted:

    python -m tests.integration.full_disk FOLDER SEED_STORE FREE_KB [--no-room-check]

It copies ``SEED_STORE`` (a store holding the sample) into ``FOLDER``, fills the
filesystem with a file that leaves ``FREE_KB`` free, ingests a new document (which must
fail for lack of space), removes the filler, then looks at the collection afresh (a new
Chroma client: Chroma applies whatever it had logged) and ingests the document again.
It prints one JSON object with what it saw. ``--no-room-check`` turns off the check
that refuses a write before it starts, so that the write meets the full disk in
Chroma's own call (the undo path).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

WORD = "zanzibarite"
"""A word only the new document holds."""


def new_document(folder: Path) -> Path:
    """A text of about 70 chunks, every one of them holding `WORD`."""
    words = ["keeper", "lamp", "wick", "tower", "harbour", "beacon", "coast", "reef"]
    text = " ".join(f"{words[i % 8]} {words[(i * 5) % 8]} {WORD}" for i in range(2400))
    path = folder / "zanzibar.txt"
    path.write_text(text, encoding="utf-8")
    return path


def fill(folder: Path, free_kb: int) -> Path:
    """A filler file leaving about ``free_kb`` KB free on ``folder``'s filesystem."""
    found = os.statvfs(folder)
    size = found.f_bavail * found.f_frsize - free_kb * 1024
    filler = folder / "filler"
    with filler.open("wb") as fh:
        if size > 0:
            fh.write(b"\0" * size)  # written, not sparse: it takes the room
    return filler


def look(store_dir: Path, source: str) -> dict:
    """The collection as a fresh client sees it: counts, the document's chunks, BM25 hits."""
    from chromadb.api.client import SharedSystemClient

    from hyde_lc import open_store
    from hyde_lc.store.collection import HybridCollection
    from hyde_lc.store.lexical_index import lexical_query

    SharedSystemClient.clear_system_cache()
    store = open_store(store_dir)
    collection = store.existing_collection()
    hits = HybridCollection.of(store).search(lexical_query(WORD), k=5)
    dense = store.similarity_search(f"{WORD} keeper lamp", k=5)
    return {
        "count": collection.count(),
        "new_chunks": len(collection.get(where={"source": source}, include=[])["ids"]),
        "bm25_hits": len(hits),
        "dense_hits_new": sum(WORD in doc.page_content for doc in dense),
        "head": (collection.metadata or {}).get("hyde_lc_head"),
    }


def _no_room_check() -> None:
    """Turn off the check before a write, so that the write itself meets the full disk."""
    try:
        from hyde_lc.ingest import files as ingest
        from hyde_lc.store import disk_space
    except ImportError:  # a version without the check
        return

    def nothing(*args: object, **kwargs: object) -> None:
        return None

    disk_space.check_room = nothing  # type: ignore[assignment]
    ingest.check_free = nothing  # type: ignore[attr-defined]


def main(argv: list[str]) -> int:
    folder, seed, free_kb = Path(argv[0]), Path(argv[1]), int(argv[2])
    if "--no-room-check" in argv:
        _no_room_check()
    from hyde_lc import ingest_paths, open_store

    store_dir = folder / "store"
    shutil.copytree(seed, store_dir)
    document = new_document(Path(tempfile.mkdtemp(prefix="hyde-lc-full-disk-")))
    source = str(document.resolve())
    out: dict = {"before": look(store_dir, source)}
    filler = fill(folder, free_kb)
    out["free_kb"] = os.statvfs(folder).f_bavail * os.statvfs(folder).f_frsize // 1024
    store = open_store(store_dir)
    try:
        ingest_paths([document], store, progress=False)
        out["failed"] = None
    except Exception as exc:
        out["failed"] = f"{type(exc).__name__}: {exc}"
    del store
    filler.unlink()
    out["after"] = look(store_dir, source)
    store = open_store(store_dir)
    report = ingest_paths([document], store, progress=False)
    out["retried"] = [(r.status, r.chunks) for r in report.files]
    out["final"] = look(store_dir, source)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
