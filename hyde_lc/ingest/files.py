"""Ingestion: PDF, text and Markdown files -> chunks with stable ids -> Chroma.

Each file becomes one *document* (`hyde_lc.ingest.reading`). The document is split with
LangChain's recursive character splitter, so chunks may cross pages; every chunk
records where it starts in the document text (``start_index``), the whitespace the
splitter dropped before it (``gap_before``), the pages it spans (``page``/``page_end``
counted from 0 and ``page_label``/``page_label_end`` as printed, the convention of
LangChain's ``PyPDFLoader``), its position
(``chunk_index``, consecutive from 0, of ``chunk_count``), its version
(``doc_version``: file, content and chunking) and the document's dominant script
(``script``: ``latin``, ``cjk``, ...).

The script decides the split (`hyde_lc.ingest.splitting`): Chinese, Japanese and Korean text
is cut at its own punctuation, every other script as LangChain does by default. Unless
the caller sets ``chunk_size``/``chunk_overlap``, the sizes follow the script and the
collection's embedding model (`hyde_lc.ingest.splitting.default_chunk_size`: 1,000/200
characters for Latin text; 450/90 for Chinese with multilingual-e5-small, which fits its
512-token window). A collection whose embedding model reads English only (the MiniLM
models) gets one warning per call when a document is mostly in another script, naming
the command that ingests it into a multilingual collection
(`hyde_lc.core.language.english_only_warning`); it is ingested all the same.

Ids are derived from content: ingesting an unchanged file again changes nothing (and
embeds nothing); a changed file's new version is written first, out of searches, then
searched instead of the old one in one metadata write, and the old chunks are removed
after: the collection never loses a document that was already searchable, and no search
finds both versions, even with the writer killed in between.

Searches never see part of a document. A document of up to one Chroma write (5,461
chunks embedded, about 4 MB of text at the default chunk size) is written in one call,
so whole or not at all; consecutive small documents share one embedding pass and one
write (up to ``batch_size`` chunks), each still whole or not at all. A larger one is
written in several calls while marked pending (`ChromaCollection.set_pending`): searches
see its previous version, if any, until the new one is complete, then the new one only.
Each call is a checkpoint: after a kill or a failure, ingesting the same file again
embeds only the chunks not yet written.

Memory stays bounded whatever the file size: files are checked and hashed in a first
pass, then read, split and written one segment (a few MB of text) and one write at a
time. Bad input fails before anything is written, with an `IngestError` saying what to
do: a missing path, a folder with no supported files, a file above ``max_file_bytes``,
a pipe, device or socket given as a file, a ``.pdf`` that is not a PDF, a damaged or
password-protected PDF, a binary file named ``.txt``. Inside folders, unreadable
sub-folders and files and things that are not regular files are passed over and
reported (status ``skipped``). Files with no text (0 bytes, blank or scanned PDFs) are
reported as ``empty`` with a note, and nothing is stored for them. Nothing is created
(store folder, collection) until something is written. A Chroma server that stops
answering mid-run fails the call with a `StoreUnavailableError` naming the server; once
it is back, ingesting the same files again completes the collection.

Documents already loaded or split by LangChain (any loader, your own splitter) go in
as given with `hyde_lc.ingest.documents.ingest_documents`.

Example:
    >>> from hyde_lc import ingest_paths, open_store
    >>> report = ingest_paths(["docs/"], open_store())  # doctest: +SKIP
    >>> print(report.summary())  # doctest: +SKIP

"""

from __future__ import annotations

import hashlib
import logging
import numbers
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from langchain_core.embeddings import Embeddings
from langchain_text_splitters import RecursiveCharacterTextSplitter
from tqdm.auto import tqdm

from hyde_lc.core.chunks import chunk_id
from hyde_lc.core.language import english_only_warning, is_english_only_model
from hyde_lc.errors import IngestError
from hyde_lc.ingest.reading import (
    DEFAULT_LIMITS,
    MAX_FILE_BYTES,
    MIN_PAGE_CHARS,
    PAGE_SEPARATOR,
    SEGMENT_CHARS,
    SUPPORTED_SUFFIXES,
    InputLimits,
    LoadedDocument,
    Skipped,
    TextSource,
    check_file_size,
    discover_files,
    find_files,
    iter_segments,
    load_document,
    scan_file,
)
from hyde_lc.ingest.splitting import default_chunk_size, make_splitter
from hyde_lc.models.loading import embedding_model_id
from hyde_lc.store.chroma_collection import DOC_VERSION, ChromaCollection, embedding_dimension
from hyde_lc.store.collection import HybridCollection, Write
from hyde_lc.store.disk_space import NoSpaceError, check_free, no_space_as_error, space_needed
from hyde_lc.store.location import server_lost_as_error
from hyde_lc.store.vectorstore import HydeChroma

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_CHUNK_OVERLAP",
    "DEFAULT_CHUNK_SIZE",
    "MAX_FILE_BYTES",
    "MIN_PAGE_CHARS",
    "PAGE_SEPARATOR",
    "SEGMENT_CHARS",
    "SUPPORTED_SUFFIXES",
    "Chunk",
    "FileResult",
    "IngestReport",
    "InputLimits",
    "LoadedDocument",
    "check_file_size",
    "chunk_id",
    "discover_files",
    "doc_version",
    "ingest_paths",
    "iter_chunks",
    "load_document",
    "missing_sources",
    "resolve_chunking",
    "split_document",
]

