"""Answering strictly from retrieved context, with citations, as LCEL runnables.

`build_answer_chain` turns any retriever plus a chat model into a runnable from a
question to ``{"question", "documents", "answer", "sources", "context_documents",
"dropped_documents", "context_note"}``. The prompt numbers each context passage with its
file and page, asks for ``[n]`` citations, and tells the model to say it does not have
enough information when the context lacks the answer.

A question written in a non-Latin script (Chinese, Japanese, Russian, ...) gets a prompt
that asks for the answer in the question's language (`answer_prompt`), and whose fixed
"not enough information" reply is that language's (`hyde_lc.core.language.not_enough_information`;
the English sentence where none is defined). A reply is recognised as that sentence in
any of these languages (`is_abstention`).

The context is budgeted in tokens for the answer model's window: the window, less the
answer's ``max_tokens`` and the prompt around the passages, is what the passages may
take. When they do not fit, the lowest-ranked passages are left out first; if even the
top one does not fit, it is cut to fit. `fit_context` says what was left out in a note
(``context_note`` in the chain's output), so an answer is never silently based on less
than was retrieved. Local models count tokens with their own tokenizer and know their
window (`hyde_lc.models.local_llm.LocalChatModel.context_size`); for a remote model the window
is ``llm.metadata["context_window"]`` (``load_llm(..., context_size=N)``) or the
``context_window`` argument, else unlimited, and tokens are estimated conservatively.

An answer ends well without changing how it is sampled (`hyde_lc.core.sentences`): when
the model begins to repeat a sentence it has already written, the answer stops before
it (a local model stops generating there; another model's output is cut as it arrives),
and when the model reaches its token cap mid-sentence, the answer ends at its last
whole sentence (an answer with no sentence end is kept as written). ``answer_ending``
and ``answer_note`` in the output say when either happened (`AnswerEnding`). The answer
streams as it is written, except a sentence that begins like an earlier one (held until
it differs) and, in the last quarter of the token budget, a sentence at a time, so that
nothing shown is taken back. ``guard=False`` turns this off.

Small models cite unreliably, so ``sources`` does not depend on it: it lists the passages
the answer cites, or, when it cites none, every passage it was given; and nothing when
the model said it lacks the information. Reasoning a "thinking" model writes before its
answer (``<think>...</think>``) is removed (`hyde_lc.core.reasoning`).

Question and passages are data: they are filled into the prompt verbatim and never
interpreted as template syntax. A question longer than
`hyde_lc.hyde.transform.MAX_QUERY_CHARS` is cut to that length for the prompt, as
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
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.documents import Document
from langchain_core.language_models import BaseLanguageModel
from langchain_core.messages import BaseMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import (
    Runnable,
    RunnableGenerator,
    RunnableLambda,
    RunnableParallel,
    RunnablePassthrough,
    RunnablePick,
)

from hyde_lc.core.language import (
    not_enough_information,
    prompt_language,
    says_not_enough_information,
)
from hyde_lc.core.reasoning import (
    astrip_reasoning_stream,
    strip_reasoning,
    strip_reasoning_stream,
)
from hyde_lc.core.sentences import AnswerGuard, AnswerStop, repeats_a_sentence
from hyde_lc.hyde.transform import clip_query
from hyde_lc.models.loading import CONTEXT_WINDOW_KEY
from hyde_lc.models.local_llm import ContextWindowError, LocalChatModel, estimate_tokens

NOT_ENOUGH_INFORMATION = "I don't have enough information in the provided documents to answer."

_SYSTEM = (
    "You answer questions using only the numbered context passages provided. "
    "Do not use outside knowledge. After each sentence, cite the passage numbers it "
    "relies on in square brackets, like [2]. If the context does not contain the "
    'answer, reply exactly: "{refusal}"'
)
_HUMAN = "Context:\n{context}\n\nQuestion: {question}\n\nAnswer (with [n] citations):"


def _prompt(system: str) -> ChatPromptTemplate:
    # The system text is fixed (no variables): braces in it must not become variables.
    escaped = system.replace("{", "{{").replace("}", "}}")
    return ChatPromptTemplate.from_messages([("system", escaped), ("human", _HUMAN)])


ANSWER_PROMPT = _prompt(_SYSTEM.format(refusal=NOT_ENOUGH_INFORMATION))
"""The answering prompt for Latin-script questions (variables ``context`` and ``question``)."""


def refusal_sentence(question: str) -> str:
    """The fixed "not enough information" reply for ``question``, in its language.

    Example:
        >>> refusal_sentence("灯塔的透镜是谁发明的？")
        '提供的文档中没有足够的信息来回答这个问题。'
        >>> refusal_sentence("Who invented the lens?") == NOT_ENOUGH_INFORMATION
        True

    """
    return _refusal(prompt_language(question))


def _refusal(language: str | None) -> str:
    """The refusal sentence in ``language`` (None, or one without a translation: English)."""
    if language is None:
        return NOT_ENOUGH_INFORMATION
    return not_enough_information(language) or NOT_ENOUGH_INFORMATION


def answer_prompt(question: str) -> ChatPromptTemplate:
    """The answering prompt for ``question`` (variables ``context`` and ``question``).

    Latin-script questions get `ANSWER_PROMPT`. A question in another script gets one
    that asks for the answer in its language (`hyde_lc.core.language.question_language`) and
    gives the "not enough information" reply in that language (`refusal_sentence`).

    Example:
        >>> messages = answer_prompt("灯塔的透镜是谁发明的？").format_messages(
        ...     context="[1] ...", question="灯塔的透镜是谁发明的？")
        >>> "Answer in Chinese" in messages[0].content
        True

    """
    language = prompt_language(question)
    if language is None:
        return ANSWER_PROMPT
    system = _SYSTEM.format(refusal=_refusal(language)) + (
        f" Answer in {language}, whatever the language of the passages."
    )
    return _prompt(system)


DEFAULT_ANSWER_TOKENS = 512
"""Tokens kept free for the answer when the model sets no ``max_tokens``."""
_SPARE_TOKENS = 16  # tokenisation at passage boundaries, template differences
_MIN_PASSAGE_TOKENS = 32  # below this, a trimmed top passage is not worth sending


def page_span(metadata: dict[str, Any]) -> tuple[str, str] | None:
    """The first and last page of a chunk as a reader finds them (None: no page).

    Pages are stored as LangChain's ``PyPDFLoader`` stores them: ``page`` counts from 0,
    ``page_label`` is the number printed on the page (``"1"``, ``"iv"``); hyde_lc's chunks
    add ``page_end``/``page_label_end`` for a chunk that runs onto later pages. The label
    is shown. A chunk without a label was ingested by hyde_lc before labels were recorded,
    when ``page`` counted from 1: its ``page``/``page_end`` are shown as stored.
    (`hyde_lc.ingest.documents.ingest_documents` gives Documents from loaders that record
    no label one from their 0-based ``page``.)

    Example:
        >>> page_span({"page": 0, "page_label": "i"})
        ('i', 'i')
        >>> page_span({"page": 2, "page_end": 3, "page_label": "3", "page_label_end": "4"})
        ('3', '4')
        >>> page_span({"page": 2, "page_end": 3})  # ingested before labels: from 1
        ('2', '3')

    """
    if metadata.get("page_label") is not None:
        first = str(metadata["page_label"])
        return first, str(metadata.get("page_label_end") or first)
    page = metadata.get("page")
    if page is None:
        return None
    return str(page), str(metadata.get("page_end") or page)


def citation(doc: Document) -> str:
    """``file, p. N`` (or ``pp. N-M``), N as printed on the page (`page_span`)."""
    meta = doc.metadata
    name = meta.get("file_name") or str(meta.get("source", "unknown source"))
    span = page_span(meta)
    if span is None:
        return str(name)
    first, last = span
    if last != first:
        return f"{name}, pp. {first}-{last}"
    return f"{name}, p. {first}"


def _passage(number: int, doc: Document) -> str:
    return f"[{number}] ({citation(doc)})\n{doc.page_content.strip()}"


def format_context(documents: Sequence[Document]) -> str:
    """Number the passages and label each with its citation."""
    return "\n\n".join(_passage(i, doc) for i, doc in enumerate(documents, start=1))


def is_abstention(answer: str) -> bool:
    """True when the answer says the context lacks the information, in any language.

    Example:
        >>> is_abstention(NOT_ENOUGH_INFORMATION), is_abstention("提供的文档中没有足够的信息。")
        (True, True)

    """
    return says_not_enough_information(answer)


def cited_sources(answer: str, documents: Sequence[Document]) -> list[str]:
    """``[n] file, p. N`` for the passages behind an answer (see the module docstring)."""
    if is_abstention(answer):
        return []
    numbers = [int(n) for n in re.findall(r"\[(\d+)\]", answer)]
    cited = [n for n in dict.fromkeys(numbers) if 1 <= n <= len(documents)]
    chosen = cited or list(range(1, len(documents) + 1))
    return [f"[{n}] {citation(documents[n - 1])}" for n in chosen]


# -- fitting the context to the answer model's window ---------------------------------


@dataclass
class ContextFit:
    """The passages an answer model is given, after fitting them to its window."""

    documents: list[Document]
    """The passages kept, in rank order (a prefix of the retrieved ones, so ``[n]``
    numbers match); the top one carries ``metadata["context_trimmed_from"]`` if cut."""
    dropped: list[Document] = field(default_factory=list)
    """The lowest-ranked passages left out."""
    note: str | None = None
    """What was left out or cut, and why; None when everything fits."""
    window: int | None = None
    """The answer model's context window in tokens (None: unknown, nothing budgeted)."""
    budget: int | None = None
    """Tokens the passages could take."""


