"""One question in, one Ragas-ready record out: answer, contexts, and what each stage cost.

`EvaluationPipeline` runs one retriever and optionally an answer model, and records each
stage; the retriever is the whole retrieval configuration, and its ``label`` is the
record's ``retrieval_method``. Any LangChain ``BaseRetriever`` can be evaluated
(``store.as_retriever()``, an ``EnsembleRetriever``...), so a baseline of your own sits in
the same report as hyde_lc's; a `HyDERetriever` (or a `NeighborExpandingRetriever`
around one) reports each of its stages, any other retriever what can be measured from
outside it (`hyde_lc.evaluation.any_retriever`): a stage that does not apply or cannot be
measured is ``None`` (its time, tokens and cost), never 0.
`EvaluationPipeline.from_settings` builds the retriever from a store, a mode and
HyDERetriever's own fields (load once, ask many); `query_for_evaluation` is the one-call
form. The record is a Ragas 0.4
``SingleTurnSample`` (``user_input``, ``response``, ``retrieved_contexts``,
``retrieved_context_ids``, and ``reference`` / ``reference_contexts`` when given) plus a
``metadata`` dict:

- times: ``execution_time`` (wall clock, seconds), ``hypothesis_time`` (writing the
  hypotheses; None for a configuration that writes none), ``retrieval_time`` (embedding,
  search and neighbour expansion: everything in retrieval but the LLM), ``answer_time``,
  and the finer ``timings``; loading the models is in them unless the pipeline was
  warmed first (`EvaluationPipeline.warm_up`, as `hyde_lc.evaluation.evaluate_questions`
  and ``compare_modes`` do);
- tokens and cost per stage in ``stages`` (``hypothesis``, ``embedding``, ``answer``), each
  with its provider, model, tokens, ``usage_source`` and ``cost_source``; and the totals
  ``input_tokens`` / ``output_tokens`` (LLM stages), ``embedding_tokens`` (every text the
  embedding model read, over every search round), ``hyde_cost``, ``answer_cost``,
  ``embedding_cost``, ``total_cost`` (``None`` as soon as one stage's price is unknown:
  never a made-up number); ``usage_source`` says how the LLM tokens were obtained,
  ``cost_source`` where every stage's price came from;
- ``retrieval_method``: the retriever's configuration label (``standard``, ``hybrid``,
  ``hyde``, ``hybrid-hyde``, with non-default settings in parentheses and ``+window=N``
  with expansion: `hyde_lc.retrievers.hyde.configuration_label`); ``lexical`` (whether a BM25
  list took part); the models (``llm_hyde_model``, ``llm_answer_model``, ``hyde_provider``,
  ``answer_provider``, ``hyde_model_id``, ``answer_model_id``, ``embedding_model``); the
  ``hypothetical_documents``, any ``fallback``, ``query_note`` (the question was cut) and
  ``neighbors_note`` (the store could not give neighbours);
- what the answer model was given: ``context_note`` (passages left out or cut to fit its
  context window, None when all fit), ``context_ids`` and ``dropped_context_ids``, and the
  ``sources`` its answer cites;
- how the answer ended: ``answer_ending`` (``repeated_sentence``: stopped where the model
  began to repeat a sentence; ``token_cap``: the model reached its token cap, and the
  answer ends at its last whole sentence; None: the model ended by itself) and
  ``answer_note`` saying what was left out (`hyde_lc.answer.AnswerEnding`).

Tokens are recorded per stage by a callback handler attached to that stage only, so two
stages that share one model are still reported apart (`hyde_lc.evaluation.usage`).
Evaluating over a missing or empty collection is refused before any model runs
(`hyde_lc.evaluation.searched_store.check_searchable`): retrieval would find nothing and
the answers would come from the model's own knowledge.

Example:
    >>> from hyde_lc.evaluation import query_for_evaluation
    >>> record = query_for_evaluation("Who invented the Fresnel lens?", k=3)  # doctest: +SKIP
    >>> record["response"], record["metadata"]["stages"]["hypothesis"]["output_tokens"]
    ... # doctest: +SKIP

"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, TypedDict, Unpack, cast

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseLanguageModel
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.utils import AddableDict
from langchain_core.vectorstores import VectorStore

from hyde_lc.answer import answer_with_context, cited_sources
from hyde_lc.core.reasoning import strip_reasoning
from hyde_lc.core.settings import settings
from hyde_lc.errors import InvalidQueryError, InvalidSettingError
from hyde_lc.evaluation.any_retriever import (
    query_embeddings,
    retriever_k,
    retriever_label,
    retriever_store,
)
from hyde_lc.evaluation.pricing import PricingTable
from hyde_lc.evaluation.searched_store import check_searchable
from hyde_lc.evaluation.usage import (
    NO_CALLS,
    StageUsage,
    UsageRecorder,
    describe_embeddings,
    describe_llm,
    embedding_usage,
    summarise,
)
from hyde_lc.retrievers.base import DetailedRetriever, HyDEResult
from hyde_lc.retrievers.hyde import HyDERetriever
from hyde_lc.retrievers.neighbors import NeighborExpandingRetriever

Mode = Literal["hyde", "standard"]
MODES = ("hyde", "standard")
WARM_UP_QUERY = "Which search terms open the indexes before timing?"
"""What `EvaluationPipeline.warm_up` searches for."""


def default_mode(
    hyde_model: str | None = None, custom_hyde_llm: object = None, hypotheses_asked: bool = False
) -> Mode:
    """``hyde`` when hypotheses are asked for or a hypothesis model is configured.

    A hypothesis model is configured by passing one (``custom_hyde_llm``, ``hyde_model``)
    or by ``$HYDE_LC_HYPOTHESIS_LLM``; ``hypotheses_asked`` is a caller's request for
    hypotheses (a number of them, or hypotheses only). Otherwise ``standard``: the
    question itself is searched, dense and BM25 fused where the collection has a lexical
    index (``hybrid``), the best configuration measured on SciFact, where HyDE on top of
    hybrid adds nothing measurable (see BENCHMARKS.md).

    Example:
        >>> default_mode(hyde_model="local:qwen2.5-coder-1.5b")
        'hyde'

    """
    configured = (
        custom_hyde_llm is not None
        or bool((hyde_model or "").strip())
        or settings().hypothesis_llm is not None
    )
    return "hyde" if hypotheses_asked or configured else "standard"


EvaluatedRetriever = BaseRetriever
"""Any LangChain retriever; hyde_lc's own report every stage."""
RAGAS_KEYS = (
    "user_input",
    "response",
    "retrieved_contexts",
    "retrieved_context_ids",
    "reference",
    "reference_contexts",
    "reference_context_ids",
)
"""The keys of a record Ragas reads (everything else lives under ``metadata``)."""

