"""query_for_evaluation / EvaluationPipeline: the record, per-stage usage and cost."""

from __future__ import annotations

import asyncio

import pytest
from langchain_core.callbacks import UsageMetadataCallbackHandler
from langchain_core.documents import Document
from langchain_core.language_models import FakeListChatModel
from langchain_core.vectorstores import InMemoryVectorStore
from pydantic import Field

from hyde_lc import HyDERetriever, NeighborExpandingRetriever
from hyde_lc.answer import ANSWER_PROMPT, fit_context, format_context
from hyde_lc.errors import HydeLcError, InvalidSettingError, StoreError
from hyde_lc.evaluation.pricing import PricingTable
from hyde_lc.evaluation.records import (
    RAGAS_KEYS,
    EvaluationPipeline,
    aquery_for_evaluation,
    query_for_evaluation,
)
from hyde_lc.evaluation.usage import UsageRecorder, summarise
from hyde_lc.models.local_llm import ContextWindowError
from hyde_lc.store.vectorstore import open_store
from tests.fakes import FakeEmbeddings, ScriptedChat, WordCountChat, chroma_of

LEGACY_KEYS = {"question", "answer", "contexts", "ground_truth", "ground_truths"}


def _words(text: str) -> int:
    return len(text.split())


def test_record_has_every_ragas_and_metadata_key_and_no_legacy_names(store):
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
        "cost_source", "fallback", "lexical", "context_note", "context_ids",
        "dropped_context_ids", "sources", "query_note", "neighbors_note",
    ):  # fmt: skip
        assert key in meta, key
    # The store is a hyde_lc collection, so its BM25 index joins the search by default.
    assert meta["retrieval_method"] == "hybrid-hyde" and meta["lexical"] is True
    assert meta["hypothetical_document"] == "Lenses bend light into beams with prisms. [1]"
    assert meta["execution_time"] >= meta["hypothesis_time"] + meta["answer_time"]
    assert set(meta["stages"]) == {"hypothesis", "embedding", "answer"}
    # ScriptedChat reports 5 in / 7 out per call: one hypothesis call, one answer call.
    assert (meta["input_tokens"], meta["output_tokens"]) == (10, 14)
    assert meta["usage_source"] == "reported by the model"
    assert meta["context_note"] is None and meta["dropped_context_ids"] == []
    assert meta["context_ids"] == record["retrieved_context_ids"]


def test_same_model_in_both_stages_is_still_split_per_stage(store):
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


def test_answer_prompt_tokens_cover_the_retrieved_context(store):
    llm = WordCountChat()
    record = query_for_evaluation(
        "Why did keepers go?", store=store, mode="standard", custom_answer_llm=llm, k=3
    )
    (answer_prompt,) = llm.prompts
    for context in record["retrieved_contexts"]:
        assert context in answer_prompt
    assert ANSWER_PROMPT.format_messages(context=format_context([]), question="q")  # sanity
    assert record["metadata"]["stages"]["answer"]["input_tokens"] == _words(answer_prompt)


@pytest.mark.parametrize(
    ("lexical", "label"), [("auto", "hybrid"), ("off", "standard")], ids=["hybrid", "dense"]
)
def test_standard_mode_has_no_hypothesis_stage(store, lexical, label):
    record = query_for_evaluation(
        "Why did keepers go?",
        store=store,
        mode="standard",
        lexical=lexical,
        custom_answer_llm=ScriptedChat(),
    )
    meta = record["metadata"]
    assert meta["retrieval_method"] == label and meta["lexical"] is (lexical == "auto")
    assert meta["stages"]["hypothesis"]["calls"] == 0
    assert meta["hyde_cost"] == 0.0
    assert meta["llm_hyde_model"] is None and meta["hyde_provider"] is None
    assert meta["hypothetical_documents"] == [] and meta["hypothetical_document"] is None
    assert meta["stages"]["embedding"]["input_tokens"] > 0  # the query was embedded


def test_unknown_model_costs_none_never_a_made_up_number(store):
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


def test_models_that_report_nothing_are_estimated_with_a_tokenizer(store):
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