def model_context_window(llm: BaseLanguageModel[Any]) -> int | None:
    """The answer model's context window in tokens, or None when unknown."""
    if isinstance(llm, LocalChatModel):
        return llm.context_size
    window = (getattr(llm, "metadata", None) or {}).get(CONTEXT_WINDOW_KEY)
    return int(window) if isinstance(window, int | float) and window > 0 else None


def _counters(
    llm: BaseLanguageModel[Any],
) -> tuple[Callable[[str], int], Callable[[list[BaseMessage]], int]]:
    """Token counters for text and for a whole prompt (exact for local models)."""
    if isinstance(llm, LocalChatModel):
        return llm.get_num_tokens, llm.get_num_tokens_from_messages
    # Remote tokenizers (tiktoken, Hugging Face) may need a download: estimate instead.
    return estimate_tokens, lambda messages: sum(estimate_tokens(m.text) + 8 for m in messages)


def _trim(doc: Document, number: int, budget: int, count: Callable[[str], int]) -> Document:
    """``doc`` cut (at a word boundary) so that its passage takes at most ``budget``."""
    text = doc.page_content.strip()
    size = len(text)
    for _ in range(8):
        tokens = count(_passage(number, doc.model_copy(update={"page_content": text[:size]})))
        if tokens <= budget:
            break
        size = int(size * min(0.95, budget / tokens))
    cut = text[:size]
    if size < len(text) and " " in cut:
        cut = cut[: cut.rfind(" ")]
    meta = {**doc.metadata, "context_trimmed_from": len(text)}
    return doc.model_copy(update={"page_content": cut, "metadata": meta})


