"""The store an evaluation searches: where it is, and whether there is anything to search.

Evaluating over an empty or missing collection would retrieve nothing and record answers
the model wrote from its own knowledge, scored as if retrieval had worked. `check_searchable`
refuses such a store before any model runs, naming it and saying what to do. Nothing is
created by the check: `hyde_lc.store.vectorstore.open_store` creates nothing, and neither does this.

Example:
    >>> from langchain_core.embeddings import DeterministicFakeEmbedding
    >>> from langchain_core.vectorstores import InMemoryVectorStore
    >>> check_searchable(InMemoryVectorStore(DeterministicFakeEmbedding(size=8)))
    Traceback (most recent call last):
    ...
    hyde_lc.errors.StoreError: the InMemoryVectorStore holds no documents: ...

"""

from __future__ import annotations

from langchain_core.vectorstores import VectorStore

from hyde_lc.errors import StoreError
from hyde_lc.search.backend import backend_for
from hyde_lc.search.chroma_backend import UNKNOWN_CHROMA, ChromaBackend

__all__ = ["UNKNOWN_CHROMA", "check_searchable", "describe_store"]


def describe_store(store: VectorStore) -> tuple[str | None, str]:
    """The collection's name (None when the store has no such name) and where it lives.

    A hyde_lc collection gives its folder or server URL; a langchain-chroma ``Chroma``
    store (which does not say publicly where it lives) ``a langchain-chroma store``; any
    other store its class name.
    """
    return backend_for(store, "off").describe()


def _ingest_hint(collection: str | None, where: str) -> str:
    server = where.startswith(("http://", "https://"))
    flags = f" --chroma-url {where}" if server else f" --store {where}"
    if where == UNKNOWN_CHROMA:
        flags = ""
    if collection:
        flags += f" --collection {collection}"
    return (
        f"ingest documents into it first (`hyde-lc ingest PATH...{flags}`, or "
        "hyde_lc.ingest_paths([...], store)), or open the store that holds them "
        "(open_store(PATH, collection=NAME), or --store / --collection)"
    )


def check_searchable(store: VectorStore) -> None:
    """Raise `StoreError` when ``store`` has nothing to search (missing or empty).

    A Chroma collection must exist and hold chunks that searches can see; any other
    store is refused only when it can tell that it is empty (``InMemoryVectorStore``).
    """
    backend = backend_for(store, "off")
    if isinstance(backend, ChromaBackend):
        collection, where = backend.describe()
        name = f"collection {collection!r}" if collection else "the collection"
        if not backend.exists():
            raise StoreError(
                f"there is no {name} at {where}: nothing to retrieve, so every answer would "
                f"come from the model's own knowledge. {_ingest_hint(collection, where)}"
            )
        if backend.size() == 0:
            raise StoreError(
                f"{name} at {where} holds no chunks: nothing to retrieve, so every answer "
                f"would come from the model's own knowledge. {_ingest_hint(collection, where)}"
            )
        return
    if backend.size() == 0:
        raise StoreError(
            f"the {type(store).__name__} holds no documents: nothing to retrieve, so every "
            "answer would come from the model's own knowledge. Add documents to it first "
            "(store.add_documents(...)), or evaluate over a hyde_lc collection (open_store())"
        )
