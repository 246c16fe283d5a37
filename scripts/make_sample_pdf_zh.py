"""Render the Chinese sample document (Markdown) into a multi-page PDF.

A development-only tool, like ``make_sample_pdf.py``: the generated PDF is committed,
with the glyphs it uses embedded (a subset of the font), so reading it needs no font.
Re-run it only after editing the Markdown source.

Usage (from the repository root, inside the project venv)::

    apt-get install -y fonts-wqy-microhei     # any CJK TrueType font will do
    uv pip install fpdf2==2.8.9
    python scripts/make_sample_pdf_zh.py [SOURCE.md OUTPUT.pdf] [--font FILE.ttc|.ttf]

By default it reads ``hyde_lc/sample/lighthouses_zh.md`` and writes
``hyde_lc/sample/lighthouses_zh.pdf``. The Markdown subset is the one of
``make_sample_pdf.py`` (``#`` title, ``##``/``###`` headings, ``- `` bullets, blank-line
separated paragraphs); lines of one paragraph are joined without a space, as Chinese is
written. After writing, the script reads the PDF back with pypdf (as ``hyde-lc ingest``
does) and fails if any paragraph's text does not come back intact.
"""

from __future__ import annotations

import argparse
import re
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from fpdf import FPDF

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SOURCE = REPO_ROOT / "hyde_lc" / "sample" / "lighthouses_zh.md"
DEFAULT_OUTPUT = REPO_ROOT / "hyde_lc" / "sample" / "lighthouses_zh.pdf"
DEFAULT_FONT = Path("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc")

FIXED_DATE = datetime(2026, 1, 1, tzinfo=UTC)
FONT = "cjk"
BODY_SIZE = 11.0
BODY_LINE = 6.4  # line height in mm for body text
MARGIN = 22.0  # page margins in mm


@dataclass(frozen=True)
class Block:
    """One rendered unit of the document."""

    kind: str  # "title", "heading", "subheading", "para" or "bullet"
    text: str


def parse_markdown(source: str) -> list[Block]:
    """Split the Markdown source into title, heading, paragraph and bullet blocks."""
    blocks: list[Block] = []
    para: list[str] = []

    def flush() -> None:
        if para:
            blocks.append(Block("para", "".join(para)))
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
    return blocks


def find_font() -> Path:
    """The default font, else the first Chinese font fontconfig knows."""
    if DEFAULT_FONT.is_file():
        return DEFAULT_FONT
    listed = subprocess.run(
        ["fc-list", ":lang=zh", "file"], capture_output=True, text=True, check=False
    ).stdout.split()
    fonts = [Path(f.rstrip(":")) for f in listed if f.rstrip(":").endswith((".ttf", ".ttc"))]
    if not fonts:
        raise SystemExit("no CJK font found: apt-get install -y fonts-wqy-microhei, or --font")
    return fonts[0]


class SamplePDF(FPDF):
    """A4 document with a page-number footer."""

    def footer(self) -> None:
        self.set_y(-15)
        self.set_font(FONT, size=9)
        self.set_text_color(110, 110, 110)
        self.cell(0, 8, f"第 {self.page_no()} 页，共 {{nb}} 页", align="C")
        self.set_text_color(0, 0, 0)


def render(blocks: list[Block], output: Path, font: Path) -> int:
    """Write ``blocks`` to ``output`` and return the number of pages."""
    title = next((b.text for b in blocks if b.kind == "title"), "示例文档")
    pdf = SamplePDF(orientation="P", unit="mm", format="A4")
    pdf.add_font(FONT, fname=str(font))  # embedded as a subset of the glyphs used
    pdf.set_creation_date(FIXED_DATE)
    pdf.set_title(title)
    pdf.set_author("hyde_lc project")
    pdf.set_subject("Chinese sample document for the hyde_lc offline demo")
    pdf.set_creator("scripts/make_sample_pdf_zh.py (fpdf2)")
    pdf.set_lang("zh-CN")
    pdf.set_margins(MARGIN, MARGIN, MARGIN)
    pdf.set_auto_page_break(auto=True, margin=MARGIN)
    pdf.alias_nb_pages()
    pdf.add_page()

    width = pdf.epw
    for block in blocks:
        if block.kind == "title":
            pdf.set_font(FONT, size=20)
            pdf.multi_cell(width, 10, block.text, align="C", new_x="LMARGIN", new_y="NEXT")
            pdf.ln(4)
        elif block.kind in ("heading", "subheading"):
            size = 14.0 if block.kind == "heading" else 12.0
            if pdf.get_y() > pdf.h - MARGIN - 30:  # no heading stranded at a page's foot
                pdf.add_page()
            pdf.ln(3)
            pdf.set_font(FONT, size=size)
            pdf.multi_cell(width, 8, block.text, align="L", new_x="LMARGIN", new_y="NEXT")
            pdf.ln(1.5)
        elif block.kind == "bullet":
            pdf.set_font(FONT, size=BODY_SIZE)
            indent = 6.0
            pdf.set_x(pdf.l_margin + 2)
            pdf.cell(indent - 2, BODY_LINE, "•")
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


def check_extraction(blocks: list[Block], output: Path) -> None:
    """Every block must come back from pypdf, line breaks and page footers aside."""
    from pypdf import PdfReader

    pages = [page.extract_text() for page in PdfReader(output).pages]
    footer = re.compile(r"第 \d+ 页，共 \d+ 页")  # between a paragraph's pages
    flat = re.sub(r"\s+", "", footer.sub("", "".join(pages)))
    lost = [b.text[:30] for b in blocks if re.sub(r"\s+", "", b.text) not in flat]
    if lost:
        raise SystemExit(f"pypdf does not read back {len(lost)} blocks, e.g. {lost[0]!r}")


def main() -> int:
    parser = argparse.ArgumentParser(description="Render the Chinese sample PDF.")
    parser.add_argument("source", nargs="?", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("output", nargs="?", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--font", type=Path, help="a CJK .ttf or .ttc font file")
    args = parser.parse_args()
    blocks = parse_markdown(args.source.read_text(encoding="utf-8"))
    pages = render(blocks, args.output, args.font or find_font())
    check_extraction(blocks, args.output)
    size = args.output.stat().st_size
    print(f"wrote {args.output} ({pages} pages, {len(blocks)} blocks, {size // 1024} KB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
