"""Render the bundled sample document (Markdown) into a multi-page PDF.

This is a development-only tool: the generated PDF is committed to the repo,
so it only needs to be re-run after editing the Markdown source.

Usage (from the repository root, inside the project venv)::

    uv pip install fpdf2==2.8.9
    python scripts/make_sample_pdf.py

By default it reads ``hyde_lc/sample/lighthouses.md`` and writes
``hyde_lc/sample/lighthouses.pdf``; other paths can be given as
``python scripts/make_sample_pdf.py SOURCE.md OUTPUT.pdf``.

Only a tiny Markdown subset is supported: ``#`` title, ``##``/``###``
headings, ``- `` bullet items and blank-line separated paragraphs.  The PDF
uses the built-in Helvetica core font, so text is limited to latin-1; common
typographic characters are replaced by ASCII equivalents.  The creation date
is fixed so that re-running the script produces identical output.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from fpdf import FPDF

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SOURCE = REPO_ROOT / "hyde_lc" / "sample" / "lighthouses.md"
DEFAULT_OUTPUT = REPO_ROOT / "hyde_lc" / "sample" / "lighthouses.pdf"

FIXED_DATE = datetime(2026, 1, 1, tzinfo=UTC)
FONT = "Helvetica"
BODY_SIZE = 11.0
BODY_LINE = 5.6  # line height in mm for body text
MARGIN = 22.0  # page margins in mm

# Typographic characters that the latin-1 core fonts cannot encode.
REPLACEMENTS: dict[str, str] = {
    "\u2018": "'",
    "\u2019": "'",
    "\u201c": '"',
    "\u201d": '"',
    "\u2013": "-",
    "\u2014": " - ",
    "\u2026": "...",
    "\u2022": "-",
    "\u00a0": " ",
}


@dataclass(frozen=True)
class Block:
    """One rendered unit of the document."""

    kind: str  # "title", "heading", "subheading", "para" or "bullet"
    text: str


def to_latin1(text: str) -> str:
    """Replace typographic characters and fail loudly on anything else."""
    for old, new in REPLACEMENTS.items():
        text = text.replace(old, new)
    try:
        text.encode("latin-1")
    except UnicodeEncodeError as exc:
        bad = text[exc.start : exc.end]
        raise SystemExit(f"non latin-1 character {bad!r} in: {text[:60]!r}") from exc
    return text


def parse_markdown(source: str) -> list[Block]:
    """Split the Markdown source into title, heading, paragraph and bullet blocks."""
    blocks: list[Block] = []
    para: list[str] = []

    def flush() -> None:
        if para:
            blocks.append(Block("para", " ".join(para)))
            para.clear()

    for raw in source.splitlines():
        line = raw.strip()
        if not line:
            flush()
        elif line.startswith("### "):
            flush()
            blocks.append(Block("subheading", line[4:].strip()))
        elif line.startswith("## "):
            flush()
            blocks.append(Block("heading", line[3:].strip()))
        elif line.startswith("# "):
            flush()
            blocks.append(Block("title", line[2:].strip()))
        elif line.startswith(("- ", "* ")):
            flush()
            blocks.append(Block("bullet", line[2:].strip()))
        else:
            para.append(line)
    flush()
    return [Block(b.kind, to_latin1(b.text)) for b in blocks]


class SamplePDF(FPDF):
    """A4 document with a page-number footer."""

    def __init__(self, doc_title: str) -> None:
        super().__init__(orientation="P", unit="mm", format="A4")
        self.doc_title = doc_title

    def footer(self) -> None:
        self.set_y(-15)
        self.set_font(FONT, size=9)
        self.set_text_color(110, 110, 110)
        self.cell(0, 8, f"Page {self.page_no()} of {{nb}}", align="C")
        self.set_text_color(0, 0, 0)


def render(blocks: list[Block], output: Path) -> int:
    """Write ``blocks`` to ``output`` and return the number of pages."""
    title = next((b.text for b in blocks if b.kind == "title"), "Sample document")
    pdf = SamplePDF(title)
    pdf.set_creation_date(FIXED_DATE)
    pdf.set_title(title)
    pdf.set_author("hyde_lc project")
    pdf.set_subject("Sample document for the hyde_lc offline demo")
    pdf.set_creator("scripts/make_sample_pdf.py (fpdf2)")
    pdf.set_margins(MARGIN, MARGIN, MARGIN)
    pdf.set_auto_page_break(auto=True, margin=MARGIN)
    pdf.alias_nb_pages()
    pdf.add_page()

    width = pdf.epw
    for block in blocks:
        if block.kind == "title":
            pdf.set_font(FONT, style="B", size=20)
            pdf.multi_cell(width, 9, block.text, align="C", new_x="LMARGIN", new_y="NEXT")
            pdf.ln(4)
        elif block.kind in ("heading", "subheading"):
            size = 14.0 if block.kind == "heading" else 12.0
            # Avoid a heading stranded at the bottom of a page.
            if pdf.get_y() > pdf.h - MARGIN - 30:
                pdf.add_page()
            pdf.ln(3)
            pdf.set_font(FONT, style="B", size=size)
            pdf.multi_cell(width, 7, block.text, align="L", new_x="LMARGIN", new_y="NEXT")
            pdf.ln(1.5)
        elif block.kind == "bullet":
            pdf.set_font(FONT, size=BODY_SIZE)
            indent = 6.0
            pdf.set_x(pdf.l_margin + 2)
            pdf.cell(indent - 2, BODY_LINE, "-")
            pdf.multi_cell(
                width - indent, BODY_LINE, block.text, align="L", new_x="LMARGIN", new_y="NEXT"
            )
            pdf.ln(0.8)
        else:
            pdf.set_font(FONT, size=BODY_SIZE)
            pdf.multi_cell(width, BODY_LINE, block.text, align="L", new_x="LMARGIN", new_y="NEXT")
            pdf.ln(2.5)

    output.parent.mkdir(parents=True, exist_ok=True)
    pdf.output(str(output))
    return pdf.page_no()


def main(argv: list[str]) -> int:
    source = Path(argv[1]) if len(argv) > 1 else DEFAULT_SOURCE
    output = Path(argv[2]) if len(argv) > 2 else DEFAULT_OUTPUT
    blocks = parse_markdown(source.read_text(encoding="utf-8"))
    pages = render(blocks, output)
    print(f"wrote {output} ({pages} pages, {len(blocks)} blocks)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
