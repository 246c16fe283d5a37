"""Reading files for ingestion: which files, how their text decodes, in bounded segments.

Each file becomes one *document*: its pages' text joined with blank lines (pages with
almost no text, such as scans or blank pages, are skipped and reported). Text files are
read as UTF-8, UTF-16/32 with a byte-order mark, else Windows-1252 with a note.

A text file is never held whole: a first pass (`scan_file`) decodes it block by block to
check it and to hash its text (the document id is that hash), and later passes read it
again as *segments* of at most `SEGMENT_CHARS` characters, cut at a paragraph break
(`iter_segments`). A document of one segment is split exactly as a whole; a longer one
is split segment by segment, and its id says so.

Each document's dominant script (`hyde_lc.core.language.dominant_script`: Latin, CJK, ...) is
counted on the same first pass; it decides how the document is split
(`hyde_lc.ingest.splitting.make_splitter`). Chinese, Japanese and Korean text is split at its own
punctuation, so its chunks differ from a Latin-style split of the same text: its id says
so too.

Example:
    >>> from hyde_lc.ingest.reading import scan_file
    >>> source = scan_file(Path("notes.txt"))  # doctest: +SKIP
    >>> source.doc_id, source.length  # doctest: +SKIP
    ('3f2a9c...', 48211)

"""

from __future__ import annotations

import bisect
import codecs
import hashlib
import logging
import os
import re
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from hyde_lc.core.language import Script, dominant_of, dominant_script, script_counts
from hyde_lc.errors import IngestError

logger = logging.getLogger(__name__)

SUPPORTED_SUFFIXES = (".pdf", ".txt", ".md")
MIN_PAGE_CHARS = 20
"""Pages with fewer non-blank characters than this are skipped (scans, blank pages)."""
PAGE_SEPARATOR = "\n\n"
MAX_FILE_BYTES = 512 * 1024 * 1024
"""Files larger than this are refused before reading; ``ingest_paths(max_file_bytes=...)``
/ ``--max-file-mb`` change it."""
SAMPLE_HEAD_CHARS = 20_000
"""Characters kept from the start of a long text file (`TextSource.sample`) for messages
about its language."""
SEGMENT_CHARS = 4 * 1024 * 1024
"""The most characters of a document split at once. Ingestion holds about one segment's
text, chunks and vectors at a time, whatever the file's size; a document longer than
this is split segment by segment (chunks do not cross segments)."""
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
_KINDS = {
    stat.S_IFIFO: "a named pipe (FIFO)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a folder",
}


@dataclass(frozen=True)
class InputLimits:
    """What reading one file may cost at most, whatever the file claims.

    A PDF's compressed streams can expand a thousandfold: a 60 KB file whose 200 pages
    share one 8 MB content stream makes pypdf parse 1.6 GB (minutes), and a 20 KB page
    can yield millions of characters. These bounds refuse such a file before anything is
    written, with a message naming the limit and how to raise it. The defaults leave
    ordinary documents far below them (a page of dense text draws from tens of KB of
    content and holds about 5,000 characters).

    Attributes:
        max_pdf_page_bytes: inflated content one PDF page's text is read from (its
            content streams and the forms it draws), in bytes (``--max-pdf-page-mb``).
        max_pdf_bytes: the same summed over a PDF's pages; a stream shared by several
            pages counts for each, since each page parses it again (``--max-pdf-mb``).
        max_page_chars: characters of text one PDF page may yield (``--max-page-chars``).
        max_pdf_chars: characters of text one PDF may yield (``--max-pdf-chars``).
        max_chunks: chunks one file may make, any type (``--max-chunks-per-file``).

    Example:
        >>> limits = InputLimits(max_chunks=200_000)
        >>> limits.max_page_chars
        100000

    """

    max_pdf_page_bytes: int = 4 * 2**20
    max_pdf_bytes: int = 64 * 2**20
    max_page_chars: int = 100_000
    max_pdf_chars: int = 10_000_000
    max_chunks: int = 100_000

    def check_chunks(self, path: str | Path, count: int) -> None:
        """Refuse a file that makes more than `max_chunks` chunks (`IngestError`)."""
        if count > self.max_chunks:
            raise IngestError(
                f"{path} would make {count:,} chunks, above the limit of {self.max_chunks:,} "
                "chunks per file. Split the file, use larger chunks (--chunk-size), or raise "
                "the limit if the file is genuine (--max-chunks-per-file, or "
                "InputLimits(max_chunks=...))"
            )


