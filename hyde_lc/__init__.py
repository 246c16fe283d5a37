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

from typing import TYPE_CHECKING

import hyde_lc.core.teardown  # noqa: F401  (hyde_lc's own work ends before Python finalises)
from hyde_lc.core.lazy import lazy_exports

if TYPE_CHECKING:
    from hyde_lc.answer import build_answer_chain
    from hyde_lc.errors import HydeLcError, InvalidSettingError
    from hyde_lc.hyde.embeddings import HyDEEmbeddings
    from hyde_lc.hyde.hypothesis_cache import HypothesisCache
    from hyde_lc.hyde.prompts import PROMPTS
    from hyde_lc.ingest.documents import ingest_documents
    from hyde_lc.ingest.files import IngestReport, ingest_paths
    from hyde_lc.ingest.reading import InputLimits
    from hyde_lc.ingest.samples import sample_files
    from hyde_lc.models.loading import load_embeddings, load_llm
    from hyde_lc.retrievers.hyde import HyDEResult, HyDERetriever
    from hyde_lc.retrievers.neighbors import NeighborExpandingRetriever
    from hyde_lc.search.lexical import LexicalSearch
    from hyde_lc.store.vectorstore import collection_info, open_store, refresh_store

_EXPORTS = {
    "PROMPTS": "hyde_lc.hyde.prompts",
    "HyDEResult": "hyde_lc.retrievers.hyde",
    "HyDERetriever": "hyde_lc.retrievers.hyde",
    "HydeLcError": "hyde_lc.errors",
    "HyDEEmbeddings": "hyde_lc.hyde.embeddings",
    "InvalidSettingError": "hyde_lc.errors",
    "HypothesisCache": "hyde_lc.hyde.hypothesis_cache",
    "IngestReport": "hyde_lc.ingest.files",
    "InputLimits": "hyde_lc.ingest.reading",
    "LexicalSearch": "hyde_lc.search.lexical",
    "NeighborExpandingRetriever": "hyde_lc.retrievers.neighbors",
    "build_answer_chain": "hyde_lc.answer",
    "collection_info": "hyde_lc.store.vectorstore",
    "ingest_documents": "hyde_lc.ingest.documents",
    "ingest_paths": "hyde_lc.ingest.files",
    "load_embeddings": "hyde_lc.models.loading",
    "load_llm": "hyde_lc.models.loading",
    "open_store": "hyde_lc.store.vectorstore",
    "refresh_store": "hyde_lc.store.vectorstore",
    "sample_files": "hyde_lc.ingest.samples",
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

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
