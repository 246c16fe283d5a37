"""Small PDFs built to cost far more to read than their size (made with pypdf).

Each is a few KB on disk: a content stream that inflates to megabytes, shared by many
pages or drawn by one, or a stream that inflates past pypdf's decompression limit.
"""

from __future__ import annotations

import zlib
from pathlib import Path

from pypdf import PdfWriter
from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

LINE = b"BT /F1 12 Tf 72 700 Td (keeper lamp wick lens clockwork tower) Tj ET\n"
"""One line of page content that shows 40 characters of text."""


def _writer_with(
    stream: DecodedStreamObject | None, pages: int, raw: bytes | None = None
) -> PdfWriter:
    writer = PdfWriter()
    font = DictionaryObject(
        {
            NameObject("/Type"): NameObject("/Font"),
            NameObject("/Subtype"): NameObject("/Type1"),
            NameObject("/BaseFont"): NameObject("/Helvetica"),
        }
    )
    font_ref = writer._add_object(font)
    if raw is not None:  # already compressed bytes, written as they are
        stream = DecodedStreamObject()
        stream.set_data(raw)
        stream[NameObject("/Filter")] = NameObject("/FlateDecode")
    assert stream is not None
    ref = writer._add_object(stream)
    resources = DictionaryObject(
        {NameObject("/Font"): DictionaryObject({NameObject("/F1"): font_ref})}
    )
    for _ in range(pages):
        page = writer.add_blank_page(612, 792)
        page[NameObject("/Contents")] = ref
        page[NameObject("/Resources")] = resources
    return writer


def content_pdf(path: Path, content_bytes: int, pages: int = 1) -> Path:
    """A PDF whose ``pages`` all draw the same compressed stream of ``content_bytes``."""
    stream = DecodedStreamObject()
    stream.set_data(LINE * max(1, content_bytes // len(LINE)))
    _writer_with(stream.flate_encode(level=9), pages).write(str(path))
    return path


def zip_bomb_pdf(path: Path, inflated_bytes: int = 80_000_000) -> Path:
    """A one-page PDF whose content stream inflates to ``inflated_bytes`` (zeros)."""
    raw = zlib.compress(b"\n" * inflated_bytes, 9)
    writer = _writer_with(None, 1, raw=raw)
    writer.write(str(path))
    return path


__all__ = ["LINE", "content_pdf", "zip_bomb_pdf"]