DEFAULT_LIMITS = InputLimits()
"""The bounds used when none are given (`InputLimits`)."""


# -- which files ----------------------------------------------------------------------------


@dataclass
class Skipped:
    """Something inside a folder that was not ingested, and why.

    Example:
        >>> Skipped("docs/feed.txt", "skipped: it is a named pipe (FIFO)").reason
        'skipped: it is a named pipe (FIFO)'

    """

    path: str
    reason: str


@dataclass
class Discovery:
    """The files to ingest, and what was passed over inside folders (`find_files`).

    Example:
        >>> found = find_files(["docs/"])  # doctest: +SKIP
        >>> [s.reason for s in found.skipped]  # doctest: +SKIP
        ['folder skipped: cannot read it (Permission denied); its files were not ingested']

    """

    files: list[Path]
    skipped: list[Skipped] = field(default_factory=list)


def _not_regular(path: Path) -> str | None:
    """Why ``path`` is not a regular file one can read (None if it is one)."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        return f"cannot read it: {exc.strerror or exc}"
    if stat.S_ISREG(mode):
        return None
    kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
    return f"it is {kind}, not a regular file"


def check_regular_file(path: Path) -> None:
    """Refuse anything but a regular file (a FIFO would block reading for ever)."""
    why = _not_regular(path)
    if why is not None:
        raise IngestError(
            f"{path}: {why}. hyde_lc ingests regular {', '.join(SUPPORTED_SUFFIXES)} files; "
            "copy the content into a file and ingest that"
        )


def find_files(paths: Iterable[str | Path], follow_links: bool = False) -> Discovery:
    """Expand files and folders (recursively) into the supported files, sorted.

    A path given by name must be a supported, regular, readable file or a folder
    (`IngestError` otherwise); a symbolic link given by name is followed, and its
    *target* must be a supported file. Inside folders, sub-folders that cannot be read and
    supported names that are not regular files (pipes, devices, sockets, broken links)
    or cannot be read are passed over and listed in ``skipped``. So are symbolic links
    that lead out of the folder being ingested (``/etc/passwd`` behind ``notes.txt``),
    unless ``follow_links`` is set, and links whose target is not a supported file
    (the type is the target's, not the link's name).

    Example:
        >>> found = find_files(["corpus/"])  # doctest: +SKIP
        >>> found.skipped[0].reason  # doctest: +SKIP
        'skipped: it is a symbolic link to /etc/passwd, outside corpus ...'

    """
    found: list[Path] = []
    skipped: list[Skipped] = []
    for raw in paths:
        path = Path(raw).expanduser()
        if not path.exists():
            raise IngestError(f"no such file or folder: {path}")
        if path.is_dir():
            inside = _walk(path, skipped, follow_links)
            if not inside:
                raise IngestError(
                    f"folder {path} contains no supported files ({', '.join(SUPPORTED_SUFFIXES)})"
                )
            for inner in inside:
                problem = _name_problem(inner)
                if problem is None:
                    found.append(inner)
                else:
                    skipped.append(Skipped(_shown(inner), f"skipped: {problem}"))
            continue
        target = path.resolve()
        if target.suffix.lower() in SUPPORTED_SUFFIXES:
            check_regular_file(path)
            problem = _name_problem(path)
            if problem is not None:
                raise IngestError(f"{_shown(path)}: {problem}")
            found.append(path)
        elif path.is_symlink():
            raise IngestError(
                f"{path} is a symbolic link to {target}, which is not a supported file "
                f"(type {target.suffix or '(none)'}); hyde_lc ingests "
                f"{', '.join(SUPPORTED_SUFFIXES)} files, judged by the link's target"
            )
        else:
            raise IngestError(
                f"{path}: unsupported file type {path.suffix or '(none)'}; "
                f"hyde_lc ingests {', '.join(SUPPORTED_SUFFIXES)}"
            )
    return Discovery(list(dict.fromkeys(p.resolve() for p in found)), skipped)


def _name_problem(path: Path) -> str | None:
    """Why ``path``'s name cannot be a document's source (None: it can).

    A name with bytes that are not UTF-8 reaches Python as lone surrogates, which no
    collection can store; replacing them would give two such files one source.
    """
    try:
        str(path.resolve()).encode("utf-8")
    except UnicodeEncodeError:
        return "its name is not valid UTF-8 (bytes shown as \\x..); rename it to ingest it"
    return None


def _shown(path: Path) -> str:
    r"""``path`` printable: bytes that are not UTF-8 shown as ``\xe9``."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