def test_streaming_and_async_give_the_same_record(store):
    def pipeline(stream: bool) -> EvaluationPipeline:
        llm = WordCountChat(replies={"Passage:": "Prisms bend light.", "Context:": "Prisms [1]."})
        return EvaluationPipeline.from_settings(
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


@pytest.mark.parametrize("stream", [False, True], ids=["invoke", "stream"])
def test_reasoning_before_the_answer_is_removed_from_the_response(store, stream):
    # The chat template opened <think>, so the reply shows only its closing tag: a stream
    # cannot hold that back, the finished answer must still lose it.
    thinking = ScriptedChat(replies=["The user asks about lenses. Prisms?</think>Prisms [1]."])
    pipeline = EvaluationPipeline.from_settings(
        store=store, mode="standard", custom_answer_llm=thinking, stream=stream, k=2
    )
    record = pipeline.run("How do lenses work?")
    assert record["response"] == "Prisms [1]."
    assert asyncio.run(pipeline.arun("How do lenses work?"))["response"] == "Prisms [1]."


async def test_aquery_for_evaluation(store):
    record = await aquery_for_evaluation(
        "Why did keepers go?", store=store, custom_hyde_llm=ScriptedChat(),
        custom_answer_llm=ScriptedChat(), retrieval_only=True,
    )  # fmt: skip
    assert record["response"] is None
    assert record["metadata"]["stages"]["answer"]["calls"] == 0
    assert record["metadata"]["stages"]["hypothesis"]["calls"] == 1


def test_neighbour_expansion_is_named_and_timed(store):
    record = query_for_evaluation(
        "Why did keepers go?", store=store, custom_hyde_llm=ScriptedChat(),
        custom_answer_llm=ScriptedChat(), window=1, k=2,
    )  # fmt: skip
    meta = record["metadata"]
    assert meta["retrieval_method"] == "hybrid-hyde+window=1"
    assert "expansion_s" in meta["timings"]
    assert meta["stages"]["hypothesis"]["calls"] == 1  # later rounds reuse the hypothesis
    assert meta["neighbors_note"] is None


def test_fallback_is_recorded(store):
    record = query_for_evaluation(
        "Why did keepers go?", store=store, custom_hyde_llm=ScriptedChat(error=True),
        retrieval_only=True,
    )  # fmt: skip
    assert record["metadata"]["fallback"]
    assert record["retrieved_contexts"]


@pytest.mark.parametrize(
    ("options", "label"),
    [
        ({}, "hybrid-hyde"),
        ({"lexical": "off"}, "hyde"),
        ({"fusion": "rrf"}, "hybrid-hyde(fusion=rrf)"),
        ({"include_query": False, "lexical": "off"}, "hyde(hypotheses-only)"),
        ({"n_hypotheses": 4, "query_weight": 0.7}, "hybrid-hyde(w=0.7,n=4)"),
        ({"dense_weight": 0.3, "lexical_query_repeats": 2}, "hybrid-hyde(dense=0.3,repeats=2)"),
    ],
    ids=["default", "dense", "rrf", "hypotheses-only", "n-and-weight", "hybrid-weights"],
)
def test_the_retrieval_method_is_the_retrievers_label(store, options, label):
    pipeline = EvaluationPipeline.from_settings(
        store=store, custom_hyde_llm=ScriptedChat(), retrieval_only=True, **options
    )
    assert pipeline.retrieval_method == pipeline.retriever.label == label
    assert pipeline.run("How do lenses work?")["metadata"]["retrieval_method"] == label


def test_a_retriever_built_by_hand_is_the_whole_configuration(store):
    hyde = HyDERetriever(
        vectorstore=store, hypothesis_llm=ScriptedChat(), k=2, lexical="off", n_hypotheses=2
    )
    wide = NeighborExpandingRetriever(base_retriever=hyde, k=2, window=1)
    for retriever, label in ((hyde, "hyde(n=2)"), (wide, "hyde(n=2)+window=1")):
        pipeline = EvaluationPipeline(retriever)
        assert pipeline.retrieval_method == label and pipeline.answer_llm is None
        record = pipeline.run("How do lenses work?")
        assert record["metadata"]["retrieval_method"] == label
        assert record["metadata"]["stages"]["hypothesis"]["calls"] == 2
        assert record["response"] is None
    record = query_for_evaluation(
        "How do lenses work?", retriever=hyde, answer_llm=ScriptedChat(replies=["Prisms [1]."])
    )
    assert record["response"] == "Prisms [1]." and record["metadata"]["k"] == 2


def test_a_retriever_and_retrieval_settings_together_are_refused(store):
    hyde = HyDERetriever(vectorstore=store, n_hypotheses=0)
    with pytest.raises(InvalidSettingError, match=r"k cannot be given too"):
        query_for_evaluation("q?", retriever=hyde, k=3)


def test_an_expansion_around_another_retriever_is_evaluated_from_outside(store):
    wide = NeighborExpandingRetriever(base_retriever=store.as_retriever(), k=2, window=1)
    pipeline = EvaluationPipeline(wide)
    assert pipeline.hyde_retriever is None and pipeline.store is store
    meta = pipeline.run("How do lenses work?")["metadata"]
    assert meta["retrieval_method"] == "VectorStoreRetriever+window=1"
    assert meta["stages"]["hypothesis"] is None and meta["k"] == 2
    assert meta["stages"]["embedding"] is None  # the expansion's own reads are not known


def test_embedding_tokens_count_every_text_the_embedding_model_read(store, fake_embeddings):
    class Counting(FakeEmbeddings):
        read: list[str] = Field(default_factory=list)

        def count_tokens(self, text: str) -> int:
            return len(text)  # characters: any count that differs per text will do

        def embed_query(self, text: str) -> list[float]:
            self.read.append(text)
            return super().embed_query(text)

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            self.read.extend(texts)
            return super().embed_documents(texts)

    for window in (0, 1):
        counting = Counting(size=32, read=[])
        record = query_for_evaluation(
            "How do lighthouse lenses work?",
            store=store,
            embeddings=counting,
            custom_hyde_llm=ScriptedChat(replies=["Prisms bend the light of the lamp."]),
            window=window,
            retrieval_only=True,
            k=2,
        )
        embedded = record["metadata"]["stages"]["embedding"]
        assert counting.read, "the query and the hypothesis were embedded"
        assert embedded["input_tokens"] == sum(len(t) for t in counting.read), window
        assert embedded["usage_source"] == "counted by the embedding model's tokenizer"


def test_bad_options_are_clear_errors(store):
    with pytest.raises(InvalidSettingError, match="unknown mode"):
        EvaluationPipeline.from_settings(store=store, mode="dense", retrieval_only=True)  # type: ignore[arg-type]
    with pytest.raises(InvalidSettingError, match="unknown fusion"):
        EvaluationPipeline.from_settings(
            store=store, custom_hyde_llm=ScriptedChat(), fusion="max", retrieval_only=True
        )
    with pytest.raises(HydeLcError, match="question is empty"):
        EvaluationPipeline.from_settings(store=store, mode="standard", retrieval_only=True).run(
            "  "
        )
    with pytest.raises(InvalidSettingError, match="window must be"):
        EvaluationPipeline.from_settings(store=store, mode="standard", window=-1)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"n_hypothesis": 4}, r"unknown setting n_hypothesis: .*n_hypotheses"),
        ({"vectorstore": None}, "pass store instead of vectorstore"),
        ({"hypothesis_llm": None}, r"pass custom_hyde_llm \(or hyde_model\) instead"),
        ({"mode": "standard", "n_hypotheses": 4}, "n_hypotheses=4 would never be used"),
        ({"n_hypotheses": 0}, "use mode='standard'"),
        ({"dense_weight": 1.5}, "dense_weight must lie between 0 and 1"),
    ],
    ids=["typo", "store", "llm", "standard-with-n", "hyde-without-n", "range"],
)
def test_retriever_fields_are_checked_before_any_model_loads(store, options, message):
    llm = ScriptedChat()
    with pytest.raises(InvalidSettingError, match=message):
        EvaluationPipeline.from_settings(
            store=store, custom_hyde_llm=llm, custom_answer_llm=llm, **options
        )
    assert llm.log == []


