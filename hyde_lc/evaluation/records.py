"""One question in, one Ragas-ready record out: answer, contexts, and what each stage cost.

`EvaluationPipeline` holds the models and the retriever (load once, ask many);
`query_for_evaluation` is the one-call form. The record is a Ragas 0.4
``SingleTurnSample`` (``user_input``, ``response``, ``retrieved_contexts``,
``retrieved_context_ids``, and ``reference`` / ``reference_contexts`` when given) plus a
``metadata`` dict:

- times: ``execution_time`` (wall clock, seconds), ``hypothesis_time`` (writing the
  hypotheses), ``retrieval_time`` (embedding, search and neighbour expansion: everything
  in retrieval but the LLM), ``answer_time``, and the finer ``timings``;
- tokens and cost per stage in ``stages`` (``hypothesis``, ``embedding``, ``answer``), each
  with its provider, model, tokens, ``usage_source`` and ``cost_source``; and the totals
  ``input_tokens`` / ``output_tokens`` (LLM stages), ``embedding_tokens``, ``hyde_cost``,
  ``answer_cost``, ``embedding_cost``, ``total_cost`` (``None`` as soon as one stage's price
  is unknown: never a made-up number); ``usage_source`` says how the LLM tokens were
  obtained, ``cost_source`` where every stage's price came from;
- ``retrieval_method`` (``standard``, ``hyde`` for the default mean with the query at
  weight 0.8, ``hyde(w=paper)`` for the paper's equal weighting, ``hyde:rrf``,
  ``hyde:mean-hypotheses-only``, ... and ``+window=N`` with expansion), the
  models (``llm_hyde_model``, ``llm_answer_model``, ``hyde_provider``, ``answer_provider``,
  ``hyde_model_id``, ``answer_model_id``, ``embedding_model``), the
  ``hypothetical_documents`` and any ``fallback``.

Tokens are recorded per stage by a callback handler attached to that stage only, so two
stages that share one model are still reported apart (`hyde_lc.evaluation.usage`).

Example:
    >>> from hyde_lc.evaluation import query_for_evaluation
    >>> record = query_for_evaluation("Who invented the Fresnel lens?", k=3)  # doctest: +SKIP
    >>> record["response"], record["metadata"]["stages"]["hypothesis"]["output_tokens"]
    ... # doctest: +SKIP

"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Literal

from langchain_core.caches import BaseCache
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.language_models import BaseLanguageModel
from langchain_core.runnables import RunnableConfig
from langchain_core.vectorstores import VectorStore

from hyde_lc.answer import answer_from_documents, cited_sources
from hyde_lc.errors import HydeLcError
from hyde_lc.evaluation.pricing import PricingTable
from hyde_lc.evaluation.usage import (
    NO_CALLS,
    StageUsage,
    UsageRecorder,
    describe_embeddings,
    describe_llm,
    embedding_usage,
    summarise,
)
from hyde_lc.fusion import concat_text
from hyde_lc.neighbors import NeighborExpandingRetriever
from hyde_lc.prompts import DEFAULT_PROMPT
from hyde_lc.retriever import DEFAULT_QUERY_WEIGHT, HyDEResult, HyDERetriever

Mode = Literal["hyde", "standard"]
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


class EvaluationPipeline:
    """Answer questions with HyDE (or standard) retrieval, recording each stage's cost.

    A ready-made LLM (``custom_hyde_llm``, ``custom_answer_llm``) takes precedence over a
    model spec (``hyde_model``, ``answer_model``, e.g. ``"openai:gpt-4o-mini"``); with
    neither, the embedded local defaults are used.

    Example:
        >>> from hyde_lc import open_store
        >>> from hyde_lc.evaluation import EvaluationPipeline
        >>> pipeline = EvaluationPipeline(store=open_store(), mode="hyde", k=3)  # doctest: +SKIP
        >>> record = pipeline.run("Who designed the Pharos?", reference="Sostratus")
        ... # doctest: +SKIP
        >>> record["metadata"]["total_cost"]  # doctest: +SKIP
        0.0

    """

    def __init__(
        self,
        *,
        store: VectorStore | None = None,
        mode: Mode = "hyde",
        hyde_model: str | None = None,
        answer_model: str | None = None,
        custom_hyde_llm: BaseLanguageModel | None = None,
        custom_answer_llm: BaseLanguageModel | None = None,
        k: int = 4,
        n_hypotheses: int = 1,
        fusion: Literal["mean", "concat", "rrf"] = "mean",
        include_query: bool = True,
        query_weight: float | Literal["default"] | None = "default",
        prompt: str | list[str] = DEFAULT_PROMPT,
        window: int = 0,
        retrieval_only: bool = False,
        timeout: float | None = 120.0,
        hypothesis_cache: BaseCache | None = None,
        pricing: PricingTable | None = None,
        stream: bool = False,
        callbacks: Sequence[BaseCallbackHandler] = (),
    ) -> None:
        from hyde_lc.models import load_llm
        from hyde_lc.store import open_store

        if mode not in ("hyde", "standard"):
            raise HydeLcError(f"unknown mode {mode!r}: use 'hyde' or 'standard'")
        if window < 0:
            raise HydeLcError(f"window must be 0 (no expansion) or more, got {window}")
        self.mode = mode
        hyde = mode == "hyde" and n_hypotheses > 0
        self.hyde_llm = (
            (custom_hyde_llm or load_llm(hyde_model, role="hypothesis")) if hyde else None
        )
        self.answer_llm = (
            None if retrieval_only else custom_answer_llm or load_llm(answer_model, role="answer")
        )
        self.store = store if store is not None else open_store()
        try:
            # Unset, the retriever's own default applies (and only where the query is fused).
            weighting: dict[str, Any] = (
                {} if query_weight == "default" else {"query_weight": query_weight}
            )
            self.retriever = HyDERetriever(
                vectorstore=self.store,
                hypothesis_llm=self.hyde_llm,
                k=k,
                n_hypotheses=n_hypotheses if hyde else 0,
                fusion=fusion,
                include_query=include_query,
                **weighting,
                prompt=prompt,
                timeout=timeout,
                hypothesis_cache=hypothesis_cache,
            )
        except ValueError as exc:
            raise HydeLcError(str(exc)) from exc
        self.expander = (
            NeighborExpandingRetriever(base_retriever=self.retriever, k=k, window=window)
            if window
            else None
        )
        self.pricing = pricing
        self.stream = stream
        self.callbacks = list(callbacks)

    @property
    def retrieval_method(self) -> str:
        """``standard``, ``hyde`` (the default: mean, query weight 0.8), or the variant."""
        r = self.retriever
        if r.n_hypotheses == 0:
            method = "standard"
        elif r.fusion == "mean" and r.include_query:
            method = "hyde"
        else:
            method = f"hyde:{r.fusion}" + ("" if r.include_query else "-hypotheses-only")
        if r.query_weight is None and r.include_query and r.fusion != "concat":
            method += "(w=paper)"  # the paper's equal weighting, not the package default
        elif r.query_weight is not None and r.query_weight != DEFAULT_QUERY_WEIGHT:
            method += f"(w={r.query_weight:g})"
        if r.n_hypotheses > 1:
            method += f"(n={r.n_hypotheses})"
        return method + (f"+window={self.expander.window}" if self.expander else "")

    # -- stages ------------------------------------------------------------------------

    def _config(self, recorder: UsageRecorder, name: str) -> RunnableConfig:
        return RunnableConfig(callbacks=[recorder, *self.callbacks], run_name=name)

    def _retrieve(self, question: str, config: RunnableConfig) -> tuple[list[Document], list]:
        details: list[HyDEResult] = []
        if self.expander is None:
            details.append(self.retriever.retrieve_with_details(question, config))
            return details[0].documents, details
        base = self.expander.base_for_call()
        assert isinstance(base, HyDERetriever)

        def fetch(n: int) -> list[Document]:
            details.append(base.retrieve_with_details(question, config, k=n))
            return details[-1].documents

        return self.expander.gather(fetch), details

    async def _aretrieve(
        self, question: str, config: RunnableConfig
    ) -> tuple[list[Document], list]:
        details: list[HyDEResult] = []
        if self.expander is None:
            details.append(await self.retriever.aretrieve_with_details(question, config))
            return details[0].documents, details
        base = self.expander.base_for_call()
        assert isinstance(base, HyDERetriever)

        async def fetch(n: int) -> list[Document]:
            details.append(await base.aretrieve_with_details(question, config, k=n))
            return details[-1].documents

        return await self.expander.agather(fetch), details

    def _answer(self, question: str, docs: list[Document], config: RunnableConfig) -> str:
        assert self.answer_llm is not None
        chain = answer_from_documents(self.answer_llm)
        inputs = {"question": question, "documents": docs}
        if self.stream:
            return "".join(chain.stream(inputs, config))
        return chain.invoke(inputs, config)

    async def _aanswer(self, question: str, docs: list[Document], config: RunnableConfig) -> str:
        assert self.answer_llm is not None
        chain = answer_from_documents(self.answer_llm)
        inputs = {"question": question, "documents": docs}
        if self.stream:
            return "".join([part async for part in chain.astream(inputs, config)])
        return await chain.ainvoke(inputs, config)

    # -- public ------------------------------------------------------------------------

    def run(
        self,
        question: str,
        *,
        reference: str | None = None,
        reference_contexts: list[str] | None = None,
        reference_context_ids: list[str] | None = None,
    ) -> dict[str, Any]:
        """Answer ``question`` and return its record (see the module docstring)."""
        _check_question(question)
        recorders = _Recorders()
        start = time.perf_counter()
        docs, details = self._retrieve(question, self._config(recorders.hyde, "hyde_lc.retrieve"))
        retrieved = time.perf_counter()
        answer = (
            None
            if self.answer_llm is None
            else self._answer(question, docs, self._config(recorders.answer, "hyde_lc.answer"))
        )
        end = time.perf_counter()
        return self._record(
            question, docs, details, answer, recorders, (start, retrieved, end),
            reference, reference_contexts, reference_context_ids,
        )  # fmt: skip

    async def arun(
        self,
        question: str,
        *,
        reference: str | None = None,
        reference_contexts: list[str] | None = None,
        reference_context_ids: list[str] | None = None,
    ) -> dict[str, Any]:
        """Async `run`: the hypotheses are awaited together, the answer asynchronously."""
        _check_question(question)
        recorders = _Recorders()
        start = time.perf_counter()
        docs, details = await self._aretrieve(
            question, self._config(recorders.hyde, "hyde_lc.retrieve")
        )
        retrieved = time.perf_counter()
        answer = (
            None
            if self.answer_llm is None
            else await self._aanswer(
                question, docs, self._config(recorders.answer, "hyde_lc.answer")
            )
        )
        end = time.perf_counter()
        return self._record(
            question, docs, details, answer, recorders, (start, retrieved, end),
            reference, reference_contexts, reference_context_ids,
        )  # fmt: skip

    # -- the record --------------------------------------------------------------------

    def _embedded_texts(self, details: list[HyDEResult]) -> list[str]:
        """What was embedded across the retrieval rounds (the query and/or hypotheses)."""
        texts: list[str] = []
        r = self.retriever
        for result in details:
            if not result.hypotheses:
                texts.append(result.query)
            elif r.fusion == "concat":
                texts.append(
                    concat_text(result.query if r.include_query else None, result.hypotheses)
                )
            else:
                texts.extend(([result.query] if r.include_query else []) + result.hypotheses)
        return texts

    def _record(
        self,
        question: str,
        docs: list[Document],
        details: list[HyDEResult],
        answer: str | None,
        recorders: _Recorders,
        clock: tuple[float, float, float],
        reference: str | None,
        reference_contexts: list[str] | None,
        reference_context_ids: list[str] | None,
    ) -> dict[str, Any]:
        start, retrieved, end = clock
        hyde_info, answer_info = describe_llm(self.hyde_llm), describe_llm(self.answer_llm)
        embeddings = self.retriever._embeddings()
        stages: dict[str, StageUsage] = {
            "hypothesis": summarise(
                "hypothesis", recorders.hyde, provider=hyde_info.provider,
                model=hyde_info.name, model_id=hyde_info.model_id, pricing=self.pricing,
            ),
            "embedding": embedding_usage(self._embedded_texts(details), embeddings, self.pricing),
            "answer": summarise(
                "answer", recorders.answer, provider=answer_info.provider,
                model=answer_info.name, model_id=answer_info.model_id, pricing=self.pricing,
            ),
        }  # fmt: skip
        hypothesis_s = sum(d.timings.get("hypothesis_s", 0.0) for d in details)
        timings = {
            "hypothesis_s": hypothesis_s,
            "embedding_s": sum(d.timings.get("embedding_s", 0.0) for d in details),
            "search_s": sum(d.timings.get("search_s", 0.0) for d in details),
            "answer_s": end - retrieved,
        }
        if self.expander is not None:
            inner = sum(sum(d.timings.values()) for d in details)
            timings["expansion_s"] = max(retrieved - start - inner, 0.0)
        hypotheses = [h for d in details[:1] for h in d.hypotheses]
        costs = [s.cost for s in stages.values()]
        record: dict[str, Any] = {
            "user_input": question,
            "response": answer,
            "retrieved_contexts": [d.page_content for d in docs],
            "retrieved_context_ids": [context_id(d) for d in docs],
        }
        if reference is not None:
            record["reference"] = reference
        if reference_contexts is not None:
            record["reference_contexts"] = list(reference_contexts)
        if reference_context_ids is not None:
            record["reference_context_ids"] = list(reference_context_ids)
        record["metadata"] = {
            "execution_time": end - start,
            "hypothesis_time": hypothesis_s,
            "retrieval_time": max(retrieved - start - hypothesis_s, 0.0),
            "answer_time": end - retrieved,
            "timings": timings,
            "input_tokens": stages["hypothesis"].input_tokens + stages["answer"].input_tokens,
            "output_tokens": stages["hypothesis"].output_tokens + stages["answer"].output_tokens,
            "embedding_tokens": stages["embedding"].input_tokens,
            "hyde_cost": stages["hypothesis"].cost,
            "answer_cost": stages["answer"].cost,
            "embedding_cost": stages["embedding"].cost,
            "total_cost": None if None in costs else sum(c for c in costs if c is not None),
            "stages": {name: stage.as_dict() for name, stage in stages.items()},
            "usage_source": _sources(stages[s].usage_source for s in ("hypothesis", "answer")),
            "cost_source": _sources(s.cost_source for s in stages.values()),
            "retrieval_method": self.retrieval_method,
            "k": self.retriever.k,
            "llm_hyde_model": hyde_info.name if self.hyde_llm else None,
            "llm_answer_model": answer_info.name if self.answer_llm else None,
            "hyde_provider": hyde_info.provider if self.hyde_llm else None,
            "answer_provider": answer_info.provider if self.answer_llm else None,
            "hyde_model_id": stages["hypothesis"].model_id if self.hyde_llm else None,
            "answer_model_id": stages["answer"].model_id if self.answer_llm else None,
            "embedding_model": describe_embeddings(embeddings).model_id,
            "hypothetical_documents": hypotheses,
            "hypothetical_document": hypotheses[0] if hypotheses else None,
            "hypothesis_cache_hits": sum(d.cache_hits for d in details[:1]),
            "fallback": next((d.fallback for d in details if d.fallback), None),
            "sources": [] if answer is None else cited_sources(answer, docs),
        }
        return record


class _Recorders:
    """One usage recorder per LLM stage."""

    def __init__(self) -> None:
        self.hyde = UsageRecorder()
        self.answer = UsageRecorder()


def _check_question(question: str) -> None:
    if not isinstance(question, str) or not question.strip():
        raise HydeLcError("the question is empty: pass the text of a question")


def _sources(sources: Any) -> str:
    """Distinct sources of the stages that ran, e.g. ``reported by the model``."""
    seen = [s for s in dict.fromkeys(sources) if s != NO_CALLS]
    return "; ".join(seen) if seen else NO_CALLS


def context_id(doc: Document) -> str:
    """A retrieved context's id: the Chroma id, else ``source:chunk_index``."""
    if doc.id:
        return str(doc.id)
    meta = doc.metadata
    return f"{meta.get('source', 'unknown')}:{meta.get('chunk_index', meta.get('start_index', ''))}"