FOLLOW_LINKS_HINT = "--follow-links, or follow_links=True, to ingest what they point to"
"""How to ingest what links out of the ingested folder point to (said when they are skipped)."""


def _link_problem(path: Path, root: Path, folder: Path, follow_links: bool) -> str | None:
    """Why the symbolic link ``path`` (found under ``root``) is not ingested, or None."""
    target = path.resolve()
    if not follow_links and not target.is_relative_to(root):
        return (
            f"it is a symbolic link to {target}, outside {folder}; links out of the folder "
            f"being ingested are not followed ({FOLLOW_LINKS_HINT})"
        )
    if target.suffix.lower() not in SUPPORTED_SUFFIXES:
        return (
            f"it is a symbolic link to {target}, which is not a supported file "
            f"({', '.join(SUPPORTED_SUFFIXES)}; the type is the target's, not the link's name)"
        )
    return None


def _walk(folder: Path, skipped: list[Skipped], follow_links: bool = False) -> list[Path]:
    """Supported regular files under ``folder``.

    Links that lead out of ``folder`` are passed over (and listed in ``skipped``) unless
    ``follow_links``; with it, links to folders are walked too, each folder once.
    """
    errors: list[OSError] = []
    inside: list[Path] = []
    root = folder.resolve()
    seen = {root}
    for top, dirs, names in os.walk(folder, onerror=errors.append, followlinks=follow_links):
        for name in list(dirs):
            sub = Path(top) / name
            if not sub.is_symlink():
                continue
            target = sub.resolve()
            if follow_links:
                if target in seen or root.is_relative_to(target):
                    dirs.remove(name)  # a loop, or a folder already walked
                seen.add(target)
            elif not target.is_relative_to(root):
                skipped.append(
                    Skipped(
                        str(sub),
                        f"folder skipped: it is a symbolic link to {target}, outside {folder}; "
                        f"links out of the folder being ingested are not followed "
                        f"({FOLLOW_LINKS_HINT})",
                    )
                )
        for name in names:
            path = Path(top) / name
            link = path.is_symlink()
            named = path.suffix.lower() in SUPPORTED_SUFFIXES
            if not named and not (link and path.resolve().suffix.lower() in SUPPORTED_SUFFIXES):
                continue  # neither the name nor a link's target is a supported file
            why = _not_regular(path)  # follows a link: a broken one cannot be read
            if why is None and link:
                why = _link_problem(path, root, folder, follow_links)
            if why is None and not os.access(path, os.R_OK):
                why = "cannot read it: permission denied"
            if why is None:
                inside.append(path)
            else:
                skipped.append(Skipped(str(path), f"skipped: {why}"))
    for error in errors:
        where = Path(error.filename) if error.filename else folder
        if where == folder:
            raise IngestError(f"cannot read folder {folder}: {error.strerror or error}")
        skipped.append(
            Skipped(
                str(where),
                f"folder skipped: cannot read it ({error.strerror or error}); its files were "
                "not ingested",
            )
        )
    return sorted(inside)