DEFAULT_CHUNK_SIZE = 1000
DEFAULT_CHUNK_OVERLAP = 200
_WRITE_CHARS = 2 * 1024 * 1024
"""About the most chunk text per Chroma write of a document written in parts: bounds the
memory a write takes (Chroma copies what it is given) and the work a kill can lose."""
_KEEP_CHARS = 16 * 1024 * 1024
"""Text kept in memory from the first pass, over all files of one call (short files and
PDFs, whose parsing is slow); the rest is read again from disk."""

Status = Literal["added", "replaced", "unchanged", "empty", "skipped", "removed"]


@dataclass
class Chunk:
    """A chunk ready to embed: its id, text and metadata."""

    id: str
    text: str
    metadata: dict[str, Any]


@dataclass
class FileResult:
    """What ingestion did with one file (or a folder it passed over: ``skipped``).

    ``removed``: a file no longer on disk whose chunks ``remove_missing`` deleted
    (``chunks`` is how many).
    """

    source: str
    status: Status
    chunks: int
    notes: list[str]
    embedded: int = 0
    """Chunks embedded by this call (the rest were already in the collection)."""


@dataclass
class IngestReport:
    """What ``ingest_paths`` did, file by file."""

    files: list[FileResult]
    warnings: list[str] = field(default_factory=list)
    """Warnings about the call as a whole (an English-only model given other scripts)."""

    def summary(self) -> str:
        """Human-readable lines: one per file, notes indented under it, then warnings."""
        lines = []
        for result in self.files:
            lines.append(f"{result.status:9} {result.chunks:5} chunks  {result.source}")
            lines.extend(f"          note: {note}" for note in result.notes)
        lines.extend(f"warning: {warning}" for warning in self.warnings)
        return "\n".join(lines)


def doc_version(source: str, doc_id: str, chunk_size: int, chunk_overlap: int) -> str:
    """The version of one file's document split one way (``doc_version`` in chunk metadata)."""
    key = f"version\0{source}\0{doc_id}\0{chunk_size}\0{chunk_overlap}"
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:24]


def _splitter(
    chunk_size: int, chunk_overlap: int, script: str = "latin"
) -> RecursiveCharacterTextSplitter:
    if chunk_size <= 0 or not 0 <= chunk_overlap < chunk_size:
        raise IngestError(
            f"invalid chunking: chunk_size={chunk_size}, chunk_overlap={chunk_overlap}; "
            "need chunk_size > 0 and 0 <= chunk_overlap < chunk_size"
        )
    return make_splitter(chunk_size, chunk_overlap, script)


def resolve_chunking(
    script: str,
    embedding_model: str,
    chunk_size: int | None = None,
    chunk_overlap: int | None = None,
) -> tuple[int, int]:
    """``(chunk_size, chunk_overlap)`` for a document in ``script``.

    What the caller set, else the script's default for the embedding model
    (`default_chunk_size`).
    A size set without an overlap gets a fifth of it as overlap; an overlap set without a
    size gets the script's default size. Raises `IngestError` for an overlap that is not
    below the size.

    Example:
        >>> resolve_chunking("cjk", "local:multilingual-e5-small")
        (450, 90)
        >>> resolve_chunking("latin", "local:minilm", chunk_size=500)
        (500, 100)

    """
    default_size, default_overlap = default_chunk_size(script, embedding_model)
    if chunk_size is None:
        size = default_size
        overlap = default_overlap if chunk_overlap is None else chunk_overlap
    else:
        size = chunk_size
        overlap = chunk_size // 5 if chunk_overlap is None else chunk_overlap
    _splitter(size, overlap)  # refuses impossible settings
    return size, overlap


def count_chunks(
    segments: Iterable[tuple[int, str]], chunk_size: int, chunk_overlap: int, script: str = "latin"
) -> int:
    """How many chunks `iter_chunks` makes of these segments (one segment held at a time)."""
    splitter = _splitter(chunk_size, chunk_overlap, script)
    return sum(len(splitter.split_text(segment)) for _, segment in segments)