def fit_context(
    documents: Sequence[Document],
    llm: BaseLanguageModel[Any],
    *,
    question: str,
    context_window: int | None = None,
    answer_tokens: int | None = None,
) -> ContextFit:
    """Keep the highest-ranked passages that fit the answer model's window.

    ``context_window`` overrides the model's own window (`model_context_window`);
    ``answer_tokens`` the room kept for the answer (the model's ``max_tokens``). Raises
    `hyde_lc.models.local_llm.ContextWindowError` only when the question alone leaves no room
    for any passage.
    """
    docs = list(documents)
    window = context_window or model_context_window(llm)
    if window is None or not docs:
        return ContextFit(docs, window=window)
    count_text, count_prompt = _counters(llm)
    question = clip_query(question)[0]
    reserve = answer_tokens or getattr(llm, "max_tokens", None) or DEFAULT_ANSWER_TOKENS
    prompt = answer_prompt(question)
    overhead = count_prompt(prompt.format_messages(context="", question=question))
    budget = window - int(reserve) - overhead - _SPARE_TOKENS
    if budget < _MIN_PASSAGE_TOKENS:
        raise ContextWindowError(
            f"the question and the answer's {reserve} tokens leave no room for any passage in "
            f"the answer model's {window}-token context window: ask a shorter question, lower "
            "the answer's max_tokens, or raise the window (HYDE_LC_N_CTX=8192 for local "
            "models, load_llm(..., context_size=N))"
        )
    kept: list[Document] = []
    used = 0
    for number, doc in enumerate(docs, start=1):
        tokens = count_text(_passage(number, doc)) + (2 if kept else 0)
        if used + tokens > budget:
            break
        kept.append(doc)
        used += tokens
    notes = []
    if not kept:
        top = _trim(docs[0], 1, budget, count_text)
        kept = [top]
        notes.append(
            f"passage [1] cut from {top.metadata['context_trimmed_from']:,} to "
            f"{len(top.page_content):,} characters"
        )
    dropped = docs[len(kept) :]
    if dropped:
        first = len(kept) + 1
        names = "; ".join(f"[{n}] {citation(d)}" for n, d in enumerate(dropped, start=first))
        notes.append(f"{len(dropped)} of {len(docs)} passages left out ({names})")
    note = None
    if notes:
        note = (
            f"context: {' and '.join(notes)} to fit the answer model's {window:,}-token "
            f"window ({budget:,} tokens for passages)"
        )
    return ContextFit(kept, dropped, note, window, budget)