def discover_files(paths: Iterable[str | Path], follow_links: bool = False) -> list[Path]:
    """The supported files in ``paths`` (see `find_files`, which also says what it passed over)."""
    return find_files(paths, follow_links).files


def check_file_size(path: Path, max_bytes: int | None = MAX_FILE_BYTES) -> None:
    """Refuse a file that is not a regular file, or larger than ``max_bytes`` (None: no limit)."""
    check_regular_file(path)
    if max_bytes is None:
        return
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise IngestError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if size > max_bytes:
        raise IngestError(
            f"{path} is {size / 2**20:,.1f} MB, above the {max_bytes / 2**20:,.1f} MB limit "
            "for one file. Split it into smaller files, or raise the limit (--max-file-mb, "
            "or max_file_bytes=...)"
        )


# -- decoding -------------------------------------------------------------------------------


def _read_head(path: Path) -> bytes:
    try:
        with path.open("rb") as fh:
            return fh.read(_HEAD_BYTES)
    except OSError as exc:
        raise IngestError(
            f"cannot read {path}: {exc.strerror or exc}; check that it is a readable file"
        ) from exc


def _decoded_blocks(path: Path, encoding: str, errors: str) -> Iterator[str]:
    """The file's text, decoded block by block (no whole-file copy)."""
    decoder = codecs.getincrementaldecoder(encoding)(errors)
    try:
        with path.open("rb") as fh:
            while block := fh.read(_READ_BLOCK):
                text = decoder.decode(block)
                if text:
                    yield text
    except OSError as exc:
        raise IngestError(f"cannot read {path}: {exc.strerror or exc}") from exc
    tail = decoder.decode(b"", final=True)
    if tail:
        yield tail


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
    return _non_blank(text, MIN_PAGE_CHARS) >= MIN_PAGE_CHARS


def _non_blank(text: str, enough: int) -> int:
    count = 0
    for match in _NON_BLANK.finditer(text):
        count += match.end() - match.start()
        if count >= enough:
            break
    return count


def document_id(digest: Any, length: int, script: str = "latin") -> str:
    """The id of a document version: its text's hash (``digest``, a sha256 of its UTF-8).

    A document longer than one segment is split segment by segment, so its chunks
    differ from a split of the whole: its id says so (and changes with the segment size).
    So does a CJK document's (``script="cjk"``), split at CJK punctuation: a collection
    that holds it split the Latin way gets it replaced, not mixed. Every other script
    keeps the plain hash, so documents already ingested keep their ids.

    Example:
        >>> digest = hashlib.sha256("灯塔".encode())
        >>> document_id(digest, 2) != document_id(digest, 2, "cjk")
        True

    """
    marks = []
    if length > SEGMENT_CHARS:
        marks.append(f"segments of {SEGMENT_CHARS}")
    if script == "cjk":
        marks.append("cjk separators")
    if not marks:
        return str(digest.hexdigest())[:20]
    marked = hashlib.sha256(digest.digest() + "".join(f"\0{m}" for m in marks).encode())
    return marked.hexdigest()[:20]


@dataclass
class _TextRead:
    encoding: str
    errors: str
    digest: Any
    length: int
    has_text: bool
    text: str | None
    counts: dict[str, int] = field(default_factory=dict)
    """Letters per script (`hyde_lc.core.language.script_counts`), added up over the blocks."""
    head: str = ""
    """The first `SAMPLE_HEAD_CHARS` characters."""


