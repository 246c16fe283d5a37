"""Answers end well without a sampling change: at a repeated sentence, at the last whole
sentence when the token cap cuts one, and the stream never shows what is then left out."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import AddableDict
from pydantic import Field

import hyde_lc.answer as answer_module
from hyde_lc import build_answer_chain
from hyde_lc.answer import answer_with_context, reached_token_cap
from hyde_lc.core.sentences import AnswerGuard, repeats_a_sentence, sentence_ends
from hyde_lc.evaluation.records import EvaluationPipeline
from hyde_lc.models.local_llm import LocalChatModel
from tests.fakes import FixedHits, serve_local_models

DOCS = [
    Document(page_content="Fresnel lenses bend light.", metadata={"file_name": "a.pdf", "page": 1}),
    Document(page_content="The lens was lit in 1823.", metadata={"file_name": "b.pdf", "page": 4}),
]
FIRST = "The Fresnel lens bends the lamp's light into a beam [1]."
SECOND = " It was first lit at Cordouan in 1823 [2]."
LOOP = FIRST + SECOND + " The Fresnel lens bends the lamp's light into a beam [1]." * 6


class Scripted(BaseChatModel):
    """Streams ``text`` in the given pieces, then says why it stopped, like a real model.

    ``pulled`` counts the pieces a consumer took: a model that is not told to stop is
    read to its end.
    """

    text: str
    pieces: int = 0
    """Split into this many pieces at random places (0: word by word)."""
    seed: int = 0
    max_tokens: int | None = 384
    finish_reason: str = "stop"
    pulled: list[str] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted-stream"

    def split(self) -> list[str]:
        if not self.pieces:
            words = self.text.split(" ")
            return [w if i == 0 else " " + w for i, w in enumerate(words)]
        rng = random.Random(self.seed)
        cuts = sorted(rng.sample(range(1, len(self.text)), self.pieces - 1))
        return [self.text[a:b] for a, b in zip([0, *cuts], [*cuts, len(self.text)], strict=True)]

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        message = AIMessage(self.text, response_metadata={"finish_reason": self.finish_reason})
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(self, messages, stop=None, run_manager=None, **kwargs) -> Iterator[Any]:
        for piece in self.split():
            self.pulled.append(piece)
            yield ChatGenerationChunk(message=AIMessageChunk(content=piece))
        end = {"finish_reason": self.finish_reason}
        yield ChatGenerationChunk(message=AIMessageChunk(content="", response_metadata=end))


def added(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    total = AddableDict()
    for chunk in chunks:
        total = total + AddableDict(chunk)
    return dict(total)


def ask(llm: BaseChatModel, question: str = "How do lenses work?") -> tuple[dict, list[str]]:
    """The chain's streamed result and the answer pieces a reader saw, in order."""
    chunks = list(build_answer_chain(FixedHits(hits=DOCS), llm).stream(question))
    return added(chunks), [c["answer"] for c in chunks if "answer" in c]


# -- where sentences end ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ends"),
    [
        ("Lenses, e.g. Fresnel's, bend light. They", ["Lenses, e.g. Fresnel's, bend light."]),
        ("Dr. Stevenson built it. Then", ["Dr. Stevenson built it."]),
        ("A. Fresnel made it. Then", ["A. Fresnel made it."]),
        ("It costs 3.5 francs, approx. three. Then", ["It costs 3.5 francs, approx. three."]),
        ("See lighthouses.pdf, p. 2. Then", ["See lighthouses.pdf, p. 2."]),
        ("It was lit [1]. [2] Then", ["It was lit [1]. [2]"]),
        ('He said "Go." Then', ['He said "Go."']),
        ("Two kinds:\n1. Lenses\n2. Mirr", ["Two kinds:", "\n1. Lenses"]),
        ("灯塔很高。它在海边！谁建的？它", ["灯塔很高。", "它在海边！", "谁建的？"]),
        ("Is it bright? Yes! It is", ["Is it bright?", " Yes!"]),
        ("No sentence has ended yet", []),
        ("It ends here.", []),  # nothing after it yet: not known to be an end
    ],
)
def test_sentence_ends(text: str, ends: list[str]) -> None:
    found = sentence_ends(text)
    assert [text[a:b] for a, b in zip([0, *found], found, strict=False)] == ends