# -- ending the answer at a whole sentence --------------------------------------------

_CAP_REASONS = frozenset({"length", "max_tokens", "MAX_TOKENS"})


def reached_token_cap(metadata: dict[str, Any]) -> bool:
    """Whether a chat model's ``response_metadata`` says it stopped at its token cap.

    llama.cpp and OpenAI-compatible models say ``finish_reason: "length"``, Anthropic's
    ``stop_reason: "max_tokens"``, Ollama's ``done_reason: "length"``, Gemini's
    ``finish_reason: "MAX_TOKENS"``.

    Example:
        >>> reached_token_cap({"finish_reason": "length"}), reached_token_cap({})
        (True, False)

    """
    return (
        metadata.get("finish_reason") in _CAP_REASONS
        or metadata.get("stop_reason") == "max_tokens"
        or metadata.get("done_reason") == "length"
    )


@dataclass
class AnswerEnding:
    """How an answer ended, when the chain ended it (see the module docstring).

    Example:
        >>> AnswerEnding().reason is None  # the model ended by itself
        True

    """

    reason: AnswerStop | None = None
    """``"repeated_sentence"`` (stopped where the model began to repeat a sentence it had
    written), ``"token_cap"`` (the model reached its token cap), or None (the model ended
    by itself)."""
    note: str | None = None
    """What was left out of the model's text, and why; None when the model ended by itself."""


def _answer_cap(llm: BaseLanguageModel[Any]) -> int | None:
    """The answer model's token cap (``max_tokens``), when it has one."""
    cap = getattr(llm, "max_tokens", None)
    return cap if isinstance(cap, int) and cap > 0 else None


def _begins_to_repeat(written: str) -> bool:
    """Whether a local model's answer so far repeats a whole sentence (it stops there)."""
    return repeats_a_sentence(strip_reasoning(written)) is not None


def _note(guard: AnswerGuard, cap: int | None) -> str | None:
    ending = guard.ending
    left_out = len(ending.removed.strip())
    at_cap = f"the model reached its {cap}-token cap" if cap else "the model reached its token cap"
    if ending.reason == "repeated_sentence":
        return "answer: stopped where the model began to repeat a sentence it had already written"
    if ending.reason != "token_cap":
        return None
    if ending.mid_sentence and not left_out:
        return f"answer: {at_cap} before any sentence ended; kept as written"
    if ending.mid_sentence:
        return (
            f"answer: {at_cap} in a sentence already shown; it ends there "
            f"({left_out:,} characters left out)"
        )
    if left_out:
        return (
            f"answer: {at_cap} mid-sentence; the answer ends at its last whole sentence "
            f"({left_out:,} characters left out)"
        )
    return f"answer: {at_cap} at the end of a sentence; it may have had more to say"


class _Guarded:
    """One answer through its `AnswerGuard`: the text of the model's chunks, then what is shown."""

    def __init__(self, ending: AnswerEnding, cap: int | None) -> None:
        self.ending = ending
        self.cap = cap
        self.guard = AnswerGuard(cap)
        self.capped = False
        self.shown = False

    def text(self, chunk: Any) -> str:
        if isinstance(chunk, BaseMessage):
            self.capped = self.capped or reached_token_cap(chunk.response_metadata)
            return chunk.text
        return str(chunk)

    def show(self, piece: str) -> str:
        out = self.guard.feed(piece)
        self.shown = self.shown or bool(out)
        return out

    def last(self) -> list[str]:
        """What is left to show once the model has stopped; fills in the ending."""
        rest = self.guard.finish(capped=self.capped)
        self.ending.reason = self.guard.ending.reason
        self.ending.note = _note(self.guard, self.cap)
        return [rest] if rest or not self.shown else []  # an empty answer is still an answer

    def texts(self, chunks: Iterator[Any]) -> Iterator[str]:
        for chunk in chunks:
            yield self.text(chunk)

    async def atexts(self, chunks: AsyncIterator[Any]) -> AsyncIterator[str]:
        async for chunk in chunks:
            yield self.text(chunk)

    def run(self, chunks: Iterator[Any]) -> Iterator[str]:
        for piece in strip_reasoning_stream(self.texts(chunks)):
            if out := self.show(piece):
                yield out
        yield from self.last()

    async def arun(self, chunks: AsyncIterator[Any]) -> AsyncIterator[str]:
        async for piece in astrip_reasoning_stream(self.atexts(chunks)):
            if out := self.show(piece):
                yield out
        for out in self.last():
            yield out


