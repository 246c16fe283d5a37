"""Removing the reasoning that "thinking" models put before their answer.

Reasoning models served behind OpenAI-compatible endpoints (Qwen3, DeepSeek-R1, ...)
often return their chain of thought inline, as ``<think>...</think>`` followed by the
answer. That text is neither a hypothetical document nor an answer: hyde_lc removes it
before embedding a hypothesis and before showing or evaluating an answer.

* every closed ``<think>...</think>`` block is removed;
* a closing ``</think>`` without an opening tag (the chat template opened it) removes
  everything before it;
* an unclosed ``<think>`` (the model ran out of tokens while reasoning) removes
  everything from it to the end, so an output that is all reasoning becomes empty.

`strip_reasoning_stream` does the same to a stream of text chunks without waiting for
its end: reasoning is held back, the answer flows as it comes. A stream cannot take back
what it sent, so there only an explicit ``<think>`` opening counts as reasoning;
`strip_reasoning` of the joined chunks gives the final text in every case.

Example:
    >>> strip_reasoning("<think>The user asks about tides.</think>Tides follow the moon.")
    'Tides follow the moon.'
    >>> strip_reasoning("<think>Let me think about this at length")
    ''

"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator

_CLOSED = re.compile(r"<think>.*?</think>", re.IGNORECASE | re.DOTALL)
_OPEN = re.compile(r"<think>", re.IGNORECASE)
_CLOSE = re.compile(r"</think>", re.IGNORECASE)


def strip_reasoning(text: str) -> str:
    """``text`` without its ``<think>`` reasoning (see the module docstring), stripped."""
    if "think>" not in text.lower():
        return text.strip()
    text = _CLOSED.sub("", text)
    closing = list(_CLOSE.finditer(text))
    if closing:  # reasoning whose opening tag came from the prompt template
        text = text[closing[-1].end() :]
    opening = _OPEN.search(text)
    if opening:  # reasoning cut off before it closed
        text = text[: opening.start()]
    return text.strip()


_TAGS = ("<think>", "</think>")


def _held_back(text: str) -> int:
    """Length of the tail of ``text`` that may still turn into a tag or be stripped."""
    lowered = text.lower()
    tag = 0
    for size in range(min(len(text), len(_TAGS[1]) - 1), 0, -1):
        if any(t.startswith(lowered[-size:]) for t in _TAGS):
            tag = size
            break
    rest = text[: len(text) - tag]
    return tag + len(rest) - len(rest.rstrip())


def _shown(text: str) -> str:
    """What may be sent so far of a partial output (explicit ``<think>`` blocks only)."""
    text = _CLOSED.sub("", text)
    opening = _OPEN.search(text)
    if opening:
        text = text[: opening.start()]
    text = text.lstrip()
    return text[: len(text) - _held_back(text)]


class _StreamStripper:
    """`strip_reasoning` applied as chunks arrive: what may be sent of each, then the rest."""

    def __init__(self) -> None:
        self.seen = ""
        self.sent = ""

    def feed(self, chunk: str) -> str:
        """The part of the answer ``chunk`` completes ("" while reasoning is held back)."""
        self.seen += chunk
        shown = _shown(self.seen)
        if len(shown) > len(self.sent) and shown.startswith(self.sent):
            piece, self.sent = shown[len(self.sent) :], shown
            return piece
        return ""

    def end(self) -> list[str]:
        """What is left to send once the stream has ended."""
        final = strip_reasoning(self.seen)
        if final.startswith(self.sent) and len(final) > len(self.sent):
            return [final[len(self.sent) :]]
        # an output that was all reasoning is an empty text, not no text
        return [] if self.sent else [""]


def strip_reasoning_stream(chunks: Iterator[str]) -> Iterator[str]:
    """`strip_reasoning` over a stream of text chunks (see the module docstring)."""
    stripper = _StreamStripper()
    for chunk in chunks:
        if piece := stripper.feed(chunk):
            yield piece
    yield from stripper.end()


async def astrip_reasoning_stream(chunks: AsyncIterator[str]) -> AsyncIterator[str]:
    """Async `strip_reasoning_stream`."""
    stripper = _StreamStripper()
    async for chunk in chunks:
        if piece := stripper.feed(chunk):
            yield piece
    for piece in stripper.end():
        yield piece
