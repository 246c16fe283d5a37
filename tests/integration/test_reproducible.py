"""Greedy local answers do not depend on what ran before, and comparisons show it.

SmolLM2 through llama.cpp: the same greedy prompt gives the same text on its first call,
on later calls (when llama.cpp could reuse the prompt it has cached) and beside another
request; two identical modes of a comparison get identical answers and scores.
"""

from __future__ import annotations

import threading

import pytest

from hyde_lc import load_llm
from hyde_lc.answer import answer_prompt
from hyde_lc.evaluation import EvaluationPipeline, compare_modes, read_questions
from tests.fakes import ROOT

pytestmark = pytest.mark.integration

SITES = [
    "The Hamburg distribution centre has 24 loading docks and employs 310 people across "
    "three shifts. It opened in 2009 and was extended in 2016 with a cold-storage wing.",
    "The Rotterdam site handles container traffic from the port. It has 18 docks, two of "
    "which are reserved for hazardous goods. Staff numbers vary by season between 150 and 220.",
    "Each distribution centre reports its throughput weekly. Hamburg moved 41,000 pallets in "
    "the last quarter, Rotterdam 37,500. The company plans a third centre in Gdansk by 2027.",
    "Safety training is mandatory for all warehouse staff. Forklift drivers renew their "
    "licence every three years. Incidents are logged in the central system within 24 hours.",
]
SAMPLE_QUESTIONS = ROOT / "hyde_lc" / "sample" / "questions.jsonl"
QUESTION = "How many loading docks does the Hamburg centre have?"
# About 560 prompt tokens: more than one 512-token batch, as an answer prompt with passages.
CONTEXT = "\n\n".join(
    f"[{i}] warehouse.pdf, p. {i}\n{text}" for i, text in enumerate(SITES * 2, start=1)
)


@pytest.fixture(scope="module")
def smol():
    return load_llm("local:smollm2-135m", role="answer", max_tokens=16)


@pytest.fixture(scope="module")
def answer_messages():
    return answer_prompt(QUESTION).format_messages(context=CONTEXT, question=QUESTION)


def test_the_same_greedy_prompt_gives_the_same_text_three_times(smol, answer_messages):
    texts = [smol.invoke(answer_messages).text for _ in range(3)]
    assert texts[0] and texts[1] == texts[0] and texts[2] == texts[0], texts


def test_a_greedy_answer_is_the_same_beside_a_sampled_request(smol, answer_messages):
    alone = smol.invoke(answer_messages).text
    writer = load_llm("local:smollm2-135m", role="hypothesis", max_tokens=64)
    assert writer._engine() is smol._engine()
    beside = threading.Thread(target=writer.invoke, args=("Write about lighthouses.",))
    beside.start()
    try:
        assert smol.invoke(answer_messages).text == alone
    finally:
        beside.join(120)


def test_two_identical_modes_get_identical_answers_and_no_difference(tmp_path, sample_store):
    def mode() -> EvaluationPipeline:
        answer_llm = load_llm("local:smollm2-135m", role="answer", max_tokens=32)
        return EvaluationPipeline.from_settings(
            store=sample_store, mode="standard", custom_answer_llm=answer_llm, k=3
        )

    (question,) = [q for q in read_questions(SAMPLE_QUESTIONS) if "Fl(3)" in q.question]
    report = compare_modes(
        [question],
        {"first": mode(), "second": mode()},
        tmp_path / "report",
        metrics=["string_similarity"],
        progress=False,
    )
    (row,) = report.per_question
    assert row["first"]["answer"] and row["first"]["answer"] == row["second"]["answer"]
    first, second = report.aggregates["first"], report.aggregates["second"]
    assert first["string_similarity"] - second["string_similarity"] == 0.0
    assert set(report.load_s["first"]) == {"retrieval", "answer"}
