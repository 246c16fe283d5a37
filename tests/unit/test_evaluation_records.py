"""query_for_evaluation / EvaluationPipeline: the record, per-stage usage and cost."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.callbacks import UsageMetadataCallbackHandler
from langchain_core.language_models import BaseChatModel, FakeListChatModel
from langchain_core.messages import AIMessage, get_buffer_string
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

from hyde_lc.answer import ANSWER_PROMPT, format_context
from hyde_lc.errors import HydeLcError
from hyde_lc.evaluation.pricing import PricingTable
from hyde_lc.evaluation.records import (
    RAGAS_KEYS,
    EvaluationPipeline,
    aquery_for_evaluation,
    process_hyde_query,
    query_for_evaluation,
)
from hyde_lc.evaluation.usage import UsageRecorder, summarise
from tests.unit.test_retriever import ScriptedChat, store  # noqa: F401  (fixture)

LEGACY_KEYS = {"question", "answer", "contexts", "ground_truth", "ground_truths"}


class WordCountChat(BaseChatModel):
    """Reports usage as word counts of the prompt and the reply, so stages differ."""

    model_name: str = "word-counter"
    replies: dict[str, str] = Field(default_factory=dict)
    prompts: list[str] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "word-count"

    def _generate(self, messages, stop=None, run_manager=None, **kwargs: Any) -> ChatResult:
        prompt = get_buffer_string(messages)
        self.prompts.append(prompt)
        reply = next((r for key, r in self.replies.items() if key in prompt), "A passage.")
        usage = {
            "input_tokens": len(prompt.split()),
            "output_tokens": len(reply.split()),
            "total_tokens": len(prompt.split()) + len(reply.split()),
        }
        message = AIMessage(
            content=reply, usage_metadata=usage, response_metadata={"model_name": self.model_name}
        )
        return ChatResult(generations=[ChatGeneration(message=message)])


def _words(text: str) -> int:
    return len(text.split())


def test_record_has_every_ragas_and_metadata_key_and_no_legacy_names(store):  # noqa: F811
    llm = ScriptedChat(replies=["Lenses bend light into beams with prisms. [1]"])
    record = query_for_evaluation(
        "How do lighthouse lenses work?",
        store=store,
        custom_hyde_llm=llm,
        custom_answer_llm=llm,
        k=2,
        reference="With concentric prisms.",
        reference_contexts=["Lighthouse lenses bend light into a beam with concentric prisms."],
    )
    assert set(record) == {
        "user_input", "response", "retrieved_contexts", "retrieved_context_ids",
        "reference", "reference_contexts", "metadata",
    }  # fmt: skip
    assert not LEGACY_KEYS & set(record)
    assert len(record["retrieved_contexts"]) == len(record["retrieved_context_ids"]) == 2
    assert all(isinstance(c, str) and c for c in record["retrieved_contexts"])
    meta = record["metadata"]
    for key in (
        "execution_time", "hypothesis_time", "retrieval_time", "answer_time", "input_tokens",
        "output_tokens", "total_cost", "hyde_cost", "answer_cost", "embedding_cost",
        "embedding_tokens", "stages", "retrieval_method", "llm_hyde_model", "llm_answer_model",
        "hyde_provider", "answer_provider", "hyde_model_id", "answer_model_id",
        "embedding_model", "hypothetical_documents", "hypothetical_document", "usage_source",
        "cost_source", "fallback",
    ):  # fmt: skip
        assert key in meta, key
    assert meta["retrieval_method"] == "hyde"
    assert meta["hypothetical_document"] == "Lenses bend light into beams with prisms. [1]"
    assert meta["execution_time"] >= meta["hypothesis_time"] + meta["answer_time"]
    assert set(meta["stages"]) == {"hypothesis", "embedding", "answer"}
    # ScriptedChat reports 5 in / 7 out per call: one hypothesis call, one answer call.
    assert (meta["input_tokens"], meta["output_tokens"]) == (10, 14)
    assert meta["usage_source"] == "reported by the model"


def test_same_model_in_both_stages_is_still_split_per_stage(store):  # noqa: F811
    llm = WordCountChat(
        replies={"Passage:": "Lenses bend light with prisms.", "Context:": "Prisms, per [1]."}
    )
    handler = UsageMetadataCallbackHandler()
    record = query_for_evaluation(
        "How do lighthouse lenses work?",
        store=store,
        custom_hyde_llm=llm,
        custom_answer_llm=llm,
        k=2,
        callbacks=[handler],
    )
    stages = record["metadata"]["stages"]
    hyde_prompt, answer_prompt = llm.prompts
    assert stages["hypothesis"]["input_tokens"] == _words(hyde_prompt)
    assert stages["hypothesis"]["output_tokens"] == _words("Lenses bend light with prisms.")
    assert stages["answer"]["input_tokens"] == _words(answer_prompt)
    assert stages["answer"]["output_tokens"] == _words("Prisms, per [1].")
    assert stages["hypothesis"]["input_tokens"] != stages["answer"]["input_tokens"]
    # LangChain's handler, by contrast, has one entry for the shared model name.
    assert list(handler.usage_metadata) == ["word-counter"]
    assert (
        handler.usage_metadata["word-counter"]["input_tokens"] == record["metadata"]["input_tokens"]
    )


def test_answer_prompt_tokens_cover_the_retrieved_context(store):  # noqa: F811
    llm = WordCountChat()
    record = query_for_evaluation(
        "Why did keepers go?", store=store, mode="standard", custom_answer_llm=llm, k=3
    )
    (answer_prompt,) = llm.prompts
    for context in record["retrieved_contexts"]:
        assert context in answer_prompt
    assert ANSWER_PROMPT.format_messages(context=format_context([]), question="q")  # sanity
    assert record["metadata"]["stages"]["answer"]["input_tokens"] == _words(answer_prompt)


def test_standard_mode_has_no_hypothesis_stage(store):  # noqa: F811
    record = query_for_evaluation(
        "Why did keepers go?", store=store, mode="standard", custom_answer_llm=ScriptedChat()
    )
    meta = record["metadata"]
    assert meta["retrieval_method"] == "standard"
    assert meta["stages"]["hypothesis"]["calls"] == 0
    assert meta["hyde_cost"] == 0.0
    assert meta["llm_hyde_model"] is None and meta["hyde_provider"] is None
    assert meta["hypothetical_documents"] == [] and meta["hypothetical_document"] is None
    assert meta["stages"]["embedding"]["input_tokens"] > 0  # the query was embedded


def test_unknown_model_costs_none_never_a_made_up_number(store):  # noqa: F811
    record = query_for_evaluation(
        "Why did keepers go?", store=store, custom_hyde_llm=ScriptedChat(),
        custom_answer_llm=ScriptedChat(),
    )  # fmt: skip
    meta = record["metadata"]
    assert meta["hyde_cost"] is None and meta["answer_cost"] is None
    assert meta["total_cost"] is None
    assert meta["stages"]["answer"]["cost_source"] == "unknown"


def test_priced_openai_stage_uses_the_dated_table():
    recorder = UsageRecorder()
    llm = WordCountChat(model_name="gpt-4o-mini-2024-07-18")
    _ = llm.invoke("one two three four", config={"callbacks": [recorder]})
    table = PricingTable.load()
    usage = summarise("answer", recorder, provider="openai", model="gpt-4o-mini", pricing=table)
    price = table.price("gpt-4o-mini")
    assert price is not None
    expected = (
        _words(llm.prompts[0]) * price.input_per_million + 2 * price.output_per_million
    ) / 1e6
    assert usage.cost == pytest.approx(expected)
    assert usage.cost_source == f"pricing table (as of {table.as_of})"
    assert usage.model_id == "gpt-4o-mini-2024-07-18"  # the id the response named


def test_models_that_report_nothing_are_estimated_with_a_tokenizer(store):  # noqa: F811
    record = query_for_evaluation(
        "Why did keepers go?",
        store=store,
        custom_hyde_llm=FakeListChatModel(responses=["Keepers left when lights were automated."]),
        custom_answer_llm=FakeListChatModel(responses=["Automation [1]."]),
    )
    meta = record["metadata"]
    for stage in ("hypothesis", "answer"):
        assert meta["stages"][stage]["usage_source"] == "estimated (o200k_base tokenizer)"
        assert meta["stages"][stage]["input_tokens"] > 0
    # "Automation [1]." is 4-6 tokens in o200k_base, not a word count.
    assert 3 <= meta["stages"]["answer"]["output_tokens"] <= 6


def test_streaming_and_async_give_the_same_record(store):  # noqa: F811
    import asyncio

    def pipeline(stream: bool) -> EvaluationPipeline:
        llm = WordCountChat(replies={"Passage:": "Prisms bend light.", "Context:": "Prisms [1]."})
        return EvaluationPipeline(
            store=store, custom_hyde_llm=llm, custom_answer_llm=llm, stream=stream, k=2
        )

    plain = pipeline(False).run("How do lenses work?")
    streamed = pipeline(True).run("How do lenses work?")
    awaited = asyncio.run(pipeline(True).arun("How do lenses work?"))
    for other in (streamed, awaited):
        assert other["response"] == plain["response"] == "Prisms [1]."
        assert other["retrieved_context_ids"] == plain["retrieved_context_ids"]
        for stage in ("hypothesis", "answer"):
            assert other["metadata"]["stages"][stage] == plain["metadata"]["stages"][stage]


async def test_aquery_for_evaluation(store):  # noqa: F811
    record = await aquery_for_evaluation(
        "Why did keepers go?", store=store, custom_hyde_llm=ScriptedChat(),
        custom_answer_llm=ScriptedChat(), retrieval_only=True,
    )  # fmt: skip
    assert record["response"] is None
    assert record["metadata"]["stages"]["answer"]["calls"] == 0
    assert record["metadata"]["stages"]["hypothesis"]["calls"] == 1


def test_neighbour_expansion_is_named_and_timed(store):  # noqa: F811
    record = query_for_evaluation(
        "Why did keepers go?", store=store, custom_hyde_llm=ScriptedChat(),
        custom_answer_llm=ScriptedChat(), window=1, k=2,
    )  # fmt: skip
    meta = record["metadata"]
    assert meta["retrieval_method"] == "hyde+window=1"
    assert "expansion_s" in meta["timings"]
    assert meta["stages"]["hypothesis"]["calls"] == 1  # later rounds reuse the hypothesis
    assert all(":" in cid for cid in record["retrieved_context_ids"])


def test_fallback_is_recorded(store):  # noqa: F811
    record = query_for_evaluation(
        "Why did keepers go?", store=store, custom_hyde_llm=ScriptedChat(error=True),
        retrieval_only=True,
    )  # fmt: skip
    assert record["metadata"]["fallback"]
    assert record["retrieved_contexts"]


def test_variants_are_named(store):  # noqa: F811
    llm = ScriptedChat()
    for options, name in [
        ({"fusion": "rrf"}, "hyde:rrf"),
        ({"include_query": False}, "hyde:mean-hypotheses-only"),
        ({"n_hypotheses": 4}, "hyde(n=4)"),
        ({"n_hypotheses": 4, "query_weight": 0.7}, "hyde(w=0.7)(n=4)"),
        ({"fusion": "rrf", "query_weight": 0.6}, "hyde:rrf(w=0.6)"),
    ]:
        pipeline = EvaluationPipeline(
            store=store, custom_hyde_llm=llm, retrieval_only=True, **options
        )
        assert pipeline.retrieval_method == name


def test_bad_options_are_clear_errors(store):  # noqa: F811
    with pytest.raises(HydeLcError, match="unknown mode"):
        EvaluationPipeline(store=store, mode="dense", retrieval_only=True)  # type: ignore[arg-type]
    with pytest.raises(HydeLcError, match="unknown fusion"):
        EvaluationPipeline(
            store=store, custom_hyde_llm=ScriptedChat(), fusion="max", retrieval_only=True
        )  # type: ignore[arg-type]
    with pytest.raises(HydeLcError, match="question is empty"):
        EvaluationPipeline(store=store, mode="standard", retrieval_only=True).run("  ")


def test_process_hyde_query_shape(store):  # noqa: F811
    llm = WordCountChat(replies={"Passage:": "Prisms bend light.", "Context:": "Prisms [1]."})
    out = process_hyde_query(
        "How do lenses work?", custom_hyde_llm=llm, custom_answer_llm=llm, store=store
    )
    assert out["answer"] == "Prisms [1]."
    assert out["hypothetical_document"] == "Prisms bend light."
    assert out["contexts"] and all(isinstance(c, str) for c in out["contexts"])
    for key in ("hyde_metrics", "answer_metrics"):
        metrics = out[key]
        assert {"input_tokens", "output_tokens", "cost", "usage_source", "cost_source"} <= set(
            metrics
        )
    assert out["total_input_tokens"] == (
        out["hyde_metrics"]["input_tokens"] + out["answer_metrics"]["input_tokens"]
    )


def test_ragas_keys_constant_matches_the_record(store):  # noqa: F811
    record = query_for_evaluation(
        "q?", store=store, mode="standard", retrieval_only=True, reference_context_ids=["x"]
    )
    assert set(record) - {"metadata"} <= set(RAGAS_KEYS)