_OWN_ARGUMENTS = {
    "vectorstore": "store",
    "hypothesis_llm": "custom_hyde_llm (or hyde_model)",
}
"""HyDERetriever fields that `EvaluationPipeline.from_settings` takes under its own name."""


class References(TypedDict, total=False):
    """What a caller knows of a question's right answer, kept in its record for Ragas."""

    reference: str | None
    """The reference answer."""
    reference_contexts: list[str] | None
    """The passages that hold the answer."""
    reference_context_ids: list[str] | None
    """The ids of the chunks that hold the answer."""


class EvaluationPipeline:
    """Answer questions with one retriever, recording each stage's tokens, cost and time.

    ``retriever`` is the whole retrieval configuration: a `HyDERetriever` (standard,
    hybrid, HyDE or hybrid HyDE, by its fields), a `NeighborExpandingRetriever` around
    one, or any other LangChain retriever (whose stages hyde_lc cannot see are recorded
    as ``None``); ``retrieval_method`` is ``label`` when given, else the retriever's
    ``label``, its ``name``, or its class. ``answer_llm=None`` retrieves only.
    `from_settings` builds the retriever from a store, a mode and model specs.

    Example:
        >>> from hyde_lc import HyDERetriever, load_llm, open_store
        >>> from hyde_lc.evaluation import EvaluationPipeline
        >>> retriever = HyDERetriever(vectorstore=open_store(), k=3,
        ...                           hypothesis_llm=load_llm(role="hypothesis"))
        ... # doctest: +SKIP
        >>> pipeline = EvaluationPipeline(retriever, answer_llm=load_llm(role="answer"))
        ... # doctest: +SKIP
        >>> record = pipeline.run("Who designed the Pharos?", reference="Sostratus")
        ... # doctest: +SKIP
        >>> record["metadata"]["retrieval_method"], record["metadata"]["total_cost"]
        ... # doctest: +SKIP
        ('hybrid-hyde', 0.0)
        >>> baseline = EvaluationPipeline(open_store().as_retriever(search_kwargs={"k": 3}),
        ...                               answer_llm=load_llm(role="answer"), label="mine")
        ... # doctest: +SKIP

    """

    def __init__(
        self,
        retriever: EvaluatedRetriever,
        *,
        answer_llm: BaseLanguageModel[Any] | None = None,
        pricing: PricingTable | None = None,
        stream: bool = False,
        callbacks: Sequence[BaseCallbackHandler] = (),
        label: str | None = None,
    ) -> None:
        self.retriever = retriever
        self.hyde_retriever = _searching_retriever(retriever)
        self.label = label
        store = self.store
        if store is not None:
            check_searchable(store)
        self.answer_llm = answer_llm
        self.pricing = pricing
        self.stream = stream
        self.callbacks = list(callbacks)

    @classmethod
    def from_settings(
        cls,
        *,
        store: VectorStore | None = None,
        mode: Mode | None = None,
        window: int = 0,
        hyde_model: str | None = None,
        answer_model: str | None = None,
        custom_hyde_llm: BaseLanguageModel[Any] | None = None,
        custom_answer_llm: BaseLanguageModel[Any] | None = None,
        retrieval_only: bool = False,
        pricing: PricingTable | None = None,
        stream: bool = False,
        callbacks: Sequence[BaseCallbackHandler] = (),
        **retriever_fields: Any,
    ) -> EvaluationPipeline:
        """A pipeline built from settings: the one-call path behind `query_for_evaluation`.

        ``store`` defaults to `hyde_lc.open_store` (``./.hyde_lc``); it must hold chunks.
        ``mode="hyde"`` writes hypotheses with ``custom_hyde_llm`` or the model spec
        ``hyde_model`` (default: the local writer); ``mode="standard"`` uses no hypothesis
        model. ``mode=None`` is `default_mode`: HyDE when a hypothesis model is configured,
        else the question alone (hybrid where the collection has a lexical index); a
        number of ``n_hypotheses`` above 0 also means HyDE. ``window=N`` widens each hit
        with N neighbouring chunks on each side.
        ``custom_answer_llm`` / ``answer_model`` answer, unless ``retrieval_only``.
        ``retriever_fields`` are `HyDERetriever` fields (``k``, ``n_hypotheses``,
        ``fusion``, ``query_weight``, ``prompt``, ``lexical``, ``dense_weight``,
        ``hypothesis_cache``, ...), checked by HyDERetriever itself.

        Raises `InvalidSettingError` for an unknown mode, window or field, or a field the
        retriever refuses; `StoreError` for a missing or empty collection. Both are
        raised before any model is loaded.
        """
        from hyde_lc.models.loading import load_llm
        from hyde_lc.store.vectorstore import open_store

        if mode is None:
            asked = bool(retriever_fields.get("n_hypotheses"))
            mode = default_mode(hyde_model, custom_hyde_llm, hypotheses_asked=asked)
        if mode not in MODES:
            raise InvalidSettingError(f"unknown mode {mode!r}: use 'hyde' or 'standard'")
        if isinstance(window, bool) or not isinstance(window, int) or window < 0:
            raise InvalidSettingError(
                f"window must be a whole number, 0 (no expansion) or more, got {window!r}"
            )
        _check_fields(mode, retriever_fields)
        store = store if store is not None else open_store()
        check_searchable(store)
        hyde_llm = None
        if mode == "hyde":
            hyde_llm = custom_hyde_llm or load_llm(hyde_model, role="hypothesis")
        else:
            retriever_fields["n_hypotheses"] = 0
        searching = HyDERetriever(vectorstore=store, hypothesis_llm=hyde_llm, **retriever_fields)
        retriever: EvaluatedRetriever = searching
        if window:
            retriever = NeighborExpandingRetriever(
                base_retriever=searching, k=searching.k, window=window
            )
        answer_llm = None
        if not retrieval_only:
            answer_llm = custom_answer_llm or load_llm(answer_model, role="answer")
        return cls(
            retriever, answer_llm=answer_llm, pricing=pricing, stream=stream, callbacks=callbacks
        )

    # -- what the pipeline runs ----------------------------------------------------------

    @property
    def retrieval_method(self) -> str:
        """The configuration label, e.g. ``hybrid-hyde``, ``hyde+window=1`` or ``label``."""
        return self.label or retriever_label(self.retriever)

    @property
    def store(self) -> VectorStore | None:
        """The vector store searched; None when the retriever does not name one."""
        if self.hyde_retriever is not None:
            return self.hyde_retriever.vectorstore
        return retriever_store(self.retriever)

    @property
    def k(self) -> int | None:
        """Documents per question, when the retriever says."""
        return retriever_k(self.retriever)

    @property
    def embedding_model(self) -> Embeddings | None:
        """The embeddings that read the question (None: none, several, or not known)."""
        if self.hyde_retriever is not None:
            return self.hyde_retriever.embedding_model
        found = query_embeddings(self.retriever) or []
        return found[0] if len({id(e) for e in found}) == 1 else None

    @property
    def expander(self) -> NeighborExpandingRetriever | None:
        """The neighbour expansion around the search, if any."""
        return self.retriever if isinstance(self.retriever, NeighborExpandingRetriever) else None

    @property
    def hyde_llm(self) -> BaseLanguageModel[Any] | None:
        """The model that writes hypotheses (None when the retriever writes none)."""
        hyde = self.hyde_retriever
        return hyde.hypothesis_llm if hyde is not None and hyde.n_hypotheses else None

    # -- stages ------------------------------------------------------------------------

    def _config(self, recorder: UsageRecorder, name: str) -> RunnableConfig:
        return RunnableConfig(callbacks=[recorder, *self.callbacks], run_name=name)

    def _answer(
        self, question: str, docs: list[Document], config: RunnableConfig
    ) -> dict[str, Any]:
        assert self.answer_llm is not None
        chain = answer_with_context(self.answer_llm)
        inputs = {"question": question, "documents": docs}
        return _added(chain.stream(inputs, config)) if self.stream else chain.invoke(inputs, config)

    async def _aanswer(
        self, question: str, docs: list[Document], config: RunnableConfig
    ) -> dict[str, Any]:
        assert self.answer_llm is not None
        chain = answer_with_context(self.answer_llm)
        inputs = {"question": question, "documents": docs}
        if not self.stream:
            return await chain.ainvoke(inputs, config)
        return _added([chunk async for chunk in chain.astream(inputs, config)])

    def _detailed(self) -> DetailedRetriever | None:
        """The retriever when it is hyde_lc's and reports its stages; None: seen from outside."""
        retriever = self.retriever
        if self.hyde_retriever is None or not isinstance(retriever, DetailedRetriever):
            return None
        return retriever

    def _retrieve(self, question: str, config: RunnableConfig) -> HyDEResult:
        detailed = self._detailed()
        if detailed is None:
            return _outside(question, self.retriever.invoke(question, config))
        return detailed.retrieve_with_details(question, config)

    async def _aretrieve(self, question: str, config: RunnableConfig) -> HyDEResult:
        detailed = self._detailed()
        if detailed is None:
            return _outside(question, await self.retriever.ainvoke(question, config))
        return await detailed.aretrieve_with_details(question, config)

    # -- public ------------------------------------------------------------------------

    def warm_up(self) -> dict[str, float]:
        """Load and run once what this pipeline uses, before timing it; seconds per stage.

        A local model loads on first use, and its first requests run much slower than
        later ones; the embedding model and the vector and BM25 indexes open on first
        use too. Warming keeps that out of every record's times. ``retrieval``: one
        search for a fixed text, question alone (no hypothesis is written or cached);
        ``hypothesis`` and ``answer``: the model's own ``warm_up``
        (`hyde_lc.models.local_llm.LocalChatModel.warm_up`), for models that have one; a model
        without one (a remote model) is not called, so warming costs no tokens. What an
        earlier pipeline warmed (a shared store, model or engine) takes about 0 s.
        A retriever other than hyde_lc's is warmed by one ``invoke`` of the fixed text (one
        that calls a model itself, such as ``MultiQueryRetriever``, calls it then).
        """
        seconds: dict[str, float] = {}
        start = time.perf_counter()
        searching = self.hyde_retriever
        if searching is None:
            self.retriever.invoke(WARM_UP_QUERY)
        else:
            embedded = searching.embed(WARM_UP_QUERY, [])
            searching.search(searching.fuse(embedded), searching.k, query=WARM_UP_QUERY)
        seconds["retrieval"] = time.perf_counter() - start
        for stage, llm in (("hypothesis", self.hyde_llm), ("answer", self.answer_llm)):
            warm_up = getattr(llm, "warm_up", None)
            if callable(warm_up):
                start = time.perf_counter()
                warm_up()
                seconds[stage] = time.perf_counter() - start
        return seconds

    def run(self, question: str, **references: Unpack[References]) -> dict[str, Any]:
        """Answer ``question`` and return its record (see the module docstring)."""
        trial = _Trial(question, self._config)
        result = trial.retrieved(self._retrieve(question, trial.retrieval))
        answered = None
        if self.answer_llm is not None:
            answered = self._answer(question, result.documents, trial.answering)
        return self._record(trial, result, answered, references)

    async def arun(self, question: str, **references: Unpack[References]) -> dict[str, Any]:
        """Async `run`: the hypotheses are awaited together, the answer asynchronously."""
        trial = _Trial(question, self._config)
        result = trial.retrieved(await self._aretrieve(question, trial.retrieval))
        answered = None
        if self.answer_llm is not None:
            answered = await self._aanswer(question, result.documents, trial.answering)
        return self._record(trial, result, answered, references)

    # -- the record --------------------------------------------------------------------

    def _record(
        self,
        trial: _Trial,
        result: HyDEResult,
        answered: dict[str, Any] | None,
        references: References,
    ) -> dict[str, Any]:
        end = time.perf_counter()
        question, start, retrieved = trial.question, trial.start, trial.retrieved_at
        docs = result.documents
        hyde_llm = self.hyde_llm
        hyde_info, answer_info = describe_llm(hyde_llm), describe_llm(self.answer_llm)
        embeddings = self.embedding_model
        answer_stage = summarise(
            "answer", trial.answer, provider=answer_info.provider,
            model=answer_info.name, model_id=answer_info.model_id, pricing=self.pricing,
        )  # fmt: skip
        stages: dict[str, StageUsage | None]
        if self.hyde_retriever is not None:
            assert embeddings is not None
            stages = {
                "hypothesis": summarise(
                    "hypothesis", trial.hyde, provider=hyde_info.provider,
                    model=hyde_info.name, model_id=hyde_info.model_id, pricing=self.pricing,
                ),
                "embedding": embedding_usage(result.embedded_texts, embeddings, self.pricing),
                "answer": answer_stage,
            }  # fmt: skip
            timings: dict[str, float | None] = {
                key: result.timings.get(key, 0.0)
                for key in ("hypothesis_s", "embedding_s", "search_s")
            }
            if not self.hyde_retriever.n_hypotheses:  # no hypotheses: no time to report
                timings["hypothesis_s"] = None
            if "expansion_s" in result.timings:
                timings["expansion_s"] = result.timings["expansion_s"]
        else:
            stages = {
                "hypothesis": None,
                "embedding": self._outside_embedding(question),
                "answer": answer_stage,
            }
            if trial.hyde.calls:  # the retriever called a model itself
                stages["retriever_llm"] = summarise(
                    "retriever_llm", trial.hyde, provider="unknown",
                    model=next((c.model_id for c in trial.hyde.calls if c.model_id), "unknown"),
                    pricing=self.pricing,
                )  # fmt: skip
            timings = {"hypothesis_s": None, "retrieval_s": retrieved - start}
        timings["answer_s"] = end - retrieved
        hypothesis_s = timings["hypothesis_s"]
        answer = None if answered is None else strip_reasoning(str(answered["answer"]))
        given: list[Document] = [] if answered is None else list(answered["context_documents"])
        dropped: list[Document] = [] if answered is None else list(answered["dropped_documents"])
        measured = {name: s for name, s in stages.items() if s is not None}
        llm_stages = [s for name, s in measured.items() if name != "embedding"]
        unmeasured = [name for name, s in stages.items() if s is None and name == "embedding"]
        costs = [s.cost for s in measured.values()]
        cost_sources = [s.cost_source for s in measured.values()]
        if unmeasured:
            cost_sources.append(f"embedding: not measured for a {type(self.retriever).__name__}")
        embedding = stages["embedding"]
        record: dict[str, Any] = {
            "user_input": question,
            "response": answer,
            "retrieved_contexts": [d.page_content for d in docs],
            "retrieved_context_ids": [context_id(d) for d in docs],
        }
        for key in References.__annotations__:  # what the caller knows of the right answer
            value: Any = references.get(key)
            if value is not None:
                record[key] = value if isinstance(value, str) else list(value)
        hypothesis = stages["hypothesis"]
        outside = self.hyde_retriever is None
        record["metadata"] = {
            "execution_time": end - start,
            "hypothesis_time": hypothesis_s,
            "retrieval_time": max(retrieved - start - (hypothesis_s or 0.0), 0.0),
            "answer_time": end - retrieved,
            "timings": timings,
            "input_tokens": sum(s.input_tokens for s in llm_stages),
            "output_tokens": sum(s.output_tokens for s in llm_stages),
            "embedding_tokens": None if embedding is None else embedding.input_tokens,
            "hyde_cost": None if hypothesis is None else hypothesis.cost,
            "answer_cost": answer_stage.cost,
            "embedding_cost": None if embedding is None else embedding.cost,
            "total_cost": (
                None if None in costs or unmeasured else sum(c for c in costs if c is not None)
            ),
            "stages": {name: s if s is None else s.as_dict() for name, s in stages.items()},
            "usage_source": _sources(s.usage_source for s in llm_stages),
            "cost_source": _sources(cost_sources),
            "retrieval_method": self.retrieval_method,
            "k": self.k,
            "lexical": None if outside else result.lexical,
            "search_rounds": None if outside else result.rounds,
            "llm_hyde_model": hyde_info.name if hyde_llm else None,
            "llm_answer_model": answer_info.name if self.answer_llm else None,
            "hyde_provider": hyde_info.provider if hyde_llm else None,
            "answer_provider": answer_info.provider if self.answer_llm else None,
            "hyde_model_id": hypothesis.model_id if hyde_llm and hypothesis else None,
            "answer_model_id": answer_stage.model_id if self.answer_llm else None,
            "embedding_model": (
                None if embeddings is None else describe_embeddings(embeddings).model_id
            ),
            "hypothetical_documents": None if outside else list(result.hypotheses),
            "hypothetical_document": result.hypotheses[0] if result.hypotheses else None,
            "hypothesis_cache_hits": None if outside else result.cache_hits,
            "fallback": result.fallback,
            "query_note": result.query_note,
            "neighbors_note": next(
                (d.metadata["neighbors_note"] for d in docs if d.metadata.get("neighbors_note")),
                None,
            ),
            "context_note": None if answered is None else answered["context_note"],
            "answer_ending": None if answered is None else answered["answer_ending"],
            "answer_note": None if answered is None else answered["answer_note"],
            "context_ids": [context_id(d) for d in given],
            "dropped_context_ids": [context_id(d) for d in dropped],
            "sources": [] if answer is None else cited_sources(answer, given),
        }
        return record

    def _outside_embedding(self, question: str) -> StageUsage | None:
        """The embedding stage of a retriever other than hyde_lc's, when it can be told.

        None when it cannot (`query_embeddings`) or does not apply (no embedding model).
        """
        found = query_embeddings(self.retriever)
        if not found:
            return None
        used = [embedding_usage([question], e, self.pricing) for e in found]
        if len(used) == 1:
            return used[0]
        costs = [u.cost for u in used]
        return StageUsage(
            stage="embedding",
            provider=" + ".join(dict.fromkeys(u.provider for u in used)),
            model=" + ".join(dict.fromkeys(u.model for u in used)),
            model_id=" + ".join(dict.fromkeys(u.model_id for u in used)),
            calls=sum(u.calls for u in used),
            input_tokens=sum(u.input_tokens for u in used),
            output_tokens=0,
            usage_source=_sources(u.usage_source for u in used),
            cost=None if None in costs else sum(c for c in costs if c is not None),
            cost_source=_sources(u.cost_source for u in used),
        )