def _read_text(path: Path, notes: list[str], keep_up_to: float) -> _TextRead | None:
    """Decode a text file once: its encoding, hash, length, and its text if short enough.

    None for a 0-byte file. Raises `IngestError` for a file that is not text.
    """
    head = _read_head(path)
    if not head:
        notes.append("empty file (0 bytes)")
        return None
    encoding = next((enc for bom, enc in _BOMS if head.startswith(bom)), None)
    if encoding is not None:
        try:
            read = _hash_text(path, encoding, "strict", keep_up_to)
        except UnicodeDecodeError as exc:
            raise IngestError(
                f"{path} starts with a {encoding.upper()} byte-order mark but is not valid "
                f"{encoding.upper()} ({exc.reason}); convert it to UTF-8 and ingest that"
            ) from exc
        notes.append(f"read as {encoding.upper()} (it starts with a byte-order mark)")
        return read
    if _looks_binary(head):
        raise IngestError(
            f"{path} is named {path.suffix} but does not look like text (NUL and other "
            "control bytes, as in binary files). Leave it out; if it is UTF-16 text without "
            "a byte-order mark, convert it first: iconv -f UTF-16LE -t UTF-8"
        )
    try:
        return _hash_text(path, "utf-8-sig", "strict", keep_up_to)
    except UnicodeDecodeError:
        notes.append("not valid UTF-8; read as Windows-1252")
        return _hash_text(path, "cp1252", "replace", keep_up_to)


def _hash_text(path: Path, encoding: str, errors: str, keep_up_to: float) -> _TextRead:
    digest = hashlib.sha256()
    length = 0
    non_blank = 0
    parts: list[str] | None = []
    counts: dict[str, int] = {}
    head = ""
    for block in _decoded_blocks(path, encoding, errors):
        digest.update(block.encode("utf-8"))
        length += len(block)
        for name, count in script_counts(block).items():
            counts[name] = counts.get(name, 0) + count
        if len(head) < SAMPLE_HEAD_CHARS:
            head += block[: SAMPLE_HEAD_CHARS - len(head)]
        if non_blank < MIN_PAGE_CHARS:
            non_blank += _non_blank(block, MIN_PAGE_CHARS)
        if parts is not None:
            parts.append(block)
            if length > keep_up_to:
                parts = None
    text = "".join(parts) if parts is not None else None
    has_text = non_blank >= MIN_PAGE_CHARS
    return _TextRead(encoding, errors, digest, length, has_text, text, counts, head)


def _pdf_pages(
    path: Path, notes: list[str], limits: InputLimits = DEFAULT_LIMITS
) -> list[tuple[int, str]]:
    from langchain_community.document_loaders import PyPDFLoader
    from pypdf import PdfReader
    from pypdf.errors import DependencyError, FileNotDecryptedError, LimitReachedError

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
    pages: list[tuple[int, str]] = []
    try:
        # The content each page's text is read from is measured first (decompressing is
        # fast, parsing it is what takes minutes), so the reading below is bounded.
        _check_pdf_content(path, PdfReader(str(path)), limits)
        total = 0
        for i, page in enumerate(PyPDFLoader(str(path), mode="page").load()):
            number = int(page.metadata.get("page", i)) + 1
            total += _checked_page_chars(path, number, page.page_content, total, limits)
            pages.append((number, page.page_content))
    except IngestError:
        raise
    except FileNotDecryptedError as exc:
        raise IngestError(
            f"{path} is encrypted with a password, so its text cannot be read. {decrypt}"
        ) from exc
    except DependencyError as exc:
        raise IngestError(
            f"{path} is encrypted (AES), which pypdf reads only with the `cryptography` "
            f"package ({exc}): pip install cryptography, or {decrypt[0].lower()}{decrypt[1:]}"
        ) from exc
    except LimitReachedError as exc:
        raise IngestError(
            f"{path}: a compressed stream in this PDF expands beyond pypdf's safety limit "
            f"({exc}): the file inflates to far more than its size (a decompression bomb), "
            "it is not a damaged download. Leave it out; if it is genuine, re-export it "
            "(e.g. print it to a new PDF) and ingest that"
        ) from exc
    except Exception as exc:
        raise IngestError(
            f"{path}: pypdf could not read this PDF ({exc}); it is damaged or truncated (an "
            "interrupted download or copy?). Re-download or re-export it, or leave it out"
        ) from exc
    return pages


