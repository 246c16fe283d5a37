r"""What ``hyde-lc`` prints: escaped text, JSON records and the layout of each command's output.

Text from documents, file names, questions and error messages is data: control characters
are shown escaped (an ESC byte as ``\x1b``), so it cannot move the cursor, clear the screen
or recolour the terminal; in one-line fields newlines and tabs are escaped too, so a file
name cannot forge a second line of output. JSON escapes DEL and the C1 controls as well.

The functions return strings (printing is left to the commands), so the layout is tested
without running the command.

Example:
    >>> shown_line("report\n\x1b[2J.pdf")
    'report\\n\\x1b[2J.pdf'
    >>> print(json_text({"source": "a\x9bb"}))
    {
      "source": "a\u009bb"
    }

"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterable, Sequence
from typing import Any

WIDTH = 88
"""Text width of ``ask``'s output."""
PREVIEW_CHARS = 300
"""Characters of each retrieved passage shown by ``ask``."""

_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0, 9), *range(11, 32), 127, *range(0x80, 0xA0))}
_CONTROL_IN_LINE = {**_CONTROL, 9: "\\t", 10: "\\n"}
# JSON escapes C0 controls itself; DEL and the C1 controls (U+0080-U+009F, which some
# terminals obey as escape sequences) are written as \u escapes too, still valid JSON.
_JSON_UNSAFE = {c: f"\\u{c:04x}" for c in (127, *range(0x80, 0xA0))}


def shown(text: str) -> str:
    r"""Text for the terminal, with control characters shown as ``\xNN``; newlines and tabs kept."""
    return text.translate(_CONTROL)


def shown_line(text: str) -> str:
    r"""One line for the terminal: `shown`, with newlines and tabs shown as ``\n``, ``\t``."""
    return text.translate(_CONTROL_IN_LINE)


def json_text(payload: Any) -> str:
    """``payload`` as indented JSON, UTF-8 kept, DEL and C1 controls escaped."""
    text = json.dumps(payload, indent=2, ensure_ascii=False, default=str)
    return text.translate(_JSON_UNSAFE)


# -- ingest and info -----------------------------------------------------------------------


def ingest_lines(files: Sequence[Any]) -> list[str]:
    """One line per file of an `hyde_lc.ingest.files.IngestReport` (notes indented under it)."""
    lines = []
    for result in files:
        lines.append(f"{result.status:9} {result.chunks:5} chunks  {shown_line(result.source)}")
        lines.extend(f"          note: {shown_line(note)}" for note in result.notes)
    return lines


SCRIPT_LABELS = {
    "cjk": "Chinese, Japanese or Korean",
    "other": "letters of no listed script",
    "unknown": "not recorded: ingested before chunks recorded it, or no letters",
}
"""What ``hyde-lc info`` adds to script names that do not explain themselves."""


def script_summary(scripts: dict[str, int]) -> str:
    """Chunks per script (`collection_info`'s ``scripts``), as info shows them.

    Example:
        >>> script_summary({"cjk": 12, "latin": 3})
        'cjk (Chinese, Japanese or Korean) 12 chunks; latin 3 chunks'

    """
    parts = []
    for script, count in scripts.items():
        label = SCRIPT_LABELS.get(script)
        name = shown_line(script) + (f" ({label})" if label else "")
        parts.append(f"{name} {count} chunks")
    return "; ".join(parts)


def _audit_line(audit: dict[str, Any]) -> str:
    """What ``info --check-index`` found, as one line."""
    if audit["checked"] is None:
        return f"BM25 index {audit['note']}"
    if not (audit["indexed"] or audit["removed"]):
        return f"BM25 index: matches the collection ({audit['checked']} chunks checked)"
    done = "rebuilt" if audit["rebuilt"] else "updated"
    return (
        f"BM25 index: {audit['indexed']} chunk(s) added or changed and {audit['removed']} "
        f"deleted outside hyde_lc were found in {audit['checked']} chunks; the index is {done}"
    )


def info_lines(info: dict[str, Any]) -> list[str]:
    """`hyde_lc.store.vectorstore.collection_info` (plus ``location``) as text."""
    lines = [
        shown_line(str(info["location"])),
        f"embedding model: {shown_line(str(info['embedding_model']))} "
        f"({info['embedding_dimension']} dimensions)",
        f"chunks: {info['chunks']}",
    ]
    scripts = info.get("scripts")
    if scripts:
        lines.append(f"scripts: {script_summary(scripts)}")
    for doc in info["documents"]:
        script = f"  [{shown_line(str(doc['script']))}]" if "script" in doc else ""
        lines.append(
            f"  {doc['chunks']:5} chunks, {doc['pages']:3} pages  {shown_line(doc['source'])}"
            f"{script}"
        )
    audit = info.get("lexical_index")
    if audit is not None:
        lines.append(_audit_line(audit))
    incomplete = info.get("incomplete") or []
    if incomplete:
        lines.append(
            "incomplete (writing was interrupted; searches do not see them until the same "
            "file is ingested again):"
        )
        for doc in incomplete:
            total = doc.get("chunk_count")
            of = f" of {total}" if total is not None else ""
            lines.append(
                f"  {doc['chunks_written']:5}{of} chunks written  {shown_line(doc['source'])}"
            )
    return lines


