"""Answering strictly from retrieved context, with citations, as LCEL runnables.

`build_answer_chain` turns any retriever plus a chat model into a runnable from a
question to ``{"question", "documents", "answer", "sources"}``. The prompt numbers each
context passage with its file and page, asks for ``[n]`` citations, and tells the model to
say it does not have enough information when the context lacks the answer.

Small models cite unreliably, so ``sources`` does not depend on it: it lists the passages
the answer cites, or, when it cites none, every passage it was given; and nothing when
the model said it lacks the information.

Question and passages are data: they are filled into the prompt verbatim and never
interpreted as template syntax. A question longer than
`hyde_lc.retriever.MAX_QUERY_CHARS` is cut to that length for the prompt, as
`HyDERetriever` cuts it for retrieval (noting it in ``metadata["hyde_query_truncated"]``).

Example:
    >>> from hyde_lc import HyDERetriever, build_answer_chain, load_llm, open_store
    >>> retriever = HyDERetriever(vectorstore=open_store(),
    ...                           hypothesis_llm=load_llm(role="hypothesis"))  # doctest: +SKIP
    >>> chain = build_answer_chain(retriever, load_llm(role="answer"))  # doctest: +SKIP
    >>> chain.invoke("Who invented the Fresnel lens?")["answer"]  # doctest: +SKIP

"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.language_models import BaseLanguageModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable, RunnableLambda, RunnablePassthrough

from hyde_lc.retriever import clip_query

NOT_ENOUGH_INFORMATION = "I don't have enough information in the provided documents to answer."

ANSWER_PROMPT = ChatPromptTemplate.from_messages(
    [
        (
            "system",
            "You answer questions using only the numbered context passages provided. "
            "Do not use outside knowledge. After each sentence, cite the passage numbers it "
            "relies on in square brackets, like [2]. If the context does not contain the "
            f'answer, reply exactly: "{NOT_ENOUGH_INFORMATION}"',
        ),
        ("human", "Context:\n{context}\n\nQuestion: {question}\n\nAnswer (with [n] citations):"),
    ]
)
"""The answering prompt (variables ``context`` and ``question``)."""


def citation(doc: Document) -> str:
    """``file, p. N`` (or ``pp. N-M``) for a chunk from a hyde_lc collection."""
    meta = doc.metadata
    name = meta.get("file_name") or str(meta.get("source", "unknown source"))
    page, page_end = meta.get("page"), meta.get("page_end")
    if page is None:
        return str(name)
    if page_end and page_end != page:
        return f"{name}, pp. {page}-{page_end}"
    return f"{name}, p. {page}"


def format_context(documents: Sequence[Document]) -> str:
    """Number the passages and label each with its citation."""
    return "\n\n".join(
        f"[{i}] ({citation(doc)})\n{doc.page_content.strip()}"
        for i, doc in enumerate(documents, start=1)
    )


def is_abstention(answer: str) -> bool:
    """True when the answer says the context lacks the information."""
    return "enough information" in answer.lower()


def cited_sources(answer: str, documents: Sequence[Document]) -> list[str]:
    """``[n] file, p. N`` for the passages behind an answer (see the module docstring)."""
    if is_abstention(answer):
        return []
    numbers = [int(n) for n in re.findall(r"\[(\d+)\]", answer)]
    cited = [n for n in dict.fromkeys(numbers) if 1 <= n <= len(documents)]
    chosen = cited or list(range(1, len(documents) + 1))
    return [f"[{n}] {citation(documents[n - 1])}" for n in chosen]


def answer_from_documents(llm: BaseLanguageModel) -> Runnable[dict[str, Any], str]:
    """A runnable from ``{"question", "documents"}`` to the answer text."""
    to_prompt: Runnable[dict[str, Any], dict[str, Any]] = RunnableLambda(
        lambda inputs: {
            "question": clip_query(inputs["question"])[0],
            "context": format_context(inputs["documents"]),
        },
        name="format_context",
    )
    return (to_prompt | ANSWER_PROMPT | llm | StrOutputParser()).with_config(run_name="answer")


def build_answer_chain(
    retriever: BaseRetriever, llm: BaseLanguageModel
) -> Runnable[str, dict[str, Any]]:
    """Question -> ``{"question", "documents", "answer", "sources"}``."""
    add_sources: Runnable[dict[str, Any], dict[str, Any]] = RunnableLambda(
        lambda out: {**out, "sources": cited_sources(out["answer"], out["documents"])},
        name="cited_sources",
    )
    return (
        {"question": RunnablePassthrough(), "documents": retriever}
        | RunnablePassthrough.assign(answer=answer_from_documents(llm))
        | add_sources
    ).with_config(run_name="hyde_lc.answer_chain")
