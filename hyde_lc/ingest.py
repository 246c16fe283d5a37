"""Ingestion: PDF, text and Markdown files -> chunks with stable ids -> Chroma.

Each file becomes one *document*: its pages' text joined with blank lines (pages with
almost no text, such as scans or blank pages, are skipped and reported). The document
is split with LangChain's recursive character splitter, so chunks may cross pages;
every chunk records where it starts in the document text (``start_index``), the
whitespace the splitter dropped before it (``gap_before``), the pages it spans, and its
position (``chunk_index``, consecutive from 0).

Ids are derived from content: ingesting an unchanged file again changes nothing (and
embeds nothing); a changed file's new chunks are written first and its old chunks
removed after, so the collection never loses a document that was already searchable.

Example:
    >>> from hyde_lc import ingest_paths, open_store
    >>> report = ingest_paths(["docs/"], open_store())  # doctest: +SKIP
    >>> print(report.summary())  # doctest: +SKIP

"""

from __future__ import annotations

import bisect
import hashlib
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from langchain_chroma import Chroma
from langchain_text_splitters import RecursiveCharacterTextSplitter
from tqdm.auto import tqdm

from hyde_lc.errors import IngestError
from hyde_lc.models import embedding_model_id
from hyde_lc.store import check_embeddings, iter_metadatas

logger = logging.getLogger(__name__)

SUPPORTED_SUFFIXES = (".pdf", ".txt", ".md")
MIN_PAGE_CHARS = 20
"""Pages with fewer non-blank characters than this are skipped (scans, blank pages)."""
PAGE_SEPARATOR = "\n\n"
DEFAULT_CHUNK_SIZE = 1000
DEFAULT_CHUNK_OVERLAP = 200


@dataclass
class LoadedDocument:
    """One file's text, with the document offset where each kept page starts."""

    source: str
    text: str
    page_starts: list[int]
    page_numbers: list[int]
    notes: list[str] = field(default_factory=list)

    @property
    def doc_id(self) -> str:
        """Content-derived id: the same text always gives the same id."""
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()[:20]

    def page_at(self, offset: int) -> int:
        """The 1-based page number that holds character ``offset``."""
        return self.page_numbers[max(0, bisect.bisect_right(self.page_starts, offset) - 1)]


@dataclass
class Chunk:
    """A chunk ready to embed: its id, text and metadata."""

    id: str
    text: str
    metadata: dict


@dataclass
class FileResult:
    """What ingestion did with one file."""

    source: str
    status: Literal["added", "replaced", "unchanged", "empty"]
    chunks: int
    notes: list[str]


@dataclass
class IngestReport:
    """What ``ingest_paths`` did, file by file."""

    files: list[FileResult]

    def summary(self) -> str:
        """Human-readable lines: one per file, notes indented under it."""
        lines = []
        for result in self.files:
            lines.append(f"{result.status:9} {result.chunks:5} chunks  {result.source}")
            lines.extend(f"          note: {note}" for note in result.notes)
        return "\n".join(lines)


