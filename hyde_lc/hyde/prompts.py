"""Hypothesis prompts: the HyDE paper's task prompts, a generic default, domain prompts.

Every prompt has one variable, ``{question}``. The paper's prompts (Gao et al. 2022,
arXiv 2212.10496, Appendix) are kept word for word; `render` may append a length hint
("about N characters"). A prompt can be named (``"scifact"``, or LangChain's
``HypotheticalDocumentEmbedder`` key for it, such as ``"sci_fact"`` or ``"mr_tydi"``),
given as a template string with one variable (``{question}``, or ``{QUESTION}`` as in
LangChain's own templates), or as a LangChain ``PromptTemplate`` with one variable.

Example:
    >>> from hyde_lc.hyde.prompts import render_prompt
    >>> print(render_prompt("web_search", "how long do lighthouses last"))
    Please write a passage to answer the question.
    Question: how long do lighthouses last
    Passage:

"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from hyde_lc.errors import UnknownPromptError


@dataclass(frozen=True)
class HypothesisPrompt:
    """A named prompt template with a single ``{question}`` variable."""

    name: str
    template: str
    source: str

    def render(self, question: str, length_hint: int | None = None) -> str:
        """Fill in the question (as data: braces in it are not interpreted).

        A question in another language than English gets a line asking for the passage
        in that language (`language_line`), so that it matches documents written in it.
        """
        text = self.template.replace("{question}", question)
        hints = [line for line in (language_line(question),) if line]
        if length_hint:
            hints.append(f"Write about {length_hint} characters.")
        if hints:
            head, sep, tail = text.rpartition("\n")
            hint = " ".join(hints)
            text = f"{head}\n{hint}{sep}{tail}" if sep else f"{text}\n{hint}"
        return text


def language_line(question: str) -> str | None:
    """Return a line such as "Write the passage in Chinese." for a non-Latin question.

    Small writers otherwise often answer a Chinese question in English, and an English
    passage matches Chinese documents poorly. Latin-script questions get no line: the
    script does not say which language they are in (a short English claim full of
    gene names reads like no language at all), and writers answer them in kind.

    Example:
        >>> language_line("灯塔的透镜是谁发明的？")
        'Write the passage in Chinese.'
        >>> language_line("5'-nucleotidase metabolizes 6MP.") is None
        True

    """
    from hyde_lc.core.language import prompt_language

    language = prompt_language(question)
    return None if language is None else f"Write the passage in {language}."


def _paper(name: str, instruction: str, label: str = "Question") -> HypothesisPrompt:
    return HypothesisPrompt(name, f"{instruction}\n{label}: {{question}}\nPassage:", "HyDE paper")


PROMPTS: dict[str, HypothesisPrompt] = {
    p.name: p
    for p in (
        HypothesisPrompt(
            "generic",
            "Write a short, factual passage, in the style of a reference document, that "
            "answers the question. State the answer directly; do not mention the question "
            "or that you are writing a passage.\nQuestion: {question}\nPassage:",
            "hyde_lc default",
        ),
        _paper("web_search", "Please write a passage to answer the question."),
        _paper(
            "scifact",
            "Please write a scientific paper passage to support/refute the claim.",
            "Claim",
        ),
        HypothesisPrompt(
            "arguana",
            "Please write a counter argument for the passage.\nPassage: {question}\n"
            "Counter Argument:",
            "HyDE paper",
        ),
        _paper("trec_covid", "Please write a scientific paper passage to answer the question."),
        _paper("fiqa", "Please write a financial article passage to answer the question."),
        _paper("dbpedia_entity", "Please write a passage to answer the question."),
        _paper("trec_news", "Please write a news passage about the topic.", "Topic"),
        _paper(
            "multilingual",
            "Please write a passage in the language of the question to answer the question "
            "in detail.",
        ),
        HypothesisPrompt(
            "medical",
            "You write entries for a medical reference guide for clinicians. Write a concise, "
            "evidence-based passage that answers the question.\nQuestion: {question}\nPassage:",
            "hyde_lc domain",
        ),
        HypothesisPrompt(
            "factual",
            "Write a factual encyclopedia paragraph that answers the question with specific "
            "names, dates and numbers.\nQuestion: {question}\nPassage:",
            "hyde_lc viewpoint",
        ),
        HypothesisPrompt(
            "analytical",
            "Write an analytical paragraph that explains the causes and mechanisms behind the "
            "answer to the question.\nQuestion: {question}\nPassage:",
            "hyde_lc viewpoint",
        ),
        HypothesisPrompt(
            "comparative",
            "Write a paragraph that answers the question by comparing the alternatives, "
            "periods or methods involved.\nQuestion: {question}\nPassage:",
            "hyde_lc viewpoint",
        ),
    )
}
"""The prompt registry, by name."""

DEFAULT_PROMPT = "generic"

ALIASES: dict[str, str] = {
    "sci_fact": "scifact",
    "mr_tydi": "multilingual",
    "trec-covid": "trec_covid",
    "trec-news": "trec_news",
    "dbpedia": "dbpedia_entity",
}
"""The keys LangChain's ``HypotheticalDocumentEmbedder.from_llm(..., prompt_key=...)`` uses
for the same paper prompts, where they differ from ours."""

_OTHER_VARIABLE = re.compile(r"\{\s*(\w+)\s*\}")


class _TemplatePrompt(HypothesisPrompt):
    """A LangChain prompt template, rendered by LangChain (its one variable filled in)."""

    def __init__(self, template: Any, variable: str = "question") -> None:
        super().__init__("custom", str(getattr(template, "template", template)), "user")
        object.__setattr__(self, "_template", template)
        object.__setattr__(self, "_variable", variable)

    def render(self, question: str, length_hint: int | None = None) -> str:
        """Fill in the question with the template's own formatting."""
        text = str(self._template.format(**{self._variable: question}))  # type: ignore[attr-defined]
        return f"{text}\nWrite about {length_hint} characters." if length_hint else text