def iter_chunks(
    source: str,
    doc_id: str,
    segments: Iterable[tuple[int, str]],
    page_at: Callable[[int], int],
    embedding_model: str,
    chunk_size: int,
    chunk_overlap: int,
    chunk_count: int,
    script: str = "latin",
    page_labels: Sequence[str] | None = None,
) -> Iterator[Chunk]:
    """The chunks of a document given as segments, in order, with ids and metadata.

    Each segment is split on its own (chunks do not cross segments) by the splitter for
    ``script`` (the document's dominant script, recorded in every chunk's metadata);
    ``chunk_count`` (from `count_chunks`) goes into every chunk's metadata.

    Pages follow LangChain's ``PyPDFLoader``: ``page`` (and ``page_end``, the page the
    chunk ends on) count from 0; ``page_label`` (and ``page_label_end``) are the numbers
    printed on those pages, from ``page_labels`` (a PDF's page labels, by 0-based page),
    else the page counted from 1. ``page_at`` gives 1-based page numbers.
    """
    splitter = _splitter(chunk_size, chunk_overlap, script)
    version = doc_version(source, doc_id, chunk_size, chunk_overlap)
    file_name = Path(source).name
    index = 0
    previous_end = 0
    tail = ""  # the document text from previous_end to the start of the next segment
    for seg_start, segment in segments:
        seg_end = seg_start + len(segment)
        for piece in splitter.create_documents([segment]):
            relative = int(piece.metadata["start_index"])
            start = seg_start + relative
            # The splitter strips the whitespace between chunks; keeping it lets a window
            # of neighbouring chunks be rebuilt exactly as the document reads.
            if previous_end >= seg_start:
                gap_before = segment[previous_end - seg_start : relative]
            else:
                gap_before = tail + segment[:relative]
            end = start + len(piece.page_content)
            previous_end = max(previous_end, end)
            first_page, last_page = page_at(start) - 1, page_at(end - 1) - 1
            yield Chunk(
                id=chunk_id(source, doc_id, chunk_size, chunk_overlap, index),
                text=piece.page_content,
                metadata={
                    "source": source,
                    "file_name": file_name,
                    "page": first_page,
                    "page_end": last_page,
                    "page_label": page_label(page_labels, first_page),
                    "page_label_end": page_label(page_labels, last_page),
                    "chunk_index": index,
                    "chunk_count": chunk_count,
                    "start_index": start,
                    "gap_before": gap_before,
                    "doc_id": doc_id,
                    # With source, doc_id and chunk_index these give any chunk's id
                    # (`chunk_id`): neighbour expansion fetches windows by id.
                    "chunk_size": chunk_size,
                    "chunk_overlap": chunk_overlap,
                    DOC_VERSION: version,
                    "embedding_model": embedding_model,
                    "script": script,
                },
            )
            index += 1
        if previous_end >= seg_start:
            tail = segment[previous_end - seg_start :] if previous_end < seg_end else ""
        else:
            tail += segment


def page_label(labels: Sequence[str] | None, page: int) -> str:
    """The label printed on 0-based ``page``: from the PDF's labels, else ``page + 1``.

    Example:
        >>> page_label(["i", "ii", "1"], 2), page_label(None, 0)
        ('1', '1')

    """
    if labels is not None and 0 <= page < len(labels):
        return str(labels[page])
    return str(page + 1)


def pdf_page_labels(path: str | Path) -> list[str] | None:
    """A PDF's page labels as ``PyPDFLoader`` records them (None: not a PDF, or unreadable).

    Read with pypdf from the document catalogue, without extracting any text.
    """
    if Path(path).suffix.lower() != ".pdf":
        return None
    try:
        from pypdf import PdfReader

        return list(PdfReader(str(path)).page_labels)
    except Exception:  # the text was read already: the page numbers stand in for labels
        return None


def split_document(
    doc: LoadedDocument,
    embedding_model: str,
    chunk_size: int | None = None,
    chunk_overlap: int | None = None,
) -> list[Chunk]:
    """Split a document held in memory into chunks, as ingestion does, in document order.

    Sizes left out follow the document's script and ``embedding_model``
    (`resolve_chunking`).

    Example:
        >>> doc = load_document(Path("notes_zh.txt"))  # doctest: +SKIP
        >>> chunks = split_document(doc, "local:multilingual-e5-small")  # doctest: +SKIP
        >>> chunks[0].metadata["script"], chunks[0].metadata["chunk_size"]  # doctest: +SKIP
        ('cjk', 450)

    """
    script = doc.script
    size, overlap = resolve_chunking(script, embedding_model, chunk_size, chunk_overlap)
    if not doc.text:
        return []
    count = count_chunks(iter_segments([doc.text]), size, overlap, script)
    return list(
        iter_chunks(
            doc.source,
            doc.doc_id,
            iter_segments([doc.text]),
            doc.page_at,
            embedding_model,
            size,
            overlap,
            count,
            script,
            pdf_page_labels(doc.source),
        )
    )


