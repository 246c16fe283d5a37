"""hyde_lc: HyDE retrieval-augmented generation for LangChain, offline-first.

Example:
    >>> from hyde_lc import HyDERetriever, build_answer_chain, ingest_paths, load_llm, open_store
    >>> store = open_store()  # doctest: +SKIP
    >>> ingest_paths(["report.pdf"], store)  # doctest: +SKIP
    >>> retriever = HyDERetriever(vectorstore=store, hypothesis_llm=load_llm(role="hypothesis"))
    ... # doctest: +SKIP
    >>> build_answer_chain(retriever, load_llm(role="answer")).invoke("...")  # doctest: +SKIP

"""

from hyde_lc.answer import build_answer_chain
from hyde_lc.errors import HydeLcError
from hyde_lc.ingest import IngestReport, ingest_paths
from hyde_lc.models import load_embeddings, load_llm
from hyde_lc.neighbors import NeighborExpandingRetriever
from hyde_lc.prompts import PROMPTS
from hyde_lc.retriever import HyDEResult, HyDERetriever
from hyde_lc.store import collection_info, open_store

__all__ = [
    "PROMPTS",
    "HyDEResult",
    "HyDERetriever",
    "HydeLcError",
    "IngestReport",
    "NeighborExpandingRetriever",
    "build_answer_chain",
    "collection_info",
    "ingest_paths",
    "load_embeddings",
    "load_llm",
    "open_store",
]
__version__ = "0.1.0"
