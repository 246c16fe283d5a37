"""``hyde-lc ingest`` and ``hyde-lc info``: fill a collection and describe it.

Example:
    $ hyde-lc ingest --sample
    $ hyde-lc ingest --sample zh --collection lighthouses_zh
    $ hyde-lc ingest docs/ notes.md --chunk-size 800 --json
    $ hyde-lc ingest docs/ --remove-missing
    $ hyde-lc info

"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from hyde_lc.cli.options import (
    add_store_options,
    non_negative_int,
    open_collection,
    positive_float,
    positive_int,
)
from hyde_lc.cli.render import info_lines, ingest_lines, json_text, shown_line
from hyde_lc.errors import HydeLcError

SAMPLE_LANGUAGES = ("en", "zh")
"""`hyde_lc.ingest.samples.SAMPLE_LANGUAGES` (kept here: the parser does not import the library)."""
MULTILINGUAL_EMBEDDINGS = "local:multilingual-e5-small"
"""`hyde_lc.core.language.MULTILINGUAL_EMBEDDINGS`: ``--sample zh`` embeds a new collection so."""
UNDONE_STATUSES = ("empty", "skipped")
"""File statuses that leave work undone: the command ingests the rest, then exits 1."""


def _sample_language(text: str) -> str:
    if text not in SAMPLE_LANGUAGES:
        raise argparse.ArgumentTypeError(
            f"expected a sample language ({', '.join(SAMPLE_LANGUAGES)}), got {text!r}; "
            "put files and folders before --sample"
        )
    return text


def sample_embeddings(args: argparse.Namespace) -> str | None:
    """The embeddings ``--sample zh`` chooses when none were asked for (None: no choice).

    The Chinese sample is embedded with ``local:multilingual-e5-small`` (the default
    model reads English only) when neither ``--embeddings`` nor ``$HYDE_LC_EMBEDDINGS``
    names a model and the collection does not exist yet. An existing collection keeps
    its model (the English-only warning then names the command for a new one).

    Example:
        >>> ns = argparse.Namespace(sample="zh", embeddings=None, store="/tmp/new",
        ...                         chroma_url=None, collection="zh")
        >>> sample_embeddings(ns)  # doctest: +SKIP
        'local:multilingual-e5-small'

    """
    from hyde_lc.core.settings import settings  # not on --help's path

    if args.sample != "zh" or args.embeddings or settings().embeddings:
        return None
    from hyde_lc.store.location import StoreLocation
    from hyde_lc.store.vectorstore import collection_exists

    location = StoreLocation.resolve(args.store, args.chroma_url, args.collection)
    return None if collection_exists(location) else MULTILINGUAL_EMBEDDINGS


def input_limits(args: argparse.Namespace) -> Any:
    """`hyde_lc.ingest.reading.InputLimits` from ``hyde-lc ingest``'s options (else defaults).

    Example:
        >>> ns = argparse.Namespace(max_pdf_page_mb=8.0, max_pdf_mb=None, max_page_chars=None,
        ...                         max_pdf_chars=None, max_chunks_per_file=None)
        >>> input_limits(ns).max_pdf_page_bytes
        8388608

    """
    from hyde_lc.ingest.reading import DEFAULT_LIMITS, InputLimits

    def mb(value: float | None, default: int) -> int:
        return default if value is None else int(value * 2**20)

    return InputLimits(
        max_pdf_page_bytes=mb(args.max_pdf_page_mb, DEFAULT_LIMITS.max_pdf_page_bytes),
        max_pdf_bytes=mb(args.max_pdf_mb, DEFAULT_LIMITS.max_pdf_bytes),
        max_page_chars=args.max_page_chars or DEFAULT_LIMITS.max_page_chars,
        max_pdf_chars=args.max_pdf_chars or DEFAULT_LIMITS.max_pdf_chars,
        max_chunks=args.max_chunks_per_file or DEFAULT_LIMITS.max_chunks,
    )


def cmd_ingest(args: argparse.Namespace) -> int:
    """``hyde-lc ingest``: files, folders or a bundled sample into the collection.

    Returns 1 (after ingesting the rest) when a file had no text to index or something
    inside a folder was passed over.
    """
    from hyde_lc.ingest.files import (
        MAX_FILE_BYTES,
        check_file_size,
        discover_files,
        ingest_paths,
    )
    from hyde_lc.ingest.samples import sample_files
    from hyde_lc.models.endpoint_errors import endpoint_errors
    from hyde_lc.models.weights import cache_dir
    from hyde_lc.store.vectorstore import visible_count

    paths = [*args.paths, *(sample_files(args.sample) if args.sample else [])]
    if not paths:
        raise HydeLcError("nothing to ingest: give files or folders, or --sample")
    if args.chunk_size is not None and (args.chunk_overlap or 0) >= args.chunk_size:
        raise HydeLcError(
            f"--chunk-overlap ({args.chunk_overlap}) must be smaller than --chunk-size "
            f"({args.chunk_size})"
        )
    max_bytes = MAX_FILE_BYTES if args.max_file_mb is None else int(args.max_file_mb * 2**20)
    # Paths are checked before the store is opened: a typo creates no store.
    for path in discover_files(paths, args.follow_links):
        check_file_size(path, max_bytes)
    cache_dir()  # a HYDE_LC_CACHE_DIR that cannot be a folder is named before any work
    chosen = sample_embeddings(args)
    if chosen is not None:
        args.embeddings = chosen
        print(
            f"hyde-lc: the Chinese sample goes into a new collection embedded with {chosen} "
            "(the default model reads English only); ask, evaluate and info use the "
            "model the collection records",
            file=sys.stderr if args.json else sys.stdout,
        )
    store = open_collection(args, must_exist=False)
    start = time.perf_counter()
    with endpoint_errors(store.embeddings, role="embedding"):
        report = ingest_paths(
            paths,
            store,
            chunk_size=args.chunk_size,
            chunk_overlap=args.chunk_overlap,
            progress=not args.json,
            max_file_bytes=max_bytes,
            follow_links=args.follow_links,
            limits=input_limits(args),
            remove_missing=args.remove_missing,
        )
    elapsed = time.perf_counter() - start
    chunks = visible_count(store)
    if args.json:
        print(
            json_text(
                {
                    "files": [vars(f) for f in report.files],
                    "chunks": chunks,
                    "seconds": round(elapsed, 3),
                    "warnings": report.warnings,
                }
            )
        )
    else:
        print("\n".join(ingest_lines(report.files)))
        print(f"done in {elapsed:.1f} s; the collection holds {chunks} chunks")
    return _undone(report.files)


_UNDONE_LINES = {
    "empty": "file(s) had no text to index, so nothing is stored for them (see their notes)",
    "skipped": "item(s) inside the folders were passed over (see their notes)",
}
"""What the stderr line says of the files of each of `UNDONE_STATUSES`."""


def _undone(files: list[Any]) -> int:
    """1 (with a line on stderr per kind) if a file stored nothing, else 0."""
    code = 0
    for status in UNDONE_STATUSES:
        sources = [f.source for f in files if f.status == status]
        if sources:
            print(
                f"hyde-lc: {len(sources)} {_UNDONE_LINES[status]}: "
                f"{shown_line(', '.join(sources))}",
                file=sys.stderr,
            )
            code = 1
    return code


def cmd_info(args: argparse.Namespace) -> int:
    """``hyde-lc info``: chunks, documents (and incomplete ones), embedding model."""
    from hyde_lc.store.location import StoreLocation
    from hyde_lc.store.vectorstore import collection_info

    store = open_collection(args, must_exist=True)
    info = collection_info(store)
    info["location"] = StoreLocation.resolve(
        args.store, args.chroma_url, args.collection
    ).describe()
    code = 0
    if args.check_index:
        info["lexical_index"], code = _check_index(store)
    print(json_text(info) if args.json else "\n".join(info_lines(info)))
    return code


def _check_index(store: Any) -> tuple[dict[str, Any], int]:
    """Audit the collection's BM25 index now: (what it found, exit code)."""
    from hyde_lc.store.collection import HybridCollection

    try:
        result = HybridCollection.of(store).audit()
    except OSError as exc:
        return {
            "checked": None,
            "note": f"not checked: it cannot be kept where it lives ({exc.strerror or exc}); "
            "free space there, make it writable, or set HYDE_LC_CACHE_DIR to a writable "
            "folder",
        }, 1
    if result is None:
        return {
            "checked": None,
            "note": "not checked: a write to the collection is under way (or the index "
            "cannot be kept); run it again when the write ends",
        }, 1
    return {
        "checked": result.checked,
        "indexed": len(result.indexed),
        "removed": len(result.removed),
        "rebuilt": result.rebuilt,
    }, 0


