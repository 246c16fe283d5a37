import doctest
from pathlib import Path

import pytest
from langchain_core.documents import Document
from langchain_text_splitters import RecursiveCharacterTextSplitter

from hyde_lc.errors import InvalidSettingError
from hyde_lc.ingest import splitting as splitting
from hyde_lc.ingest.files import LoadedDocument, load_document, split_document
from hyde_lc.ingest.splitting import default_chunk_size, make_splitter
from hyde_lc.retrievers.neighbors import join_chunks
from tests.conftest import ROOT, SAMPLE_PDF

SAMPLE_ZH_PDF = ROOT / "hyde_lc" / "sample" / "lighthouses_zh.pdf"
SAMPLE_ZH_MD = ROOT / "hyde_lc" / "sample" / "lighthouses_zh.md"
SENTENCE_ENDS = "。！？…”’」』）"
CLAUSE_MARKS = "。！？；，、："


@pytest.fixture(scope="module")
def chinese_pdf_text() -> str:
    return load_document(SAMPLE_ZH_PDF).text


def chunk_documents(text: str, splitter: RecursiveCharacterTextSplitter) -> list[Document]:
    """Chunks with start_index and gap_before computed as ingest.split_document does."""
    chunks = []
    previous_end = 0
    for index, piece in enumerate(splitter.create_documents([text])):
        start = int(piece.metadata["start_index"])
        gap_before = text[previous_end:start] if start > previous_end else ""
        previous_end = max(previous_end, start + len(piece.page_content))
        chunks.append(
            Document(
                piece.page_content,
                metadata={"chunk_index": index, "start_index": start, "gap_before": gap_before},
            )
        )
    return chunks


@pytest.mark.parametrize("script", ["latin", "unknown", "cyrillic", "arabic"])
@pytest.mark.parametrize(("size", "overlap"), [(1000, 200), (300, 50)])
def test_non_cjk_text_splits_exactly_as_before(script, size, overlap):
    text = load_document(SAMPLE_PDF).text
    old = RecursiveCharacterTextSplitter(
        chunk_size=size, chunk_overlap=overlap, add_start_index=True
    ).create_documents([text])
    new = make_splitter(size, overlap, script).create_documents([text])
    assert [(d.page_content, d.metadata) for d in new] == [
        (d.page_content, d.metadata) for d in old
    ]


def test_latin_chunks_match_what_ingest_stores():
    doc = load_document(SAMPLE_PDF)
    stored = split_document(doc, "local:minilm")
    size, overlap = default_chunk_size("latin", "local:minilm")
    ours = make_splitter(size, overlap, "latin").create_documents([doc.text])
    assert [c.text for c in stored] == [d.page_content for d in ours]
    assert [c.metadata["start_index"] for c in stored] == [d.metadata["start_index"] for d in ours]


def test_cjk_punctuation_stays_with_its_sentence():
    text = "他说：“灯塔在岸边。”夜里它发光！船只因此安全，渔民也放心、商人也放心。真的吗？是的……"
    pieces = make_splitter(14, 0, "cjk").split_text(text)
    assert "".join(pieces) == text
    assert pieces[0] == "他说：“灯塔在岸边。”"
    for piece in pieces:
        assert piece[0] not in CLAUSE_MARKS + "”"
        assert piece[-1] in CLAUSE_MARKS + "…”"


