import pytest

from hyde_lc.errors import HydeLcError
from hyde_lc.hyde.prompts import PROMPTS, get_prompt, render_prompt


def test_paper_prompts_are_verbatim():
    assert render_prompt("scifact", "X") == (
        "Please write a scientific paper passage to support/refute the claim.\nClaim: X\nPassage:"
    )
    assert render_prompt("web_search", "Y") == (
        "Please write a passage to answer the question.\nQuestion: Y\nPassage:"
    )
    assert render_prompt("trec_news", "Z").startswith(
        "Please write a news passage about the topic."
    )


def test_registry_covers_the_paper_tasks_and_domains():
    for name in (
        "web_search",
        "scifact",
        "arguana",
        "trec_covid",
        "fiqa",
        "dbpedia_entity",
        "trec_news",
        "multilingual",
        "generic",
        "medical",
    ):
        assert name in PROMPTS
        assert PROMPTS[name].template.count("{question}") == 1


def test_question_is_data_not_a_format_string():
    text = render_prompt("generic", "what is {x} in {question}?")
    assert "what is {x} in {question}?" in text


def test_length_hint_goes_before_the_passage_cue():
    text = render_prompt("web_search", "Q", length_hint=400)
    assert text.endswith("Write about 400 characters.\nPassage:")


def test_custom_template_and_unknown_name():
    assert get_prompt("Answer: {question}").render("q") == "Answer: q"
    with pytest.raises(HydeLcError, match="scifact"):
        get_prompt("no-such-prompt")
