"""A vector store as it travels to another process: reopened there, or refused plainly.

A retriever handed to a worker process (``multiprocessing``, ``concurrent.futures``, Ray,
Spark) is pickled. A store's client cannot be: it holds connections, threads and locks of
this process. What travels is where the store lives, and the worker opens it again:

* a hyde_lc collection (`hyde_lc.open_store`) pickles itself that way
  (`HydeChroma.__reduce__`): its folder or its server and collection, and its embeddings;
* langchain-chroma's ``Chroma`` does not say through its public API where it lives (a
  folder, a server, or this process's memory), so `portable_store` refuses it with a
  `NotPortableError` saying what to do: open the collection with `hyde_lc.open_store`;
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

import sys
from typing import Any

from hyde_lc.errors import NotPortableError


def portable_store(store: Any) -> Any:
    """``store`` as it should be pickled for another process (see the module docstring).

    Raises `NotPortableError` for langchain-chroma's ``Chroma``.
    """
    module = sys.modules.get("langchain_chroma")
    if module is None or not isinstance(store, module.Chroma) or hasattr(store, "hybrid"):
        return store  # a hyde_lc collection reduces itself; other stores pickle as they do
    raise NotPortableError(
        "langchain-chroma's Chroma does not say where it lives (a folder, a server, or this "
        "process's memory), so another process cannot open it again. Open the collection "
        "with hyde_lc.open_store('/path/to/folder', collection=NAME), or on a Chroma server "
        "with open_store(url='http://host:8000', collection=NAME), and give the retriever "
        "that store; or build the retriever in each worker (in the pool's initializer)"
    )
