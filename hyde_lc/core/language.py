"""Which writing system a text uses, and whether an embedding model can read it.

Script detection counts letters per Unicode block (Latin, CJK, Cyrillic, Arabic, ...):
cheap, deterministic and enough for what hyde_lc decides with it: how to split a
document (`hyde_lc.ingest.splitting`), whether to warn that an English-only embedder is about
to index text it cannot read, and which language to ask an LLM to write in. It does not
tell languages of one script apart (French from English); a language identifier such as
fastText's ``lid.176`` would, at the price of a model download, which offline use rules out.

Example:
    >>> from hyde_lc.core.language import dominant_script, question_language
    >>> dominant_script("灯塔是一种为船只指引方向的建筑。")
    'cjk'
    >>> question_language("灯塔的透镜是谁发明的？")
    'Chinese'
    >>> question_language("灯台のレンズは誰が発明しましたか？")
    'Japanese'

"""

from __future__ import annotations

import re
from typing import Any, Literal

Script = Literal[
    "latin",
    "cjk",
    "cyrillic",
    "greek",
    "arabic",
    "hebrew",
    "devanagari",
    "thai",
    "other",
    "unknown",
]

_LETTER = re.compile(r"[^\W\d_]")
"""Any letter or ideograph (Unicode word characters without digits and underscore)."""

_SCRIPT_RANGES: dict[str, str] = {
    "latin": "A-Za-z\u00aa\u00ba\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f\u1e00-\u1eff",
    "cjk": (
        "\u3040-\u30ff\u31f0-\u31ff"  # hiragana, katakana
        "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f"  # Han
        "\u1100-\u11ff\u3130-\u318f\uac00-\ud7af"  # Hangul
        "\u3005-\u3007\uff66-\uff9f"  # iteration marks, half-width katakana
    ),
    "cyrillic": "\u0400-\u052f\u1c80-\u1c8f\u2de0-\u2dff\ua640-\ua69f",
    "greek": "\u0370-\u03ff\u1f00-\u1fff",
    "arabic": "\u0600-\u06ff\u0750-\u077f\u08a0-\u08ff\ufb50-\ufdff\ufe70-\ufeff",
    "hebrew": "\u0590-\u05ff\ufb1d-\ufb4f",
    "devanagari": "\u0900-\u097f\ua8e0-\ua8ff",
    "thai": "\u0e00-\u0e7f",
}
_SCRIPT_PATTERNS = {name: re.compile(f"[{chars}]") for name, chars in _SCRIPT_RANGES.items()}
_KANA = re.compile("[\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f]")
_HANGUL = re.compile("[\u1100-\u11ff\u3130-\u318f\uac00-\ud7af]")
_PERSIAN = re.compile("[\u067e\u0686\u0698\u06af\u06cc]")  # پ چ ژ گ ی
_UKRAINIAN = re.compile("[іїєґІЇЄҐ]")
# Words that mark English and are rare as words of other Latin-script languages ("was" is
# German, "is" Dutch, "a" French: left out).
# fmt: off
_ENGLISH_WORDS = frozenset((
    "the", "of", "and", "what", "which", "who", "whose", "how", "why", "when", "where",
    "does", "did", "could", "should", "would", "are", "were", "these", "those", "its",
    "been", "from", "with", "have", "had", "this", "that", "there", "they", "their",
))
# fmt: on
_WORD = re.compile(r"[A-Za-z']+")

SAMPLE_CHARS = 200_000
"""Longer texts are judged on evenly spread samples of this many characters in all."""

SCRIPT_NAMES: dict[str, str] = {
    "latin": "Latin-script",
    "cjk": "Chinese, Japanese or Korean",
    "cyrillic": "Cyrillic-script",
    "greek": "Greek",
    "arabic": "Arabic-script",
    "hebrew": "Hebrew",
    "devanagari": "Devanagari-script",
    "thai": "Thai",
    "other": "non-Latin-script",
    "unknown": "unrecognised",
}
"""How messages name each script."""