def test_a_text_known_to_be_complete_ends_at_its_last_stop_unless_an_abbreviation() -> None:
    assert sentence_ends("It ends here.", final=True) == [13]
    assert sentence_ends("Ask Dr.", final=True) == []


def test_a_repeat_is_the_same_words_whatever_the_citations_and_case() -> None:
    text = "The lens bends light [1]. It was lit. THE LENS bends light [2]. More"
    assert text[repeats_a_sentence(text) :] == "THE LENS bends light [2]. More"
    assert repeats_a_sentence("Yes it is. Yes it is. More") is None  # too short to matter
    assert repeats_a_sentence("The lens bends light. The lens bends light") is None  # unfinished


# -- a repeated sentence ------------------------------------------------------------------


def test_the_answer_stops_before_a_repeated_sentence_and_says_so() -> None:
    out, pieces = ask(Scripted(text=LOOP))
    assert out["answer"] == FIRST + SECOND
    assert out["answer_ending"] == "repeated_sentence"
    assert "repeat a sentence" in out["answer_note"]
    assert "".join(pieces) == out["answer"]  # nothing shown was taken back
    assert out["sources"] == ["[1] a.pdf, p. 1", "[2] b.pdf, p. 4"]


@pytest.mark.parametrize("pieces", [0, 3, 17, 60])
def test_streamed_invoked_and_async_answers_agree_however_the_text_is_cut(pieces: int) -> None:
    llm = Scripted(text=LOOP, pieces=pieces, seed=pieces)
    streamed, shown = ask(llm)
    invoked = build_answer_chain(FixedHits(hits=DOCS), llm).invoke("How do lenses work?")
    assert streamed == invoked and "".join(shown) == invoked["answer"] == FIRST + SECOND


async def test_the_guard_works_on_async_streams_too() -> None:
    chain = build_answer_chain(FixedHits(hits=DOCS), Scripted(text=LOOP))
    chunks = [chunk async for chunk in chain.astream("How do lenses work?")]
    out = added(chunks)
    assert out["answer"] == FIRST + SECOND and out["answer_ending"] == "repeated_sentence"


def test_a_repeated_chinese_sentence_ends_the_answer() -> None:
    text = "菲涅耳透镜把灯光聚成光束[1]。它在1823年首次点亮。菲涅耳透镜把灯光聚成光束[1]。它在"
    out, pieces = ask(Scripted(text=text, pieces=20), "透镜是谁发明的？")
    assert out["answer"] == "菲涅耳透镜把灯光聚成光束[1]。它在1823年首次点亮。"
    assert out["answer_ending"] == "repeated_sentence" and "".join(pieces) == out["answer"]


def test_a_sentence_that_only_begins_like_an_earlier_one_is_kept() -> None:
    text = "The lens bends light [1]. The lens was made in Paris [2]."
    out, pieces = ask(Scripted(text=text))
    assert out["answer"] == text and out["answer_ending"] is None and out["answer_note"] is None
    assert len(pieces) > 3  # still streamed as written, not held to the end


def test_remote_models_are_read_to_their_end_and_cut_after() -> None:
    llm = Scripted(text=LOOP)
    out, _ = ask(llm)
    assert out["answer"] == FIRST + SECOND and "".join(llm.pulled) == LOOP


# -- the token cap ------------------------------------------------------------------------

CAPPED = FIRST + SECOND + " It could be seen from thirty kilometres aw"


def test_at_the_token_cap_the_answer_ends_at_its_last_whole_sentence() -> None:
    out, pieces = ask(Scripted(text=CAPPED, max_tokens=48, finish_reason="length"))
    assert out["answer"] == FIRST + SECOND
    assert out["answer_ending"] == "token_cap"
    assert "48-token cap" in out["answer_note"] and "last whole sentence" in out["answer_note"]
    assert "".join(pieces) == out["answer"] and not any("thirty" in p for p in pieces)


