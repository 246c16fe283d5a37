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

    python -m tests.integration.full_disk index STORE

runs the other situation: ``STORE/hyde_lc_lexical`` is a small filesystem of its own
(the store itself on a roomy one). It builds a store of five small files (fake
embeddings), fills the index's filesystem, ingests one more file (refused by the check),
again with the index's check turned off (the write meets the full disk in the index),
searches while the disk is full, frees it and searches again.
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


def _ingest(paths: list[Path], store: object) -> str | None:
    """Ingest ``paths``; None, or the error it raised as ``Type: message``."""
    from hyde_lc import ingest_paths

    try:
        ingest_paths(paths, store, progress=False)  # type: ignore[arg-type]
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _search(store: object, query: str) -> dict:
    """A hybrid search's hits as ``(file name, found by, lexical note)``, or its error."""
    from hyde_lc import HyDERetriever

    try:
        docs = HyDERetriever(vectorstore=store, k=6).invoke(query)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}", "hits": []}
    hits = [
        (d.metadata.get("file_name"), d.metadata.get("found_by"), d.metadata.get("lexical_note"))
        for d in docs
    ]
    return {"error": None, "hits": hits}


def index_main(store_dir: Path) -> int:
    """The BM25 index's folder on a full filesystem of its own (see the module docstring)."""
    os.environ["HYDE_LC_REFRESH_INTERVAL"] = "0"  # each search reads the collection's state
    from hyde_lc import open_store
    from hyde_lc.store import disk_space
    from hyde_lc.store.location import LEXICAL_FOLDER
    from tests.fakes import FakeEmbeddings, write_files

    embeddings = FakeEmbeddings(size=32)
    files = Path(tempfile.mkdtemp(prefix="hyde-lc-full-index-"))
    docs = write_files(files / "docs")
    tide = write_files(files / "new", {"tide.txt": f"Tide tables told when the {WORD} came."})

    def count() -> int:
        return open_store(store_dir, embeddings=embeddings).existing_collection().count()

    assert _ingest([docs], open_store(store_dir, embeddings=embeddings)) is None
    filler = fill(store_dir / LEXICAL_FOLDER, 0)
    out: dict = {"counts": [count()]}
    out["refused"] = _ingest([tide], open_store(store_dir, embeddings=embeddings))
    out["counts"].append(count())
    check = getattr(disk_space, "check_index_room", None)  # None: a version without it
    disk_space.check_index_room = lambda *args, **kwargs: None  # type: ignore[attr-defined]
    out["failed"] = _ingest([tide], open_store(store_dir, embeddings=embeddings))
    if check is not None:
        disk_space.check_index_room = check  # type: ignore[attr-defined]
    out["counts"].append(count())
    out["while_full"] = _search(open_store(store_dir, embeddings=embeddings), WORD)
    filler.unlink()
    out["after_freeing"] = _search(open_store(store_dir, embeddings=embeddings), WORD)
    print(json.dumps(out))
    return 0


def main(argv: list[str]) -> int:
    if argv[0] == "index":
        return index_main(Path(argv[1]))
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
