"""Where an answer's sentences end, and the guard that ends an answer at one.

`sentence_ends` finds the ends of the sentences of a text written so far: ``.``, ``!``
or ``?`` followed by a space (or a CJK character), and ``。``, ``！``, ``？`` at once;
closing quotes and brackets and ``[n]`` citations right after an end belong to its
sentence, and a line break ends a line (a list item) too. A full stop is not an end
after an abbreviation or an initial (``e.g.``, ``Dr.``, ``A. Fresnel``), before a
lower-case word, in a number (``3.5``) or after a list number (``2.``); an end with
nothing written after it yet is not known to be one until the text goes on (or ends).

`AnswerGuard` follows an answer as it streams and decides what may be shown:

* a sentence that repeats one already written (compared without citations, case and
  punctuation; at least `MIN_REPEAT_TOKENS` words) ends the answer before it, and
  `repeats_a_sentence` tells a model to stop there;
* when the model stops at its token cap, the answer ends at its last whole sentence
  (kept whole when no sentence ended);
* text streams as it comes, except a sentence that begins like one already written
  (held until it differs) and, in the last part of the token budget, the sentence being
  written (held until it ends), so that what was shown never has to be taken back.

What was shown, added up, is the final text whatever the chunks were.

Example:
    >>> text = "Fresnel made the lens. It is bright. Fresnel made the lens. It"
    >>> text[: repeats_a_sentence(text)]
    'Fresnel made the lens. It is bright. '
    >>> guard = AnswerGuard(cap=64)  # a small cap: held a sentence at a time
    >>> guard.feed("The lens was lit in 1823. Dr. Smith saw it. The beam was se")
    'The lens was lit in 1823. Dr. Smith saw it.'
    >>> guard.finish(capped=True), guard.ending.reason, guard.ending.removed
    ('', 'token_cap', ' The beam was se')

"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

MIN_REPEAT_TOKENS = 4
"""Words (CJK characters) a sentence needs before its repetition ends an answer."""
HOLD_SHARE = 4
"""The last 1/HOLD_SHARE of the token budget (at least `HOLD_MIN_TOKENS`), estimated from
the text, streams a sentence at a time."""
HOLD_MIN_TOKENS = 64

_END = re.compile(r"[.!?。！？]+")
_CJK_ENDS = "。！？"
_CLOSERS = frozenset("\"'”’»)]）」』】")
_CITATION = re.compile(r"[ \t]*\[\d+(?:\s*[,;–-]\s*\d+)*\]")
_CITATIONS = re.compile(r"\[\d+(?:\s*[,;–-]\s*\d+)*\]")
_OPEN_CITATION = re.compile(r"[ \t]*\[[\d,;\s–-]*$")
_WORD_BEFORE = re.compile(r"([^\W\d_]+(?:\.[^\W\d_]+)*)$")
_LIST_NUMBER = re.compile(r"(?:^|\n)[ \t]*\(?\d{1,3}$")
_CJK = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")
_TOKEN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]|[^\W_]+")

_NEVER_ENDS = frozenset(
    {
        "e.g", "i.e", "cf", "vs", "viz", "al", "approx", "ca", "dr", "mr", "mrs", "ms",
        "prof", "st", "mt", "jr", "sr", "rev", "capt", "col", "gen", "lt", "sgt", "fr",
        "sen", "rep", "gov", "pres",
    }
)  # fmt: skip
"""Abbreviations that a name or a word of any case follows (``Dr. Smith``, ``e.g. Fresnel``)."""
_BEFORE_NUMBERS = frozenset(
    {
        "no", "nos", "vol", "vols", "pp", "fig", "figs", "ch", "sec", "art", "jan", "feb",
        "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec",
    }
)  # fmt: skip
"""Abbreviations that a number follows (``No. 5``, ``Fig. 2``, ``Oct. 1823``)."""


def _ends_sentence(text: str, stop: int, following: str | None) -> bool:
    """Whether the full stop at ``text[stop]`` ends a sentence, given the next character."""
    before = text[:stop]
    if _LIST_NUMBER.search(before):
        return False  # "2." opening a list item
    found = _WORD_BEFORE.search(before)
    word = found.group(1).lower() if found else ""
    if word in _NEVER_ENDS or (len(word) == 1 and word.isalpha()):
        return False  # an abbreviation or an initial
    if following is None:
        return True
    if following.islower():
        return False  # "approx. three": a sentence starts with a capital
    return not (following.isdigit() and word in _BEFORE_NUMBERS)


def sentence_ends(text: str, *, final: bool = False) -> list[int]:
    """Offsets just past each whole sentence (or line) of ``text``, in order.

    With ``final`` the text is complete, so an end with nothing after it counts;
    otherwise an end is counted only once the text goes on past it.

    Example:
        >>> sentence_ends("It works, e.g. here. 灯塔很高。Yes [2]. No")
        [20, 26, 34]
        >>> sentence_ends("It ends here.", final=True)
        [13]

    """
    ends: list[int] = []
    size = len(text)
    for match in _END.finditer(text):
        end = match.end()
        while end < size and text[end] in _CLOSERS:
            end += 1
        while cited := _CITATION.match(text, end):
            end = cited.end()
        if _OPEN_CITATION.match(text, end) and not final:
            break  # a citation still being written: nothing after it is known
        rest = text[end:]
        following = rest.lstrip()[:1] or None
        if following is None and not final:
            break  # nothing after it yet
        latin = match.group()[-1] not in _CJK_ENDS
        if latin and following is not None and rest[:1] == following and not _CJK.match(following):
            continue  # "3.5", "file.pdf", "e.g.,"
        if latin and match.group() == "." and not _ends_sentence(text, match.start(), following):
            continue
        ends.append(end)
    for line in re.finditer(r"\n", text):
        end = len(text[: line.start()].rstrip())
        if end and (not ends or end not in ends):
            ends.append(end)
    return sorted(set(ends))


def _normal(sentence: str) -> str:
    """A sentence as compared for repetition: words only, lower case, no citations."""
    sentence = _OPEN_CITATION.sub("", _CITATIONS.sub(" ", sentence))
    return " ".join(_TOKEN.findall(sentence.lower()))


def _sentences(text: str, ends: list[int]) -> list[tuple[int, str]]:
    """Each whole sentence's start (past leading space) and its normal form."""
    out = []
    start = 0
    for end in ends:
        piece = text[start:end]
        out.append((start + len(piece) - len(piece.lstrip()), _normal(piece)))
        start = end
    return out