class _Trial:
    """One question's run: a usage recorder and a config per LLM stage, and the clock.

    ``hyde`` records the retrieval stage (the hypotheses, or a model another retriever
    calls itself), ``answer`` the answer; ``start`` is when the run began (the question
    checked), ``retrieved_at`` when retrieval returned.
    """

    def __init__(
        self, question: str, config: Callable[[UsageRecorder, str], RunnableConfig]
    ) -> None:
        _check_question(question)
        self.question = question
        self.hyde = UsageRecorder()
        self.answer = UsageRecorder()
        self.start = self.retrieved_at = time.perf_counter()
        self.retrieval = config(self.hyde, "hyde_lc.retrieve")
        self.answering = config(self.answer, "hyde_lc.answer")

    def retrieved(self, result: HyDEResult) -> HyDEResult:
        """``result``, its time noted."""
        self.retrieved_at = time.perf_counter()
        return result


def _added(chunks: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Streamed chunks added up, as ``invoke`` would have returned them."""
    out = AddableDict()
    for chunk in chunks:
        out = out + AddableDict(chunk)
    return dict(out)


def _searching_retriever(retriever: Any) -> HyDERetriever | None:
    """The HyDERetriever that searches (``retriever`` itself, or the one it expands).

    None for any other LangChain retriever: it is evaluated from outside.
    """
    if isinstance(retriever, HyDERetriever):
        return retriever
    if isinstance(retriever, NeighborExpandingRetriever) and isinstance(
        retriever.base_retriever, HyDERetriever
    ):
        return retriever.base_retriever
    if isinstance(retriever, BaseRetriever):
        return None
    raise InvalidSettingError(
        "EvaluationPipeline evaluates a LangChain retriever (a BaseRetriever: a "
        "HyDERetriever, store.as_retriever(), an EnsembleRetriever...); got a "
        f"{type(retriever).__name__}. For a vector store, pass store.as_retriever()"
    )


def _outside(question: str, documents: list[Document]) -> HyDEResult:
    """What a retriever other than hyde_lc's returned, in the shape of its own results."""
    return HyDEResult(question, [], list(documents), label="")


def _check_fields(mode: str, fields: dict[str, Any]) -> None:
    """Refuse retriever fields that do not exist or contradict ``mode``, naming the fix.

    HyDERetriever ignores keywords it does not know, so a misspelt setting would
    silently run with the default instead.
    """
    for name, ours in _OWN_ARGUMENTS.items():
        if name in fields:
            raise InvalidSettingError(f"pass {ours} instead of {name}")
    known = set(HyDERetriever.model_fields) - set(_OWN_ARGUMENTS)
    unknown = sorted(set(fields) - known)
    if unknown:
        raise InvalidSettingError(
            f"unknown setting{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}: "
            f"EvaluationPipeline.from_settings takes HyDERetriever's fields "
            f"({', '.join(sorted(known - {'name', 'tags', 'metadata'}))})"
        )
    n = fields.get("n_hypotheses")
    if mode == "standard" and n:
        raise InvalidSettingError(
            f"mode='standard' searches with the question alone, so n_hypotheses={n} would "
            "never be used: leave n_hypotheses out, or use mode='hyde'"
        )
    if mode == "hyde" and n == 0:
        raise InvalidSettingError(
            "mode='hyde' with n_hypotheses=0 writes no hypothesis: use mode='standard'"
        )


def _check_question(question: str) -> None:
    if not isinstance(question, str) or not question.strip():
        raise InvalidQueryError("the question is empty: pass the text of a question")


def _sources(sources: Any) -> str:
    """Distinct sources of the stages that ran, e.g. ``reported by the model``."""
    seen = [s for s in dict.fromkeys(sources) if s != NO_CALLS]
    return "; ".join(seen) if seen else NO_CALLS


def context_id(doc: Document) -> str:
    """A retrieved context's id: the store's id, else ``source:chunk_index``."""
    if doc.id:
        return str(doc.id)
    meta = doc.metadata
    return f"{meta.get('source', 'unknown')}:{meta.get('chunk_index', meta.get('start_index', ''))}"


def _pipeline_for(
    retriever: EvaluatedRetriever | None, options: dict[str, Any]
) -> EvaluationPipeline:
    if retriever is None:
        return EvaluationPipeline.from_settings(**options)
    allowed = {"answer_llm", "pricing", "stream", "callbacks", "label"}
    extra = sorted(set(options) - allowed)
    if extra:
        raise InvalidSettingError(
            f"with retriever=..., the retrieval settings are the retriever's own: "
            f"{', '.join(extra)} cannot be given too (pass answer_llm, pricing, stream, "
            "callbacks or label, or leave retriever out)"
        )
    return EvaluationPipeline(retriever, **options)


def query_for_evaluation(
    question: str, *, retriever: EvaluatedRetriever | None = None, **options: Any
) -> dict[str, Any]:
    """Answer one question and return its Ragas-ready record.

    ``reference``, ``reference_contexts`` and ``reference_context_ids`` (`References`)
    go into the record as given.

    With ``retriever`` (any LangChain retriever: a `HyDERetriever`,
    ``store.as_retriever()``, an ``EnsembleRetriever``...), ``options`` are those of
    `EvaluationPipeline` (``answer_llm``, ``pricing``, ``stream``, ``callbacks``,
    ``label``); without, those of
    `EvaluationPipeline.from_settings` (``store``, ``mode``, ``window``, ``hyde_model``,
    ``answer_model``, ``custom_hyde_llm``, ``custom_answer_llm``, ``retrieval_only`` and
    HyDERetriever's fields such as ``k`` or ``n_hypotheses``). For many questions, build
    one `EvaluationPipeline` and call ``run`` on it: the models load once.

    Example:
        >>> record = query_for_evaluation("What fuel did lamps burn?", mode="standard")
        ... # doctest: +SKIP
        >>> sorted(record)  # doctest: +SKIP
        ['metadata', 'response', 'retrieved_context_ids', 'retrieved_contexts', 'user_input']

    """
    references = _references(options)
    return _pipeline_for(retriever, options).run(question, **references)


async def aquery_for_evaluation(
    question: str, *, retriever: EvaluatedRetriever | None = None, **options: Any
) -> dict[str, Any]:
    """Async `query_for_evaluation`."""
    references = _references(options)
    return await _pipeline_for(retriever, options).arun(question, **references)


def _references(options: dict[str, Any]) -> References:
    """The `References` among a call's ``options``, taken out of them."""
    return cast(
        References, {key: options.pop(key) for key in References.__annotations__ if key in options}
    )