MULTILINGUAL_EMBEDDINGS = "local:multilingual-e5-small"
"""The embedded model to suggest for text an English-only model cannot read."""

SAME_LANGUAGE = "the same language as the question"
"""What `question_language` returns when the script does not name one language."""

_ENGLISH_ONLY_MODELS = (
    "local:minilm",
    "all-minilm-l6-v2",
    "all-minilm-l12-v2",
    "all-mpnet-base-v2",
    "all-distilroberta-v1",
    "multi-qa-minilm-l6",
    "multi-qa-mpnet-base",
    "msmarco-",
    "bge-small-en",
    "bge-base-en",
    "bge-large-en",
    "e5-small-v2",
    "e5-base-v2",
    "e5-large-v2",
    "gte-small",
    "gte-base",
    "gte-large",
    "nomic-embed-text-v1",
)
"""Substrings of English-only model ids (lower case), checked after the multilingual ones."""

_MULTILINGUAL_MODELS = (
    "multilingual",
    "text-embedding-3",
    "text-embedding-ada-002",
    "paraphrase-xlm",
    "labse",
    "bge-m3",
    "jina-embeddings-v3",
    "nomic-embed-text-v2",
    "gte-multilingual",
)
"""Substrings of multilingual model ids (lower case); they win over the English list."""


_SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"
"""U+FFFD, the character that stands for one that could not be read."""


def without_lone_surrogates(text: str) -> tuple[str, int]:
    r"""``text`` with each lone surrogate replaced by U+FFFD; and how many there were.

    A lone surrogate (``"\ud800"``: half of a UTF-16 pair, from a JSON escape without its
    pair or a file name that is not UTF-8) is not a character: tokenizers, UTF-8 and
    SQLite refuse it. A pair written as two code points is joined into its character.

    Example:
        >>> without_lone_surrogates("lens \ud800 prism")
        ('lens \ufffd prism', 1)
        >>> without_lone_surrogates("\ud83d\udca1 idea")
        ('💡 idea', 0)

    """
    if text.isascii() or not _SURROGATE.search(text):
        return text, 0
    fixed = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return fixed, fixed.count(REPLACEMENT) - text.count(REPLACEMENT)


def valid_unicode(value: Any) -> tuple[Any, int]:
    r"""``value`` (a string, or a list, tuple or dict of them) with lone surrogates replaced.

    `without_lone_surrogates` on every string inside; how many were replaced in all.

    Example:
        >>> valid_unicode({"source": "a\udc80.txt", "page": 2})
        ({'source': 'a�.txt', 'page': 2}, 1)

    """
    if isinstance(value, str):
        return without_lone_surrogates(value)
    if isinstance(value, list | tuple):
        parts = [valid_unicode(v) for v in value]
        return type(value)(v for v, _ in parts), sum(n for _, n in parts)
    if isinstance(value, dict):
        pairs = [(valid_unicode(k), valid_unicode(v)) for k, v in value.items()]
        return {k: v for (k, _), (v, _) in pairs}, sum(a + b for (_, a), (_, b) in pairs)
    return value, 0


def _sample(text: str, max_chars: int = SAMPLE_CHARS) -> str:
    """The text itself, or ten evenly spread slices of it totalling ``max_chars``."""
    if len(text) <= max_chars:
        return text
    pieces, width = 10, max_chars // 10
    step = (len(text) - width) / (pieces - 1)
    return "".join(text[int(i * step) : int(i * step) + width] for i in range(pieces))


_CJK_CHAR = re.compile(f"[{_SCRIPT_RANGES['cjk']}\u3000-\u303f\uff00-\uffef]")
"""A CJK letter or CJK punctuation (full-width forms included)."""


def is_cjk(char: str) -> bool:
    """Whether ``char`` (one character) is Chinese, Japanese or Korean, or CJK punctuation.

    Example:
        >>> is_cjk("灯"), is_cjk("。"), is_cjk("a"), is_cjk("")
        (True, True, False, False)

    """
    return bool(char) and _CJK_CHAR.match(char) is not None