def ingest_paths(
    paths: Sequence[str | Path],
    store: HydeChroma,
    *,
    chunk_size: int | None = None,
    chunk_overlap: int | None = None,
    batch_size: int = 64,
    progress: bool = True,
    max_file_bytes: int | None = MAX_FILE_BYTES,
    max_write: int | None = None,
    follow_links: bool = False,
    limits: InputLimits = DEFAULT_LIMITS,
    remove_missing: bool = False,
) -> IngestReport:
    """Ingest files and folders into ``store`` (a collection opened by `open_store`).

    Every file is read and checked before anything is written, so a bad file in the
    list (missing, not a PDF, unreadable, too large) fails the call with the collection
    untouched (and nothing created). Files with no text are reported with status
    ``empty`` and a note; what was passed over inside folders, with status ``skipped``.
    ``batch_size`` chunks are embedded per call; ``max_write`` chunks at most are
    written per Chroma call (default: as many as Chroma takes). Symbolic links that lead
    out of a folder being ingested are skipped unless ``follow_links`` (`find_files`).
    A file beyond ``limits`` (`InputLimits`: a PDF's inflated content and text, the
    chunks of any file) fails the call before anything is written.

    ``chunk_size``/``chunk_overlap`` (characters) left as None follow each document's
    script and the collection's embedding model (`resolve_chunking`). When that model
    reads English only and a document is mostly in another script, the report's
    ``warnings`` (and the ``hyde_lc`` logger, once per call) say how to ingest it into a
    multilingual collection.

    ``remove_missing`` keeps the collection in step with the *folders* in ``paths``: the
    documents whose ``source`` lies inside one of them and that no longer exist on disk
    (a file deleted or renamed since it was ingested) are deleted, after the files found
    are written, and reported with status ``removed``. Nothing outside those folders is
    touched, and files given by name only are ingested. A document is kept whenever its
    absence is not certain: inside a sub-folder that was skipped (it could not be read),
    or a file whose state cannot be read (an error other than "not found"). See
    `missing_sources`.
    """
    hybrid = HybridCollection.of(store)
    chroma, embeddings = hybrid.chroma, hybrid.embeddings
    if embeddings is None:
        raise IngestError("the store has no embedding function; open it with open_store()")
    chroma.ensure_writable()
    chroma.check_embeddings(embeddings)
    model = embedding_model_id(embeddings)
    resolve_chunking("latin", model, chunk_size, chunk_overlap)  # bad settings fail first
    check_counts(batch_size=batch_size, max_write=max_write)
    found = find_files(paths, follow_links)
    for path in found.files:  # all sizes first: a huge last file fails before any reading
        check_file_size(path, max_file_bytes)
    sources: list[tuple[TextSource, int]] = []
    budget = _KEEP_CHARS
    for path in found.files:
        source = scan_file(path, max_file_bytes, keep_up_to=budget, limits=limits)
        budget -= len(source.text or "")
        size, overlap = resolve_chunking(source.script, model, chunk_size, chunk_overlap)
        count = count_chunks(source.segments(), size, overlap, source.script)
        limits.check_chunks(source.path, count)
        sources.append((source, count))
    skipped = [_skipped(item) for item in found.skipped]
    warnings = _language_warnings(chroma.name, model, [s for s, count in sources if count])
    if not any(count for _, count in sources) and chroma.existing() is None:
        empty = [_empty(source, kept=False) for source, _ in sources]
        return IngestReport(empty + skipped, warnings)
    settings = _Settings(model, chunk_size, chunk_overlap, batch_size, progress, max_write)
    # One writer per embedded collection at a time: another process (or thread) ingesting
    # into the same folder waits here, then sees what the first one wrote.
    resume = (
        "ingest the same files again: chunks already written are kept (nothing is "
        "embedded twice) and the rest are completed, with no duplicate chunks"
    )
    folders = [Path(p).expanduser().resolve() for p in paths if Path(p).expanduser().is_dir()]
    if remove_missing:
        for result in skipped:
            if result.notes and result.notes[0].startswith("folder skipped"):
                result.notes.append(KEPT_UNDER_SKIPPED)
    with (
        server_lost_as_error(chroma.location, resume),
        no_space_as_error(chroma.folder),
        hybrid.writing() as write,
    ):
        written = _write_documents(write, sources, embeddings, settings)
        removed = (
            _remove_missing(write, folders, found.files, found.skipped)
            if remove_missing and folders
            else []
        )
    return IngestReport(written + removed + skipped, warnings)


KEPT_UNDER_SKIPPED = "its documents already in the collection are kept (not removed)"
"""The note ``remove_missing`` adds to a sub-folder it could not read."""
REMOVED_NOTE = "no longer on disk: its chunks were removed from the collection"
"""The note of a document ``remove_missing`` deleted."""


