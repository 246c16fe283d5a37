"""HyDEEmbeddings: HyDE as a LangChain Embeddings, with hyde_lc's prompts, fusion and fallbacks."""

from __future__ import annotations

import logging
from operator import itemgetter

import numpy as np
import pytest
from langchain_classic.chains.hyde.prompts import PROMPT_MAP
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.prompts import PromptTemplate
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_openai import ChatOpenAI

from hyde_lc.errors import HydeLcError, InvalidQueryError, InvalidSettingError
from hyde_lc.hyde.embeddings import HyDEEmbeddings
from hyde_lc.hyde.prompts import PROMPTS
from hyde_lc.models.endpoint_errors import ModelConfigurationError
from hyde_lc.retrievers.hyde import DEFAULT_QUERY_WEIGHT
from hyde_lc.store.vectorstore import open_store
from tests.fakes import TOPICS, FakeEmbeddings, PromptLog, ScriptedChat, status_server

QUESTION = "How do lighthouse lenses focus light?"
PASSAGE = "Concentric prisms bend the lamp's light into one horizontal beam."


@pytest.fixture
def base() -> FakeEmbeddings:
    return FakeEmbeddings(size=32)


def weighted(vectors: list[list[float]], weights: list[float]) -> np.ndarray:
    return np.average(np.asarray(vectors), axis=0, weights=weights)


def test_query_vector_is_the_weighted_mean_of_query_and_hypothesis(base):
    embeddings = HyDEEmbeddings.from_llm(ScriptedChat(replies=[PASSAGE]), base)
    details = embeddings.embed_query_with_details(QUESTION)
    expected = weighted(
        [base.embed_query(QUESTION), base.embed_documents([PASSAGE])[0]],
        [DEFAULT_QUERY_WEIGHT, 1 - DEFAULT_QUERY_WEIGHT],
    )
    assert details.hypotheses == [PASSAGE] and details.fallback is None
    np.testing.assert_allclose(details.vector, expected)
    np.testing.assert_allclose(embeddings.embed_query(QUESTION), expected)
    assert not np.allclose(details.vector, base.embed_query(QUESTION))


def test_n_hypotheses_with_the_papers_equal_weights(base):
    replies = ["First passage.", "Second passage.", "Third passage."]
    llm = ScriptedChat(replies=replies)
    embeddings = HyDEEmbeddings.from_llm(llm, base, n_hypotheses=3, query_weight=None)
    vector = embeddings.embed_query(QUESTION)
    assert len(llm.log) == 3
    expected = np.mean([base.embed_query(QUESTION), *base.embed_documents(replies)], axis=0)
    np.testing.assert_allclose(vector, expected)


def test_hypotheses_only_when_the_query_is_left_out(base):
    embeddings = HyDEEmbeddings.from_llm(ScriptedChat(replies=[PASSAGE]), base, include_query=False)
    np.testing.assert_allclose(embeddings.embed_query(QUESTION), base.embed_documents([PASSAGE])[0])


def test_documents_are_embedded_by_the_base_model_without_any_llm_call(base):
    llm = ScriptedChat()
    embeddings = HyDEEmbeddings.from_llm(llm, base)
    assert embeddings.embed_documents(TOPICS[:3]) == base.embed_documents(TOPICS[:3])
    assert llm.log == []


@pytest.mark.parametrize(
    ("given", "name"),
    [("sci_fact", "scifact"), ("mr_tydi", "multilingual"), ("web_search", "web_search")],
)
def test_prompts_by_name_and_by_langchain_key(base, given, name):
    llm = PromptLog(responses=[PASSAGE])
    HyDEEmbeddings.from_llm(llm, base, prompt=given).embed_query(QUESTION)
    assert llm.seen == [PROMPTS[name].render(QUESTION)]


def test_langchain_from_llm_keywords_are_accepted(base):
    llm = PromptLog(responses=[PASSAGE, PASSAGE])
    HyDEEmbeddings.from_llm(llm, base, prompt_key="sci_fact").embed_query(QUESTION)
    custom = PromptTemplate.from_template("Write a lighthouse manual passage about {question}")
    HyDEEmbeddings.from_llm(llm, base, custom_prompt=custom).embed_query(QUESTION)
    assert llm.seen == [
        PROMPTS["scifact"].render(QUESTION),
        f"Write a lighthouse manual passage about {QUESTION}",
    ]


@pytest.mark.parametrize("key", sorted(PROMPT_MAP))
def test_langchains_own_templates_are_used_as_they_are(base, key):
    """LangChain's ``PROMPT_MAP`` templates name their variable QUESTION, Claim, PASSAGE, ...:
    a drop-in fills whichever one there is with the question."""
    llm = PromptLog(responses=[PASSAGE])
    embeddings = HyDEEmbeddings.from_llm(llm, base, custom_prompt=PROMPT_MAP[key])
    details = embeddings.embed_query_with_details(QUESTION)
    (variable,) = PROMPT_MAP[key].input_variables
    assert llm.seen == [PROMPT_MAP[key].format(**{variable: QUESTION})]
    assert details.hypotheses == [PASSAGE] and details.fallback is None


def test_a_template_string_with_one_other_variable_takes_the_question(base):
    llm = PromptLog(responses=[PASSAGE])
    template = "Please write a passage to answer the question\nQuestion: {QUESTION}\nPassage:"
    HyDEEmbeddings.from_llm(llm, base, prompt=template).embed_query(QUESTION)
    assert llm.seen == [template.replace("{QUESTION}", QUESTION)]


