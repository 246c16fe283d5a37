"""Checks on a synthetic question: copied from its chunk, answered by it, about it alone.

A question written from a chunk shares words with it, and BM25 rewards shared words: a
test set of such questions flatters lexical search. These checks measure that bias and
act on it; each is a pure function of the texts, so `hyde_lc.evaluation.testset` can run
them on every draft and a test can run them on fixed strings:

- `word_overlap`: the share of the question's search terms (BM25's own terms,
  `hyde_lc.store.lexical_index.analyze`: stemmed English words, Chinese characters and
  character pairs) that occur in the chunk. Reported, not enforced: a question about a
  chunk names its subject, so some overlap is right.
- `longest_copy`: the longest run of consecutive words the question copies from the
  chunk, in word equivalents (a Chinese character counts `CJK_CHAR_WEIGHT` of a word).
  A run above `QuestionRules.max_copied_words` sends the question back for a rewrite in
  other words, and rejects it if the rewrite copies too.
- `answer_supported`: the reference answer's terms occur in the chunk (at least
  `QuestionRules.min_answer_support` of them, every number among them): a cheap check
  that the chunk answers the question the writer says it answers.
- `refers_to_passage`: the question leans on the chunk ("this study", "the passage",
  "文中") and means nothing to a reader of the whole collection: rewritten, as a copy is.
- `other_answers`: the chunks a search for the question ranks at or above the reference
  chunk that support the answer too. More than `QuestionRules.max_other_answers` of them:
  the question is not about one chunk, and is dropped.

Example:
    >>> longest_copy("When was the Bell Rock lighthouse completed?",
    ...              "The Bell Rock lighthouse was completed in 1810.")
    4.0
    >>> answer_supported("1810", "The Bell Rock lighthouse was completed in 1810.")
    True

"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from langchain_core.documents import Document

from hyde_lc.core.language import is_cjk
from hyde_lc.store.lexical_index import analyze

CJK_CHAR_WEIGHT = 0.6
"""A Chinese character as a share of a word in `longest_copy` (10 characters ~ 6 words)."""

_SURFACE = re.compile(r"\w+", re.UNICODE)
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_REFERS = re.compile(
    r"\b(?:the|this|that|above|given)\s+(?:passage|text|excerpt|paragraph|study|article|"
    r"paper|document|abstract|section|author|authors)\b|\baccording to the\b"
    r"|这段|本段|该段|上文|文中|本文|原文|该文|这篇",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class QuestionRules:
    """The limits a synthetic question is held to.

    Example:
        >>> QuestionRules().max_copied_words
        6

    """

    max_copied_words: float = 6
    """The longest run of the chunk's words a question may copy (word equivalents)."""
    min_answer_support: float = 0.75
    """Share of the reference answer's terms that must occur in the chunk."""
    max_other_answers: int = 1
    """Other chunks, ranked at or above the reference, that may support the answer too."""
    min_question_terms: int = 3
    """Search terms a question needs (fewer: too vague to be about one chunk)."""


def surface_tokens(text: str) -> list[tuple[str, float]]:
    """Words (lower-cased) and Chinese characters of ``text``, each with its weight."""
    tokens: list[tuple[str, float]] = []
    for match in _SURFACE.finditer(text.lower()):
        word = match.group()
        if any(is_cjk(ch) for ch in word):
            run = ""
            for ch in word:
                if is_cjk(ch):
                    if run:
                        tokens.append((run, 1.0))
                        run = ""
                    tokens.append((ch, CJK_CHAR_WEIGHT))
                else:
                    run += ch
            if run:
                tokens.append((run, 1.0))
        else:
            tokens.append((word, 1.0))
    return tokens


def longest_copy(question: str, chunk: str) -> float:
    """The longest run of consecutive tokens ``question`` shares with ``chunk``, weighted.

    `difflib.SequenceMatcher.find_longest_match` over the two token lists (the standard
    library's longest common substring), without its junk heuristic, which would skip
    frequent words of a long chunk.
    """
    q = surface_tokens(question)
    c = surface_tokens(chunk)
    if not q or not c:
        return 0.0
    matcher = difflib.SequenceMatcher(None, [t for t, _ in q], [t for t, _ in c], autojunk=False)
    match = matcher.find_longest_match(0, len(q), 0, len(c))
    return round(sum(weight for _, weight in q[match.a : match.a + match.size]), 2)


def word_overlap(question: str, chunk: str) -> float:
    """Share of the question's distinct search terms that occur in ``chunk`` (0 to 1)."""
    terms = set(analyze(question))
    if not terms:
        return 0.0
    return round(len(terms & set(analyze(chunk))) / len(terms), 4)


def answer_supported(answer: str, chunk: str, min_support: float = 0.75) -> bool:
    """Whether ``chunk`` holds the answer: most of its terms, and every number in it."""
    terms = set(analyze(answer))
    if not terms:
        return False
    chunk_terms = set(analyze(chunk))
    if len(terms & chunk_terms) / len(terms) < min_support:
        return False
    chunk_numbers = set(_NUMBER.findall(chunk))
    return all(number in chunk_numbers for number in _NUMBER.findall(answer))


def refers_to_passage(question: str) -> bool:
    """Whether the question points at the text it was written from ("this study", "文中").

    Example:
        >>> refers_to_passage("What did this study find?"), refers_to_passage("Who built it?")
        (True, False)

    """
    return _REFERS.search(question) is not None


def other_answers(
    reference_id: str, answer: str, ranked: Sequence[Document], min_support: float = 0.75
) -> list[str]:
    """Ids of other chunks, ranked above the reference, whose text supports ``answer`` too.

    All of ``ranked`` counts when the reference is not in it.
    """
    ids = [str(doc.id) for doc in ranked]
    above = ranked[: ids.index(reference_id)] if reference_id in ids else ranked
    return [
        str(doc.id)
        for doc in above
        if str(doc.id) != reference_id and answer_supported(answer, doc.page_content, min_support)
    ]


@dataclass(frozen=True)
class Verdict:
    """What the checks say of one draft: its measures and, when it fails, why."""

    overlap: float
    copied: float
    problem: str | None
    """None: the draft passes; else ``copies``, ``refers to the passage``, ``unsupported``,
    ``too vague`` (the fixable ones first: `needs_rewrite`)."""

    @property
    def needs_rewrite(self) -> bool:
        """A problem another wording can fix: the question copies or leans on the chunk."""
        return self.problem in ("copies", "refers to the passage")


def judge_draft(question: str, answer: str, chunk: str, rules: QuestionRules) -> Verdict:
    """Measure a draft question against its chunk and name its first problem, if any.

    Example:
        >>> chunk = "The Bell Rock lighthouse was completed in 1810 by Robert Stevenson."
        >>> judge_draft("Which engineer finished the Bell Rock light?", "Robert Stevenson",
        ...             chunk, QuestionRules()).problem is None
        True
        >>> judge_draft("Which engineer finished the Bell Rock light?", "Thomas Telford",
        ...             chunk, QuestionRules()).problem
        'unsupported'

    """
    overlap, copied = word_overlap(question, chunk), longest_copy(question, chunk)
    problem: str | None = None
    if len(set(analyze(question))) < rules.min_question_terms:
        problem = "too vague"
    elif not answer_supported(answer, chunk, rules.min_answer_support):
        problem = "unsupported"
    elif copied > rules.max_copied_words:
        problem = "copies"
    elif refers_to_passage(question):
        problem = "refers to the passage"
    return Verdict(overlap, copied, problem)