def add_commands(sub: Any) -> None:
    """Register ``ingest`` and ``info`` on the ``hyde-lc`` subparsers."""
    ingest = sub.add_parser(
        "ingest",
        help="ingest PDF, .txt and .md files into the collection",
        description="Ingest PDF, .txt and .md files (folders recurse) into the collection. "
        "Unchanged files are skipped, changed ones replaced. Each document is split for its "
        "script: Chinese, Japanese and Korean text at its own punctuation, in chunks that "
        "fit the embedding model (450 characters with local:multilingual-e5-small), other "
        "text in chunks of 1000. local:minilm-dq (the default) reads English only: a document "
        "mostly in another script gets a warning naming the command for a multilingual "
        "collection (--embeddings local:multilingual-e5-small). Exits 1 after ingesting the "
        "rest when a file had no text to index (a scanned PDF: run OCR first) or something "
        "inside a folder was passed over (unreadable, not a regular file, a symbolic link "
        "leading out of the folder).",
    )
    ingest.add_argument("paths", nargs="*", help="files or folders (folders recurse)")
    ingest.add_argument(
        "--sample",
        nargs="?",
        const="en",
        type=_sample_language,
        metavar="{" + ",".join(SAMPLE_LANGUAGES) + "}",
        help="also ingest the bundled sample document: en (default) or zh. zh into a new "
        "collection uses --embeddings local:multilingual-e5-small unless --embeddings or "
        "$HYDE_LC_EMBEDDINGS names a model (ask, evaluate and info then use the model the "
        "collection records)",
    )
    ingest.add_argument(
        "--chunk-size",
        type=positive_int,
        help="characters per chunk (default: by script and model: 1000 for Latin text; "
        "for CJK 450 with multilingual-e5-small, 240 with minilm)",
    )
    ingest.add_argument(
        "--chunk-overlap",
        type=non_negative_int,
        help="characters shared by neighbouring chunks (default: a fifth of the chunk size)",
    )
    ingest.add_argument(
        "--max-file-mb",
        type=positive_float,
        help="refuse files larger than this many MB (default: 512)",
    )
    limits = ingest.add_argument_group(
        "limits",
        "What one file may cost to read; a file beyond them is refused, naming the limit "
        "(a small PDF can expand a thousandfold when its compressed content is inflated).",
    )
    limits.add_argument(
        "--max-pdf-page-mb",
        type=positive_float,
        help="inflated content one PDF page's text is read from, in MB (default: 4)",
    )
    limits.add_argument(
        "--max-pdf-mb",
        type=positive_float,
        help="the same summed over a PDF's pages, in MB; a stream shared by pages counts for "
        "each (default: 64)",
    )
    limits.add_argument(
        "--max-page-chars",
        type=positive_int,
        help="characters of text one PDF page may yield (default: 100000)",
    )
    limits.add_argument(
        "--max-pdf-chars",
        type=positive_int,
        help="characters of text one PDF may yield (default: 10000000)",
    )
    limits.add_argument(
        "--max-chunks-per-file",
        type=positive_int,
        help="chunks one file may make (default: 100000)",
    )
    ingest.add_argument(
        "--follow-links",
        action="store_true",
        help="also ingest what symbolic links inside the folders point to when it lies "
        "outside them (by default such links are skipped and listed)",
    )
    ingest.add_argument(
        "--remove-missing",
        action="store_true",
        help="keep the collection in step with the FOLDERS given: remove the documents "
        "ingested from inside them whose files no longer exist (deleted or renamed); "
        "nothing outside them is touched, and sub-folders that cannot be read keep theirs",
    )
    ingest.add_argument("--json", action="store_true", help="print one JSON record")
    add_store_options(ingest)
    ingest.set_defaults(func=cmd_ingest)

    info = sub.add_parser(
        "info", help="facts about the collection", description="Chunks, documents, model."
    )
    info.add_argument(
        "--check-index",
        action="store_true",
        help="also compare the BM25 index with every chunk of the collection now, and index "
        "what was changed outside hyde_lc (done in the background every "
        "$HYDE_LC_AUDIT_INTERVAL seconds anyway); exits 1 if a write is under way",
    )
    info.add_argument("--json", action="store_true", help="print one JSON record")
    add_store_options(info)
    info.set_defaults(func=cmd_info)