def query_for_evaluation(
    question: str,
    *,
    reference: str | None = None,
    reference_contexts: list[str] | None = None,
    reference_context_ids: list[str] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Answer one question and return its Ragas-ready record.

    ``options`` are those of `EvaluationPipeline` (``store``, ``mode``, ``hyde_model``,
    ``answer_model``, ``custom_hyde_llm``, ``custom_answer_llm``, ``k``, ``n_hypotheses``,
    ``fusion``, ``window``, ``retrieval_only``, ``stream``, ...). For many questions, build
    one `EvaluationPipeline` and call ``run`` on it: the models load once.

    Example:
        >>> record = query_for_evaluation("What fuel did lamps burn?", mode="standard")
        ... # doctest: +SKIP
        >>> sorted(record)  # doctest: +SKIP
        ['metadata', 'response', 'retrieved_context_ids', 'retrieved_contexts', 'user_input']

    """
    return EvaluationPipeline(**options).run(
        question,
        reference=reference,
        reference_contexts=reference_contexts,
        reference_context_ids=reference_context_ids,
    )


async def aquery_for_evaluation(
    question: str,
    *,
    reference: str | None = None,
    reference_contexts: list[str] | None = None,
    reference_context_ids: list[str] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Async `query_for_evaluation`."""
    return await EvaluationPipeline(**options).arun(
        question,
        reference=reference,
        reference_contexts=reference_contexts,
        reference_context_ids=reference_context_ids,
    )


def _stage_metrics(stage: dict[str, Any]) -> dict[str, Any]:
    keys = ("provider", "model", "model_id", "input_tokens", "output_tokens")
    return {
        **{key: stage[key] for key in keys},
        "total_tokens": stage["input_tokens"] + stage["output_tokens"],
        "cost": stage["cost"],
        "usage_source": stage["usage_source"],
        "cost_source": stage["cost_source"],
    }


def legacy_view(record: dict[str, Any]) -> dict[str, Any]:
    """The ``process_hyde_query`` shape of a record (the seed module's key names)."""
    meta = record["metadata"]
    return {
        "answer": record["response"],
        "contexts": record["retrieved_contexts"],
        "hypothetical_document": meta["hypothetical_document"],
        "hypothetical_documents": meta["hypothetical_documents"],
        "hyde_metrics": _stage_metrics(meta["stages"]["hypothesis"]),
        "answer_metrics": _stage_metrics(meta["stages"]["answer"]),
        "embedding_metrics": _stage_metrics(meta["stages"]["embedding"]),
        "total_input_tokens": meta["input_tokens"],
        "total_output_tokens": meta["output_tokens"],
        "total_cost": meta["total_cost"],
        "execution_time": meta["execution_time"],
        "retrieval_method": meta["retrieval_method"],
    }


def process_hyde_query(
    query: str,
    custom_hyde_llm: BaseLanguageModel | None = None,
    custom_answer_llm: BaseLanguageModel | None = None,
    **options: Any,
) -> dict[str, Any]:
    """The seed module's call shape, on the same implementation as `query_for_evaluation`.

    Returns ``answer``, ``contexts``, ``hypothetical_document``, and ``hyde_metrics`` /
    ``answer_metrics`` (tokens, cost, usage and cost source) with the totals.

    Example:
        >>> out = process_hyde_query("Who invented the Fresnel lens?")  # doctest: +SKIP
        >>> out["hyde_metrics"]["output_tokens"], out["total_cost"]  # doctest: +SKIP
        (187, 0.0)

    """
    record = query_for_evaluation(
        query, custom_hyde_llm=custom_hyde_llm, custom_answer_llm=custom_answer_llm, **options
    )
    return legacy_view(record)
