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

Bad input fails before anything is written, with an `IngestError` saying what to do:
a missing path, a folder with no supported files, a file above ``max_file_bytes``, a
``.pdf`` that is not a PDF, a damaged or truncated PDF, a password-protected PDF, a
binary file named ``.txt``. Files with no text (0 bytes, blank or scanned PDFs) are
reported as ``empty`` with a note, and nothing is stored for them. A Chroma server that
stops answering mid-run fails the call with a `StoreUnavailableError` naming the server;
once it is back, ingesting the same files again completes the collection. Text files are read
in blocks (UTF-8, UTF-16/32 with a byte-order mark, else Windows-1252 with a note), so
reading holds about two copies of the text at most.

Example:
    >>> from hyde_lc import ingest_paths, open_store
    >>> report = ingest_paths(["docs/"], open_store())  # doctest: +SKIP
    >>> print(report.summary())  # doctest: +SKIP

"""

from __future__ import annotations

import bisect
import codecs
import hashlib
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from langchain_chroma import Chroma
from langchain_core.embeddings import Embeddings
from langchain_text_splitters import RecursiveCharacterTextSplitter
from tqdm.auto import tqdm

from hyde_lc.errors import IngestError
from hyde_lc.models import embedding_model_id
from hyde_lc.store import (
    check_dimension,
    check_embeddings,
    declared_dimension,
    iter_metadatas,
    server_lost_as_error,
    write_lock,
)

logger = logging.getLogger(__name__)

SUPPORTED_SUFFIXES = (".pdf", ".txt", ".md")
MIN_PAGE_CHARS = 20
"""Pages with fewer non-blank characters than this are skipped (scans, blank pages)."""
PAGE_SEPARATOR = "\n\n"
DEFAULT_CHUNK_SIZE = 1000
DEFAULT_CHUNK_OVERLAP = 200
MAX_FILE_BYTES = 512 * 1024 * 1024
"""Files larger than this are refused before reading (ingesting one holds several copies
of its text in memory); ``ingest_paths(max_file_bytes=...)`` / ``--max-file-mb`` change it."""
_READ_BLOCK = 1024 * 1024
_HEAD_BYTES = 8192
_NON_BLANK = re.compile(r"\S+")
_BINARY_BYTES = [bytes([b]) for b in (*range(0, 8), *range(14, 27), *range(28, 32))]
"""Control bytes that text files do not use (backspace, tab, newlines, form feed and
escape are left out)."""
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


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


def check_file_size(path: Path, max_bytes: int | None = MAX_FILE_BYTES) -> None:
    """Refuse a file larger than ``max_bytes`` (None: no limit) before reading it."""
    if max_bytes is None:
        return
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise IngestError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if size > max_bytes:
        raise IngestError(
            f"{path} is {size / 2**20:,.1f} MB, above the {max_bytes / 2**20:,.1f} MB limit "
            "for one file (ingesting holds several copies of its text in memory). Split it "
            "into smaller files, or raise the limit (--max-file-mb, or max_file_bytes=...) "
            "if this machine has the memory"
        )


def _read_head(path: Path) -> bytes:
    try:
        with path.open("rb") as fh:
            return fh.read(_HEAD_BYTES)
    except OSError as exc:
        raise IngestError(
            f"cannot read {path}: {exc.strerror or exc}; check that it is a readable file"
        ) from exc


def _decode(path: Path, encoding: str, errors: str) -> str:
    """The file's text, decoded block by block (no whole-file bytes copy)."""
    decoder = codecs.getincrementaldecoder(encoding)(errors)
    parts: list[str] = []
    try:
        with path.open("rb") as fh:
            while block := fh.read(_READ_BLOCK):
                parts.append(decoder.decode(block))
    except OSError as exc:
        raise IngestError(f"cannot read {path}: {exc.strerror or exc}") from exc
    parts.append(decoder.decode(b"", final=True))
    return "".join(parts)


def _pdf_pages(path: Path, notes: list[str]) -> list[tuple[int, str]]:
    from langchain_community.document_loaders import PyPDFLoader
    from pypdf.errors import DependencyError, FileNotDecryptedError

    head = _read_head(path)
    if not head:
        notes.append("empty file (0 bytes)")
        return []
    if b"%PDF-" not in head[:1024]:
        raise IngestError(f"{path} is named .pdf but is not a PDF file (no %PDF header)")
    decrypt = (
        f"Decrypt it first, e.g. `qpdf --decrypt --password=PASSWORD {path} decrypted.pdf`, "
        "and ingest the decrypted copy"
    )
    try:
        pages = PyPDFLoader(str(path), mode="page").load()
    except FileNotDecryptedError as exc:
        raise IngestError(
            f"{path} is encrypted with a password, so its text cannot be read. {decrypt}"
        ) from exc
    except DependencyError as exc:
        raise IngestError(
            f"{path} is encrypted (AES), which pypdf reads only with the `cryptography` "
            f"package ({exc}): pip install cryptography, or {decrypt[0].lower()}{decrypt[1:]}"
        ) from exc
    except Exception as exc:
        raise IngestError(
            f"{path}: pypdf could not read this PDF ({exc}); it is damaged or truncated (an "
            "interrupted download or copy?). Re-download or re-export it, or leave it out"
        ) from exc
    return [
        (int(page.metadata.get("page", i)) + 1, page.page_content) for i, page in enumerate(pages)
    ]