def test_the_cap_read_from_a_whole_message_cuts_the_same() -> None:
    llm = Scripted(text=CAPPED, max_tokens=48, finish_reason="length")
    out = build_answer_chain(FixedHits(hits=DOCS), llm).invoke("How do lenses work?")
    assert out["answer"] == FIRST + SECOND and out["answer_ending"] == "token_cap"


def test_abbreviations_are_not_taken_for_the_last_sentence_end() -> None:
    text = "Lenses, e.g. Fresnel's, bend light [1]. Dr. Smith lit it in 1823. It was seen by St"
    out, _ = ask(Scripted(text=text, max_tokens=40, finish_reason="length"))
    assert out["answer"] == "Lenses, e.g. Fresnel's, bend light [1]. Dr. Smith lit it in 1823."


def test_a_chinese_answer_at_the_cap_ends_at_its_last_sentence_mark() -> None:
    text = "菲涅耳透镜把灯光聚成光束[1]。它能照多远？很远！它在1823年首"
    out, _ = ask(Scripted(text=text, pieces=9, max_tokens=30, finish_reason="length"), "多远？")
    assert out["answer"] == "菲涅耳透镜把灯光聚成光束[1]。它能照多远？很远！"


def test_an_answer_with_no_sentence_end_is_kept_whole() -> None:
    text = "The Fresnel lens made by Augustin Fresnel for the Cordouan lighthouse in"
    out, pieces = ask(Scripted(text=text, max_tokens=20, finish_reason="length"))
    assert out["answer"] == text and "".join(pieces) == text
    assert out["answer_ending"] == "token_cap" and "kept as written" in out["answer_note"]


def test_an_answer_that_ended_by_itself_is_left_alone() -> None:
    text = "It was lit in 1823 and could be seen from thirty kilometres"  # no full stop
    out, _ = ask(Scripted(text=text, max_tokens=20))
    assert out["answer"] == text and out["answer_ending"] is None and out["answer_note"] is None


def test_far_from_the_cap_the_answer_streams_word_by_word() -> None:
    _, pieces = ask(Scripted(text=FIRST, max_tokens=384))
    assert len([p for p in pieces if p]) == len(FIRST.split(" "))


def test_near_the_cap_it_streams_a_sentence_at_a_time() -> None:
    _, pieces = ask(Scripted(text=FIRST + SECOND, max_tokens=64))
    assert [p for p in pieces if p] == [FIRST, SECOND]


def test_without_the_guard_the_text_is_as_written() -> None:
    chain = build_answer_chain(FixedHits(hits=DOCS), Scripted(text=LOOP), guard=False)
    out = chain.invoke("How do lenses work?")
    assert out["answer"] == LOOP and out["answer_ending"] is None


@pytest.mark.parametrize(
    ("metadata", "capped"),
    [
        ({"finish_reason": "length"}, True),
        ({"stop_reason": "max_tokens"}, True),
        ({"done_reason": "length"}, True),
        ({"finish_reason": "MAX_TOKENS"}, True),
        ({"finish_reason": "stop"}, False),
        ({}, False),
    ],
)
def test_each_provider_s_way_of_saying_it_hit_the_cap(metadata: dict, capped: bool) -> None:
    assert reached_token_cap(metadata) is capped


def shown_by(guard: AnswerGuard, pieces: list[str], capped: bool) -> str:
    return "".join(guard.feed(piece) for piece in pieces) + guard.finish(capped=capped)


@pytest.mark.parametrize("cap", [None, 30, 64, 384])
def test_every_way_of_cutting_a_text_shows_the_answer_one_piece_shows(cap) -> None:
    rng = random.Random(cap)
    for text, capped in [(LOOP, False), (CAPPED, True), (FIRST + SECOND, True)]:
        whole = shown_by(AnswerGuard(cap), [text], capped)
        for _ in range(40):
            cuts = sorted(rng.sample(range(1, len(text)), rng.randint(1, 40)))
            pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
            assert shown_by(AnswerGuard(cap), pieces, capped) == whole, pieces


