"""Streaming answers: tokens as the model writes them, sources at the end, no hypotheses."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGenerationChunk
from langchain_core.runnables import AddableDict
from langchain_core.vectorstores import InMemoryVectorStore
from pydantic import Field

from hyde_lc import HyDERetriever, build_answer_chain
from hyde_lc.answer import ANSWER_CHAIN_KEYS, answer_from_documents, answer_with_context
from tests.fakes import TOPICS, FakeEmbeddings, FixedHits

DOCS = [
    Document(page_content="Fresnel lenses bend light.", metadata={"file_name": "a.pdf", "page": 2}),
    Document(page_content="Keepers wound clockwork.", metadata={"file_name": "b.pdf", "page": 5}),
]
ANSWER = "Fresnel lenses bend the lamp's light into a beam [1]."
HYPOTHESIS = "A hypothetical passage about prisms that must never reach the reader."


def streaming_model(text: str) -> GenericFakeChatModel:
    """A chat model that streams ``text`` word by word."""
    return GenericFakeChatModel(messages=iter([AIMessage(text)]))


class LoggedStream(GenericFakeChatModel):
    """Streams word by word and logs each word it produces into a shared list."""

    log: list[Any] = Field(default_factory=list)

    def _stream(self, messages, stop=None, run_manager=None, **kwargs) -> Iterator[Any]:
        for chunk in super()._stream(messages, stop, run_manager, **kwargs):
            if isinstance(chunk, ChatGenerationChunk) and chunk.text:
                self.log.append(("model", chunk.text))
            yield chunk


def merged(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    total = AddableDict()
    for chunk in chunks:
        total = total + AddableDict(chunk)
    return dict(total)


def check_stream_shape(chunks: list[dict[str, Any]]) -> None:
    """question, documents, several answer pieces, then sources and the context keys."""
    keys = [next(iter(c)) for c in chunks if len(c) == 1]
    assert len(keys) == len(chunks), "every chunk carries one key"
    assert sorted(keys[:2]) == ["documents", "question"]
    answer_at = [i for i, key in enumerate(keys) if key == "answer"]
    assert len(answer_at) >= 3, "the answer arrives in several chunks"
    assert answer_at == list(range(2, 2 + len(answer_at))), "answer pieces are contiguous"
    rest = keys[answer_at[-1] + 1 :]
    assert sorted(rest) == sorted(
        [
            "sources",
            "context_documents",
            "dropped_documents",
            "context_note",
            "answer_ending",
            "answer_note",
        ]
    )


def test_the_answer_streams_before_the_sources():
    chain = build_answer_chain(FixedHits(hits=DOCS), streaming_model(ANSWER))
    chunks = list(chain.stream("How do lenses work?"))
    check_stream_shape(chunks)
    out = merged(chunks)
    assert sorted(out) == sorted(ANSWER_CHAIN_KEYS)
    assert out["answer"] == ANSWER
    assert out["sources"] == ["[1] a.pdf, p. 2"]
    assert out["documents"] == DOCS and out["context_documents"] == DOCS
    assert out["dropped_documents"] == [] and out["context_note"] is None


def test_streamed_chunks_add_up_to_the_invoke_result():
    question = "How do lenses work?"
    streamed = merged(
        list(build_answer_chain(FixedHits(hits=DOCS), streaming_model(ANSWER)).stream(question))
    )
    invoked = build_answer_chain(FixedHits(hits=DOCS), streaming_model(ANSWER)).invoke(question)
    assert streamed == invoked


def test_tokens_reach_the_consumer_while_the_model_is_still_writing():
    llm = LoggedStream(messages=iter([AIMessage(ANSWER)]))
    log = llm.log
    for chunk in build_answer_chain(FixedHits(hits=DOCS), llm).stream("How do lenses work?"):
        if chunk.get("answer"):
            log.append(("reader", chunk["answer"]))
    first_read = next(i for i, (who, _) in enumerate(log) if who == "reader")
    last_written = max(i for i, (who, _) in enumerate(log) if who == "model")
    assert first_read < last_written, log


async def test_the_answer_streams_asynchronously_too():
    chain = build_answer_chain(FixedHits(hits=DOCS), streaming_model(ANSWER))
    chunks = [chunk async for chunk in chain.astream("How do lenses work?")]
    check_stream_shape(chunks)
    assert merged(chunks)["answer"] == ANSWER


def test_reasoning_never_reaches_the_stream():
    llm = streaming_model("<think>The user asks about lenses, passage one says</think> " + ANSWER)
    chunks = list(build_answer_chain(FixedHits(hits=DOCS), llm).stream("How do lenses work?"))
    pieces = [c["answer"] for c in chunks if "answer" in c]
    assert not any("think" in p or "user asks" in p for p in pieces)
    assert "".join(pieces) == ANSWER and len([p for p in pieces if p]) >= 3


def test_an_abstention_streams_and_cites_nothing():
    llm = streaming_model("I don't have enough information in the provided documents to answer.")
    chunks = list(build_answer_chain(FixedHits(hits=DOCS), llm).stream("Who built the Pharos?"))
    assert merged(chunks)["sources"] == []
    assert len([c for c in chunks if c.get("answer")]) >= 3


def test_answer_from_documents_streams_text():
    chunks = list(
        answer_from_documents(streaming_model(ANSWER)).stream({"question": "Q?", "documents": DOCS})
    )
    assert all(isinstance(c, str) for c in chunks)
    assert "".join(chunks) == ANSWER and len(chunks) >= 3


def test_answer_with_context_streams_the_answer_then_its_context():
    chain = answer_with_context(streaming_model(ANSWER), context_window=1200)
    many = [
        Document(page_content="lens " * 150, metadata={"file_name": f"{i}.pdf"}) for i in range(4)
    ]
    chunks = list(chain.stream({"question": "Q?", "documents": many}))
    keys = [next(iter(c)) for c in chunks]
    assert (
        keys[: keys.count("answer")] == ["answer"] * keys.count("answer")
        and keys.count("answer") >= 3
    )
    out = merged(chunks)
    assert (
        out["answer"] == ANSWER and out["dropped_documents"] and "left out" in out["context_note"]
    )


# -- astream_events: the hypothesis is not the answer ------------------------------------


def hyde_chain() -> Any:
    embeddings = FakeEmbeddings(size=32)
    store = InMemoryVectorStore.from_texts(TOPICS, embeddings)
    retriever = HyDERetriever(
        vectorstore=store, hypothesis_llm=streaming_model(HYPOTHESIS), k=2, lexical="off"
    )
    return build_answer_chain(retriever, streaming_model(ANSWER))


async def chat_tokens(chain: Any, **event_filters: Any) -> tuple[str, list[list[str]]]:
    """What an astream_events consumer printing chat model tokens prints, and the runs it saw."""
    printed, runs = "", []
    async for event in chain.astream_events("How do lenses work?", version="v2", **event_filters):
        if event["event"] == "on_chat_model_stream":
            printed += event["data"]["chunk"].content
        elif event["event"] == "on_chat_model_end":
            runs.append(event["tags"])
    return printed, runs


async def test_the_documented_recipe_prints_only_the_answer():
    printed, runs = await chat_tokens(hyde_chain(), exclude_tags=["hyde.hypothesis"])
    assert printed == ANSWER
    assert len(runs) == 1 and "hyde.hypothesis" not in runs[0]


async def test_a_naive_consumer_does_not_print_the_hypothesis():
    """Hypotheses are generated without streaming: only their end event is seen, tagged."""
    printed, runs = await chat_tokens(hyde_chain())
    assert printed == ANSWER
    assert [("hyde.hypothesis" in tags) for tags in runs] == [True, False]


@pytest.mark.parametrize("recipe", [True, False], ids=["recipe", "naive"])
async def test_the_chain_output_stream_carries_no_hypothesis(recipe):
    filters = {"exclude_tags": ["hyde.hypothesis"]} if recipe else {}
    answer = ""
    async for event in hyde_chain().astream_events("How do lenses work?", version="v2", **filters):
        if event["event"] == "on_chain_stream" and event["name"] == "hyde_lc.answer_chain":
            answer += event["data"]["chunk"].get("answer", "")
    assert answer == ANSWER