def _guarded(ending: AnswerEnding, cap: int | None) -> Runnable[Any, str]:
    """The model's output to the answer's text, ended well (a fresh guard per answer)."""

    def run(chunks: Iterator[Any]) -> Iterator[str]:
        yield from _Guarded(ending, cap).run(chunks)

    async def arun(chunks: AsyncIterator[Any]) -> AsyncIterator[str]:
        async for piece in _Guarded(ending, cap).arun(chunks):
            yield piece

    return RunnableGenerator(run, arun, name="answer_guard")


# -- the chains -----------------------------------------------------------------------
#
# The chains are LCEL steps that stream: ``RunnablePassthrough.assign`` passes its input
# keys on as they arrive and adds its own key when that is computed, and ``pick`` drops
# the working keys; so the answer's tokens flow out while the sources, which need the
# whole answer, follow at the end. (A final ``RunnableLambda`` would collect everything
# first and emit one chunk.)

ANSWER_CHAIN_KEYS = (
    "question",
    "documents",
    "answer",
    "sources",
    "context_documents",
    "dropped_documents",
    "context_note",
    "answer_ending",
    "answer_note",
)
"""The keys of `build_answer_chain`'s output, in the order they stream."""

_CONTEXT_KEYS = (
    "answer",
    "context_documents",
    "dropped_documents",
    "context_note",
    "answer_ending",
    "answer_note",
)


def _fit(llm: BaseLanguageModel[Any], window: int | None) -> Runnable[dict[str, Any], ContextFit]:
    def fit(inputs: dict[str, Any]) -> ContextFit:
        return fit_context(
            inputs["documents"], llm, question=inputs["question"], context_window=window
        )

    return RunnableLambda(fit, name="fit_context")


def _generate(llm: BaseLanguageModel[Any], guard: bool) -> Runnable[dict[str, Any], str]:
    """From ``{"question", "fit", "ending"}`` to the answer's text, streamed, reasoning removed.

    With ``guard`` the answer ends well (see the module docstring), and ``ending`` says how.
    """
    to_prompt: Runnable[dict[str, Any], dict[str, Any]] = RunnableLambda(
        lambda inputs: {
            "question": clip_query(inputs["question"])[0],
            "context": format_context(inputs["fit"].documents),
            "ending": inputs["ending"],
        },
        name="format_context",
    )
    # A runnable returned by a lambda is run on the lambda's input: the prompt for the
    # question's language, filled with the question and context, the model, its output.
    if not guard:
        prompt: Runnable[dict[str, Any], Any] = RunnableLambda(
            lambda inputs: answer_prompt(inputs["question"]), name="answer_prompt"
        )
        strip = RunnableGenerator(
            strip_reasoning_stream, astrip_reasoning_stream, name="strip_reasoning"
        )
        return to_prompt | prompt | llm | StrOutputParser() | strip
    cap = _answer_cap(llm)
    # A local model stops where the answer begins to repeat itself, saving the rest of
    # its generation; any other model's output is cut there when it arrives.
    model = llm.bind(stop_when=_begins_to_repeat) if isinstance(llm, LocalChatModel) else llm

    def written(inputs: dict[str, Any]) -> Runnable[dict[str, Any], str]:
        return answer_prompt(inputs["question"]) | model | _guarded(inputs["ending"], cap)

    return to_prompt | RunnableLambda(written, name="answer_prompt")


def _prepared(
    llm: BaseLanguageModel[Any], window: int | None
) -> Runnable[dict[str, Any], dict[str, Any]]:
    """``{"question", "documents"}`` plus ``fit`` (the passages given) and a fresh ``ending``."""
    return RunnablePassthrough.assign(
        fit=_fit(llm, window),
        ending=RunnableLambda(lambda _: AnswerEnding(), name="answer_ending"),
    )