def get_prompt(prompt: Any) -> HypothesisPrompt:
    """The prompt for a name, a one-variable template or a LangChain ``PromptTemplate``.

    Names include LangChain's keys for the paper's prompts (`ALIASES`). A template's one
    variable receives the question, whatever its name: ``{question}``, or ``{QUESTION}``
    as in LangChain's ``HypotheticalDocumentEmbedder`` templates (``PROMPT_MAP``).

    Raises `UnknownPromptError` naming the valid names, or what is wrong with a template
    (more than one variable, or none).

    Example:
        >>> get_prompt("Answer this: {QUESTION}").render("why?")
        'Answer this: why?'

    """
    if hasattr(prompt, "input_variables") and hasattr(prompt, "format"):
        variables = list(prompt.input_variables)
        if len(variables) != 1:
            raise UnknownPromptError(
                f"a prompt template for hypotheses takes one variable (the question); this "
                f"one takes {variables}: leave one, e.g. {{question}}, where the question goes"
            )
        return _TemplatePrompt(prompt, variables[0])
    if not isinstance(prompt, str):
        raise UnknownPromptError(
            "a prompt is a name, a template string or a PromptTemplate, got "
            f"{type(prompt).__name__}"
        )
    name = ALIASES.get(prompt, prompt)
    if name in PROMPTS:
        return PROMPTS[name]
    if "{question}" in prompt:
        return HypothesisPrompt("custom", prompt, "user")
    others = sorted(set(_OTHER_VARIABLE.findall(prompt)))
    if len(others) == 1:  # LangChain's templates name it {QUESTION}: it takes the question
        return HypothesisPrompt("custom", _OTHER_VARIABLE.sub("{question}", prompt), "user")
    if others:
        raise UnknownPromptError(
            f"the prompt template has {', '.join('{' + o + '}' for o in others)}: a "
            "hypothesis prompt takes one variable, where the question goes, e.g. "
            "'Write a passage that answers: {question}'"
        )
    raise UnknownPromptError(
        f"unknown prompt {prompt!r}: choose one of {', '.join(PROMPTS)} (or a LangChain key: "
        f"{', '.join(ALIASES)}), or pass a template containing {{question}}"
    )


def render_prompt(name_or_template: str, question: str, length_hint: int | None = None) -> str:
    """Render a prompt (by name or template) for ``question``."""
    return get_prompt(name_or_template).render(question, length_hint)
