"""What can be told about a retriever that is not hyde_lc's: its name, store, k and embeddings.

`EvaluationPipeline` evaluates any LangChain ``BaseRetriever`` (``store.as_retriever()``,
an ``EnsembleRetriever``, a ``ContextualCompressionRetriever``...). Such a retriever says
nothing about its stages, so a record of it holds what can be known from outside: the
retrieval time, the documents, the tokens of any LLM it called (through callbacks), and
the embedding tokens where the question is known to be embedded once per vector-store
retriever (`query_embeddings`). Everything else is absent (``None``), never zero.

Example:
    >>> from langchain_core.embeddings import DeterministicFakeEmbedding
    >>> from langchain_core.vectorstores import InMemoryVectorStore
    >>> retriever = InMemoryVectorStore(DeterministicFakeEmbedding(size=8)).as_retriever()
    >>> retriever_label(retriever), retriever_k(retriever)
    ('VectorStoreRetriever(InMemoryVectorStore,similarity)', 4)

"""

from __future__ import annotations

from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import VectorStore, VectorStoreRetriever

LEXICAL_RETRIEVERS = frozenset({"BM25Retriever", "TFIDFRetriever"})
"""Retrievers (by class name) that search without an embedding model."""
_NOT_SETTINGS = frozenset({"name", "tags", "metadata", "callbacks", "verbose"})
_DEPTH = 4


def retriever_label(retriever: BaseRetriever) -> str:
    """The retriever's configuration name: its ``label`` or ``name``, else its class.

    A vector-store retriever names its store and search type; an ensemble its members.
    """
    label = getattr(retriever, "label", None)
    if isinstance(label, str) and label:
        return label
    if retriever.name:
        return str(retriever.name)
    kind = type(retriever).__name__
    if isinstance(retriever, VectorStoreRetriever):
        return f"{kind}({type(retriever.vectorstore).__name__},{retriever.search_type})"
    members = getattr(retriever, "retrievers", None)
    if isinstance(members, list) and members:
        return f"{kind}({','.join(retriever_label(m) for m in members)})"
    return kind


def retriever_store(retriever: BaseRetriever) -> VectorStore | None:
    """The vector store the retriever searches, when it has exactly one it names."""
    store = getattr(retriever, "vectorstore", None)
    return store if isinstance(store, VectorStore) else None


def retriever_k(retriever: BaseRetriever) -> int | None:
    """Documents per query, when the retriever says (``k``, or ``search_kwargs["k"]``)."""
    k = getattr(retriever, "k", None)
    if isinstance(k, int) and not isinstance(k, bool):
        return k
    if isinstance(retriever, VectorStoreRetriever):
        value = retriever.search_kwargs.get("k", 4)  # VectorStore.similarity_search's default
        return value if isinstance(value, int) else None
    return None


def query_embeddings(retriever: BaseRetriever) -> list[Embeddings] | None:
    """The embedding models that read the question once per retrieval; None if not known.

    Known for a vector-store retriever (its store's embeddings read the question once, in
    every search type), a lexical retriever (none) and an ensemble of such retrievers; any
    other retriever (one that rewrites the question, compresses, or embeds documents at
    query time) is not known from outside, and its embedding usage is reported absent.
    """
    if isinstance(retriever, VectorStoreRetriever):
        embeddings = retriever.vectorstore.embeddings
        return [embeddings] if embeddings is not None else None
    if type(retriever).__name__ in LEXICAL_RETRIEVERS:
        return []
    members = getattr(retriever, "retrievers", None)
    if type(retriever).__name__ == "EnsembleRetriever" and isinstance(members, list):
        found: list[Embeddings] = []
        for member in members:
            inner = query_embeddings(member) if isinstance(member, BaseRetriever) else None
            if inner is None:
                return None
            found.extend(inner)
        return found
    return None


def describe_retriever(retriever: BaseRetriever, depth: int = _DEPTH) -> dict[str, Any]:
    """The retriever's class and fields as plain JSON values (nested retrievers too).

    Used as a run's settings: two runs whose retrievers differ in any field (k, weights,
    search type, members) are told apart. Objects without plain values (stores, models,
    functions) are given by their class name, a store with its location.
    """
    out: dict[str, Any] = {"class": type(retriever).__name__}
    for name in type(retriever).model_fields:
        if name not in _NOT_SETTINGS:
            out[name] = _plain(getattr(retriever, name, None), depth - 1)
    return out


def _plain(value: Any, depth: int) -> Any:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=str) if isinstance(value, set | frozenset) else value
        return [_plain(v, depth) for v in items]
    if isinstance(value, dict):
        return {str(k): _plain(v, depth) for k, v in value.items()}
    if isinstance(value, BaseRetriever) and depth > 0:
        return describe_retriever(value, depth)
    if isinstance(value, VectorStore):
        from hyde_lc.evaluation.searched_store import describe_store

        collection, where = describe_store(value)
        return {"class": type(value).__name__, "collection": collection, "store": where}
    template = getattr(value, "template", None)
    if isinstance(template, str):
        return template
    return type(value).__name__
