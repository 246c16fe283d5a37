import asyncio
import random

import pytest

from hyde_lc.core.reasoning import astrip_reasoning_stream, strip_reasoning, strip_reasoning_stream

CASES = [
    ("<think>plan the answer</think>\n\nTides follow the moon.", "Tides follow the moon."),
    ("  <THINK>\nupper case\n</THINK>Answer.", "Answer."),
    ("<think>a</think>One. <think>b</think>Two.", "One. Two."),
    ("<think>ran out of tokens while thinking", ""),
    ("Answer first. <think>then a cut-off thought", "Answer first."),
    ("the template opened it</think>The answer.", "The answer."),
    ("With <b>markup</b> and a < sign.  ", "With <b>markup</b> and a < sign."),
    ("", ""),
]  # fmt: skip


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_strip_reasoning(text, expected):
    assert strip_reasoning(text) == expected


def _split(text: str, rng: random.Random) -> list[str]:
    cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(0, 8))))
    return [text[i:j] for i, j in zip([0, *cuts], [*cuts, len(text)], strict=True)]


@pytest.mark.parametrize(("text", "expected"), [c for c in CASES if "template" not in c[0]])
def test_streams_give_the_same_text_however_they_are_cut(text, expected):
    rng = random.Random(7)
    for _ in range(30):
        parts = _split(text, rng) if len(text) > 1 else [text]
        assert "".join(strip_reasoning_stream(iter(parts))) == expected

        async def chunks(parts=parts):
            for part in parts:
                yield part

        async def collect():
            return "".join([p async for p in astrip_reasoning_stream(chunks())])

        assert asyncio.run(collect()) == expected


def test_streams_hold_back_reasoning_but_pass_the_answer_as_it_comes():
    parts = ["<think>long ", "thought</think>", "The ", "keeper ", "lit ", "it."]
    assert list(strip_reasoning_stream(iter(parts))) == ["The", " keeper", " lit", " it."]
