"""The store an evaluation searches: where it is, and whether there is anything to search.

Evaluating over an empty or missing collection would retrieve nothing and record answers
the model wrote from its own knowledge, scored as if retrieval had worked. `check_searchable`
refuses such a store before any model runs, naming it and saying what to do. Nothing is
created by the check: `hyde_lc.store.chroma.open_store` creates nothing, and neither does this.

Example:
    >>> from langchain_core.embeddings import DeterministicFakeEmbedding
    >>> from langchain_core.vectorstores import InMemoryVectorStore
    >>> check_searchable(InMemoryVectorStore(DeterministicFakeEmbedding(size=8)))
    Traceback (most recent call last):
    ...
    hyde_lc.errors.StoreError: the InMemoryVectorStore holds no documents: ...

"""

from __future__ import annotations

from typing import Any

from langchain_core.vectorstores import VectorStore

from hyde_lc.errors import StoreError
from hyde_lc.search.stores import is_chroma, store_size

UNKNOWN_CHROMA = "a langchain-chroma store"
"""Where a langchain-chroma ``Chroma`` store lives, as far as its public API says."""


def describe_store(store: VectorStore) -> tuple[str | None, str]:
    """The collection's name (None when the store has no such name) and where it lives.

    A hyde_lc collection gives its folder or server URL; a langchain-chroma ``Chroma``
    store (which does not say publicly where it lives) ``a langchain-chroma store``; any
    other store its class name.
    """
    if not is_chroma(store):
        return None, type(store).__name__
    from hyde_lc.store.chroma import HydeChroma, server_url, store_folder

    if isinstance(store, HydeChroma):
        location = store.location
        return location.collection, str(location.path) if location.path else str(location.url)
    folder = store_folder(store)  # type: ignore[arg-type]
    where = str(folder) if folder else server_url(store)  # type: ignore[arg-type]
    return None, where or UNKNOWN_CHROMA


def _ingest_hint(store: Any) -> str:
    collection, where = describe_store(store)
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

    A hyde_lc (Chroma) collection must exist and hold chunks that searches can see; any
    other store is refused only when it can tell that it is empty (``InMemoryVectorStore``).
    """
    if is_chroma(store):
        from hyde_lc.store.chroma import has_collection, visible_count

        collection, where = describe_store(store)
        name = f"collection {collection!r}" if collection else "the collection"
        if not has_collection(store):  # type: ignore[arg-type]
            raise StoreError(
                f"there is no {name} at {where}: nothing to retrieve, so every answer would "
                f"come from the model's own knowledge. {_ingest_hint(store)}"
            )
        if visible_count(store) == 0:  # type: ignore[arg-type]
            raise StoreError(
                f"{name} at {where} holds no chunks: nothing to retrieve, so every answer "
                f"would come from the model's own knowledge. {_ingest_hint(store)}"
            )
        return
    if store_size(store) == 0:
        raise StoreError(
            f"the {type(store).__name__} holds no documents: nothing to retrieve, so every "
            "answer would come from the model's own knowledge. Add documents to it first "
            "(store.add_documents(...)), or evaluate over a hyde_lc collection (open_store())"
        )