def script_counts(text: str) -> dict[str, int]:
    """Letters per script (``other``: letters of no listed script); digits etc. not counted.

    Example:
        >>> script_counts("Fresnel 透镜")["cjk"]
        2

    """
    sample = _sample(text)
    # Regex counts run in C: a few milliseconds for the 200k-character sample.
    counts = {name: pattern.subn("", sample)[1] for name, pattern in _SCRIPT_PATTERNS.items()}
    letters = _LETTER.subn("", sample)[1]
    counts["other"] = max(0, letters - sum(counts.values()))
    return counts


def script_shares(text: str) -> dict[str, float]:
    """Each script's share of the text's letters (0 to 1, summing to 1; empty: no letters).

    Example:
        >>> shares = script_shares("灯塔 lighthouse")
        >>> round(shares["latin"], 2), round(shares["cjk"], 2)
        (0.83, 0.17)

    """
    counts = script_counts(text)
    total = sum(counts.values())
    if not total:
        return {}
    return {name: count / total for name, count in counts.items() if count}


def dominant_of(counts: dict[str, int]) -> Script:
    """The script with the most letters in ``counts`` (`script_counts`), else ``unknown``.

    Lets a long text be judged on counts added up piece by piece.

    Example:
        >>> dominant_of({"latin": 3, "cjk": 40}), dominant_of({})
        ('cjk', 'unknown')

    """
    if not counts:
        return "unknown"
    name, count = max(counts.items(), key=lambda item: item[1])
    return name if count else "unknown"  # type: ignore[return-value]


def dominant_script(text: str) -> Script:
    """The script with the most letters, or ``unknown`` for text without letters.

    Counting letters favours Latin in mixed text (a word is several letters, a Chinese
    word one or two characters): a Chinese document quoting English terms stays ``cjk``
    as long as its Chinese characters outnumber the Latin letters.

    Example:
        >>> dominant_script("Лампа маяка"), dominant_script("12345 !?")
        ('cyrillic', 'unknown')

    """
    return dominant_of(script_counts(text))


def question_language(text: str) -> str:
    """The language to ask an LLM to write in, named for a prompt (``"Chinese"``, ...).

    Han characters give Chinese, unless kana are present (Japanese) or Hangul (Korean);
    Latin text with common English words gives English. When the script does not settle
    the language (other Latin-script text, Cyrillic, Devanagari), the answer is
    `SAME_LANGUAGE`, which reads naturally in "Answer in ...".

    Example:
        >>> question_language("How were lighthouse lamps fuelled?")
        'English'
        >>> question_language("Comment fonctionnait la lampe du phare ?")
        'the same language as the question'

    """
    script = dominant_script(text)
    if script == "cjk":
        if _KANA.search(text):
            return "Japanese"
        if _HANGUL.search(text):
            return "Korean"
        return "Chinese"
    if script == "latin":
        words = [w.lower().strip("'") for w in _WORD.findall(text)]
        return "English" if any(w in _ENGLISH_WORDS for w in words) else SAME_LANGUAGE
    if script == "arabic":
        return "Persian" if _PERSIAN.search(text) else "Arabic"
    if script == "cyrillic" and _UKRAINIAN.search(text):
        return "Ukrainian"
    return {"greek": "Greek", "hebrew": "Hebrew", "thai": "Thai"}.get(script, SAME_LANGUAGE)


def prompt_language(text: str) -> str | None:
    """`question_language` for a question in a script other than Latin, else None.

    The prompts name a language only then: a Latin-script question's script does not say
    which language it is in (a short English claim full of gene names reads like no
    language at all), and models answer it in kind.

    Example:
        >>> prompt_language("灯塔的透镜是谁发明的？"), prompt_language("Who made the lens?")
        ('Chinese', None)

    """
    if dominant_script(text) in ("latin", "unknown"):
        return None
    return question_language(text)


NOT_ENOUGH_INFORMATION: dict[str, str] = {
    "Chinese": "提供的文档中没有足够的信息来回答这个问题。",
    "Japanese": "提供された文書には、回答するのに十分な情報がありません。",
    "Korean": "제공된 문서에는 답변하기에 충분한 정보가 없습니다.",
}
"""The answer model's fixed reply when the context lacks the answer, per `question_language`
(English keeps ``hyde_lc.answer.NOT_ENOUGH_INFORMATION``)."""

