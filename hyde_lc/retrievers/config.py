"""A retriever's configuration as plain data: written to JSON, read back in another process.

`HyDERetriever.to_config` and `NeighborExpandingRetriever.to_config` give a dict of JSON
values: the store's location (folder or server, collection, embedding model), each model
as its spec (``local:smollm2-135m``, ``openai:gpt-4o-mini@http://host/v1``) with the
settings given to it, and the retriever's own settings as given. ``from_config`` builds
the same retriever from it, with `hyde_lc.open_store`, `hyde_lc.load_llm` and
`hyde_lc.load_embeddings`: nothing is loaded before its first use.

Why a dict of our own, not LangChain's ``Serializable`` (``dumpd``/``load``): a
retriever's store and local models are not LangChain-serialisable objects, and
``langchain_core.load`` rebuilds only classes in namespaces it is told to trust. A spec
and a location are what hyde_lc already loads models and stores from.

**Secrets are never written.** A remote model's API key is left out; ``from_config``
reads it from ``OPENAI_API_KEY`` in the process that loads the config, or from
``api_key=``. (A pickled retriever is another matter: it carries what its objects hold;
see `hyde_lc.retrievers.base.DetailedRetriever.__getstate__`.)

What cannot be written as a spec raises `NotPortableError` naming it: a store other than
a hyde_lc collection, a model of another class, a ``PromptTemplate`` object, a lexical
side brought by the caller, a hypothesis cache other than a `HypothesisCache` file.
Pickle such a retriever instead.

Example:
    >>> import json
    >>> from hyde_lc import HyDERetriever, open_store
    >>> retriever = HyDERetriever(vectorstore=open_store("/tmp/store"), k=3)  # doctest: +SKIP
    >>> text = json.dumps(retriever.to_config())  # doctest: +SKIP
    >>> HyDERetriever.from_config(json.loads(text)).k  # doctest: +SKIP
    3

"""

from __future__ import annotations

import json
from typing import Any

from langchain_core.embeddings import Embeddings

from hyde_lc.errors import NotPortableError
from hyde_lc.hyde.embeddings import HyDEEmbeddings
from hyde_lc.hyde.hypothesis_cache import HypothesisCache
from hyde_lc.models.loading import load_embeddings, load_llm
from hyde_lc.models.weights import LOCAL_LLM_WEIGHTS

CONFIG_VERSION = 1
"""The version of the config format (the ``hyde_lc_config`` key)."""

_LOCAL_LLM_SETTINGS = (
    "temperature",
    "max_tokens",
    "top_p",
    "seed",
    "stop",
    "repeat_penalty",
    "frequency_penalty",
    "dry_multiplier",
    "dry_penalty_last_n",
    "context_size",
    "parallel",
    "threads",
    "poll",
)
_OPENAI_SETTINGS = {"temperature": "temperature", "max_tokens": "max_tokens"}
_EMBEDDING_SETTINGS = ("batch_size", "max_tokens", "threads", "query_threads", "hypothesis_prefix")
_OBJECT_FIELDS = ("vectorstore", "hypothesis_llm", "embeddings", "hypothesis_cache", "lexical")
"""A `hyde_lc.HyDERetriever`'s fields written as specs, not as values."""


def _refused(what: str, value: Any) -> NotPortableError:
    return NotPortableError(
        f"{what} ({type(value).__name__}) cannot be written as a configuration: to_config "
        "writes hyde_lc collections (open_store), models loaded by spec (load_llm, "
        "load_embeddings), prompts by name or template string and HypothesisCache files. "
        "Pickle the retriever instead to send it to another process"
    )


# -- models ------------------------------------------------------------------------------


