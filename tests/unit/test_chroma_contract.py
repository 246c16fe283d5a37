"""The private members of chromadb and langchain-chroma that hyde_lc still relies on.

They are used in the Chroma adapter modules only, and pinned here: an upgrade of either
library that moves one of them fails this test, naming it, instead of failing at run time.
The dependency ranges in pyproject.toml are narrowed to the releases checked.
"""

import inspect
import re
from importlib.metadata import version
from pathlib import Path

import chromadb
from chromadb.api.fastapi import FastAPI
from chromadb.api.rust import RustBindingsAPI
from langchain_chroma import Chroma
from langchain_core.vectorstores import VectorStore

PACKAGE = Path(__file__).resolve().parents[2] / "hyde_lc"
ADAPTERS = {"store.py", "store_state.py", "store_reads.py", "chroma_location.py"}
"""Where hyde_lc talks to Chroma below LangChain's and chromadb's public API."""
PRIVATE = re.compile(
    r"\._(client|collection|chroma_collection|collection_name|server|session)\b"
    r"|_Chroma__|RustBindingsAPI|\._select_relevance_score_fn"
)


def test_private_members_of_chroma_are_used_only_in_the_adapter_modules():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name in ADAPTERS or path.name == "local_embeddings.py":  # its own _session
            continue
        for number, line in enumerate(path.read_text("utf-8").splitlines(), 1):
            if PRIVATE.search(line) and not line.lstrip().startswith(("#", '"', "`", "into")):
                found.append(f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}")
    # vectorstore.py: LangChain's documented hook for a store's own relevance function
    assert [f for f in found if "_select_relevance_score_fn()" not in f] == []


def test_the_private_members_relied_on_exist_in_the_installed_releases():
    assert chromadb.__version__.startswith("1.5."), chromadb.__version__
    assert version("langchain-chroma").startswith("1.1."), version("langchain-chroma")
    init = inspect.getsource(Chroma.__init__)
    assert "self._client = client" in init and "self._chroma_collection" in init
    assert "self._collection_name = collection_name" in init
    assert isinstance(inspect.getattr_static(Chroma, "_collection"), property)
    # every LangChain search goes through this one method, which HydeChroma overrides
    assert callable(getattr(Chroma, "_Chroma__query_collection", None))
    assert "self.__query_collection(" in inspect.getsource(Chroma)
    assert callable(getattr(VectorStore, "_select_relevance_score_fn", None))
    assert callable(getattr(RustBindingsAPI, "start", None))  # fresh bindings for a reload
    assert "self._session = httpx.Client(" in inspect.getsource(FastAPI.__init__)  # timeout
