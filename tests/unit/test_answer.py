from langchain_core.documents import Document
from langchain_core.language_models import FakeListChatModel
from langchain_core.retrievers import BaseRetriever
from pydantic import Field

from hyde_lc.answer import (
    NOT_ENOUGH_INFORMATION,
    answer_from_documents,
    answer_with_context,
    build_answer_chain,
    citation,
    cited_sources,
    fit_context,
    format_context,
)
from hyde_lc.models.local_llm import ContextWindowError, estimate_tokens

DOCS = [
    Document(
        "Fresnel lenses bend light.", metadata={"file_name": "a.pdf", "page": 2, "page_end": 2}
    ),
    Document("Keepers wound clocks.", metadata={"file_name": "a.pdf", "page": 3, "page_end": 4}),
    Document("Plain text note.", metadata={"source": "/x/notes.txt"}),
]


class ListRetriever(BaseRetriever):
    docs: list[Document]

    def _get_relevant_documents(self, query, *, run_manager):
        return self.docs


def test_citations_name_file_and_pages():
    assert [citation(d) for d in DOCS] == ["a.pdf, p. 2", "a.pdf, pp. 3-4", "/x/notes.txt"]


def test_context_numbers_and_labels_each_passage():
    text = format_context(DOCS[:2])
    assert text.startswith("[1] (a.pdf, p. 2)\nFresnel lenses bend light.")
    assert "\n\n[2] (a.pdf, pp. 3-4)\nKeepers wound clocks." in text


def test_sources_follow_the_answers_citations():
    assert cited_sources("Lenses bend light [1]. Also [2][1].", DOCS) == [
        "[1] a.pdf, p. 2",
        "[2] a.pdf, pp. 3-4",
    ]
    assert cited_sources("Out of range [7] only.", DOCS) == [
        "[1] a.pdf, p. 2",
        "[2] a.pdf, pp. 3-4",
        "[3] /x/notes.txt",
    ]  # falls back to all


def test_no_sources_when_the_model_abstains():
    assert cited_sources(NOT_ENOUGH_INFORMATION, DOCS) == []


def test_chain_returns_answer_documents_and_sources():
    llm = FakeListChatModel(responses=["They bend light [1]."])
    out = build_answer_chain(ListRetriever(docs=DOCS), llm).invoke("What do lenses do?")
    assert out == {
        "question": "What do lenses do?",
        "documents": DOCS,
        "answer": "They bend light [1].",
        "sources": ["[1] a.pdf, p. 2"],
        "context_documents": DOCS,
        "dropped_documents": [],
        "context_note": None,
        "answer_ending": None,
        "answer_note": None,
    }


def test_prompt_carries_the_context_and_question():
    seen = []

    class Spy(FakeListChatModel):
        def _call(self, messages, stop=None, run_manager=None, **kwargs):
            seen.append(messages)
            return super()._call(messages, stop, run_manager, **kwargs)

    build_answer_chain(ListRetriever(docs=DOCS[:1]), Spy(responses=["ok"])).invoke("Q?")
    system, human = seen[0]
    assert (
        "only the numbered context" in system.content and NOT_ENOUGH_INFORMATION in system.content
    )
    assert "[1] (a.pdf, p. 2)\nFresnel lenses bend light." in human.content
    assert "Question: Q?" in human.content


