r"""The writer's side of a test set: prompts, replies read, and one chunk's question checked.

`write_question` asks a writer LLM for a question on a chunk and a short answer
(`write_prompt`, in Chinese for a Chinese chunk), reads the reply (`parse_draft`), holds
the draft to `hyde_lc.evaluation.question_checks` (once rewritten in other words when it
copies its chunk or leans on it, `rewrite_prompt`), and, given the collection's search,
counts the other chunks that answer it as well. `hyde_lc.evaluation.testset` keeps or drops
the `Draft`.

A question written with its chunk in view shares the chunk's words, which favours BM25.
So every draft is put in everyday words by a rephraser (`default_rephraser`: the answer
model in force, the local 1.5B by default) that sees the question alone, never the chunk
(`rephrase_prompt`), before the checks: the question then reads like one asked by someone
who has not read the document. Small writers repeat a question they are asked to rewrite
while the passage is in front of them; shown the question alone, the 1.5B model rephrases
it. Without a rephraser, the writer is asked once to rewrite a draft that copies.

Example:
    >>> from langchain_core.language_models import FakeListChatModel
    >>> chunk = Document("Robert Stevenson completed the Bell Rock lighthouse in 1810.", id="c")
    >>> reply = "Question: Which engineer finished the reef light?\nAnswer: Robert Stevenson"
    >>> writer = FakeListChatModel(responses=[reply])
    >>> write_question(chunk, writer, QuestionRules(), search=None).problem is None
    True

"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from langchain_core.documents import Document
from langchain_core.language_models.chat_models import BaseChatModel

from hyde_lc.core.language import dominant_script
from hyde_lc.core.reasoning import strip_reasoning
from hyde_lc.evaluation.question_checks import (
    QuestionRules,
    Verdict,
    judge_draft,
    other_answers,
)

MAX_CHUNK_CHARS = 1500
"""The writer reads at most this much of a chunk (small local writers slow down on more)."""
SPECIFICITY_DEPTH = 10
"""Hits of the question's own search examined for other chunks that answer it."""
WRITER_MAX_TOKENS = 96
"""Tokens the writer may spend on a question and its answer."""
REPHRASER_MAX_TOKENS = 64
"""Tokens the rephraser may spend on its one question."""

SearchFn = Callable[[str, int], list[Document]]
"""``search(question, k)``: the collection's dense hits for a question, best first."""


WRITE_PROMPT = """Passage:
{chunk}

Write one question that this passage answers, as someone who has not read the passage \
would ask it. Rules:
- name the subject, so that the question makes sense on its own (never "this study" or \
"the passage");
- use your own words: do not copy phrases from the passage;
- ask about one specific fact stated in the passage.
Then give the answer in a few words taken from the passage.{language}

Reply in exactly two lines:
Question: ...
Answer: ..."""

WRITE_PROMPT_ZH = """段落：
{chunk}

请写一个这段文字能够回答的问题，像没读过这段文字的读者那样提问。要求：
- 写明主题，使问题单独成立（不要说"这段文字""文中"）；
- 用自己的话，不要照抄原文的句子；
- 只问原文写明的一个具体事实。
然后用原文中的几个词给出答案。

严格按两行回复：
问题：……
答案：……"""

REWRITE_PROMPT = """Passage:
{chunk}

This question about the passage {problem}:
{question}

Rewrite the question in other words: name its subject so that it makes sense on its own, \
and do not copy phrases from the passage. Keep its meaning.{language}

Reply in one line:
Question: ..."""

REWRITE_PROMPT_ZH = """段落：
{chunk}

下面这个关于该段落的问题{problem}：
{question}

请换一种说法重写这个问题：写明主题，使问题单独成立，不要照抄原文的句子，意思不变。

严格按一行回复：
问题：……"""

REPHRASE_PROMPT = """Ask the same thing as this question, the way a curious reader would ask \
it in everyday words, in one short question. Do not reuse its long phrases.{language}

Question: {question}
Reader's question:"""