@pytest.mark.parametrize(
    "prompt",
    [
        "Answer {QUESTION} using {context}",
        PromptTemplate.from_template("Answer {QUESTION} using {context}"),
    ],
    ids=["template", "PromptTemplate"],
)
def test_a_template_with_two_variables_is_refused_saying_one_is_taken(base, prompt):
    with pytest.raises(HydeLcError, match="one variable"):
        HyDEEmbeddings.from_llm(ScriptedChat(), base, prompt=prompt)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"n_hypotheses": 0}, "n_hypotheses must be between 1"),
        ({"query_weight": 1.0}, "query_weight must lie strictly between 0 and 1"),
        ({"timeout": 0}, "timeout must be a positive"),
        ({"prompt": "no_such_prompt"}, "unknown prompt 'no_such_prompt'"),
        ({"prompt": "web_search", "prompt_key": "scifact"}, "give the prompt once"),
    ],
)
def test_invalid_settings_are_refused_saying_what_to_do(base, settings, message):
    with pytest.raises(InvalidSettingError, match=message):
        HyDEEmbeddings.from_llm(ScriptedChat(), base, **settings)


def test_a_failing_llm_falls_back_to_the_query_embedding(base, caplog):
    embeddings = HyDEEmbeddings.from_llm(ScriptedChat(error=True), base)
    with caplog.at_level(logging.WARNING, logger="hyde_lc.hyde.hypotheses"):
        details = embeddings.embed_query_with_details(QUESTION)
    assert details.vector == base.embed_query(QUESTION)
    assert details.hypotheses == [] and "model exploded" in details.fallback
    assert "fell back to the plain query" in caplog.text


def test_a_refusal_is_not_averaged_in(base):
    llm = ScriptedChat(replies=["I'm sorry, I cannot help with that."])
    details = HyDEEmbeddings.from_llm(llm, base).embed_query_with_details(QUESTION)
    assert details.vector == base.embed_query(QUESTION)
    assert details.fallback == "empty or refusal"


def test_a_slow_llm_times_out_to_the_query_embedding(base):
    embeddings = HyDEEmbeddings.from_llm(ScriptedChat(delay=30), base, timeout=0.2)
    details = embeddings.embed_query_with_details(QUESTION)
    assert details.vector == base.embed_query(QUESTION)
    assert details.fallback == "timeout after 0.2s"


def test_a_rejected_api_key_raises_instead_of_silently_dropping_hyde(base):
    with status_server(401, "invalid api key") as url:
        llm = ChatOpenAI(model="gpt-test", base_url=url, api_key="sk-wrong", max_retries=0)
        with pytest.raises(ModelConfigurationError, match="401"):
            HyDEEmbeddings.from_llm(llm, base).embed_query(QUESTION)
        tolerant = HyDEEmbeddings.from_llm(llm, base, config_errors="fallback")
        assert tolerant.embed_query(QUESTION) == base.embed_query(QUESTION)


def test_an_empty_query_is_refused(base):
    with pytest.raises(InvalidQueryError, match="empty"):
        HyDEEmbeddings.from_llm(ScriptedChat(), base).embed_query("  ")


async def test_async_query_vector_matches_the_sync_one(base):
    embeddings = HyDEEmbeddings.from_llm(ScriptedChat(replies=[PASSAGE]), base)
    vector = await embeddings.aembed_query(QUESTION)
    np.testing.assert_allclose(vector, embeddings.embed_query(QUESTION))
    assert await embeddings.aembed_documents(["a b"]) == base.embed_documents(["a b"])


async def test_async_fallback(base):
    embeddings = HyDEEmbeddings.from_llm(ScriptedChat(error=True), base)
    details = await embeddings.aembed_query_with_details(QUESTION)
    assert details.vector == base.embed_query(QUESTION) and details.fallback


def test_any_vector_store_searches_with_it(base):
    """The writer's passage moves the search: a passage about bees finds the bee topic."""
    llm = ScriptedChat(replies=[TOPICS[4]])
    embeddings = HyDEEmbeddings.from_llm(llm, base, include_query=False)
    store = InMemoryVectorStore.from_texts(TOPICS, embeddings)
    hits = store.similarity_search("something unrelated to any topic", k=1)
    assert [d.page_content for d in hits] == [TOPICS[4]]
    assert len(llm.log) == 1  # one passage per search, none for the documents


def test_a_hyde_lc_collection_built_with_the_base_model_is_searched_with_it(store, base, tmp_path):
    embeddings = HyDEEmbeddings.from_llm(ScriptedChat(replies=[TOPICS[0]]), base)
    reopened = open_store(tmp_path / "store", embeddings=embeddings)
    hits = reopened.similarity_search("How do lighthouse lenses work?", k=2)
    assert len(hits) == 2


async def test_hypothesis_tokens_are_not_streamed_to_event_consumers(base):
    """A naive astream_events consumer sees the hypothesis run, but none of its tokens."""
    writer = GenericFakeChatModel(messages=iter([AIMessage(PASSAGE)]))
    store = InMemoryVectorStore.from_texts(TOPICS, HyDEEmbeddings.from_llm(writer, base))
    chain = itemgetter("question") | store.as_retriever(search_kwargs={"k": 1})
    tokens, hypothesis_runs = [], []
    async for event in chain.astream_events({"question": QUESTION}, version="v2"):
        if event["event"] == "on_chat_model_stream":
            tokens.append(event["data"]["chunk"].content)
        if event["event"] == "on_chat_model_end":
            hypothesis_runs.append(event["tags"])
    assert hypothesis_runs and all("hyde.hypothesis" in tags for tags in hypothesis_runs)
    assert tokens == []
