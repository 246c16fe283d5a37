"""A vector store as it travels to another process: reopened there, or refused plainly.

A retriever handed to a worker process (``multiprocessing``, ``concurrent.futures``, Ray,
Spark) is pickled. A store's client cannot be: it holds connections, threads and locks of
this process. What travels is where the store lives, and the worker opens it again:

* a hyde_lc collection (`hyde_lc.open_store`) pickles itself that way
  (`HydeChroma.__reduce__`): its folder or its server and collection, and its embeddings;
* langchain-chroma's ``Chroma`` over a folder (``persist_directory``) or a Chroma server
  (``host``/``port``) travels as `ReopenedChroma`: the folder or address, the collection
  name, the embeddings and the relevance function. A server's auth headers do not travel
  (reopen such a store in the worker yourself);
* a ``Chroma`` held in memory (chromadb's ``EphemeralClient``, LangChain's default with
  no folder) lives in this process only: `portable_store` refuses it with a
  `NotPortableError` saying what to do;
* any other store travels as pickle makes it (``InMemoryVectorStore`` is copied with its
  texts and vectors: the worker searches its own copy, which later writes do not reach).

Example:
    >>> import pickle
    >>> from hyde_lc import open_store
    >>> store = open_store("/tmp/store")  # doctest: +SKIP
    >>> pickle.loads(pickle.dumps(store)).location == store.location  # doctest: +SKIP
    True

"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from langchain_core.embeddings import Embeddings

from hyde_lc.errors import NotPortableError

_HOW = (
    "Give the retriever a store another process can open: a folder "
    "(hyde_lc.open_store('/path/to/store'), or Chroma(persist_directory=...)) or a Chroma "
    "server (open_store(url='http://host:8000'))"
)


def _is_langchain_chroma(store: Any) -> bool:
    import sys

    module = sys.modules.get("langchain_chroma")
    return module is not None and isinstance(store, module.Chroma)


@dataclass(frozen=True)
class ReopenedChroma:
    """Where a langchain-chroma ``Chroma`` lives; unpickled, it is that store opened again.

    Example:
        >>> from langchain_core.embeddings import DeterministicFakeEmbedding
        >>> ReopenedChroma("notes", DeterministicFakeEmbedding(size=4), folder="/tmp/c").folder
        '/tmp/c'

    """

    collection: str
    embeddings: Embeddings | None
    folder: str | None = None
    host: str | None = None
    port: int | None = None
    ssl: bool = False
    relevance: Callable[[float], float] | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        return (_open_chroma, tuple(getattr(self, f.name) for f in fields(self)))


def _open_chroma(*settings: Any) -> Any:
    """The ``Chroma`` store a `ReopenedChroma` names, with a client of this process's own."""
    from langchain_chroma import Chroma  # a program on another store never loads chromadb

    from hyde_lc.store.location import check_not_forked

    where = ReopenedChroma(*settings)
    if where.folder is not None:
        check_not_forked(f"the Chroma folder {where.folder}")
        place: dict[str, Any] = {"persist_directory": where.folder}
    else:
        place = {"host": where.host, "port": where.port, "ssl": where.ssl}
    return Chroma(
        collection_name=where.collection,
        embedding_function=where.embeddings,
        relevance_score_fn=where.relevance,
        **place,
    )


def portable_store(store: Any) -> Any:
    """``store`` as it should be pickled for another process (see the module docstring).

    Raises `NotPortableError` for a ``Chroma`` store held in memory.
    """
    if store is None or not _is_langchain_chroma(store) or hasattr(store, "hybrid"):
        return store  # a hyde_lc collection reduces itself; other stores pickle as they do
    settings = store._client.get_settings()
    collection = store._collection.name
    kept = {"embeddings": store.embeddings, "relevance": store.override_relevance_score_fn}
    if settings.is_persistent and settings.persist_directory:
        return ReopenedChroma(collection, folder=str(settings.persist_directory), **kept)
    if settings.chroma_server_host:
        return ReopenedChroma(
            collection,
            host=str(settings.chroma_server_host),
            port=int(settings.chroma_server_http_port or 8000),
            ssl=bool(settings.chroma_server_ssl_enabled),
            **kept,
        )
    raise NotPortableError(
        f"the Chroma collection {collection!r} is held in this process's memory (an "
        "EphemeralClient: Chroma made without persist_directory, host or client), so "
        f"another process cannot open it. {_HOW}; then hand the retriever to the workers."
    )