def _first_repeat(sentences: list[tuple[int, str]]) -> int | None:
    """The start of the first sentence that repeats an earlier one (None: none does)."""
    seen: set[str] = set()
    for start, normal in sentences:
        if len(normal.split()) >= MIN_REPEAT_TOKENS and normal in seen:
            return start
        seen.add(normal)
    return None


def repeats_a_sentence(text: str, *, final: bool = False) -> int | None:
    """Where ``text`` begins to repeat a whole sentence it already has, or None.

    Example:
        >>> repeats_a_sentence("The lens was made in Paris [1]. The lens was made in Paris.",
        ...                    final=True)
        32
        >>> repeats_a_sentence("Yes. Yes. Yes.", final=True) is None  # too short to matter
        True

    """
    return _first_repeat(_sentences(text, sentence_ends(text, final=final)))


def _hold_offset(text: str, cap: int | None) -> int:
    """Where in ``text`` the held part of the token budget begins (len(text): not reached).

    Tokens are estimated at one per 3 bytes of UTF-8: more than English text has, about
    what Chinese has, so the held part begins early rather than late. Without a known
    cap nothing is held for it: such a model's cap cannot be foreseen.
    """
    if cap is None:
        return len(text)
    budget = 3 * max(0, cap - max(HOLD_MIN_TOKENS, cap // HOLD_SHARE))
    used = 0
    for offset, char in enumerate(text):
        used += len(char.encode("utf-8"))
        if used > budget:
            return offset
    return len(text)


AnswerStop = Literal["repeated_sentence", "token_cap"]


@dataclass
class Ending:
    """How `AnswerGuard` ended an answer.

    Example:
        >>> guard = AnswerGuard(cap=64)
        >>> guard.feed("It was lit in 1823. It was se") + guard.finish(capped=True)
        'It was lit in 1823.'
        >>> guard.ending
        Ending(reason='token_cap', removed=' It was se', mid_sentence=False)

    """

    reason: AnswerStop | None = None
    """``repeated_sentence``, ``token_cap`` (the model reached its cap), or None (the
    model ended by itself)."""
    removed: str = ""
    """The text the model wrote that the answer leaves out."""
    mid_sentence: bool = False
    """Whether the answer ends mid-sentence: at the token cap with no sentence ended (kept
    as written), or in a sentence already shown."""


class AnswerGuard:
    """Follows a streamed answer: what may be shown, and where the answer ends.

    ``feed`` takes each new piece of text and returns what may be shown now; ``finish``
    returns the rest once the model has stopped (``capped``: at its token cap). ``cap``
    is the model's token cap, when known: in its last part the answer streams a sentence
    at a time. See the module docstring.

    Example:
        >>> guard = AnswerGuard(cap=384)
        >>> pieces = ["The lens ", "bends light. ", "The lens ", "bends light. ", "It"]
        >>> [guard.feed(piece) for piece in pieces]
        ['The lens', ' bends light.', '', '', '']
        >>> guard.stopped, guard.finish(capped=False), guard.ending.reason
        (True, '', 'repeated_sentence')

    """

    def __init__(self, cap: int | None = None) -> None:
        self.cap = cap
        self.text = ""
        self.sent = 0
        self.stop_at: int | None = None
        self.ending = Ending()

    @property
    def stopped(self) -> bool:
        """Whether the answer has begun to repeat a sentence (nothing more is shown)."""
        return self.stop_at is not None

    def _show(self, upto: int) -> str:
        upto = len(self.text[:upto].rstrip())
        if upto <= self.sent:
            return ""
        piece, self.sent = self.text[self.sent : upto], upto
        return piece

    def feed(self, piece: str) -> str:
        """Take the next piece of the answer; return the text that may be shown now."""
        if self.stopped or not piece:
            return ""
        self.text += piece
        ends = sentence_ends(self.text)
        sentences = _sentences(self.text, ends)
        repeat = _first_repeat(sentences)
        if repeat is not None:
            self.stop_at = repeat
            return self._show(repeat)
        settled = ends[-1] if ends else 0
        partial = _normal(self.text[settled:])
        if partial and any(normal.startswith(partial) for _, normal in sentences):
            return self._show(settled)  # it may be a repeat: held until it differs
        return self._show(max(settled, _hold_offset(self.text, self.cap)))

    def finish(self, *, capped: bool) -> str:
        """The rest of the answer once the model has stopped; sets `ending`."""
        text = self.text
        if self.stop_at is None:
            self.stop_at = repeats_a_sentence(text, final=True)
        if self.stop_at is not None:
            end, reason = self.stop_at, "repeated_sentence"
        elif capped:
            ends = sentence_ends(text, final=True)
            end, reason = max(ends[-1] if ends else len(text), self.sent), "token_cap"
            self.ending.mid_sentence = not ends or end not in ends
        else:
            end, reason = len(text), None
        end = len(text[:end].rstrip())
        self.ending.reason = reason  # type: ignore[assignment]
        self.ending.removed = text[end:]
        return self._show(end)
