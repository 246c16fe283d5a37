"""hyde_lc: HyDE retrieval-augmented generation for LangChain, offline-first.

The public names below are imported on first use, so ``import hyde_lc`` is quick and
loads neither LangChain nor Chroma nor a model runtime until something needs them.

Example:
    >>> from hyde_lc import HyDERetriever, build_answer_chain, ingest_paths, load_llm
    >>> from hyde_lc import open_store, sample_files
    >>> store = open_store()  # doctest: +SKIP
    >>> ingest_paths(sample_files(), store)  # doctest: +SKIP
    >>> retriever = HyDERetriever(vectorstore=store, hypothesis_llm=load_llm(role="hypothesis"))
    ... # doctest: +SKIP
    >>> build_answer_chain(retriever, load_llm(role="answer")).invoke("...")  # doctest: +SKIP

"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hyde_lc.answer import build_answer_chain
    from hyde_lc.document_ingest import ingest_documents
    from hyde_lc.documents import InputLimits
    from hyde_lc.errors import HydeLcError, InvalidSettingError
    from hyde_lc.hyde_embeddings import HyDEEmbeddings
    from hyde_lc.hypothesis_cache import HypothesisCache
    from hyde_lc.ingest import IngestReport, ingest_paths
    from hyde_lc.lexical import LexicalSearch
    from hyde_lc.models import load_embeddings, load_llm
    from hyde_lc.neighbors import NeighborExpandingRetriever
    from hyde_lc.prompts import PROMPTS
    from hyde_lc.retriever import HyDEResult, HyDERetriever
    from hyde_lc.samples import sample_files
    from hyde_lc.store import collection_info, open_store, refresh_store

_EXPORTS = {
    "PROMPTS": "hyde_lc.prompts",
    "HyDEResult": "hyde_lc.retriever",
    "HyDERetriever": "hyde_lc.retriever",
    "HydeLcError": "hyde_lc.errors",
    "HyDEEmbeddings": "hyde_lc.hyde_embeddings",
    "InvalidSettingError": "hyde_lc.errors",
    "HypothesisCache": "hyde_lc.hypothesis_cache",
    "IngestReport": "hyde_lc.ingest",
    "InputLimits": "hyde_lc.documents",
    "LexicalSearch": "hyde_lc.lexical",
    "NeighborExpandingRetriever": "hyde_lc.neighbors",
    "build_answer_chain": "hyde_lc.answer",
    "collection_info": "hyde_lc.store",
    "ingest_documents": "hyde_lc.document_ingest",
    "ingest_paths": "hyde_lc.ingest",
    "load_embeddings": "hyde_lc.models",
    "load_llm": "hyde_lc.models",
    "open_store": "hyde_lc.store",
    "refresh_store": "hyde_lc.store",
    "sample_files": "hyde_lc.samples",
}
"""Public name -> the module that defines it."""

__all__ = [
    "PROMPTS",
    "HyDEEmbeddings",
    "HyDEResult",
    "HyDERetriever",
    "HydeLcError",
    "HypothesisCache",
    "IngestReport",
    "InputLimits",
    "InvalidSettingError",
    "LexicalSearch",
    "NeighborExpandingRetriever",
    "build_answer_chain",
    "collection_info",
    "ingest_documents",
    "ingest_paths",
    "load_embeddings",
    "load_llm",
    "open_store",
    "refresh_store",
    "sample_files",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """Import a public name from its module on first use (PEP 562)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'hyde_lc' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