def llm_config(llm: Any) -> dict[str, Any]:
    """A chat model as ``{"spec": ..., "settings": {...}}``; never its API key."""
    kind = type(llm).__name__
    given: set[str] = getattr(llm, "model_fields_set", set())
    if kind == "LocalChatModel":
        name = llm.model_name
        spec = f"local:{name}" if name in LOCAL_LLM_WEIGHTS else f"local:{llm.model_path}"
        always = ("temperature", "max_tokens")  # a spec's role defaults would differ
        settings = {
            key: getattr(llm, key) for key in _LOCAL_LLM_SETTINGS if key in given or key in always
        }
        return {"spec": spec, "settings": settings}
    if kind == "ChatOpenAI":
        base = llm.openai_api_base
        spec = f"openai:{llm.model_name}" + (f"@{base}" if base else "")
        settings = {key: getattr(llm, attr) for key, attr in _OPENAI_SETTINGS.items()}
        if llm.request_timeout is not None and not isinstance(llm.request_timeout, tuple):
            settings["timeout"] = llm.request_timeout
        return {"spec": spec, "settings": {k: v for k, v in settings.items() if v is not None}}
    raise _refused("the hypothesis LLM", llm)


def embeddings_config(embeddings: Embeddings) -> dict[str, Any]:
    """Embeddings as ``{"spec": ..., "settings": {...}}`` (HyDE embeddings as ``{"hyde": ...}``)."""
    if isinstance(embeddings, HyDEEmbeddings):
        settings = _plain_fields(
            embeddings, ("llm", "base_embeddings", "hypothesis_cache"), "HyDEEmbeddings"
        )
        return {
            "hyde": {
                "llm": llm_config(embeddings.llm),
                "base_embeddings": embeddings_config(embeddings.base_embeddings),
                "hypothesis_cache": cache_config(embeddings.hypothesis_cache),
                "settings": settings,
            }
        }
    model_id = getattr(embeddings, "model_id", None)
    given: set[str] = getattr(embeddings, "model_fields_set", set())
    if isinstance(model_id, str) and model_id.startswith("local:"):
        settings = {key: getattr(embeddings, key) for key in _EMBEDDING_SETTINGS if key in given}
        return {"spec": model_id, "settings": settings}
    if type(embeddings).__name__ == "OpenAIEmbeddings":
        base = getattr(embeddings, "openai_api_base", None)
        spec = f"openai:{getattr(embeddings, 'model', '')}" + (f"@{base}" if base else "")
        return {"spec": spec, "settings": {}}
    raise _refused("the embeddings", embeddings)


def _settings(config: dict[str, Any], api_key: str | None) -> dict[str, Any]:
    """A model config's settings, with ``api_key`` for a remote model when one is given."""
    settings = dict(config.get("settings") or {})
    if api_key is not None and str(config["spec"]).startswith("openai:"):
        settings["api_key"] = api_key
    return settings


def load_llm_config(config: dict[str, Any], api_key: str | None = None) -> Any:
    """The chat model a `llm_config` names (``api_key`` for a remote one, if given)."""
    return load_llm(config["spec"], **_settings(config, api_key))


def load_embeddings_config(config: dict[str, Any], api_key: str | None = None) -> Embeddings:
    """The embeddings an `embeddings_config` names."""
    if "hyde" in config:
        hyde = config["hyde"]
        return HyDEEmbeddings(
            llm=load_llm_config(hyde["llm"], api_key),
            base_embeddings=load_embeddings_config(hyde["base_embeddings"], api_key),
            hypothesis_cache=load_cache_config(hyde.get("hypothesis_cache")),
            **hyde.get("settings", {}),
        )
    return load_embeddings(config["spec"], **_settings(config, api_key))


def cache_config(cache: Any) -> dict[str, Any] | None:
    """A `HypothesisCache` file as ``{"path": ...}``; None for no cache."""
    if cache is None:
        return None
    if isinstance(cache, HypothesisCache) and cache.path != ":memory:":
        return {"path": cache.path}
    raise _refused("the hypothesis cache", cache)


def load_cache_config(config: dict[str, Any] | None) -> HypothesisCache | None:
    """The `HypothesisCache` a `cache_config` names."""
    return None if config is None else HypothesisCache(config["path"])


# -- the store ------------------------------------------------------------------------------


def store_config(store: Any) -> dict[str, Any]:
    """A hyde_lc collection as its location and embedding model."""
    location = getattr(store, "location", None)
    if not hasattr(store, "hybrid") or location is None:
        raise _refused("the vector store", store)
    where: dict[str, Any] = {"url": location.url} if location.url else {"path": str(location.path)}
    return {
        **where,
        "collection": location.collection,
        "timeout": location.timeout,
        "embeddings": embeddings_config(store.embeddings),
    }