def missing_sources(
    stored: Iterable[str],
    folders: Sequence[Path],
    present: Iterable[Path],
    skipped: Iterable[str] = (),
) -> list[str]:
    """The stored sources that `ingest_paths` with ``remove_missing`` deletes, sorted.

    A source is deleted when it is an absolute path inside one of ``folders`` (resolved),
    is not among the files just found (``present``), lies under none of the ``skipped``
    paths (sub-folders that could not be read), and is certainly gone from disk (looking
    it up says "no such file"; any other error keeps it). Sources that are not paths of
    such files (relative names, URLs from `ingest_documents`) are never deleted.

    Example:
        >>> missing_sources(["/nowhere/docs/a.txt", "notes.txt"], [Path("/nowhere/docs")], [])
        ['/nowhere/docs/a.txt']

    """
    roots = [Path(folder) for folder in folders]
    kept = {str(path) for path in present}
    passed_over = [Path(os.path.realpath(item)) for item in skipped]
    gone = []
    for source in set(stored):
        path = Path(source)
        if source in kept or not path.is_absolute():
            continue
        if not any(path.is_relative_to(root) for root in roots):
            continue
        if any(path.is_relative_to(item) for item in passed_over):
            continue
        if _certainly_gone(path):
            gone.append(source)
    return sorted(gone)


def _certainly_gone(path: Path) -> bool:
    """Whether ``path`` does not exist (False when looking it up fails otherwise)."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except (OSError, ValueError):
        return False  # not readable (a folder without permission): it may still be there
    return False


def _remove_missing(
    write: Write, folders: Sequence[Path], present: Sequence[Path], skipped: Sequence[Skipped]
) -> list[FileResult]:
    """Delete the documents of ``folders`` no longer on disk (`missing_sources`)."""
    chroma = write.owner.chroma
    if chroma.existing() is None:
        return []
    counts: dict[str, int] = {}
    for page in chroma.pages():
        for meta in page["metadatas"] or []:
            source = (meta or {}).get("source")
            if isinstance(source, str):
                counts[source] = counts.get(source, 0) + 1
    gone = missing_sources(counts, folders, present, [item.path for item in skipped])
    if not gone:
        return []
    write.delete_where({"source": {"$in": gone}})
    _prune_pending(write)  # versions of a removed file left pending by a killed run
    results = [FileResult(source, "removed", counts[source], [REMOVED_NOTE]) for source in gone]
    for result in results:
        logger.info("removed %s (%d chunks): no longer on disk", result.source, result.chunks)
    return results


def check_counts(**counts: int | None) -> None:
    """Refuse a chunk count setting below 1 (None means the default), naming it.

    Example:
        >>> check_counts(batch_size=64, max_write=None)
        >>> check_counts(batch_size=0)
        Traceback (most recent call last):
        ...
        hyde_lc.errors.IngestError: batch_size must be a whole number of chunks, at least 1 (got 0)

    """
    for name, value in counts.items():
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1
        ):
            raise IngestError(
                f"{name} must be a whole number of chunks, at least 1 (got {value!r})"
            )


def _language_warnings(collection: str, model: str, sources: list[TextSource]) -> list[str]:
    """One warning (logged once) when an English-only model is given other scripts."""
    if not is_english_only_model(model):
        return []
    unreadable = [s for s in sources if s.script not in ("latin", "unknown")]
    if not unreadable:
        return []
    first = unreadable[0]
    warning = english_only_warning(model, first.sample, source=first.source, collection=collection)
    if warning is None:  # the sample's judgement differs from the whole document's
        return []
    if len(unreadable) > 1:
        others = ", ".join(s.path.name for s in unreadable[1:4])
        more = "..." if len(unreadable) > 4 else ""
        warning += (
            f" ({len(unreadable) - 1} more file(s) of this ingest are not Latin-script either:"
            f" {others}{more})"
        )
    logger.warning("%s", warning)
    return [warning]


def _skipped(item: Skipped) -> FileResult:
    logger.warning("%s: %s", item.path, item.reason)
    return FileResult(item.path, "skipped", 0, [item.reason])


def _empty(source: TextSource, kept: bool) -> FileResult:
    note = (
        "no text to index; the previously ingested version is kept"
        if kept
        else ("no text to index")
    )
    return FileResult(source.source, "empty", 0, [*source.notes, note])


@dataclass
class _Settings:
    model: str
    chunk_size: int | None
    chunk_overlap: int | None
    batch_size: int
    progress: bool
    max_write: int | None

    def chunking(self, script: str) -> tuple[int, int]:
        """Chunk size and overlap for a document in ``script``."""
        return resolve_chunking(script, self.model, self.chunk_size, self.chunk_overlap)


@dataclass
class _Plan:
    """One file's document against what the collection holds of that file."""

    source: TextSource
    count: int
    version: str
    chunk_size: int
    chunk_overlap: int
    current: int = 0
    """Chunks of this version already in the collection."""
    existing: int = 0
    stale_versions: set[str] = field(default_factory=set)
    stale_doc_ids: set[str] = field(default_factory=set)
    stale_ids: list[str] = field(default_factory=list)
    """Chunks of other versions: by version, by content (older chunks), by id (the rest)."""
    pending: bool = False

    @property
    def stale(self) -> bool:
        return bool(self.stale_versions or self.stale_doc_ids or self.stale_ids)

    @property
    def missing(self) -> int:
        return self.count - self.current