def _mb(size: int) -> str:
    return f"{size / 2**20:,.1f} MB"


def _check_pdf_content(path: Path, reader: Any, limits: InputLimits) -> None:
    """Refuse a PDF whose pages draw from more inflated content than `InputLimits` allows."""
    sizes: dict[Any, int] = {}
    total = 0
    for number, page in enumerate(reader.pages, 1):
        size = _drawn_bytes(page, sizes, set())
        if size > limits.max_pdf_page_bytes:
            raise IngestError(
                f"{path}: page {number} draws its text from {_mb(size)} of content once "
                f"inflated, above the limit of {_mb(limits.max_pdf_page_bytes)} per page (a "
                "small PDF whose compressed content expands this much takes minutes to "
                "read). If the file is genuine, raise the limit: --max-pdf-page-mb, or "
                "InputLimits(max_pdf_page_bytes=...)"
            )
        total += size
        if total > limits.max_pdf_bytes:
            raise IngestError(
                f"{path}: its pages up to page {number} draw their text from {_mb(total)} of "
                f"content once inflated, above the limit of {_mb(limits.max_pdf_bytes)} per "
                "file (a stream shared by several pages counts for each, since each page "
                "reads it again). If the file is genuine, raise the limit: --max-pdf-mb, or "
                "InputLimits(max_pdf_bytes=...)"
            )


def _drawn_bytes(holder: Any, sizes: dict[Any, int], forms: set[Any]) -> int:
    """Inflated bytes of a page's (or form's) content and of the forms it can draw.

    Each stream is decompressed once (``sizes`` keeps its length by object); a form is
    counted once per page (``forms``), which also stops forms that draw themselves.
    """
    from pypdf.generic import ArrayObject, IndirectObject

    def stream_size(ref: Any) -> int:
        key = (ref.idnum, ref.generation) if isinstance(ref, IndirectObject) else id(ref)
        if key not in sizes:
            sizes[key] = len(ref.get_object().get_data())
        return sizes[key]

    total = 0
    if "/Subtype" in holder:  # a form XObject: itself a stream
        total += len(holder.get_data())
    else:
        contents = holder.get("/Contents")
        if contents is not None:
            resolved = contents.get_object()
            items = list(resolved) if isinstance(resolved, ArrayObject) else [contents]
            total += sum(stream_size(item) for item in items)
    resources = holder.get("/Resources")
    xobjects = resources.get_object().get("/XObject") if resources is not None else None
    for ref in xobjects.get_object().values() if xobjects is not None else []:
        key = (ref.idnum, ref.generation) if isinstance(ref, IndirectObject) else id(ref)
        form = ref.get_object()
        if key in forms or form.get("/Subtype") != "/Form":
            continue
        forms.add(key)
        total += _drawn_bytes(form, sizes, forms)
    return total


def _checked_page_chars(
    path: Path, number: int, text: str, before: int, limits: InputLimits
) -> int:
    """The characters of one page's text, refused above `InputLimits`' page and file bounds."""
    if len(text) > limits.max_page_chars:
        raise IngestError(
            f"{path}: page {number} yields {len(text):,} characters of text, above the limit "
            f"of {limits.max_page_chars:,} per page (a page of dense text holds about "
            "5,000). If the file is genuine, raise the limit: --max-page-chars, or "
            "InputLimits(max_page_chars=...)"
        )
    if before + len(text) > limits.max_pdf_chars:
        raise IngestError(
            f"{path}: its pages up to page {number} yield {before + len(text):,} characters "
            f"of text, above the limit of {limits.max_pdf_chars:,} per PDF. Split it, or "
            "raise the limit if the file is genuine: --max-pdf-chars, or "
            "InputLimits(max_pdf_chars=...)"
        )
    return len(text)


def _join_pages(
    pages: list[tuple[int, str]], is_pdf: bool, notes: list[str]
) -> tuple[str, list[int], list[int]]:
    """The document text of kept pages, where each starts, and their numbers."""
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
    return PAGE_SEPARATOR.join(text_parts), starts, numbers