ABSTENTION_MARKERS: tuple[str, ...] = (
    "enough information",
    "没有足够的信息",
    "沒有足夠的資訊",
    "十分な情報がありません",
    "충분한 정보가 없습니다",
)
"""Phrases that mark an answer as "not enough information", in the languages above."""


def not_enough_information(language: str) -> str | None:
    """The fixed "not enough information" reply in ``language``, None if there is none.

    Example:
        >>> not_enough_information(question_language("灯塔的透镜是谁发明的？"))
        '提供的文档中没有足够的信息来回答这个问题。'

    """
    return NOT_ENOUGH_INFORMATION.get(language)


def says_not_enough_information(answer: str) -> bool:
    """Whether an answer is the "not enough information" reply, in any language above."""
    text = answer.lower()
    return any(marker in text for marker in ABSTENTION_MARKERS)


def language_code(text: str) -> str | None:
    """A short code for collection names: ``zh``, ``ja``, ``ko``, ``ru``, ... (None: Latin)."""
    name = question_language(text)
    codes = {
        "Chinese": "zh",
        "Japanese": "ja",
        "Korean": "ko",
        "Arabic": "ar",
        "Persian": "fa",
        "Ukrainian": "uk",
        "Greek": "el",
        "Hebrew": "he",
        "Thai": "th",
    }
    if name in codes:
        return codes[name]
    return {"cyrillic": "ru", "devanagari": "hi"}.get(dominant_script(text))


def model_languages(model_id: str) -> Literal["english", "multilingual", "unknown"]:
    """What is known of the languages an embedding model reads, from its id.

    Example:
        >>> model_languages("local:minilm"), model_languages("openai:text-embedding-3-small")
        ('english', 'multilingual')

    """
    key = model_id.lower()
    if any(part in key for part in _MULTILINGUAL_MODELS):
        return "multilingual"
    if any(part in key for part in _ENGLISH_ONLY_MODELS):
        return "english"
    return "unknown"


def is_english_only_model(model_id: str) -> bool:
    """True for embedding models known to read English only (all-MiniLM-L6-v2, ...).

    Unknown models give False: hyde_lc warns only about what it knows.
    """
    return model_languages(model_id) == "english"


def english_only_warning(
    model_id: str,
    text: str,
    *,
    source: str | None = None,
    collection: str | None = None,
) -> str | None:
    """The warning for a document an English-only embedder cannot read, else None.

    ``text`` is the document's text; ``source`` (its path) and ``collection`` (the
    collection's name) make the suggested command ready to copy.

    Example:
        >>> print(english_only_warning("local:minilm", "灯塔是航海的标志。", source="a.pdf",
        ...                            collection="docs"))  # doctest: +NORMALIZE_WHITESPACE
        a.pdf: the collection's embedding model local:minilm reads English only, but this
        document is mostly Chinese, Japanese or Korean text (100% of its letters): its
        chunks would get near-arbitrary vectors and searches would not find them. Ingest
        it into a multilingual collection with: hyde-lc ingest a.pdf --collection docs_zh
        --embeddings local:multilingual-e5-small

    """
    if not is_english_only_model(model_id):
        return None
    shares = script_shares(text)
    script = dominant_script(text)
    if script in ("latin", "unknown"):
        return None
    code = language_code(text) or script
    return (
        f"{source or 'this document'}: the collection's embedding model {model_id} reads "
        f"English only, but this document is mostly {SCRIPT_NAMES[script]} text "
        f"({shares[script]:.0%} of its letters): its chunks would get near-arbitrary vectors "
        "and searches would not find them. Ingest it into a multilingual collection with: "
        f"hyde-lc ingest {source or 'PATH'} --collection {collection or 'NAME'}_{code} "
        f"--embeddings {MULTILINGUAL_EMBEDDINGS}"
    )