def _plan(chroma: ChromaCollection, source: TextSource, count: int, settings: _Settings) -> _Plan:
    """Sort the chunks the collection holds of ``source``'s file (read in pages)."""
    name, doc_id = source.source, source.doc_id
    size, overlap = settings.chunking(source.script)
    plan = _Plan(source, count, doc_version(name, doc_id, size, overlap), size, overlap)
    for page in chroma.pages({"source": name}):
        for id_, meta in zip(page["ids"], page["metadatas"] or [], strict=True):
            meta = meta or {}
            plan.existing += 1
            index = meta.get("chunk_index")
            if index is not None and id_ == chunk_id(name, doc_id, size, overlap, int(index)):
                plan.current += 1
            elif meta.get(DOC_VERSION):
                plan.stale_versions.add(str(meta[DOC_VERSION]))
            elif meta.get("doc_id") and meta["doc_id"] != doc_id:
                plan.stale_doc_ids.add(str(meta["doc_id"]))
            else:
                plan.stale_ids.append(id_)
    return plan


def _write_documents(
    write: Write,
    sources: list[tuple[TextSource, int]],
    embeddings: Embeddings,
    settings: _Settings,
) -> list[FileResult]:
    """Bring each file's chunks in the collection to its document (one `Write`)."""
    chroma = write.owner.chroma
    pending = _prune_pending(write)
    plans = [_plan(chroma, source, count, settings) for source, count in sources]
    for plan in plans:
        plan.pending = plan.version in pending
    to_embed = sum(plan.missing for plan in plans if plan.count)
    if to_embed:  # creates the collection, or checks the vector length, before any write
        dimension = embedding_dimension(embeddings)
        chars = sum(plan.missing * plan.chunk_size for plan in plans if plan.count)
        # Before embedding: a disk without room refuses now, not after minutes of work.
        check_free(chroma.folder, space_needed(to_embed, dimension, chars, 700 * to_embed))
        chroma.prepare_write(embeddings, dimension)
    limit = min(settings.max_write or 10**9, chroma.max_write())
    results: dict[int, FileResult] = {}  # by id() of the plan: files keep their order
    logged = 0
    quiet = not settings.progress or not to_embed  # nothing to embed: no empty bar
    with tqdm(total=to_embed, unit="chunk", desc="embedding", disable=quiet) as bar:
        group = _Group(min(limit, settings.batch_size))

        def done(plan: _Plan, result: FileResult) -> None:
            nonlocal logged
            results[id(plan)] = result
            while logged < len(plans) and id(plans[logged]) in results:  # in file order
                shown = results[id(plans[logged])]
                logger.info("%s %s (%d chunks)", shown.status, shown.source, shown.chunks)
                logged += 1

        def flush() -> None:
            members = group.drain()
            written = _write_group(write, members, embeddings, settings, limit, bar)
            for (plan, _), result in zip(members, written, strict=True):
                done(plan, result)

        for plan in plans:
            whole = plan.count <= limit and not plan.pending  # else written in parts
            if plan.count and plan.current < plan.count and whole:
                try:
                    chunks = list(_plan_chunks(plan, settings))
                except Exception:
                    flush()  # the files before this one are written, as the error implies
                    raise
                if not group.takes(chunks):
                    flush()
                group.add(plan, chunks)
                if group.full:
                    flush()
                continue
            if plan.count and (plan.stale or plan.pending or plan.current < plan.count):
                flush()  # files are written in their order: the group before this one first
            done(plan, _write_document(write, plan, embeddings, settings, limit, bar))
        flush()
    return [results[id(plan)] for plan in plans]


@dataclass
class _Group:
    """Consecutive whole documents written in one embedding pass and one Chroma call.

    Small documents (a SciFact abstract is about 2 chunks) each paid a Chroma upsert, a
    lexical-index commit and an embedding call too short for the batch session; grouped,
    they share them. A document is never split between two groups, and one Chroma call is
    one transaction, so each document is still searchable whole or not at all.
    """

    size: int
    """Chunks at which the group is written (the embedding batch, at most one Chroma call)."""
    members: list[tuple[_Plan, list[Chunk]]] = field(default_factory=list)
    chunks: int = 0
    chars: int = 0

    def takes(self, chunks: list[Chunk]) -> bool:
        """Whether one more document's ``chunks`` fit this group's Chroma call."""
        if not self.members:
            return True
        chars = sum(len(c.text) for c in chunks)
        return self.chunks + len(chunks) <= self.size and self.chars + chars <= _WRITE_CHARS

    def add(self, plan: _Plan, chunks: list[Chunk]) -> None:
        self.members.append((plan, chunks))
        self.chunks += len(chunks)
        self.chars += sum(len(c.text) for c in chunks)

    @property
    def full(self) -> bool:
        return self.chunks >= self.size or self.chars >= _WRITE_CHARS

    def drain(self) -> list[tuple[_Plan, list[Chunk]]]:
        """The members, leaving the group empty."""
        members, self.members, self.chunks, self.chars = self.members, [], 0, 0
        return members