def _answered(
    llm: BaseLanguageModel[Any], window: int | None, guard: bool
) -> Runnable[dict[str, Any], dict[str, Any]]:
    """``{"question", "documents"}`` plus ``fit`` and ``ending``, then the streamed ``answer``."""
    return _prepared(llm, window) | RunnablePassthrough.assign(answer=_generate(llm, guard))


def _context_report() -> dict[str, Runnable[dict[str, Any], Any]]:
    """The keys `answer_with_context` adds once the answer is complete."""
    return {
        "context_documents": RunnableLambda(lambda out: out["fit"].documents),
        "dropped_documents": RunnableLambda(lambda out: out["fit"].dropped),
        "context_note": RunnableLambda(lambda out: out["fit"].note),
        "answer_ending": RunnableLambda(lambda out: out["ending"].reason),
        "answer_note": RunnableLambda(lambda out: out["ending"].note),
    }


def answer_from_documents(
    llm: BaseLanguageModel[Any], *, context_window: int | None = None, guard: bool = True
) -> Runnable[dict[str, Any], str]:
    """A runnable from ``{"question", "documents"}`` to the answer text.

    The documents are fitted to the model's window first (`fit_context`); use
    `answer_with_context` to also get what was left out and how the answer ended.
    ``stream`` yields the answer's text as the model writes it (reasoning removed; with
    ``guard``, ended at a repeated sentence or at the last whole sentence before the
    token cap: see the module docstring).
    """
    chain = _prepared(llm, context_window) | _generate(llm, guard)
    return chain.with_config(run_name="answer")


def answer_with_context(
    llm: BaseLanguageModel[Any], *, context_window: int | None = None, guard: bool = True
) -> Runnable[dict[str, Any], dict[str, Any]]:
    """A runnable from ``{"question", "documents"}`` to the answer and its context.

    Returns ``{"answer", "context_documents", "dropped_documents", "context_note",
    "answer_ending", "answer_note"}`` (see `fit_context` and `AnswerEnding`). ``stream``
    yields ``{"answer": text}`` chunks as the model writes, then the other keys.
    ``guard=False`` leaves the model's text as it was written.
    """
    chain = (
        _answered(llm, context_window, guard)
        | RunnablePassthrough.assign(**_context_report())
        | RunnablePick(list(_CONTEXT_KEYS))
    )
    return chain.with_config(run_name="answer")


def build_answer_chain(
    retriever: BaseRetriever,
    llm: BaseLanguageModel[Any],
    *,
    context_window: int | None = None,
    guard: bool = True,
) -> Runnable[str, dict[str, Any]]:
    r"""A runnable from a question to the retrieved passages, the answer and its sources.

    Returns ``{"question", "documents", "answer", "sources", "context_documents",
    "dropped_documents", "context_note", "answer_ending", "answer_note"}``:
    ``documents`` are the retrieved passages, ``context_documents`` those the answer
    model was given (see `fit_context`), which ``sources`` refers to; ``answer_ending``
    and ``answer_note`` say whether the answer was stopped at a repeated sentence or
    ended at its last whole sentence at the model's token cap (`AnswerEnding`; both None
    when the model ended by itself). ``guard=False`` leaves the model's text as written.

    ``stream``/``astream`` yield dict chunks as they come: ``{"question"}``, then
    ``{"documents"}`` when retrieval is done, then one ``{"answer": text}`` per piece of
    the answer as the model writes it (reasoning removed; a sentence at a time near the
    token cap), then ``{"sources"}`` and the other keys once the answer is complete.
    Adding the chunks up gives ``invoke``'s result.

    Example:
        >>> for chunk in chain.stream("Who invented the Fresnel lens?"):  # doctest: +SKIP
        ...     print(chunk.get("answer", ""), end="", flush=True)
        ...     if "sources" in chunk:
        ...         print("\nSources:", *chunk["sources"], sep="\n  ")

    """
    sources: Runnable[dict[str, Any], list[str]] = RunnableLambda(
        lambda out: cited_sources(out["answer"], out["fit"].documents), name="cited_sources"
    )
    chain = (
        RunnableParallel(question=RunnablePassthrough(), documents=retriever)
        | _answered(llm, context_window, guard)
        | RunnablePassthrough.assign(sources=sources, **_context_report())
        | RunnablePick(list(ANSWER_CHAIN_KEYS))
    )
    return chain.with_config(run_name="hyde_lc.answer_chain")