REPHRASE_PROMPT_ZH = """用日常的话，像一个好奇的读者那样，换一种说法问同一件事。\
只写一个简短的问题，不要沿用原问题里的长短语。

原问题：{question}
读者的问题："""

_PROBLEMS = {
    "copies": ("copies words from the passage", "照抄了原文的词句"),
    "refers to the passage": ("only makes sense next to the passage", "离开原文就看不懂"),
}
_REPHRASE_LABEL = re.compile(
    r"^\W*(reader'?s question|读者的问题|新的问法)\s*[:：]\s*", re.IGNORECASE
)
_LINE = re.compile(
    r"^\W*(question|answer|q|a|问题|答案|回答)\s*\W*\s*[:：]\s*(.+)$", re.IGNORECASE | re.MULTILINE
)


def _is_chinese(text: str) -> bool:
    return dominant_script(text) == "cjk"


def _language_note(text: str, of: str = "passage") -> str:
    """Ask for ``text``'s language (``of``: what the model reads) unless it is Latin script."""
    script = dominant_script(text)
    return "" if script in ("latin", "unknown") else f"\nWrite in the language of the {of}."


def write_prompt(chunk: str) -> str:
    """The writer's prompt for one chunk (Chinese for a Chinese chunk)."""
    text = chunk[:MAX_CHUNK_CHARS]
    if _is_chinese(text):
        return WRITE_PROMPT_ZH.format(chunk=text)
    return WRITE_PROMPT.format(chunk=text, language=_language_note(text))


def rewrite_prompt(chunk: str, question: str, problem: str) -> str:
    """The prompt asking for ``question`` in other words, saying what was wrong."""
    text = chunk[:MAX_CHUNK_CHARS]
    english, chinese = _PROBLEMS[problem]
    if _is_chinese(text):
        return REWRITE_PROMPT_ZH.format(chunk=text, question=question, problem=chinese)
    return REWRITE_PROMPT.format(
        chunk=text, question=question, problem=english, language=_language_note(text)
    )


def rephrase_prompt(question: str) -> str:
    """The rephraser's prompt: ``question`` alone, to be asked again in everyday words."""
    if _is_chinese(question):
        return REPHRASE_PROMPT_ZH.format(question=question)
    return REPHRASE_PROMPT.format(question=question, language=_language_note(question, "question"))


def parse_rephrase(reply: str) -> str | None:
    """The question of a rephraser's reply (its first line, any label taken off).

    Example:
        >>> parse_rephrase("Reader's question: Why can ships see the light so far?")
        'Why can ships see the light so far?'

    """
    for line in strip_reasoning(reply).splitlines():
        text = _REPHRASE_LABEL.sub("", line.strip()).strip("*\"'` ").strip()
        if text:
            return parse_rewrite(text) or text
    return None


def parse_draft(reply: str) -> tuple[str | None, str | None]:
    r"""The question and answer of a writer's reply (None where a line is missing).

    Example:
        >>> parse_draft("**Question:** Who lit the lamp?\nAnswer: The keeper.")
        ('Who lit the lamp?', 'The keeper.')
        >>> parse_draft("问题：谁点亮了灯？\n答案：守塔人")
        ('谁点亮了灯？', '守塔人')

    """
    question = answer = None
    for match in _LINE.finditer(strip_reasoning(reply)):
        label, value = match.group(1).lower(), match.group(2).strip().strip("*\"'` ").strip()
        if not value:
            continue
        if label in ("question", "q", "问题") and question is None:
            question = value
        elif label in ("answer", "a", "答案", "回答") and answer is None:
            answer = value
    return question, answer