# -- ask -------------------------------------------------------------------------------------


def document_heading(rank: int, doc: Any, citation: str) -> str:
    """``[rank] citation  (chunk N, score S, found by dense D + lexical L)``.

    A window names its chunks and the hit it grew from; a hybrid hit names the lists that
    found it (``dense``, ``lexical``) with its score in each.
    """
    meta = doc.metadata
    if "window_start" in meta:
        where = f"chunks {meta['window_start']}-{meta['window_end']}, hit {meta['hit_chunk_index']}"
    else:
        where = f"chunk {meta.get('chunk_index')}"
    parts = [where]
    score = meta.get("score")
    if isinstance(score, float):
        parts.append(f"score {score:.3f}")
    found_by = meta.get("found_by")
    if found_by:
        found = []
        for name in found_by:
            value = meta.get(f"{name}_score")
            found.append(f"{name} {value:.3f}" if isinstance(value, float) else name)
        parts.append("found by " + " + ".join(found))
    return f"[{rank}] {shown_line(citation)}  ({', '.join(parts)})"


def passage_preview(text: str, width: int = WIDTH) -> str:
    """The start of a passage, whitespace collapsed, wrapped and indented by 4."""
    preview = shown(" ".join(text.split()))
    cut = preview[:PREVIEW_CHARS] + ("..." if len(preview) > PREVIEW_CHARS else "")
    return textwrap.indent(textwrap.fill(cut, width - 4), "    ")


def timings_line(timings: dict[str, float]) -> str:
    """``hypothesis 1.20 s  embedding 0.05 s ...``."""
    return "  ".join(f"{k.removesuffix('_s')} {v:.2f} s" for k, v in timings.items())


def passages_payload(documents: Iterable[Any], citation: Any) -> list[dict[str, Any]]:
    """Documents as JSON objects: text, citation and every metadata field."""
    return [
        {"text": d.page_content, "citation": citation(d), "id": d.id, **d.metadata}
        for d in documents
    ]


class WrappedStream:
    r"""Text arriving in pieces (an answer's tokens), written as it comes, wrapped at ``width``.

    `textwrap` needs the whole text; this wraps at word boundaries while the text is still
    arriving: a word is written once the space after it arrives, on the current line if
    it fits, else on a new one. Newlines in the text are kept. ``width=None`` writes the
    text as it comes (for output that is not a terminal). Control characters are shown
    escaped (`shown`) either way. ``write`` receives the output; ``text`` is what was fed.

    Example:
        >>> out = []
        >>> stream = WrappedStream(out.append, width=12)
        >>> for piece in ["The lens ", "bends li", "ght into a beam."]:
        ...     stream.feed(piece)
        >>> stream.close()
        >>> "".join(out)
        'The lens\nbends light\ninto a beam.\n'

    """

    def __init__(self, write: Any, width: int | None = WIDTH) -> None:
        self.write = write
        self.width = width
        self.column = 0
        self.word = ""
        self._pieces: list[str] = []

    @property
    def text(self) -> str:
        """Everything fed so far, as it was fed."""
        return "".join(self._pieces)

    def feed(self, piece: str) -> None:
        """Take the next piece; write every word it completes."""
        self._pieces.append(piece)
        if self.width is None:
            self.write(shown(piece))
            if piece:
                self.column = 0 if piece.endswith("\n") else 1
            return
        for char in shown(piece):
            if char == "\n":
                self._flush_word()
                self.write("\n")
                self.column = 0
            elif char == " ":
                self._flush_word()
            else:
                self.word += char

    def close(self) -> None:
        """Write the last word and end the line."""
        self._flush_word()
        if self.column:
            self.write("\n")
            self.column = 0

    def _flush_word(self) -> None:
        if not self.word:
            return
        assert self.width is not None
        if self.column and self.column + 1 + len(self.word) > self.width:
            self.write("\n")
            self.column = 0
        if self.column:
            self.write(" ")
            self.column += 1
        self.write(self.word)
        self.column += len(self.word)
        self.word = ""