def _prune_pending(write: Write) -> set[str]:
    """Drop pending versions with no chunks left (a run killed before its first write)."""
    chroma = write.owner.chroma
    pending = chroma.pending()
    gone = [v for v in pending if not chroma.has_records({DOC_VERSION: v})]
    if gone:
        write.set_pending(remove=gone)
    return set(pending) - set(gone)


def _write_document(
    write: Write,
    plan: _Plan,
    embeddings: Embeddings,
    settings: _Settings,
    limit: int,
    bar: tqdm,
) -> FileResult:
    source = plan.source
    if not plan.count:  # a file gone blank does not remove what was searchable
        return _empty(source, kept=plan.existing > 0)
    status: Status
    embedded = 0
    if plan.current == plan.count:  # written before; drop what an interrupted run left
        status = "replaced" if plan.stale else "unchanged"
    else:
        status = "replaced" if plan.stale else "added"
        chunks = _plan_chunks(plan, settings)
        embedded = _write_in_parts(write, plan, chunks, embeddings, settings, limit, bar)
    _retire_old_versions(write, plan, limit)
    return FileResult(source.source, status, plan.count, source.notes, embedded)


def _plan_chunks(plan: _Plan, settings: _Settings) -> Iterator[Chunk]:
    """The chunks of ``plan``'s document, read and split one segment at a time."""
    source = plan.source
    return iter_chunks(
        source.source,
        source.doc_id,
        source.segments(),
        source.page_at,
        settings.model,
        plan.chunk_size,
        plan.chunk_overlap,
        plan.count,
        source.script,
        pdf_page_labels(source.path) if source.kind == "pdf" else None,
    )


def _embed(chunks: list[Chunk], embeddings: Embeddings, batch_size: int, bar: tqdm) -> np.ndarray:
    """The chunks' vectors (``batch_size`` per embedding call) as one float32 array."""
    parts = []
    for start in range(0, len(chunks), batch_size):
        batch = chunks[start : start + batch_size]
        parts.append(np.asarray(embeddings.embed_documents([c.text for c in batch]), np.float32))
        bar.update(len(batch))
    return np.concatenate(parts)


def _write(write: Write, chunks: list[Chunk], vectors: np.ndarray) -> None:
    write.upsert(
        [c.id for c in chunks],
        vectors,
        [c.metadata for c in chunks],
        [c.text for c in chunks],
    )


def _write_group(
    write: Write,
    members: list[tuple[_Plan, list[Chunk]]],
    embeddings: Embeddings,
    settings: _Settings,
    limit: int,
    bar: tqdm,
) -> list[FileResult]:
    """Write a group's documents in one Chroma call, all of them or none.

    Then retire their old versions.
    """
    if not members:
        return []
    resumed = [c.id for plan, chunks in members if plan.current for c in chunks]
    present = write.owner.chroma.present_ids(resumed) if resumed else set()
    missing = [[c for c in chunks if c.id not in present] for _, chunks in members]
    to_write = [c for chunks in missing for c in chunks]
    # A replaced file's new version is written out of searches, then searched instead of
    # the old one in one metadata write: a writer killed in between leaves one version
    # searchable, never both. (Members are never pending before this.)
    swapped = [plan for plan, _ in members if plan.stale_versions]
    try:
        if to_write:
            vectors = _embed(to_write, embeddings, settings.batch_size, bar)
            if swapped:  # only now: a failed embedding leaves the collection untouched
                write.set_pending(add=[plan.version for plan in swapped])
                for plan in swapped:
                    plan.pending = True
            _write(write, to_write, vectors)
    except IngestError:
        _unmark(write, swapped)
        raise
    except NoSpaceError as exc:
        _unmark(write, swapped)
        raise NoSpaceError(f"{_names(members)}: {exc}") from exc
    except Exception as exc:
        _unmark(write, swapped)
        raise IngestError(_group_failed(members, exc)) from exc
    plans = [plan for plan, _ in members]
    pending = [plan for plan in plans if plan.pending]
    if pending:
        stale = {version for plan in pending for version in plan.stale_versions}
        write.set_pending(add=stale, remove=[plan.version for plan in pending])
        for plan in pending:
            plan.pending = False
    _retire_group(write, plans, limit)
    results = []
    for (plan, _), written in zip(members, missing, strict=True):
        status: Status = "replaced" if plan.stale else "added"
        source = plan.source
        results.append(FileResult(source.source, status, plan.count, source.notes, len(written)))
    return results