def parse_rewrite(reply: str) -> str | None:
    """The question of a rewrite: its ``Question:`` line, else a reply of one line.

    Example:
        >>> parse_rewrite("Who finished the reef light?"), parse_rewrite("Question: Who?")
        ('Who finished the reef light?', 'Who?')

    """
    question, _ = parse_draft(reply)
    if question is not None:
        return question
    lines = [line.strip() for line in strip_reasoning(reply).splitlines() if line.strip()]
    return lines[0].strip("*\"'` ") if len(lines) == 1 else None


def default_writer(spec: str | None = None) -> BaseChatModel:
    """The writer: ``spec``, else the hypothesis writer in force, greedy (reproducible)."""
    from hyde_lc.models.loading import load_llm, resolve_llm_spec

    return load_llm(
        resolve_llm_spec(spec, "hypothesis"), role="answer", max_tokens=WRITER_MAX_TOKENS
    )


def default_rephraser(spec: str | None = None) -> BaseChatModel:
    """The rephraser: ``spec``, else the answer model in force, greedy, one short question."""
    from hyde_lc.models.loading import load_llm, resolve_llm_spec

    return load_llm(
        resolve_llm_spec(spec, "answer"), role="answer", max_tokens=REPHRASER_MAX_TOKENS
    )


@dataclass
class Draft:
    """One chunk's question as written, rewritten and checked, with its cost."""

    chunk: Document
    question: str | None = None
    answer: str | None = None
    first_draft: str | None = None
    verdict: Verdict | None = None
    problem: str | None = None
    others: list[str] = field(default_factory=list)
    calls: int = 0
    seconds: float = 0.0


def _ask(writer: BaseChatModel, prompt: str, draft: Draft) -> str:
    started = time.perf_counter()
    reply = writer.invoke(prompt).content
    draft.calls += 1
    draft.seconds += time.perf_counter() - started
    return reply if isinstance(reply, str) else str(reply)


def write_question(
    chunk: Document,
    writer: BaseChatModel,
    rules: QuestionRules,
    search: SearchFn | None,
    rephraser: BaseChatModel | None = None,
) -> Draft:
    """Draft a question on ``chunk``, put it in other words, and check it.

    Without a ``rephraser`` the writer rewrites a draft that copies its chunk or leans on
    it, once, with the chunk in view. With one, every draft is rephrased from the
    question alone (module docstring), and a rephrasing that still copies is dropped.
    """
    draft = Draft(chunk)
    draft.question, draft.answer = parse_draft(
        _ask(writer, write_prompt(chunk.page_content), draft)
    )
    if draft.question is None or draft.answer is None:
        draft.problem = "unparsed"
        return draft
    if rephraser is not None:
        draft.first_draft = draft.question
        rephrased = parse_rephrase(_ask(rephraser, rephrase_prompt(draft.question), draft))
        if rephrased is None:
            draft.problem = "unparsed"
            return draft
        draft.question = rephrased
    started = time.perf_counter()
    verdict = judge_draft(draft.question, draft.answer, chunk.page_content, rules)
    draft.seconds += time.perf_counter() - started
    if verdict.needs_rewrite and rephraser is None:
        assert verdict.problem is not None
        draft.first_draft = draft.question
        prompt = rewrite_prompt(chunk.page_content, draft.question, verdict.problem)
        rewritten = parse_rewrite(_ask(writer, prompt, draft))
        if rewritten is None:
            draft.problem = verdict.problem
            draft.verdict = verdict
            return draft
        draft.question = rewritten
        verdict = judge_draft(rewritten, draft.answer, chunk.page_content, rules)
    draft.verdict, draft.problem = verdict, verdict.problem
    if draft.problem is None and search is not None:
        started = time.perf_counter()
        ranked = search(draft.question, SPECIFICITY_DEPTH)
        draft.others = other_answers(str(chunk.id), draft.answer, ranked, rules.min_answer_support)
        draft.seconds += time.perf_counter() - started
        if len(draft.others) > rules.max_other_answers:
            draft.problem = "not specific"
    return draft
