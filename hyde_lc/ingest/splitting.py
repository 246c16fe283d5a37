"""Splitters per script: Chinese, Japanese and Korean text splits at its own punctuation.

LangChain's `RecursiveCharacterTextSplitter` splits at paragraphs, lines, then spaces,
then anywhere. Chinese and Japanese put no spaces between words or sentences, so its
defaults cut CJK text at arbitrary characters once a paragraph is too long. `make_splitter`
gives CJK text separators that follow its own punctuation (paragraph, sentence end
``。！？``, line, clause ``；``, comma ``，、：``, then characters), keeping each mark with the
sentence it ends, so a chunk ends with ``。`` and the next one starts with a new sentence.
Every other script splits exactly as LangChain's defaults do, so collections already
built are not re-embedded.

`default_chunk_size` picks chunk and overlap sizes that fit the embedding model's token
window (see the measurements beside it).

Example:
    >>> from hyde_lc.ingest.splitting import default_chunk_size, make_splitter
    >>> size, overlap = default_chunk_size("cjk", "local:multilingual-e5-small")
    >>> splitter = make_splitter(12, 0, "cjk")
    >>> splitter.split_text("灯塔在岸边。夜里它发光！船只因此安全。")
    ['灯塔在岸边。夜里它发光！', '船只因此安全。']

"""

from __future__ import annotations

from langchain_text_splitters import RecursiveCharacterTextSplitter

from hyde_lc.errors import InvalidSettingError

LATIN_CHUNK_SIZE = 1000
LATIN_CHUNK_OVERLAP = 200

_CLOSERS = "”’」』）)》〉】〕\"'"
"""Closing quotes and brackets that belong to the sentence before them."""

CJK_SEPARATORS: list[str] = [
    r"\n\n",
    # Sentence ends: full-width 。！？ (and the ellipsis ……), or ASCII .!? before a space
    # as Korean and mixed text use them; with the quotes or brackets that close the sentence.
    # They come before single line breaks: text extracted from a PDF breaks every printed
    # line, and Chinese lines break anywhere, mid-word included.
    rf"(?:[。！？｡…]+|[.!?]+(?=\s))[{_CLOSERS}]*",
    r"\n",
    r"[；;]",
    r"[，、：,:]",
    r" ",
    "",
]
"""Regex separators for CJK text, most to least preferred (kept at the end of a piece)."""

# Chunk sizes for CJK text, in characters, per embedding model. Chinese costs about one
# token per character: on the 1,104 CMRC 2018 passages, multilingual-e5-small's tokenizer
# gives 0.74 tokens per character on average, 0.87 at the 90th percentile and 0.96 at most;
# all-MiniLM-L6-v2's gives 0.93 on average and 1.00 at most (it reads every Han character
# as one token). A chunk should fit the model's window in one piece (e5: 512 tokens with
# two special tokens and the 3-token "passage: " prefix; MiniLM: 256 with two): 450
# characters are at most 432 e5 tokens, 240 at most 240 MiniLM tokens. The overlap keeps
# the Latin setting's 20%. Models with large windows (OpenAI's 8k) keep 450: a chunk is
# then still about a paragraph, the unit a search should return.
_CJK_CHUNKS: dict[str, tuple[int, int]] = {
    "local:multilingual-e5-small": (450, 90),
    "local:minilm": (240, 48),
    "local:minilm-dq": (240, 48),  # the same tokenizer and window
}
_CJK_DEFAULT = (450, 90)


def default_chunk_size(script: str, embedding_model_id: str | None = None) -> tuple[int, int]:
    """``(chunk_size, chunk_overlap)`` in characters for text in ``script``.

    Latin-script (and every non-CJK) text keeps 1,000/200 whatever the model: about 250
    tokens, all-MiniLM-L6-v2's window, and the size existing collections were built with.

    Example:
        >>> default_chunk_size("latin", "local:minilm")
        (1000, 200)
        >>> default_chunk_size("cjk", "local:multilingual-e5-small")
        (450, 90)

    """
    if script != "cjk":
        return LATIN_CHUNK_SIZE, LATIN_CHUNK_OVERLAP
    return _CJK_CHUNKS.get(embedding_model_id or "", _CJK_DEFAULT)


def make_splitter(
    chunk_size: int = LATIN_CHUNK_SIZE,
    chunk_overlap: int = LATIN_CHUNK_OVERLAP,
    script: str = "latin",
) -> RecursiveCharacterTextSplitter:
    r"""A recursive character splitter for text in ``script`` (``add_start_index`` on).

    ``cjk`` gets `CJK_SEPARATORS`, each mark kept at the end of the sentence or clause it
    closes; any other script gets LangChain's default separators and settings, unchanged.

    Example:
        >>> splitter = make_splitter(1000, 200, "latin")
        >>> splitter._separators
        ['\n\n', '\n', ' ', '']

    """
    if chunk_size <= 0 or not 0 <= chunk_overlap < chunk_size:
        raise InvalidSettingError(
            f"invalid chunking: chunk_size={chunk_size}, chunk_overlap={chunk_overlap}; "
            "need chunk_size > 0 and 0 <= chunk_overlap < chunk_size"
        )
    if script != "cjk":
        return RecursiveCharacterTextSplitter(
            chunk_size=chunk_size, chunk_overlap=chunk_overlap, add_start_index=True
        )
    return RecursiveCharacterTextSplitter(
        chunk_size=chunk_size,
        chunk_overlap=chunk_overlap,
        add_start_index=True,
        separators=CJK_SEPARATORS,
        is_separator_regex=True,
        keep_separator="end",
    )