def _unmark(write: Write, plans: list[_Plan]) -> None:
    """After a failed group write (undone): its new versions no longer pending."""
    marked = [plan for plan in plans if plan.pending]
    if not marked:
        return
    try:
        write.set_pending(remove=[plan.version for plan in marked])
    except Exception as exc:  # the rerun resumes a version left pending, like a kill would
        logger.debug("could not clear the pending versions of a failed write: %s", exc)
        return
    for plan in marked:
        plan.pending = False


def _names(members: list[tuple[_Plan, list[Chunk]]]) -> str:
    names = [plan.source.source for plan, _ in members]
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _group_failed(members: list[tuple[_Plan, list[Chunk]]], exc: Exception) -> str:
    why = f"{type(exc).__name__}: {exc}"
    if len(members) == 1:
        return (
            f"{_names(members)}: writing its chunks failed ({why}); the partial write was "
            "undone and the collection is as before. Fix the cause and ingest again."
        )
    return (
        f"{_names(members)}: writing the chunks of these {len(members)} files (one Chroma "
        f"call) failed ({why}); the partial write was undone, so the collection is as "
        "before for them (files before them in this call are written). Fix the cause and "
        "ingest again: files already written are not embedded again."
    )


def _write_in_parts(
    write: Write,
    plan: _Plan,
    chunks: Iterator[Chunk],
    embeddings: Embeddings,
    settings: _Settings,
    limit: int,
    bar: tqdm,
) -> int:
    """Write a document in several Chroma calls, pending (out of searches) until complete.

    Each call (at most ``limit`` chunks, about `_WRITE_CHARS` of text) is a checkpoint:
    chunks already in the collection (from an interrupted run) are not embedded again.
    """
    if not plan.pending:
        write.set_pending(add=[plan.version])
        plan.pending = True
    embedded = 0
    chroma = write.owner.chroma
    try:
        for group in _groups(chunks, limit):
            present = chroma.present_ids([c.id for c in group]) if plan.current else set()
            missing = [c for c in group if c.id not in present]
            if missing:
                _write(write, missing, _embed(missing, embeddings, settings.batch_size, bar))
                embedded += len(missing)
    except IngestError:
        raise
    except NoSpaceError as exc:
        raise NoSpaceError(
            f"{plan.source.source}: {exc} Its {plan.current + embedded} of {plan.count} "
            "chunks written are left out of searches until the rest is written."
        ) from exc
    except Exception as exc:
        written = plan.current + embedded
        raise IngestError(
            f"{plan.source.source}: writing its chunks failed ({type(exc).__name__}: {exc}) "
            f"with {written} of {plan.count} chunks written. Searches leave them out (and "
            "still see the previous version, if any). Fix the cause and ingest the file "
            "again: it resumes from the chunks already written."
        ) from exc
    return embedded


def _groups(chunks: Iterator[Chunk], size: int) -> Iterator[list[Chunk]]:
    """Consecutive chunks, at most ``size`` and about `_WRITE_CHARS` of text per group."""
    group: list[Chunk] = []
    chars = 0
    for chunk in chunks:
        group.append(chunk)
        chars += len(chunk.text)
        if len(group) == size or chars >= _WRITE_CHARS:
            yield group
            group, chars = [], 0
    if group:
        yield group


def _retire_old_versions(write: Write, plan: _Plan, limit: int) -> None:
    """Make the complete new version the one searched, then delete the other versions.

    A pending new version is released and the old versions hidden in one metadata write,
    so searches switch from one whole version to the other.
    """
    if plan.pending:
        write.set_pending(add=plan.stale_versions, remove=[plan.version])
        plan.pending = False
    _retire_group(write, [plan], limit)


def _retire_group(write: Write, plans: list[_Plan], limit: int) -> None:
    """Delete the old versions of documents whose new versions are written, together.

    One delete for a whole group, so a replaced file's two versions are both searchable
    only as long as that delete takes, not while the other files' are removed one by one.
    """
    clauses: list[dict[str, Any]] = []
    for plan in plans:
        name = plan.source.source
        if plan.stale_versions:
            versions = sorted(plan.stale_versions)
            clauses.append({"$and": [{"source": name}, {DOC_VERSION: {"$in": versions}}]})
        if plan.stale_doc_ids:
            doc_ids = sorted(plan.stale_doc_ids)
            clauses.append({"$and": [{"source": name}, {"doc_id": {"$in": doc_ids}}]})
    if clauses:
        write.delete_where(clauses[0] if len(clauses) == 1 else {"$or": clauses})
    write.delete([id_ for plan in plans for id_ in plan.stale_ids], limit)
    retired = {version for plan in plans for version in plan.stale_versions}
    if retired:
        write.set_pending(remove=retired)
