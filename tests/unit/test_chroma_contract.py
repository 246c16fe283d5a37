"""hyde_lc uses chromadb's and langchain-chroma's public API only.

A grep over the whole package for accesses to the private members of their objects
(``store._client``, ``store._collection``, ``_Chroma__...``, chromadb's ``_server``,
``_system``, the Rust bindings, ...): a private member moves or changes in any patch
release, and a dependency range cannot protect against that. Two uses are allowed, each
pinned below to the text it relies on:

* ``chroma_location._BoundedHttpClient`` sets the timeout of chromadb's HTTP session:
  chromadb 1.5 makes it with ``timeout=None`` and offers no setting for it, and refuses
  any ``chroma_api_impl`` of one's own ("Unsupported Chroma API implementation").
* ``vectorstore.relevance_fn`` calls ``_select_relevance_score_fn`` on a store that was
  given no relevance function: the hook LangChain's `VectorStore` (langchain-core)
  defines for its subclasses; hyde_lc's own store never needs it.
"""

import inspect
import re
from pathlib import Path

import chromadb
from chromadb.api.fastapi import FastAPI
from chromadb.config import Settings
from langchain_chroma import Chroma
from langchain_core.vectorstores import VectorStore

from hyde_lc.store.vectorstore import HydeChroma

PACKAGE = Path(__file__).resolve().parents[2] / "hyde_lc"

PRIVATE = re.compile(
    r"\._(client|collection|chroma_collection|collection_name|collection_metadata"
    r"|collection_configuration|embedding_function|server|session|system|identifier"
    r"|admin_client|select_relevance_score_fn|query_collection)\b"
    r"|_Chroma__|RustBindingsAPI|SharedSystemClient|chromadb\.api\.(rust|segment)"
    r"|getattr\([^)]*[\"']_(client|collection|chroma_collection|collection_name|server"
    r"|session|system|embedding_function)[\"']"
)
"""Private members of chromadb's and langchain-chroma's objects, as hyde_lc would reach them."""

ALLOWED = {
    ("store/location.py", 'session = getattr(getattr(self, "_server", None), "_session", None)'),
    ("search/vectorstore_backend.py", "return vectorstore._select_relevance_score_fn()"),
}
OWN = {"models/local_embeddings.py": re.compile(r"self\._session\b|_session: Any")}
"""hyde_lc's own attributes of the same name: local_embeddings.py's ONNX session."""


def private_uses(text: str, name: str = "<text>") -> list[str]:
    """``name:line: code`` for each line of code in ``text`` that reaches a private member."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0].strip()
        if name in OWN:
            code = OWN[name].sub("", code)
        listed = (name, code) in ALLOWED
        if code and not code.startswith(('"', "`")) and PRIVATE.search(code) and not listed:
            found.append(f"{name}:{number}: {code}")
    return found


def test_no_private_member_of_chromadb_or_langchain_chroma_is_used():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        found += private_uses(path.read_text("utf-8"), str(path.relative_to(PACKAGE)))
    assert found == []


def test_the_check_finds_each_kind_of_private_use():
    old = """
        def _Chroma__query_collection(self, query_texts=None):
        settings = store._client.get_settings()
        got = store._collection.get(ids=ids)
        to_relevance = store._select_relevance_score_fn()
        name = getattr(store, "_collection_name", None)
        from chromadb.api.rust import RustBindingsAPI
        server = getattr(store._client, "_server", None)
        self._chroma_collection = None
    """
    assert len(private_uses(old, "store/chroma.py")) == 8
    # the allowed uses are allowed in their own module only
    elsewhere = "        return vectorstore._select_relevance_score_fn()"
    assert private_uses(elsewhere, "store/reads.py") != []
    assert private_uses(elsewhere, "search/vectorstore_backend.py") == []


def test_the_allowed_private_uses_still_have_no_public_replacement():
    # chromadb's HTTP session has no timeout and no setting for one
    assert "httpx.Client(timeout=None" in inspect.getsource(FastAPI.__init__).replace("\n", "")
    assert not [f for f in Settings.model_fields if "http_timeout" in f or f == "request_timeout"]
    # LangChain's relevance hook is still the one its public method applies
    assert "_select_relevance_score_fn()" in inspect.getsource(
        VectorStore._similarity_search_with_relevance_scores
    )
    assert callable(getattr(chromadb.api.client.Client, "clear_system_cache", None))


def test_every_chroma_method_is_hyde_chromas_own_or_uses_public_methods_only():
    """HydeChroma never reaches Chroma's private state through a method it inherits."""
    through_public = {"encode_image", "get_by_ids", "update_document", "from_documents"}
    inherited = [
        name
        for name, value in vars(Chroma).items()
        if not name.startswith("_")
        and callable(getattr(Chroma, name))
        and name not in vars(HydeChroma)
        and name not in through_public
    ]
    assert inherited == []
    for name in through_public:  # what they call, all public and overridden
        source = inspect.getsource(getattr(Chroma, name))
        assert "self._collection" not in source and "self._client" not in source, name