def _text_pages(path: Path, notes: list[str]) -> list[tuple[int, str]]:
    head = _read_head(path)
    if not head:
        notes.append("empty file (0 bytes)")
        return []
    encoding = next((enc for bom, enc in _BOMS if head.startswith(bom)), None)
    if encoding is not None:
        try:
            text = _decode(path, encoding, "strict")
        except UnicodeDecodeError as exc:
            raise IngestError(
                f"{path} starts with a {encoding.upper()} byte-order mark but is not valid "
                f"{encoding.upper()} ({exc.reason}); convert it to UTF-8 and ingest that"
            ) from exc
        notes.append(f"read as {encoding.upper()} (it starts with a byte-order mark)")
        return [(1, text)]
    if _looks_binary(head):
        raise IngestError(
            f"{path} is named {path.suffix} but does not look like text (NUL and other "
            "control bytes, as in binary files). Leave it out; if it is UTF-16 text without "
            "a byte-order mark, convert it first: iconv -f UTF-16LE -t UTF-8"
        )
    try:
        text = _decode(path, "utf-8-sig", "strict")
    except UnicodeDecodeError:
        text = _decode(path, "cp1252", "replace")
        notes.append("not valid UTF-8; read as Windows-1252")
    return [(1, text)]


def _looks_binary(head: bytes) -> bool:
    """Whether a file's first bytes look binary (or like UTF-16 without a byte-order mark).

    That is: NUL bytes, with control bytes that text does not use making up 5% or more
    of the start. A text file with a stray NUL or many escape sequences reads as text.
    """
    if b"\x00" not in head:
        return False
    controls = sum(head.count(byte) for byte in _BINARY_BYTES)
    return controls >= 0.05 * len(head)


def _has_text(text: str) -> bool:
    """Whether ``text`` holds at least `MIN_PAGE_CHARS` non-blank characters (no copy)."""
    count = 0
    for match in _NON_BLANK.finditer(text):
        count += match.end() - match.start()
        if count >= MIN_PAGE_CHARS:
            return True
    return False


def load_document(path: Path, max_bytes: int | None = MAX_FILE_BYTES) -> LoadedDocument:
    """Read one file into a `LoadedDocument` (pages with almost no text skipped).

    Raises `IngestError` for a file that cannot be read as what its name says; a file
    with no text gives an empty document whose ``notes`` say why.
    """
    path = Path(path)
    check_file_size(path, max_bytes)
    notes: list[str] = []
    is_pdf = path.suffix.lower() == ".pdf"
    pages = _pdf_pages(path, notes) if is_pdf else _text_pages(path, notes)
    text_parts: list[str] = []
    starts: list[int] = []
    numbers: list[int] = []
    offset = 0
    for number, page_text in pages:
        if not _has_text(page_text):
            if is_pdf:
                notes.append(f"page {number} skipped: no extractable text (blank or scanned)")
            else:
                notes.append(
                    f"too little text to index (under {MIN_PAGE_CHARS} non-blank characters)"
                )
            continue
        if text_parts:
            offset += len(PAGE_SEPARATOR)
        starts.append(offset)
        numbers.append(number)
        text_parts.append(page_text)
        offset += len(page_text)
    if is_pdf and pages and not text_parts:
        notes.append(
            "no page has extractable text: if it is a scan, run OCR on it first "
            "(e.g. ocrmypdf in.pdf out.pdf) and ingest the result"
        )
    return LoadedDocument(
        source=str(path),
        text=PAGE_SEPARATOR.join(text_parts),
        page_starts=starts,
        page_numbers=numbers,
        notes=notes,
    )


def chunk_id(source: str, doc_id: str, chunk_size: int, chunk_overlap: int, index: int) -> str:
    """The stable id of chunk ``index`` of one document version split one way."""
    key = f"{source}\0{doc_id}\0{chunk_size}\0{chunk_overlap}\0{index}"
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


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
        chunks.append(
            Chunk(
                id=chunk_id(doc.source, doc_id, chunk_size, chunk_overlap, index),
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
                    # With source, doc_id and chunk_index these give any chunk's id
                    # (`chunk_id`): neighbour expansion fetches windows by id.
                    "chunk_size": chunk_size,
                    "chunk_overlap": chunk_overlap,
                    "embedding_model": embedding_model,
                },
            )
        )
    return chunks