# -- documents ------------------------------------------------------------------------------


@dataclass
class LoadedDocument:
    """One file's text in memory, with the document offset where each kept page starts."""

    source: str
    text: str
    page_starts: list[int]
    page_numbers: list[int]
    notes: list[str] = field(default_factory=list)

    @property
    def script(self) -> Script:
        """The text's dominant script (`hyde_lc.core.language.dominant_script`)."""
        return dominant_script(self.text)

    @property
    def doc_id(self) -> str:
        """Content-derived id: the same text always gives the same id (`document_id`)."""
        digest = hashlib.sha256(self.text.encode("utf-8"))
        return document_id(digest, len(self.text), self.script)

    def page_at(self, offset: int) -> int:
        """The 1-based page number that holds character ``offset``."""
        return _page_at(self.page_starts, self.page_numbers, offset)


def _page_at(starts: list[int], numbers: list[int], offset: int) -> int:
    return numbers[max(0, bisect.bisect_right(starts, offset) - 1)]


def load_document(
    path: Path, max_bytes: int | None = MAX_FILE_BYTES, limits: InputLimits = DEFAULT_LIMITS
) -> LoadedDocument:
    """Read one file's whole text into a `LoadedDocument` (pages with almost no text skipped).

    Raises `IngestError` for a file that cannot be read as what its name says; a file
    with no text gives an empty document whose ``notes`` say why. Holds about two copies
    of the text while reading; ingestion itself streams (`scan_file`).
    """
    path = Path(path)
    check_file_size(path, max_bytes)
    notes: list[str] = []
    if path.suffix.lower() == ".pdf":
        text, starts, numbers = _join_pages(_pdf_pages(path, notes, limits), True, notes)
    else:
        read = _read_text(path, notes, keep_up_to=float("inf"))
        pages = [(1, read.text or "")] if read is not None else []
        text, starts, numbers = _join_pages(pages, False, notes)
    return LoadedDocument(str(path), text, starts, numbers, notes)


@dataclass
class TextSource:
    """A file checked and hashed by `scan_file`, ready to be read again in segments.

    ``text`` holds the document text when it was kept from the first pass (short texts
    and PDFs); otherwise `blocks` decodes the file again, and checks that its text is
    still the one hashed.

    Example:
        >>> source = scan_file(Path("big.txt"))  # doctest: +SKIP
        >>> [(offset, len(text)) for offset, text in source.segments()][:2]  # doctest: +SKIP
        [(0, 4194210), (4194210, 4193977)]

    """

    path: Path
    kind: Literal["text", "pdf"]
    doc_id: str
    length: int
    notes: list[str]
    page_starts: list[int] = field(default_factory=lambda: [0])
    page_numbers: list[int] = field(default_factory=lambda: [1])
    encoding: str = "utf-8"
    errors: str = "strict"
    text: str | None = None
    digest: str = ""
    script: str = "unknown"
    """The document's dominant script (``latin``, ``cjk``, ...; ``unknown``: no letters)."""
    head: str = ""
    """The text's first `SAMPLE_HEAD_CHARS` characters when ``text`` is not kept."""
    limits: InputLimits = DEFAULT_LIMITS
    """The bounds the file was read under (a PDF read again keeps them)."""

    @property
    def sample(self) -> str:
        """Text to judge the document's language by: all of it if kept, else its start."""
        return self.text if self.text is not None else self.head

    @property
    def source(self) -> str:
        """The file's path as stored in each chunk's ``source``."""
        return str(self.path)

    def page_at(self, offset: int) -> int:
        """The 1-based page number that holds character ``offset``."""
        return _page_at(self.page_starts, self.page_numbers, offset)

    def blocks(self) -> Iterator[str]:
        """The document text in blocks; raises `IngestError` if the file changed since."""
        if self.length == 0:
            return
        if self.text is not None:
            yield self.text
            return
        digest = hashlib.sha256()
        if self.kind == "pdf":
            text, _, _ = _join_pages(_pdf_pages(self.path, [], self.limits), True, [])
            digest.update(text.encode("utf-8"))
            yield text
        else:
            for block in _decoded_blocks(self.path, self.encoding, self.errors):
                digest.update(block.encode("utf-8"))
                yield block
        if digest.hexdigest() != self.digest:
            raise IngestError(
                f"{self.path} changed while it was being ingested. Ingest it again once "
                "nothing is writing it (what was written of it stays out of searches)"
            )

    def segments(self) -> Iterator[tuple[int, str]]:
        """The document text as (offset, segment) pairs (`iter_segments`)."""
        return iter_segments(self.blocks())


