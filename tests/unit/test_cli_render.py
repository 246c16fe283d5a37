"""What ``hyde-lc`` prints, checked on the rendering functions themselves (no command run)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from langchain_core.documents import Document

from hyde_lc.cli.evaluate import comparison_table
from hyde_lc.cli.render import (
    PREVIEW_CHARS,
    WrappedStream,
    document_heading,
    info_lines,
    ingest_lines,
    json_text,
    passage_preview,
    shown,
    shown_line,
)

HOSTILE = "a\x1b[2Jb\x07c\x9bd\x7fe"


def test_control_characters_are_shown_escaped():
    assert shown(HOSTILE + "\nnext\tcell") == "a\\x1b[2Jb\\x07c\\x9bd\\x7fe\nnext\tcell"
    assert shown_line("x\ny\tz\x1b") == "x\\ny\\tz\\x1b"


def test_json_output_escapes_del_and_c1_controls():
    record = {"source": "a\x9b2Jb\x7fc\x1bd", "text": "café"}
    out = json_text(record)
    assert "\x9b" not in out and "\x7f" not in out and "\x1b" not in out
    assert "\\u009b2J" in out and "café" in out
    assert json.loads(out) == record


def test_a_hybrid_hit_says_which_lists_found_it_with_each_score():
    both = Document(
        "x",
        metadata={
            "chunk_index": 3,
            "score": 0.9,
            "found_by": ["dense", "lexical"],
            "dense_score": 0.61,
            "lexical_score": 7.25,
        },
    )
    lexical_only = Document(
        "x",
        metadata={
            "chunk_index": 8,
            "score": 0.4,
            "found_by": ["lexical"],
            "dense_score": None,
            "lexical_score": 3.5,
        },
    )
    assert document_heading(1, both, "a.pdf, p. 2") == (
        "[1] a.pdf, p. 2  (chunk 3, score 0.900, found by dense 0.610 + lexical 7.250)"
    )
    assert document_heading(2, lexical_only, "b.txt") == (
        "[2] b.txt  (chunk 8, score 0.400, found by lexical 3.500)"
    )


def test_a_dense_hit_and_a_window_are_described_by_their_chunks():
    dense = Document("x", metadata={"chunk_index": 5, "score": 0.5})
    window = Document(
        "x", metadata={"window_start": 4, "window_end": 6, "hit_chunk_index": 5, "score": 0.5}
    )
    assert document_heading(1, dense, "a") == "[1] a  (chunk 5, score 0.500)"
    assert document_heading(1, window, "a") == "[1] a  (chunks 4-6, hit 5, score 0.500)"
    assert document_heading(1, dense, "a\n\x1bb") == "[1] a\\n\\x1bb  (chunk 5, score 0.500)"


def test_a_passage_preview_is_cut_wrapped_and_escaped():
    preview = passage_preview("word " * 200 + "\x1b")
    lines = preview.splitlines()
    assert all(line.startswith("    ") and len(line) <= 88 for line in lines)
    assert preview.rstrip().endswith("...") and "\x1b" not in preview
    assert len(" ".join(line.strip() for line in lines)) <= PREVIEW_CHARS + 3


def _streamed(pieces, width):
    out: list[str] = []
    stream = WrappedStream(out.append, width=width)
    for piece in pieces:
        stream.feed(piece)
    stream.close()
    return "".join(out), stream.text


def test_a_streamed_answer_is_wrapped_at_word_boundaries_as_it_arrives():
    text = "Fresnel lenses use concentric prisms to bend light into one beam."
    pieces = [text[i : i + 3] for i in range(0, len(text), 3)]  # splits words
    out, fed = _streamed(pieces, width=20)
    assert fed == text
    assert all(len(line) <= 20 for line in out.splitlines())
    assert " ".join(out.split()) == text and out.endswith("\n")


def test_a_streamed_answer_keeps_its_newlines_and_escapes_controls():
    out, fed = _streamed(["First [1].\n\n- a\x1b[31m\n- b"], width=40)
    assert out == "First [1].\n\n- a\\x1b[31m\n- b\n"
    assert fed == "First [1].\n\n- a\x1b[31m\n- b"


def test_without_a_width_the_answer_is_written_as_it_comes():
    out, _ = _streamed(["word " * 30, "end\x07"], width=None)
    assert out == "word " * 30 + "end\\x07\n"


def test_info_lists_documents_and_incomplete_ones():
    info = {
        "location": "chroma folder /s, collection c",
        "embedding_model": "local:minilm",
        "embedding_dimension": 384,
        "chunks": 12,
        "documents": [{"source": "/d/a\x1b.pdf", "chunks": 12, "pages": 3}],
        "incomplete": [{"source": "/d/big.txt", "chunks_written": 5461, "chunk_count": 9000}],
    }
    lines = info_lines(info)
    assert lines[:3] == [
        "chroma folder /s, collection c",
        "embedding model: local:minilm (384 dimensions)",
        "chunks: 12",
    ]
    assert lines[3] == "     12 chunks,   3 pages  /d/a\\x1b.pdf"
    assert lines[4].startswith("incomplete (writing was interrupted")
    assert lines[5] == "   5461 of 9000 chunks written  /d/big.txt"
    assert len(info_lines({**info, "incomplete": []})) == 4


def test_ingest_lines_escape_names_and_notes():
    files = [SimpleNamespace(source="/d/\x1bx\n.txt", status="added", chunks=3, notes=["n\x07"])]
    assert ingest_lines(files) == [
        "added         3 chunks  /d/\\x1bx\\n.txt",
        "          note: n\\x07",
    ]


def test_comparison_table_shows_missing_values_as_n_a():
    aggregates = {
        "standard": {"label": "standard", "rouge": 0.41234, "total_cost": None},
        "hyde": {"label": "hybrid-hyde", "rouge": 0.5, "total_cost": 0.0},
    }
    lines = comparison_table(aggregates, ["standard", "hyde"])
    assert lines[0].split() == ["standard", "hyde"]
    assert lines[1].split() == ["rouge", "0.4123", "0.5"]
    assert lines[2].split() == ["total_cost", "n/a", "0"]