def _max_write(store: Chroma) -> int:
    """The most records Chroma takes in one call (5,461 for embedded Chroma 1.5)."""
    try:
        return max(1, int(store._client.get_max_batch_size()))
    except Exception:
        return 1000


def _write_chunks(
    store: Chroma,
    chunks: list[Chunk],
    existing: set[str],
    batch_size: int,
    bar: tqdm,
    max_write: int,
) -> None:
    """Embed a document's chunks (``batch_size`` at a time), then write them all at once.

    One Chroma call is one transaction, so the document becomes searchable whole or not
    at all, even when the process is killed mid-write. Only a document of more than
    ``max_write`` chunks takes several calls; a failure between them is undone here,
    and a kill between them leaves a partial version that the next `ingest_paths` of
    the file completes. The old version stays complete and searchable until the new
    one is fully written.
    """
    embeddings = store.embeddings
    assert embeddings is not None
    written: list[str] = []
    try:
        vectors: list[list[float]] = []
        for start in range(0, len(chunks), batch_size):
            batch = chunks[start : start + batch_size]
            vectors.extend(embeddings.embed_documents([c.text for c in batch]))
            bar.update(len(batch))
        for start in range(0, len(chunks), max_write):
            part = chunks[start : start + max_write]
            store._collection.upsert(
                ids=[c.id for c in part],
                embeddings=vectors[start : start + max_write],  # type: ignore[arg-type]
                metadatas=[c.metadata for c in part],
                documents=[c.text for c in part],
            )
            written.extend(c.id for c in part if c.id not in existing)
    except Exception as exc:
        if written:
            try:
                store.delete(ids=written)
            except Exception as undo:  # the store is gone (a stopped server, say)
                raise IngestError(
                    f"{chunks[0].metadata['source']}: writing its chunks failed "
                    f"({type(exc).__name__}: {exc}), and so did undoing the partial write "
                    f"({type(undo).__name__}). Fix the cause and ingest the file again: "
                    "that completes it"
                ) from exc
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
    max_file_bytes: int | None = MAX_FILE_BYTES,
) -> IngestReport:
    """Ingest files and folders into ``store`` (a collection opened by `open_store`).

    Every file is read and split before anything is written, so a bad file in the
    list (missing, not a PDF, unreadable, too large) fails the call with the collection
    untouched. Files with no text are reported with status ``empty`` and a note.
    """
    embeddings = store.embeddings
    if embeddings is None:
        raise IngestError("the store has no embedding function; open it with open_store()")
    check_embeddings(store, embeddings)
    model_id = embedding_model_id(embeddings)
    files = discover_files(paths)
    for path in files:  # all sizes first: a huge last file fails before any reading
        check_file_size(path, max_file_bytes)
    documents = [load_document(path, max_file_bytes) for path in files]

    split = [(doc, split_document(doc, model_id, chunk_size, chunk_overlap)) for doc in documents]
    # One writer per embedded collection at a time: another process (or thread) ingesting
    # into the same folder waits here, then sees what the first one wrote.
    resume = (
        "ingest the same files again: documents already written are kept (nothing is "
        "embedded twice) and the rest are completed, with no duplicate chunks"
    )
    with server_lost_as_error(store, resume), write_lock(store):
        return _write_documents(store, split, embeddings, batch_size, progress)


def _write_documents(
    store: Chroma,
    split: list[tuple[LoadedDocument, list[Chunk]]],
    embeddings: Embeddings,
    batch_size: int,
    progress: bool,
) -> IngestReport:
    """Bring each document's chunks in the collection to ``split`` (under the write lock).

    A file's chunks already there decide: all its new ids present means nothing to embed
    (only leftovers of other versions, such as those of an interrupted run, are
    removed); otherwise the new version is written whole, then every other chunk of
    that file removed.
    """
    plans: list[tuple[LoadedDocument, list[Chunk], set[str]]] = []
    for doc, chunks in split:
        existing = {id_ for id_, _ in iter_metadatas(store, where={"source": doc.source})}
        plans.append((doc, chunks, existing))

    to_embed = sum(len(c) for _, c, old in plans if not {x.id for x in c} <= old)
    if to_embed:  # same model id but other vector length: refuse before writing anything
        dimension = declared_dimension(embeddings)
        check_dimension(store, dimension or len(embeddings.embed_query("dimension check")))
    max_write = _max_write(store)
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
            elif new_ids <= existing:  # written before; drop what an interrupted run left
                status = "unchanged" if new_ids == existing else "replaced"
            else:
                status = "replaced" if existing - new_ids else "added"
                _write_chunks(store, chunks, existing, batch_size, bar, max_write)
            stale = sorted(existing - new_ids)
            if stale:
                store.delete(ids=stale)
            results.append(FileResult(doc.source, status, len(chunks), doc.notes))
            logger.info("%s %s (%d chunks)", status, doc.source, len(chunks))
    return IngestReport(results)