def scan_file(
    path: Path,
    max_bytes: int | None = MAX_FILE_BYTES,
    keep_up_to: float = 0,
    limits: InputLimits = DEFAULT_LIMITS,
) -> TextSource:
    """First pass over one file: check it, hash its text, measure it; no chunks yet.

    Raises `IngestError` for a file that cannot be read as what its name says. The text
    is kept in the result when it has at most ``keep_up_to`` characters (a PDF's text
    too, since parsing it again is slow), else read again when needed. A PDF beyond
    ``limits`` (`InputLimits`) is refused with an `IngestError` naming the limit.
    """
    path = Path(path)
    check_file_size(path, max_bytes)
    notes: list[str] = []
    if path.suffix.lower() == ".pdf":
        text, starts, numbers = _join_pages(_pdf_pages(path, notes, limits), True, notes)
        digest = hashlib.sha256(text.encode("utf-8"))
        script = dominant_script(text)
        kept = len(text) <= keep_up_to
        return TextSource(
            path,
            "pdf",
            document_id(digest, len(text), script),
            len(text),
            notes,
            starts,
            numbers,
            text=text if kept else None,
            digest=digest.hexdigest(),
            script=script,
            head="" if kept else text[:SAMPLE_HEAD_CHARS],
            limits=limits,
        )
    read = _read_text(path, notes, min(keep_up_to, SEGMENT_CHARS))
    if read is None or not read.has_text:
        if read is not None:
            notes.append(f"too little text to index (under {MIN_PAGE_CHARS} non-blank characters)")
        empty = hashlib.sha256()
        return TextSource(path, "text", document_id(empty, 0), 0, notes, digest=empty.hexdigest())
    script = dominant_of(read.counts)
    return TextSource(
        path,
        "text",
        document_id(read.digest, read.length, script),
        read.length,
        notes,
        encoding=read.encoding,
        errors=read.errors,
        text=read.text,
        digest=read.digest.hexdigest(),
        script=script,
        head="" if read.text is not None else read.head,
    )


def _cut(text: str, start: int, size: int) -> int:
    """Where to end the segment of ``text`` that begins at ``start``: its length.

    Looks only at ``text[start:start + size]``, so the cut depends on the text alone,
    not on how it was read: after the last blank line in its second half, else the last
    line break, else the last space, else at ``size`` characters.
    """
    for separator in (PAGE_SEPARATOR, "\n", " "):
        at = text.rfind(separator, start + size // 2, start + size)
        if at >= 0:
            return at + len(separator) - start
    return size


def iter_segments(blocks: Iterable[str], size: int | None = None) -> Iterator[tuple[int, str]]:
    """The text of ``blocks`` as (offset, segment): at most ``size`` characters each.

    A text of at most ``size`` (default `SEGMENT_CHARS`) characters is one segment; a
    longer one is cut after paragraph breaks (`_cut`). Holds about one segment and one
    block at a time.
    """
    size = size or SEGMENT_CHARS
    buffer = ""
    offset = 0
    for block in blocks:
        buffer += block
        while len(buffer) > size:
            cut = _cut(buffer, 0, size)
            segment, buffer = buffer[:cut], buffer[cut:]  # no copy of it kept while split
            yield offset, segment
            offset += cut
    if buffer:
        yield offset, buffer