def _long_docs(n: int, chars: int) -> list[Document]:
    words = "The keeper climbed the tower at dusk to light the lamp above the rocks. "
    return [
        Document((f"Passage {i}. " + words * (chars // len(words) + 1))[:chars],
                 metadata={"file_name": "log.pdf", "page": i})
        for i in range(1, n + 1)
    ]  # fmt: skip


class Windowed(FakeListChatModel):
    """A fake chat model that says its window is small, and remembers its prompts."""

    max_tokens: int = 200
    seen: list = Field(default_factory=list)

    def _call(self, messages, stop=None, run_manager=None, **kwargs):
        self.seen.append(messages)
        return super()._call(messages, stop, run_manager, **kwargs)


def _windowed(window: int, **kwargs) -> Windowed:
    return Windowed(responses=["The keeper lit the lamp [1]."], metadata={"context_window": window},
                    seen=[], **kwargs)  # fmt: skip


def test_the_lowest_ranked_passages_are_left_out_to_fit_the_window():
    docs = _long_docs(6, 3000)
    llm = _windowed(3000)
    out = build_answer_chain(ListRetriever(docs=docs), llm).invoke("When was the lamp lit?")
    kept, dropped = out["context_documents"], out["dropped_documents"]
    assert kept == docs[: len(kept)] and dropped == docs[len(kept) :]  # a prefix, in rank order
    assert 1 <= len(kept) < 6 and out["documents"] == docs
    assert f"{len(dropped)} of 6 passages left out" in out["context_note"]
    assert "[6] log.pdf, p. 6" in out["context_note"] and "3,000-token" in out["context_note"]
    prompt = "".join(m.content for m in llm.seen[0])
    assert estimate_tokens(prompt) + llm.max_tokens <= 3000
    assert f"Passage {len(kept)}." in prompt and f"Passage {len(kept) + 1}." not in prompt
    assert out["sources"] == ["[1] log.pdf, p. 1"]


def test_a_top_passage_too_long_for_the_window_is_cut_to_fit():
    docs = _long_docs(2, 20000)
    llm = _windowed(2048)
    fit = fit_context(docs, llm, question="When was the lamp lit?")
    assert len(fit.documents) == 1 and fit.dropped == docs[1:]
    top = fit.documents[0]
    assert top.metadata["context_trimmed_from"] == 20000 and len(top.page_content) < 20000
    assert "passage [1] cut from 20,000 to" in fit.note and "1 of 2 passages left out" in fit.note
    answer_from_documents(llm).invoke({"question": "When?", "documents": docs})
    prompt = "".join(m.content for m in llm.seen[0])
    assert estimate_tokens(prompt) + llm.max_tokens <= 2048


def test_everything_fits_without_a_note_and_unknown_windows_are_not_budgeted():
    fit = fit_context(DOCS, _windowed(4096), question="Q?")
    assert fit.documents == DOCS and fit.note is None and fit.budget is not None
    unknown = fit_context(_long_docs(9, 9000), FakeListChatModel(responses=["x"]), question="Q")
    assert len(unknown.documents) == 9 and unknown.note is None and unknown.window is None


def test_a_window_with_no_room_for_any_passage_says_what_to_do():
    try:
        fit_context(DOCS, _windowed(300), question="Why? " * 200)
    except ContextWindowError as exc:
        assert "HYDE_LC_N_CTX" in str(exc) and "300-token" in str(exc)
    else:
        raise AssertionError("expected ContextWindowError")


def test_answer_with_context_reports_what_the_model_saw():
    docs = _long_docs(4, 4000)
    out = answer_with_context(_windowed(2500)).invoke({"question": "Q?", "documents": docs})
    assert out["answer"] == "The keeper lit the lamp [1]."
    assert out["context_documents"] + out["dropped_documents"] == docs
    assert out["context_note"].startswith("context: ")


REASONING = "<think>The user asks about lenses. Passage [1] says they bend light.</think>\n\n"


def test_reasoning_is_removed_from_answers():
    llm = FakeListChatModel(responses=[REASONING + "They bend light [1]."])
    out = build_answer_chain(ListRetriever(docs=DOCS), llm).invoke("What do lenses do?")
    assert out["answer"] == "They bend light [1]." and out["sources"] == ["[1] a.pdf, p. 2"]


def test_reasoning_is_removed_from_streamed_answers():
    from langchain_core.language_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    llm = GenericFakeChatModel(messages=iter([AIMessage(REASONING + "They bend light [1].")]))
    chunks = list(answer_from_documents(llm).stream({"question": "Q?", "documents": DOCS}))
    assert "".join(chunks) == "They bend light [1]." and len(chunks) > 1


def test_an_answer_that_is_all_reasoning_is_empty():
    llm = FakeListChatModel(responses=["<think>Passage [1] might say something about"])
    out = build_answer_chain(ListRetriever(docs=DOCS), llm).invoke("Q?")
    assert out["answer"] == ""