# -- the local engine stops where the answer repeats --------------------------------------


class LoopingEngine:
    """A stand-in llama.cpp server that writes ``LOOP`` word by word until told to stop.

    It writes in step with its reader: each word waits until the reader has looked at
    the one before (``read``), or until the reader tells it to stop, as llama.cpp hears
    it (the chunk callback returns True).
    """

    def __init__(self) -> None:
        self.written = 0
        self.read = threading.Semaphore(0)
        self.stopped_early = threading.Event()

    def handle_chat_completions(self, request: dict[str, Any], on_chunk: Any) -> None:
        words = LOOP.split(" ")
        for n, word in enumerate(words, start=1):
            self.written = n
            timings = {"prompt_n": 30, "cache_n": 2, "predicted_n": n}
            delta = {"content": word if n == 1 else " " + word}
            stop = on_chunk(
                {"choices": [{"delta": delta, "finish_reason": None}], "timings": timings}
            )
            while not stop and not self.read.acquire(timeout=0.01):
                stop = on_chunk({})  # an empty chunk: only asks whether to go on
            if stop:
                self.stopped_early.set()
                return
        on_chunk({"choices": [{"delta": {}, "finish_reason": "stop"}]})
        usage = {"prompt_tokens": 32, "completion_tokens": len(words), "total_tokens": 99}
        on_chunk({"choices": [], "usage": usage, "timings": timings})


@pytest.fixture
def looping(monkeypatch: pytest.MonkeyPatch) -> LoopingEngine:
    engine = LoopingEngine()
    serve_local_models(monkeypatch, engine)
    looks = answer_module._begins_to_repeat

    def look(written: str) -> bool:
        stop = looks(written)
        if not stop:
            engine.read.release()
        return stop

    monkeypatch.setattr(answer_module, "_begins_to_repeat", look)
    return engine


REPEATED_AT = len((FIRST + SECOND + " " + FIRST).split(" ")) + 1  # the word that settles it
LOOP_WORDS = len(LOOP.split(" "))


@pytest.mark.parametrize("streamed", [True, False])
def test_a_local_model_stops_generating_where_the_answer_repeats(looping, streamed) -> None:
    llm = LocalChatModel(model_path="stand-in.gguf", model_name="stand-in", temperature=0)
    chain = answer_with_context(llm)
    inputs = {"question": "How do lenses work?", "documents": DOCS}
    out = added(list(chain.stream(inputs))) if streamed else chain.invoke(inputs)
    assert out["answer"] == FIRST + SECOND and out["answer_ending"] == "repeated_sentence"
    assert looping.stopped_early.wait(5)
    assert looping.written == REPEATED_AT < LOOP_WORDS


def test_a_local_model_stopped_early_still_reports_its_tokens(looping) -> None:
    llm = LocalChatModel(model_path="stand-in.gguf", model_name="stand-in", temperature=0)
    record = EvaluationPipeline(FixedHits(hits=DOCS), answer_llm=llm).run("How do lenses work?")
    meta = record["metadata"]
    assert record["response"] == FIRST + SECOND
    assert meta["answer_ending"] == "repeated_sentence" and meta["answer_note"]
    answer = meta["stages"]["answer"]
    assert (answer["input_tokens"], answer["output_tokens"]) == (32, REPEATED_AT)


def test_an_answer_record_says_when_the_cap_cut_it() -> None:
    llm = Scripted(text=CAPPED, max_tokens=48, finish_reason="length")
    record = EvaluationPipeline(FixedHits(hits=DOCS), answer_llm=llm).run("How do lenses work?")
    assert record["response"] == FIRST + SECOND
    assert record["metadata"]["answer_ending"] == "token_cap"
    assert "last whole sentence" in record["metadata"]["answer_note"]