def discover_files(paths: Iterable[str | Path]) -> list[Path]:
    """Expand files and folders (recursively) into the supported files, sorted."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw).expanduser()
        if not path.exists():
            raise IngestError(f"no such file or folder: {path}")
        if path.is_dir():
            inside = sorted(
                p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in SUPPORTED_SUFFIXES
            )
            if not inside:
                raise IngestError(
                    f"folder {path} contains no supported files ({', '.join(SUPPORTED_SUFFIXES)})"
                )
            found.extend(inside)
        elif path.suffix.lower() in SUPPORTED_SUFFIXES:
            found.append(path)
        else:
            raise IngestError(
                f"{path}: unsupported file type {path.suffix or '(none)'}; "
                f"hyde_lc ingests {', '.join(SUPPORTED_SUFFIXES)}"
            )
    return list(dict.fromkeys(p.resolve() for p in found))


def _pdf_pages(path: Path) -> list[tuple[int, str]]:
    from langchain_community.document_loaders import PyPDFLoader

    with path.open("rb") as fh:
        head = fh.read(1024)
    if b"%PDF-" not in head:
        raise IngestError(f"{path} is named .pdf but is not a PDF file (no %PDF header)")
    try:
        pages = PyPDFLoader(str(path), mode="page").load()
    except Exception as exc:
        raise IngestError(f"{path}: pypdf could not read this PDF ({exc})") from exc
    return [
        (int(page.metadata.get("page", i)) + 1, page.page_content) for i, page in enumerate(pages)
    ]


def _text_pages(path: Path, notes: list[str]) -> list[tuple[int, str]]:
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = raw.decode("cp1252", errors="replace")
        notes.append("not valid UTF-8; read as Windows-1252")
    return [(1, text)]


def load_document(path: Path) -> LoadedDocument:
    """Read one file into a `LoadedDocument` (pages with almost no text skipped)."""
    notes: list[str] = []
    pages = _pdf_pages(path) if path.suffix.lower() == ".pdf" else _text_pages(path, notes)
    text_parts: list[str] = []
    starts: list[int] = []
    numbers: list[int] = []
    offset = 0
    for number, page_text in pages:
        if len("".join(page_text.split())) < MIN_PAGE_CHARS:
            notes.append(f"page {number} skipped: no extractable text (blank or scanned)")
            continue
        if text_parts:
            offset += len(PAGE_SEPARATOR)
        starts.append(offset)
        numbers.append(number)
        text_parts.append(page_text)
        offset += len(page_text)
    return LoadedDocument(
        source=str(path),
        text=PAGE_SEPARATOR.join(text_parts),
        page_starts=starts,
        page_numbers=numbers,
        notes=notes,
    )


def split_document(
    doc: LoadedDocument,
    embedding_model: str,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
) -> list[Chunk]:
    """Split a document into chunks with ids and metadata, in document order."""
    if chunk_size <= 0 or not 0 <= chunk_overlap < chunk_size:
        raise IngestError(
            f"invalid chunking: chunk_size={chunk_size}, chunk_overlap={chunk_overlap}; "
            "need chunk_size > 0 and 0 <= chunk_overlap < chunk_size"
        )
    if not doc.text:
        return []
    splitter = RecursiveCharacterTextSplitter(
        chunk_size=chunk_size, chunk_overlap=chunk_overlap, add_start_index=True
    )
    pieces = splitter.create_documents([doc.text])
    doc_id = doc.doc_id
    chunks = []
    previous_end = 0
    for index, piece in enumerate(pieces):
        start = int(piece.metadata["start_index"])
        # The splitter strips the whitespace between chunks; keeping it lets a window of
        # neighbouring chunks be rebuilt exactly as the document reads.
        gap_before = doc.text[previous_end:start] if start > previous_end else ""
        previous_end = max(previous_end, start + len(piece.page_content))
        key = f"{doc.source}\0{doc_id}\0{chunk_size}\0{chunk_overlap}\0{index}"
        chunks.append(
            Chunk(
                id=hashlib.sha256(key.encode("utf-8")).hexdigest()[:32],
                text=piece.page_content,
                metadata={
                    "source": doc.source,
                    "file_name": Path(doc.source).name,
                    "page": doc.page_at(start),
                    "page_end": doc.page_at(start + len(piece.page_content) - 1),
                    "chunk_index": index,
                    "chunk_count": len(pieces),
                    "start_index": start,
                    "gap_before": gap_before,
                    "doc_id": doc_id,
                    "embedding_model": embedding_model,
                },
            )
        )
    return chunks


def _write_chunks(
    store: Chroma, chunks: list[Chunk], existing: set[str], batch_size: int, bar: tqdm
) -> None:
    """Embed and write a document's new chunks; on failure remove those already written.

    The old version stays complete and searchable until the new one is fully written.
    """
    written: list[str] = []
    try:
        for start in range(0, len(chunks), batch_size):
            batch = chunks[start : start + batch_size]
            store.add_texts(
                [c.text for c in batch], [c.metadata for c in batch], ids=[c.id for c in batch]
            )
            written.extend(c.id for c in batch if c.id not in existing)
            bar.update(len(batch))
    except Exception as exc:
        if written:
            store.delete(ids=written)
        raise IngestError(
            f"{chunks[0].metadata['source']}: writing its chunks failed "
            f"({type(exc).__name__}: {exc}); the partial write was undone and the collection "
            "is as before. Fix the cause and ingest again."
        ) from exc


def ingest_paths(
    paths: Sequence[str | Path],
    store: Chroma,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
    batch_size: int = 64,
    progress: bool = True,
) -> IngestReport:
    """Ingest files and folders into ``store`` (a collection opened by `open_store`).

    Every file is read and split before anything is written, so a bad file in the
    list (missing, not a PDF, unreadable) fails the call with the collection untouched.
    """
    embeddings = store.embeddings
    if embeddings is None:
        raise IngestError("the store has no embedding function; open it with open_store()")
    check_embeddings(store, embeddings)
    model_id = embedding_model_id(embeddings)
    documents = [load_document(path) for path in discover_files(paths)]

    plans: list[tuple[LoadedDocument, list[Chunk], set[str]]] = []
    for doc in documents:
        chunks = split_document(doc, model_id, chunk_size, chunk_overlap)
        existing = {id_ for id_, _ in iter_metadatas(store, where={"source": doc.source})}
        plans.append((doc, chunks, existing))

    to_embed = sum(len(c) for _, c, old in plans if {x.id for x in c} != old)
    results: list[FileResult] = []
    with tqdm(total=to_embed, unit="chunk", desc="embedding", disable=not progress) as bar:
        for doc, chunks, existing in plans:
            new_ids = {c.id for c in chunks}
            if not chunks:
                status: Literal["added", "replaced", "unchanged", "empty"] = "empty"
                doc.notes.append(
                    "no text to index; the previously ingested version is kept"
                    if existing
                    else "no text to index"
                )
                new_ids = existing  # a file gone blank does not remove what was searchable
            elif new_ids == existing:
                status = "unchanged"
            else:
                status = "replaced" if existing else "added"
                _write_chunks(store, chunks, existing, batch_size, bar)
            stale = sorted(existing - new_ids)
            if stale:
                store.delete(ids=stale)
            results.append(FileResult(doc.source, status, len(chunks), doc.notes))
            logger.info("%s %s (%d chunks)", status, doc.source, len(chunks))
    return IngestReport(results)