# -- the store must hold something to retrieve ---------------------------------------------


def test_a_folder_without_a_collection_is_an_error_and_nothing_is_created(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("HYDE_LC_STORE", "HYDE_LC_CHROMA_URL", "HYDE_LC_COLLECTION"):
        monkeypatch.delenv(name, raising=False)
    answer = ScriptedChat(replies=["From memory: prisms."])
    with pytest.raises(StoreError) as refused:
        query_for_evaluation(
            "How do lenses work?", custom_hyde_llm=answer, custom_answer_llm=answer
        )
    message = str(refused.value)
    assert "no collection 'hyde_lc'" in message and str(tmp_path / ".hyde_lc") in message
    assert "hyde-lc ingest" in message and "open_store(PATH" in message
    assert answer.log == []  # nothing answered from the model's own knowledge
    assert list(tmp_path.iterdir()) == []  # no ./.hyde_lc appeared


def test_an_empty_collection_is_an_error_naming_it(tmp_path, fake_embeddings):
    empty = open_store(tmp_path / "store", collection="notes", embeddings=fake_embeddings)
    empty.create_collection()
    with pytest.raises(StoreError, match=r"collection 'notes' at .*store holds no chunks") as e:
        EvaluationPipeline.from_settings(store=empty, mode="standard", retrieval_only=True)
    assert "--collection notes" in str(e.value)
    with pytest.raises(StoreError, match="InMemoryVectorStore holds no documents"):
        memory = InMemoryVectorStore(fake_embeddings)
        EvaluationPipeline(HyDERetriever(vectorstore=memory, n_hypotheses=0))


# -- any LangChain store -------------------------------------------------------------------


def test_windows_over_a_store_other_than_chroma(store, fake_embeddings):
    chunks = list(chroma_of(store).iter_chunks())
    memory = InMemoryVectorStore(fake_embeddings)
    memory.add_documents(chunks)
    record = query_for_evaluation(
        "Why did keepers go?", store=memory, mode="standard", window=1, k=2,
        retrieval_only=True,
    )  # fmt: skip
    meta = record["metadata"]
    assert meta["retrieval_method"] == "standard+window=1" and meta["neighbors_note"] is None
    assert set(record["retrieved_context_ids"]) <= {
        f"{c.metadata['doc_id']}:{c.metadata['chunk_index']}-{c.metadata['chunk_index']}"
        for c in chunks
    }

    # Chunks numbered by position but without hyde_lc's ids nor start_index cannot be
    # placed among neighbours: the hits come back as they are, and the record says why.
    numbered = InMemoryVectorStore(fake_embeddings)
    numbered.add_documents(
        [
            Document(c.page_content, id=f"x{i}", metadata={
                k: c.metadata[k] for k in ("source", "chunk_index")
            })
            for i, c in enumerate(chunks)
        ]
    )  # fmt: skip
    record = query_for_evaluation(
        "Why did keepers go?", store=numbered, mode="standard", window=1, k=2,
        retrieval_only=True,
    )  # fmt: skip
    assert "lacks start_index" in record["metadata"]["neighbors_note"]
    assert "add_start_index=True" in record["metadata"]["neighbors_note"]
    assert len(record["retrieved_contexts"]) == 2

    # Hits that are not chunks at all: returned as found, with a note saying how to make them.
    bare = InMemoryVectorStore(fake_embeddings)
    bare.add_documents([Document(c.page_content, id=f"y{i}") for i, c in enumerate(chunks)])
    record = query_for_evaluation(
        "Why did keepers go?", store=bare, mode="standard", window=1, retrieval_only=True
    )
    assert "ingest_paths" in record["metadata"]["neighbors_note"]


# -- what the answer model was given -------------------------------------------------------


def test_passages_left_out_of_the_answer_context_are_recorded(store):
    question = "How do lighthouse lenses work?"
    docs = HyDERetriever(vectorstore=store, n_hypotheses=0, k=3).invoke(question)
    answerer = ScriptedChat(replies=["Prisms [1]."])

    def kept(window: int) -> int:
        try:
            fitted = fit_context(docs, answerer, question=question, context_window=window)
        except ContextWindowError:  # no room for any passage
            return 0
        return len(fitted.documents)

    window = next(w for w in range(600, 4000, 4) if kept(w) == 1)  # the first passage only
    answerer.metadata = {"context_window": window}
    record = query_for_evaluation(
        question, store=store, mode="standard", k=3, custom_answer_llm=answerer
    )
    meta = record["metadata"]
    assert meta["context_note"] and "2 of 3 passages left out" in meta["context_note"]
    assert meta["context_ids"] == record["retrieved_context_ids"][:1]
    assert meta["dropped_context_ids"] == record["retrieved_context_ids"][1:]
    assert len(meta["sources"]) == 1  # the answer cites what it was given, and only that


def test_process_hyde_query_shape(store):
    import hyde_lc.evaluation
    from hyde_lc.evaluation.compat import legacy_view, process_hyde_query

    assert hyde_lc.evaluation.process_hyde_query is process_hyde_query
    assert hyde_lc.evaluation.legacy_view is legacy_view
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
    assert out["retrieval_method"] == "hybrid-hyde"


def test_ragas_keys_constant_matches_the_record(store):
    record = query_for_evaluation(
        "q?", store=store, mode="standard", retrieval_only=True, reference_context_ids=["x"]
    )
    assert set(record) - {"metadata"} <= set(RAGAS_KEYS)


def test_a_mode_without_hypotheses_reports_no_hypothesis_time(store):
    from hyde_lc.evaluation.compare import aggregate

    standard = query_for_evaluation(
        "Why did keepers go?", store=store, mode="standard", custom_answer_llm=ScriptedChat()
    )
    hyde = query_for_evaluation(
        "Why did keepers go?", store=store, custom_hyde_llm=ScriptedChat(),
        custom_answer_llm=ScriptedChat(),
    )  # fmt: skip
    meta = standard["metadata"]
    assert meta["hypothesis_time"] is None and meta["timings"]["hypothesis_s"] is None
    assert meta["retrieval_time"] > 0
    assert aggregate([standard], [{}])["hypothesis_time_mean_s"] is None
    assert hyde["metadata"]["hypothesis_time"] is not None
    assert aggregate([hyde], [{}])["hypothesis_time_mean_s"] is not None