def test_cjk_prefers_sentence_ends_to_pdf_line_breaks(chinese_pdf_text):
    # pypdf breaks every printed line, mid-sentence; chunks should still end sentences.
    text = chinese_pdf_text
    assert text.count("\n") > 100
    size, overlap = default_chunk_size("cjk", "local:multilingual-e5-small")

    def ends(splitter: RecursiveCharacterTextSplitter) -> tuple[int, int]:
        """(chunks ending a sentence, chunks that had to: not at a page or document end)."""
        ended = due = 0
        for doc in splitter.create_documents([text]):
            stop = doc.metadata["start_index"] + len(doc.page_content)
            if text[stop : stop + 2] == "\n\n" or stop == len(text):
                continue  # a page break may fall mid-sentence: nothing to split at there
            due += 1
            ended += doc.page_content[-1] in SENTENCE_ENDS
        return ended, due

    ours = make_splitter(size, overlap, "cjk")
    assert len(ours.split_text(text)) >= 8
    assert all(len(c) <= size for c in ours.split_text(text))
    ended, due = ends(ours)
    assert due >= 5
    assert ended == due
    default = RecursiveCharacterTextSplitter(
        chunk_size=size, chunk_overlap=overlap, add_start_index=True
    )
    ended, due = ends(default)
    assert ended < 0.7 * due


def test_cjk_text_without_any_separator_is_cut_at_the_size():
    text = "灯" * 1000
    pieces = make_splitter(450, 90, "cjk").split_text(text)
    assert all(len(p) <= 450 for p in pieces)
    assert "".join(p[90:] if i else p for i, p in enumerate(pieces)) == text


@pytest.mark.parametrize("source", [SAMPLE_ZH_PDF, SAMPLE_ZH_MD])
@pytest.mark.parametrize(("size", "overlap"), [(450, 90), (120, 30), (80, 0)])
def test_joined_neighbours_give_back_the_exact_chinese_text(source, size, overlap):
    text = load_document(Path(source)).text
    chunks = chunk_documents(text, make_splitter(size, overlap, "cjk"))
    assert len(chunks) >= 10
    for chunk in chunks:  # start_index points at the chunk's own text
        start = chunk.metadata["start_index"]
        assert text[start : start + len(chunk.page_content)] == chunk.page_content
    for width in (2, 3):
        for first in range(len(chunks) - width + 1):
            window = chunks[first : first + width]
            start = window[0].metadata["start_index"]
            end = max(c.metadata["start_index"] + len(c.page_content) for c in window)
            assert join_chunks(window) == text[start:end]
    whole = join_chunks(chunks)
    assert whole == text.strip()


def test_chunk_metadata_here_is_computed_as_ingest_computes_it():
    text = SAMPLE_ZH_MD.read_text(encoding="utf-8")
    doc = LoadedDocument(source="zh.md", text=text, page_starts=[0], page_numbers=[1])
    chunks = chunk_documents(text, make_splitter(450, 90, "latin"))
    stored = split_document(doc, "local:minilm", 450, 90)
    # The stored gap_before/start_index are computed exactly as in chunk_documents.
    assert [c.metadata["gap_before"] for c in stored] == [c.metadata["gap_before"] for c in chunks]
    assert [c.metadata["start_index"] for c in stored] == [
        c.metadata["start_index"] for c in chunks
    ]


@pytest.mark.parametrize(
    ("script", "model", "expected"),
    [
        ("latin", "local:minilm", (1000, 200)),
        ("latin", "local:multilingual-e5-small", (1000, 200)),
        ("cyrillic", "local:multilingual-e5-small", (1000, 200)),
        ("cjk", "local:multilingual-e5-small", (450, 90)),
        ("cjk", "local:minilm", (240, 48)),
        ("cjk", "local:minilm-dq", (240, 48)),
        ("cjk", "openai:text-embedding-3-small", (450, 90)),
        ("cjk", None, (450, 90)),
    ],
)
def test_default_chunk_size(script, model, expected):
    assert default_chunk_size(script, model) == expected


@pytest.mark.parametrize(("size", "overlap"), [(0, 0), (100, 100), (100, -1), (-5, 0)])
def test_invalid_chunking_is_refused(size, overlap):
    with pytest.raises(InvalidSettingError, match="chunk_size > 0"):
        make_splitter(size, overlap, "cjk")


def test_docstring_examples_hold():
    result = doctest.testmod(splitting)
    assert result.attempted >= 5
    assert result.failed == 0
