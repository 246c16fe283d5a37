from langchain_core.documents import Document
from langchain_core.language_models import FakeListChatModel
from langchain_core.retrievers import BaseRetriever

from hyde_lc.answer import (
    NOT_ENOUGH_INFORMATION,
    build_answer_chain,
    citation,
    cited_sources,
    format_context,
)

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