def load_store_config(config: dict[str, Any], api_key: str | None = None) -> Any:
    """The collection a `store_config` names, opened with its embedding model."""
    from hyde_lc.store.vectorstore import open_store

    return open_store(
        config.get("path"),
        url=config.get("url"),
        collection=config["collection"],
        timeout=config.get("timeout"),
        embeddings=load_embeddings_config(config["embeddings"], api_key),
    )


# -- the retrievers' own settings -----------------------------------------------------------


def _plain_fields(model: Any, objects: tuple[str, ...], owner: str) -> dict[str, Any]:
    """The settings given to ``model`` (not its objects), each checked to be JSON data."""
    out: dict[str, Any] = {}
    for name in sorted(model.model_fields_set):
        if name in objects:
            continue
        value = getattr(model, name)
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            raise _refused(f"{owner}.{name}", value) from None
        out[name] = value
    return out


def hyde_config(retriever: Any) -> dict[str, Any]:
    """A `hyde_lc.HyDERetriever` as plain data (see the module docstring)."""
    if not isinstance(retriever.lexical, str):
        raise _refused("the lexical side", retriever.lexical)
    settings = _plain_fields(retriever, _OBJECT_FIELDS, "HyDERetriever")
    if "lexical" in retriever.model_fields_set:
        settings["lexical"] = retriever.lexical
    return {
        "hyde_lc_config": CONFIG_VERSION,
        "retriever": "HyDERetriever",
        "store": store_config(retriever.vectorstore),
        "hypothesis_llm": (
            None if retriever.hypothesis_llm is None else llm_config(retriever.hypothesis_llm)
        ),
        "embeddings": (
            None if retriever.embeddings is None else embeddings_config(retriever.embeddings)
        ),
        "hypothesis_cache": cache_config(retriever.hypothesis_cache),
        "settings": settings,
    }


def check_config(config: Any, kind: str) -> dict[str, Any]:
    """``config`` if it is a config of a ``kind`` retriever, else `NotPortableError`."""
    if not isinstance(config, dict) or config.get("retriever") != kind:
        found = config.get("retriever") if isinstance(config, dict) else type(config).__name__
        raise NotPortableError(
            f"not a {kind} configuration (it is {found!r}): give what {kind}.to_config() "
            "returned (json.load of the file it was written to)"
        )
    version = config.get("hyde_lc_config")
    if version != CONFIG_VERSION:
        raise NotPortableError(
            f"configuration version {version!r} is not one this hyde_lc reads "
            f"({CONFIG_VERSION}): write it again with this version's to_config()"
        )
    return config


def hyde_fields(config: Any, api_key: str | None = None) -> dict[str, Any]:
    """The fields of the `hyde_lc.HyDERetriever` a `hyde_config` describes (objects loaded)."""
    config = check_config(config, "HyDERetriever")
    fields: dict[str, Any] = dict(config.get("settings") or {})
    fields["vectorstore"] = load_store_config(config["store"], api_key)
    if config.get("hypothesis_llm") is not None:
        fields["hypothesis_llm"] = load_llm_config(config["hypothesis_llm"], api_key)
    if config.get("embeddings") is not None:
        fields["embeddings"] = load_embeddings_config(config["embeddings"], api_key)
    if config.get("hypothesis_cache") is not None:
        fields["hypothesis_cache"] = load_cache_config(config["hypothesis_cache"])
    return fields


def neighbors_config(retriever: Any, base: dict[str, Any]) -> dict[str, Any]:
    """A `hyde_lc.NeighborExpandingRetriever` over a base of config ``base``."""
    settings = _plain_fields(
        retriever, ("base_retriever", "vectorstore"), "NeighborExpandingRetriever"
    )
    own_store = retriever.vectorstore is not getattr(retriever.base_retriever, "vectorstore", None)
    return {
        "hyde_lc_config": CONFIG_VERSION,
        "retriever": "NeighborExpandingRetriever",
        "base": base,
        "store": store_config(retriever.vectorstore) if own_store else None,
        "settings": settings,
    }
