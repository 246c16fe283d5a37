"""The Chroma collection: where it lives, which embedding model built it, what it holds.

A hyde_lc collection records the embedding model id and dimension in its Chroma
metadata. Opening it with another embedding model is refused before anything is read or
written: vectors from two models in one index make every search silently wrong. An
empty collection takes the model of its first write.

Opening never writes: nothing is created (no folder, no collection) until the first
write, and a read-only store folder can be searched. Location, in order: the arguments,
then ``HYDE_LC_CHROMA_URL`` (a Chroma server) or ``HYDE_LC_STORE`` (a folder), then
``./.hyde_lc`` in the current working directory. The collection name is
``HYDE_LC_COLLECTION`` or ``hyde_lc``. Every request to a Chroma server waits at most
``HYDE_LC_CHROMA_TIMEOUT`` seconds (default 30).

A document too large for one Chroma write is written in several, and searches must not
see it until it is whole: its *version* (`DOC_VERSION` in each chunk's metadata) is
listed as pending in the collection's metadata (`set_pending`, one atomic metadata
write) while it is written. Every read through `open_store`'s store (searches, MMR,
``get``), `visible_where`, `search_filter` or `collection_info` reads that list fresh
(one request, about 0.2 ms embedded) and leaves pending versions out: searches by asking
for a few more results and dropping pending ones (`query_visible`), since a metadata
filter makes embedded Chroma scan every record's metadata on each query.

Example:
    >>> from hyde_lc import open_store
    >>> store = open_store()  # doctest: +SKIP
    >>> store.similarity_search("Who invented the Fresnel lens?", k=2)  # doctest: +SKIP

"""

from __future__ import annotations

import atexit
import ipaddress
import logging
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import numpy as np
from chromadb.api.client import Client as ChromaClient
from chromadb.config import DEFAULT_DATABASE, DEFAULT_TENANT, Settings
from chromadb.errors import NotFoundError
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from hyde_lc.errors import (
    EmbeddingMismatchError,
    InvalidSettingError,
    StoreError,
    StoreUnavailableError,
)
from hyde_lc.locks import file_lock
from hyde_lc.models import EMBEDDINGS_ENV, embedding_model_id

logger = logging.getLogger(__name__)

DEFAULT_STORE_DIR = ".hyde_lc"
DEFAULT_COLLECTION = "hyde_lc"
META_MODEL = "hyde_lc_embedding_model"
META_DIMENSION = "hyde_lc_embedding_dimension"
META_PENDING = "hyde_lc_pending"
"""Collection metadata: the document versions being written or removed, comma-separated.
Searches leave their chunks out."""
META_HEAD = "hyde_lc_head"
"""Collection metadata: the sequence number of the last finished write (the change feed's
head, `hyde_lc.hybrid_collection`)."""
SEQ = "hyde_lc_seq"
"""Chunk metadata: the sequence number of the write that wrote the chunk."""
DOC_VERSION = "doc_version"
"""Chunk metadata: which version of a document (file, content, chunking) a chunk is of."""
DEFAULT_TIMEOUT_S = 30.0
TIMEOUT_ENV = "HYDE_LC_CHROMA_TIMEOUT"
SQLITE_FILE = "chroma.sqlite3"
COSINE: dict[str, Any] = {"hnsw": {"space": "cosine"}}
_PAGE = 5000
_TEXT_PAGE = 1000
_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9._-]{1,510}[a-zA-Z0-9]")


def _timeout_from(value: float | str | None) -> float:
    """Seconds a Chroma server request may take: ``value``, ``$HYDE_LC_CHROMA_TIMEOUT`` or 30."""
    raw: float | str | None = value if value is not None else os.environ.get(TIMEOUT_ENV)
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return DEFAULT_TIMEOUT_S
    try:
        seconds = float(raw)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds < float("inf"):
        where = "timeout" if value is not None else TIMEOUT_ENV
        raise StoreError(
            f"{where} must be a positive number of seconds (how long a Chroma server may take "
            f"to answer one request), got {raw!r}; e.g. {TIMEOUT_ENV}=30"
        )
    return seconds


def check_collection_name(name: str) -> None:
    """Refuse a collection name Chroma would refuse when it creates the collection.

    Chroma checks names only on creation, which is now the first write: checked here
    too, so that a bad name fails when the store is opened. Chroma's rules: 3-512
    characters of ``[a-zA-Z0-9._-]``, a letter or digit first and last, no ``..``, not
    an IPv4 address.
    """
    bad = not _NAME.fullmatch(name) or ".." in name
    if not bad:
        try:
            ipaddress.IPv4Address(name)
            bad = True
        except ValueError:
            pass
    if bad:
        raise StoreError(
            f"invalid collection name {name!r}: use 3-512 letters, digits, '.', '_' or '-', "
            "starting and ending with a letter or digit (e.g. --collection my_docs)"
        )


@dataclass(frozen=True)
class StoreLocation:
    """Where a collection lives: a folder (embedded Chroma) or a server URL.

    Example:
        >>> StoreLocation.resolve(path="/tmp/x").describe()
        'chroma folder /tmp/x, collection hyde_lc'

    """

    path: Path | None
    url: str | None
    collection: str
    timeout: float = DEFAULT_TIMEOUT_S
    """Seconds one request to a Chroma server may take (``HYDE_LC_CHROMA_TIMEOUT``)."""

    @classmethod
    def resolve(
        cls,
        path: str | os.PathLike | None = None,
        url: str | None = None,
        collection: str | None = None,
        timeout: float | None = None,
    ) -> StoreLocation:
        """Apply arguments, then environment variables, then defaults."""
        if isinstance(path, str) and not path.strip():
            raise StoreError(
                'the store folder is empty (--store ""): give a folder (e.g. --store '
                "./.hyde_lc), or leave it out for $HYDE_LC_STORE or ./.hyde_lc"
            )
        if isinstance(url, str) and not url.strip():
            raise StoreError(
                "the Chroma server URL is empty: give one (e.g. http://127.0.0.1:8000), or "
                "leave it out to use a store folder"
            )
        name = collection or os.environ.get("HYDE_LC_COLLECTION") or DEFAULT_COLLECTION
        if path is None and url is None:
            url = os.environ.get("HYDE_LC_CHROMA_URL") or None
            if url is None:
                path = os.environ.get("HYDE_LC_STORE") or DEFAULT_STORE_DIR
        if path is not None and url is not None:
            raise StoreError("give either a store folder or a Chroma server URL, not both")
        return cls(
            path=Path(path).expanduser().resolve() if path is not None else None,
            url=url,
            collection=name,
            timeout=_timeout_from(timeout),
        )

    def describe(self) -> str:
        """One line for messages and ``info``."""
        where = f"chroma server {self.url}" if self.url else f"chroma folder {self.path}"
        return f"{where}, collection {self.collection}"

    @property
    def server(self) -> str | None:
        """The server's address as ``scheme://host:port`` (None for a folder)."""
        if not self.url:
            return None
        parsed = urlparse(self.url if "://" in self.url else f"http://{self.url}")
        port = parsed.port or (443 if parsed.scheme == "https" else 8000)
        return f"{parsed.scheme}://{parsed.hostname or '127.0.0.1'}:{port}"

    def client(self) -> Any:
        """A chromadb client for this location (telemetry off, nothing fetched).

        For a folder this creates it (and Chroma's database in it) if missing: call it
        only to write, or on a folder that holds a store (`has_store`).
        """
        import chromadb

        settings = Settings(anonymized_telemetry=False)
        if self.url:
            return _http_client(self.url, settings, self.timeout)
        assert self.path is not None
        if self.path.exists() and not self.path.is_dir():
            raise StoreError(f"store location {self.path} is a file, not a folder")
        return chromadb.PersistentClient(path=str(self.path), settings=settings)

    def has_store(self) -> bool:
        """For a folder: whether it holds a Chroma database; a server always may."""
        if self.path is None:
            return True
        if self.path.exists() and not self.path.is_dir():
            raise StoreError(f"store location {self.path} is a file, not a folder")
        return (self.path / SQLITE_FILE).is_file()


class _BoundedHttpClient(ChromaClient):
    """chromadb's HTTP client, with a bounded wait for each request.

    chromadb 1.5 makes its httpx session with no timeout and has no setting for one,
    and its constructor already sends requests (who am I, which tenant): so the timeout
    is put on the session just before the first of them, `get_user_identity`.
    """

    def __init__(self, timeout: float, **kwargs: Any) -> None:
        self._hyde_lc_timeout = timeout
        super().__init__(**kwargs)
        self.bound_requests()

    def get_user_identity(self) -> Any:
        self.bound_requests()
        return super().get_user_identity()

    def bound_requests(self) -> None:
        """Apply the timeout to the session (idempotent)."""
        session = getattr(getattr(self, "_server", None), "_session", None)
        if isinstance(session, httpx.Client):
            session.timeout = httpx.Timeout(self._hyde_lc_timeout)


def _http_client(url: str, settings: Settings, timeout: float) -> Any:
    parsed = urlparse(url if "://" in url else f"http://{url}")
    # What chromadb.HttpClient sets, for a client class of our own.
    settings.chroma_api_impl = "chromadb.api.fastapi.FastAPI"
    settings.chroma_server_host = parsed.hostname or "127.0.0.1"
    settings.chroma_server_http_port = parsed.port or (443 if parsed.scheme == "https" else 8000)
    settings.chroma_server_ssl_enabled = parsed.scheme == "https"
    try:
        return _BoundedHttpClient(
            timeout, tenant=DEFAULT_TENANT, database=DEFAULT_DATABASE, settings=settings
        )
    except Exception as exc:
        if _timed_out(exc):
            raise StoreError(
                f"the Chroma server at {url} did not answer within {timeout:g} s. Check that "
                f"it is a Chroma server and not stuck; if it is only slow, raise {TIMEOUT_ENV} "
                "(seconds)."
            ) from exc
        raise StoreError(
            f"cannot reach the Chroma server at {url} ({exc}). Start it "
            "(chroma run --path DIR --port N) or check HYDE_LC_CHROMA_URL."
        ) from exc


def _timed_out(exc: BaseException) -> bool:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, httpx.TimeoutException):
            return True
        current = current.__cause__ or current.__context__
    return False


# -- reading a folder that cannot be written --------------------------------------------

_READ_ONLY_COPIES: dict[Path, Path] = {}


def _is_read_only(folder: Path) -> bool:
    """Whether this process cannot write a store folder that Chroma must write to open."""
    sqlite = folder / SQLITE_FILE
    if not sqlite.is_file():
        return False
    places = [folder, sqlite, *(p for p in folder.iterdir() if p.is_dir())]
    return not all(os.access(p, os.W_OK) for p in places)


def _read_only_copy(folder: Path) -> Path:
    """A writable copy of a read-only store folder, made once per process, removed at exit.

    Chroma cannot open a store it cannot write (it updates its database on open), so a
    read-only folder (a read-only mount, a shared copy) is read through a private copy.
    """
    if folder in _READ_ONLY_COPIES:
        return _READ_ONLY_COPIES[folder]
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    logger.warning(
        "%s is read-only and Chroma cannot open a store it cannot write: reading a "
        "temporary copy (%.1f MB; set TMPDIR to choose where)",
        folder,
        size / 2**20,
    )
    holder = Path(tempfile.mkdtemp(prefix="hyde-lc-read-only-"))
    atexit.register(shutil.rmtree, holder, ignore_errors=True)
    copy = holder / "store"
    try:
        shutil.copytree(
            folder,
            copy,
            copy_function=shutil.copyfile,  # no permission bits: the copy must be writable
            ignore=shutil.ignore_patterns(LOCK_FILE),
        )
        for root, dirs, _ in os.walk(copy):
            for name in dirs:
                os.chmod(os.path.join(root, name), 0o700)
        os.chmod(copy, 0o700)
    except OSError as exc:
        raise StoreError(
            f"{folder} is read-only, and copying it to {holder} to read it failed "
            f"({exc.strerror or exc}). Copy it somewhere writable yourself and point "
            "--store at the copy"
        ) from exc
    _READ_ONLY_COPIES[folder] = copy
    return copy


# -- the store ----------------------------------------------------------------------------


@dataclass
class _Opened:
    client: Any = None
    collection: Any = None
    copy_of: Path | None = None


def _open_existing(location: StoreLocation) -> _Opened:
    """The client and collection if they exist; creates nothing."""
    if not location.has_store():
        return _Opened()
    opened = _Opened()
    if location.path is not None and _is_read_only(location.path):
        opened.copy_of = location.path
        location = StoreLocation(_read_only_copy(location.path), None, location.collection)
    opened.client = location.client()
    try:
        opened.collection = opened.client.get_collection(location.collection)
    except NotFoundError:
        opened.collection = None
    return opened


class _Handover:
    """What `Chroma.__init__` sees as its client: hands it the collection found, if any."""

    def __init__(self, collection: Any) -> None:
        self.collection = collection

    def get_collection(self, name: str) -> Any:
        return self.collection


class HydeChroma(Chroma):
    """A hyde_lc collection as a LangChain `Chroma` store (what `open_store` returns).

    Opening creates nothing: the store folder and the collection are made by the first
    write, with the embedding model recorded; until then reads see an empty collection.
    Searches and ``get`` leave out the chunks of documents still being written
    (`visible_where`). A read-only store folder is read through a temporary copy, and
    writing to it is refused.

    Example:
        >>> from hyde_lc import open_store
        >>> store = open_store("/tmp/new-store")  # doctest: +SKIP
        >>> store.similarity_search("lamps")  # nothing created yet  # doctest: +SKIP
        []

    """

    def __init__(
        self,
        location: StoreLocation,
        embeddings: Embeddings,
        client: Any = None,
        collection: Any = None,
        copy_of: Path | None = None,
    ) -> None:
        self._location = location
        self._copy_of = copy_of
        self._hyde_lc_client: Any = None
        super().__init__(
            collection_name=location.collection,
            embedding_function=embeddings,
            client=_Handover(collection),  # type: ignore[arg-type]
            collection_configuration=COSINE,  # type: ignore[arg-type]
            create_collection_if_not_exists=False,
        )
        self._hyde_lc_client = client

    # Chroma.__init__ assigns _client; reading it opens the client on first use (which,
    # for a new folder, creates it: only writes get that far).
    @property
    def _client(self) -> Any:
        if self._hyde_lc_client is None:
            self._hyde_lc_client = self._location.client()
        return self._hyde_lc_client

    @_client.setter
    def _client(self, value: Any) -> None:
        self._hyde_lc_client = value

    @property
    def location(self) -> StoreLocation:
        """Where the collection lives."""
        return self._location

    @property
    def read_only_source(self) -> Path | None:
        """The read-only folder this store reads through a temporary copy, if it does."""
        return self._copy_of

    def existing_collection(self) -> Any:
        """The chromadb collection if it exists by now, else None (nothing is created)."""
        if self._chroma_collection is None:
            if self._hyde_lc_client is None and not self._location.has_store():
                return None
            try:
                self._chroma_collection = self._client.get_collection(self._location.collection)
            except NotFoundError:
                return None
        return self._chroma_collection

    @property
    def _collection(self) -> Any:
        found = self.existing_collection()
        return _UnbornCollection(self) if found is None else found

    def create_collection(self) -> Any:
        """The collection, created now (with the embedding model recorded) if missing."""
        found = self.existing_collection()
        if found is not None:
            return found
        embeddings = self.embeddings
        assert embeddings is not None
        metadata = {
            META_MODEL: embedding_model_id(embeddings),
            META_DIMENSION: embedding_dimension(embeddings),
        }
        self._chroma_collection = self._client.get_or_create_collection(
            name=self._location.collection,
            embedding_function=None,
            metadata=metadata,
            configuration=COSINE,
        )
        return self._chroma_collection

    # -- reads leave pending document versions out -----------------------------------------

    # langchain-chroma sends every search (similarity, with scores or vectors, MMR) through
    # this one private method: overriding it keeps pending versions out of all of them.
    def _Chroma__query_collection(
        self,
        query_texts: list[str] | None = None,
        query_embeddings: list[list[float]] | None = None,
        n_results: int = 4,
        where: dict | None = None,
        where_document: dict | None = None,
        **kwargs: Any,
    ) -> Any:
        query: dict[str, Any] = {"query_texts": query_texts, "query_embeddings": query_embeddings}
        return query_visible(
            self, n_results, where=where, where_document=where_document, **query, **kwargs
        )

    def get(
        self,
        ids: str | list[str] | None = None,
        where: Any = None,
        limit: int | None = None,
        offset: int | None = None,
        where_document: Any = None,
        include: list[str] | None = None,
    ) -> dict[str, Any]:
        """LangChain's ``get``, without chunks of pending versions."""
        return super().get(ids, visible_where(self, where), limit, offset, where_document, include)

    # LangChain's writes go through the hybrid collection's one write path: stamped in the
    # change feed, indexed lexically at once, under the collection's lock.

    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict] | None = None,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """LangChain's ``add_texts``; the first write creates the collection (model recorded).

        Texts without an id get a new UUID; an id written before is replaced.
        """
        texts = list(texts)
        given = list(ids) if ids is not None else []
        if ids is not None and len(given) != len(texts):
            raise StoreError(f"add_texts got {len(texts)} texts and {len(given)} ids")
        ids = [str(i) if i is not None else str(uuid.uuid4()) for i in given] or [
            str(uuid.uuid4()) for _ in texts
        ]
        metas = list(metadatas or [])
        metas += [{}] * (len(texts) - len(metas))
        if not texts:
            return []
        assert self.embeddings is not None
        vectors = self.embeddings.embed_documents(texts)
        self._write("upsert", ids, vectors, metas, texts)
        return ids

    def update_documents(self, ids: list[str], documents: list[Document]) -> None:
        """LangChain's ``update_documents``: new texts, metadata and vectors for these ids."""
        if len(ids) != len(documents):
            raise StoreError(f"update_documents got {len(ids)} ids and {len(documents)} documents")
        if not ids:
            return
        assert self.embeddings is not None
        texts = [d.page_content for d in documents]
        vectors = self.embeddings.embed_documents(texts)
        self._write("update", ids, vectors, [dict(d.metadata or {}) for d in documents], texts)

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> None:
        """LangChain's ``delete``: by ``ids``, or by ``where=...`` (Chroma's filter)."""
        if self.existing_collection() is None:
            return
        from hyde_lc.hybrid_collection import HybridCollection

        where = kwargs.get("where")
        with HybridCollection.of(self).writing() as write:
            if ids:
                write.delete([str(i) for i in ids])
            if where:
                write.delete_where(where)

    def _write(self, how: str, ids: list[str], vectors: Any, metas: list, texts: list) -> None:
        from hyde_lc.hybrid_collection import HybridCollection

        batch = max_write(self)
        with HybridCollection.of(self).writing() as write:
            step = getattr(write, how)
            for start in range(0, len(ids), batch):
                end = start + batch
                try:
                    step(ids[start:end], vectors[start:end], metas[start:end], texts[start:end])
                except ValueError as exc:
                    if "metadata" in str(exc).lower():
                        raise ValueError(
                            f"{exc}\n\nChroma stores str, int, float and bool metadata values: "
                            "filter complex metadata from the documents (langchain_community."
                            "vectorstores.utils.filter_complex_metadata)."
                        ) from exc
                    raise


class _UnbornCollection:
    """Stands in for a collection that does not exist yet: empty to read, made by a write."""

    _WRITES = frozenset({"add", "upsert", "update", "modify"})

    def __init__(self, store: HydeChroma) -> None:
        self._store = store
        self.name = store.location.collection
        self.metadata: dict[str, Any] = {}
        self.configuration: dict[str, Any] = COSINE

    def count(self) -> int:
        return 0

    def get(
        self, *args: Any, include: Sequence[str] = ("metadatas", "documents"), **kwargs: Any
    ) -> dict[str, Any]:
        kept: dict[str, Any] = {key: ([] if key in include else None) for key in _RESULT_KEYS}
        return {"ids": [], **kept, "included": list(include)}

    def query(
        self,
        *args: Any,
        include: Sequence[str] = ("metadatas", "documents", "distances"),
        **kwargs: Any,
    ) -> dict[str, Any]:
        count = len(kwargs.get("query_embeddings") or kwargs.get("query_texts") or [None])
        empty: list[list[Any]] = [[] for _ in range(count)]
        kept = {key: (empty if key in include else None) for key in (*_RESULT_KEYS, "distances")}
        return {"ids": empty, **kept, "included": list(include)}

    def peek(self, limit: int = 10) -> dict[str, Any]:
        return self.get()

    def delete(self, *args: Any, **kwargs: Any) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        if name in self._WRITES:
            return getattr(self._store.create_collection(), name)
        raise AttributeError(
            f"collection {self.name!r} does not exist yet (nothing has been written to it)"
        )


_RESULT_KEYS = ("embeddings", "documents", "metadatas", "uris", "data")


def _store_collection(store: Chroma) -> Any:
    """The chromadb collection behind ``store``, or None if it does not exist yet."""
    if isinstance(store, HydeChroma):
        return store.existing_collection()
    return store._collection


def existing_collection(store: Chroma) -> Any:
    """The chromadb collection behind ``store``, or None if it does not exist yet."""
    return _store_collection(store)


def client_of(store: Chroma) -> Any:
    """The chromadb client behind ``store``."""
    return store._client


def collection_name(store: Chroma) -> str | None:
    """The name of ``store``'s collection (None if the store does not say)."""
    location = getattr(store, "location", None)
    name = getattr(location, "collection", None) or getattr(store, "_collection_name", None)
    return str(name) if name else None


def has_collection(store: Chroma) -> bool:
    """Whether ``store``'s collection exists (a store opened by `open_store` may not, yet)."""
    return _store_collection(store) is not None


def has_records(store: Chroma, where: dict) -> bool:
    """Whether any record matches ``where`` (visible or not)."""
    collection = _store_collection(store)
    if collection is None:
        return False
    return bool(collection.get(where=where, limit=1, include=[])["ids"])


def fresh_metadata(store: Chroma) -> dict[str, Any]:
    """The collection's metadata as stored now (another process may have changed it)."""
    collection = _store_collection(store)
    if collection is None:
        return {}
    try:
        return dict(store._client.get_collection(collection.name).metadata or {})
    except NotFoundError:
        return {}


def pending_versions(store: Chroma) -> list[str]:
    """The document versions being written or removed: searches leave them out."""
    return pending_in(fresh_metadata(store))


def pending_in(metadata: dict[str, Any]) -> list[str]:
    """The pending versions listed in collection metadata."""
    raw = metadata.get(META_PENDING) or ""
    return [version for version in str(raw).split(",") if version]


def visible_where(store: Chroma, where: dict | None = None) -> dict | None:
    """``where`` narrowed to the chunks searches may see (none of a pending version).

    Reads the collection's metadata fresh (one request, about 0.25 ms embedded) and
    returns ``where`` unchanged when nothing is pending, which is the normal case.

    Example:
        >>> visible_where(store, {"source": "a.txt"})  # doctest: +SKIP
        {'$and': [{'source': 'a.txt'}, {'doc_version': {'$nin': ['9f0c...']}}]}

    """
    pending = pending_versions(store)
    if not pending:
        return where
    hide: dict[str, Any] = {DOC_VERSION: {"$nin": pending}}
    return {"$and": [where, hide]} if where else hide


def search_filter(store: Chroma, where: dict | None = None) -> dict | None:
    """The ``filter`` for a LangChain search on ``store`` that leaves pending versions out.

    A store from `open_store` leaves them out itself (``where`` comes back unchanged);
    any other `Chroma` over a hyde_lc collection gets `visible_where`.
    """
    return where if isinstance(store, HydeChroma) else visible_where(store, where)


_POST_FILTER_LIMIT = 2048
"""Most results asked for when searching around pending chunks before filtering instead."""


def query_visible(
    store: Chroma, n_results: int, pending: Iterable[str] | None = None, **query: Any
) -> Any:
    """``collection.query(n_results=..., **query)`` without chunks of pending versions.

    Nothing pending: the query as given (plus one metadata read). Otherwise, with no
    filter of the caller's, more results are asked for and pending ones dropped: a
    metadata filter (``$nin``) makes embedded Chroma 1.5 scan its metadata on every
    query (390 ms at 50,000 chunks, against 2 ms for 40 unfiltered results). Where
    pending chunks crowd the neighbourhood past `_POST_FILTER_LIMIT` results, or the
    caller filters anyway, the filter is used. ``pending`` is the list of pending
    versions when the caller has it (else it is read fresh).
    """
    collection = store._collection
    pending = set(pending_versions(store) if pending is None else pending)
    if not pending:
        return collection.query(n_results=n_results, **query)
    queries = query.get("query_embeddings") or query.get("query_texts") or []
    include = list(query.pop("include", None) or ["metadatas", "documents", "distances"])
    hide: dict[str, Any] = {DOC_VERSION: {"$nin": sorted(pending)}}
    if query.get("where") or query.get("where_document") or len(queries) != 1:
        where = query.pop("where", None)
        where = {"$and": [where, hide]} if where else hide
        return collection.query(n_results=n_results, include=include, where=where, **query)
    fetch_include = include if "metadatas" in include else [*include, "metadatas"]
    fetch = 2 * n_results + 8
    while True:
        got: Any = collection.query(n_results=fetch, include=fetch_include, **query)
        metadatas = got["metadatas"][0] if got.get("metadatas") else []
        rows = [
            i for i, meta in enumerate(metadatas) if (meta or {}).get(DOC_VERSION) not in pending
        ]
        exhausted = len(got["ids"][0]) < fetch  # the collection has no more
        if len(rows) >= n_results or exhausted:
            return _rows(got, rows[:n_results], include)
        if fetch >= _POST_FILTER_LIMIT:
            query.pop("where", None)
            return collection.query(n_results=n_results, include=include, where=hide, **query)
        fetch *= 4


def _rows(got: Any, rows: list[int], include: list[str]) -> dict[str, Any]:
    """The given rows of a one-query result, with only the fields ``include`` asks for."""
    out: dict[str, Any] = {}
    for key, value in got.items():
        if key == "included":
            out[key] = include
        elif value is None or (key != "ids" and key not in include):
            out[key] = None
        else:
            out[key] = [[value[0][i] for i in rows]]
    return out


def set_head(store: Chroma, seq: int) -> None:
    """Record ``seq`` as the last finished write (one metadata write; under the write lock)."""
    set_metadata_value(store, META_HEAD, seq)


def set_metadata_value(store: Chroma, key: str, value: Any) -> None:
    """Set one value of the collection's metadata (one read, one write; under the lock)."""
    collection = prepare_write(store)
    metadata = fresh_metadata(store)
    if metadata.get(key) == value:
        return
    metadata[key] = value
    _write_metadata(collection, metadata)


def set_pending(store: Chroma, add: Iterable[str] = (), remove: Iterable[str] = ()) -> list[str]:
    """Change the pending versions in one metadata write (atomic); returns the new list.

    Writers of one embedded folder hold `write_lock`; on a Chroma server two writers
    changing the list at the same instant could lose one change (Chroma has no
    compare-and-set), so give each server collection one writer at a time.
    """
    collection = prepare_write(store)
    metadata = fresh_metadata(store)
    before = pending_in(metadata)
    after = sorted((set(before) | set(add)) - set(remove))
    if after == sorted(before):
        return after
    if after:
        metadata[META_PENDING] = ",".join(after)
    else:
        metadata.pop(META_PENDING, None)
    _write_metadata(collection, metadata)
    return after


def _write_metadata(collection: Any, metadata: dict[str, Any]) -> None:
    metadata.pop("hnsw:space", None)  # set through the configuration, not metadata
    collection.modify(metadata=metadata or {META_PENDING: ""})


# -- searching by vector (what hyde_lc.vectorstore asks of a Chroma store) ------------------


def scored_search(
    store: Chroma, vector: list[float], k: int, search_kwargs: dict[str, Any]
) -> list[tuple[Document, float | None]]:
    """The ``k`` nearest visible chunks with their relevance, higher is better.

    The relevance comes from the collection's own distance function (cosine for hyde_lc
    collections).
    """
    extra = dict(search_kwargs)
    extra["filter"] = search_filter(store, extra.get("filter"))
    to_relevance = store._select_relevance_score_fn()
    return [
        (doc, float(to_relevance(distance)))
        for doc, distance in store.similarity_search_by_vector_with_relevance_scores(
            vector, k=k, **extra
        )
    ]


def vector_hits(
    store: Chroma, vector: list[float], k: int, where: Any = None
) -> list[tuple[str, float]]:
    """The ``k`` nearest visible chunks as ``(id, relevance)``, without reading their texts.

    The dense candidates of a hybrid search: most of them are never returned, so only the
    ones that make the fused ranking are read afterwards (`documents_by_id`). ``where`` is
    the caller's filter only: `query_visible` leaves pending versions out for any store.
    """
    extra: dict[str, Any] = {"where": where} if where else {}
    pending = None
    collection = _store_collection(store)
    if collection is not None and META_MODEL in (collection.metadata or {}):
        from hyde_lc.hybrid_collection import HybridCollection

        pending = HybridCollection.of(store).snapshot().pending  # refreshed at most once a second
    got = query_visible(
        store, k, pending, query_embeddings=[vector], include=["distances"], **extra
    )
    to_relevance = store._select_relevance_score_fn()
    ids, distances = got["ids"][0], got["distances"][0]
    return [(str(i), float(to_relevance(d))) for i, d in zip(ids, distances, strict=True)]


def mmr_search(
    store: Chroma, vector: list[float], k: int, search_kwargs: dict[str, Any]
) -> list[Document]:
    """MMR among visible chunks, as copies with ``metadata["score"]``: cosine to ``vector``.

    LangChain's MMR returns no scores; the cosine is computed from the stored vectors.
    """
    extra = dict(search_kwargs)
    extra["filter"] = search_filter(store, extra.get("filter"))
    docs = [
        d.model_copy(deep=True)
        for d in store.max_marginal_relevance_search_by_vector(vector, k=k, **extra)
    ]
    if not docs:
        return docs
    got = store._collection.get(ids=[str(d.id) for d in docs], include=["embeddings"])
    vectors: list[Any] = list(got["embeddings"] if got["embeddings"] is not None else [])
    stored = dict(zip(got["ids"], vectors, strict=True))
    query = np.asarray(vector, dtype=float)
    query /= max(float(np.linalg.norm(query)), 1e-12)
    for doc in docs:
        row = stored.get(str(doc.id))
        if row is None:
            doc.metadata["score"] = None
        else:
            row = np.asarray(row, dtype=float)
            doc.metadata["score"] = float(row @ query / max(float(np.linalg.norm(row)), 1e-12))
    return docs


def documents_by_id(store: Chroma, ids: Sequence[str], where: Any = None) -> list[Document]:
    """The visible chunks with these ids (matching ``where``, a Chroma filter), unordered."""
    if not ids:
        return []
    hide = visible_where(store, where)
    extra: dict[str, Any] = {"where": hide} if hide else {}
    got = store._collection.get(ids=list(ids), include=["documents", "metadatas"], **extra)
    texts, metas = got["documents"] or [], got["metadatas"] or []
    return [
        Document(page_content=text or "", metadata=dict(meta or {}), id=id_)
        for id_, text, meta in zip(got["ids"], texts, metas, strict=True)
    ]


# -- embedding model ----------------------------------------------------------------------


def embedding_dimension(embeddings: Embeddings) -> int:
    """The vector length of ``embeddings``: declared, else measured on one short text."""
    return declared_dimension(embeddings) or len(embeddings.embed_query("dimension check"))


def _refuse_other_model(where: str, metadata: dict[str, Any], wanted: str, count: int) -> None:
    """Refuse writing or reading ``wanted``'s vectors in a non-empty collection of another."""
    built_with = metadata.get(META_MODEL)
    if count == 0 or built_with == wanted:
        return
    if built_with is None:
        raise StoreError(
            f"{where} holds {count} vectors but no record of their embedding "
            "model (it was not built by hyde_lc). Ingest into a new collection "
            "(--collection NAME) instead."
        )
    raise EmbeddingMismatchError(
        f"{where} was built with embedding model {built_with!r} "
        f"({metadata.get(META_DIMENSION)} dimensions); you asked for {wanted!r}. "
        f"Use --embeddings {built_with} (HYDE_LC_EMBEDDINGS={built_with}), or ingest "
        "into another collection (--collection NAME) to use the new model."
    )


def check_embeddings(store: Chroma, embeddings: Embeddings, location: str = "") -> None:
    """Refuse an embedding model other than the one the collection was built with.

    Reads only: a collection that does not exist yet, or holds nothing, passes (its
    first write records the model); a non-empty one with no record (not built by
    hyde_lc) is refused, since its vectors cannot be vouched for.
    """
    collection = _store_collection(store)
    if collection is None:
        return
    metadata = dict(collection.metadata or {})
    wanted = embedding_model_id(embeddings)
    if metadata.get(META_MODEL) == wanted:
        dimension = declared_dimension(embeddings)
        if dimension is not None:
            check_dimension(store, dimension, location)
        return
    _refuse_other_model(location or collection.name, metadata, wanted, collection.count())


def check_embeddings_for_reading(store: Chroma, embeddings: Embeddings) -> None:
    """Refuse searching a hyde_lc collection with another model than it was built with.

    A collection built by other tools records no model: its owner vouches for the
    embeddings they pass, so it is searched as it is. Reads only.
    """
    collection = _store_collection(store)
    if collection is None or META_MODEL not in (collection.metadata or {}):
        return
    check_embeddings(store, embeddings)


def ensure_writable(store: Chroma) -> None:
    """Refuse to write a store that is read through a copy of a read-only folder."""
    source = store.read_only_source if isinstance(store, HydeChroma) else None
    if source is not None:
        raise StoreError(
            f"{source} is read-only: it can be searched but not written. Make it "
            "writable (chmod -R u+w), or ingest into another store (--store DIR)"
        )


def prepare_write(store: Chroma, dimension: int | None = None) -> Any:
    """Make the collection ready for a write of ``store``'s embeddings; returns it.

    Creates a missing collection with the model recorded; an empty collection takes
    this model (whatever it recorded before); a non-empty one must have been built with
    it, at the same dimension (checked when ``dimension`` is given).
    """
    ensure_writable(store)
    embeddings = store.embeddings
    if embeddings is None:
        raise StoreError("the store has no embedding function; open it with open_store()")
    if isinstance(store, HydeChroma) and store.existing_collection() is None:
        store.create_collection()
    collection = store._collection
    metadata = fresh_metadata(store)
    wanted = embedding_model_id(embeddings)
    if metadata.get(META_MODEL) == wanted:
        if dimension is not None:
            check_dimension(store, dimension)
        return collection
    _refuse_other_model(collection.name, metadata, wanted, collection.count())
    metadata.pop(META_PENDING, None)  # an empty collection has nothing pending
    metadata.update(
        {META_MODEL: wanted, META_DIMENSION: dimension or embedding_dimension(embeddings)}
    )
    _write_metadata(collection, metadata)
    return collection


def declared_dimension(embeddings: Embeddings) -> int | None:
    """The vector length an embeddings object states (``dimension``/``dimensions``), if any."""
    for attr in ("dimension", "dimensions"):
        value = getattr(embeddings, attr, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def check_dimension(store: Chroma, dimension: int, location: str = "") -> None:
    """Refuse vectors of another length than the collection records (same model id).

    Raises `EmbeddingMismatchError` before anything is searched or written; Chroma's own
    error would come later and not say what to do. An empty collection passes.
    """
    collection = _store_collection(store)
    if collection is None:
        return
    metadata = collection.metadata or {}
    recorded = metadata.get(META_DIMENSION)
    if recorded is None or int(recorded) == dimension or collection.count() == 0:
        return
    model = metadata.get(META_MODEL)
    raise EmbeddingMismatchError(
        f"{location or collection.name} holds {recorded}-dimensional vectors from "
        f"{model!r}, but these embeddings give {dimension} dimensions (same model name, "
        f"other settings?). Use the settings the collection was built with ({recorded} "
        "dimensions), or ingest into another collection (--collection NAME)."
    )


# -- opening --------------------------------------------------------------------------------


def collection_exists(location: StoreLocation) -> bool:
    """Whether the collection exists, without creating the store or the collection."""
    try:
        return _open_existing(location).collection is not None
    except StoreError:
        raise
    except Exception as exc:
        raise StoreError(f"cannot open {location.describe()}: {exc}") from exc


def open_store(
    path: str | os.PathLike | None = None,
    *,
    url: str | None = None,
    collection: str | None = None,
    embeddings: Embeddings | None = None,
    timeout: float | None = None,
) -> HydeChroma:
    """Open a hyde_lc collection as a LangChain `Chroma` store; creates nothing.

    With no arguments: the collection ``hyde_lc`` in ``./.hyde_lc`` with the default
    embeddings. The embedding model is checked against the one the collection was
    built with (`EmbeddingMismatchError` when they differ). A missing folder or
    collection is created by the first write; ``timeout`` (seconds, default
    ``$HYDE_LC_CHROMA_TIMEOUT`` or 30) bounds each request to a Chroma server.
    """
    location = StoreLocation.resolve(path, url, collection, timeout)
    check_collection_name(location.collection)
    try:
        opened = _open_existing(location)
    except StoreError:
        raise
    except Exception as exc:  # chromadb's errors: damaged database, ...
        raise StoreError(f"cannot open {location.describe()}: {exc}") from exc
    embeddings = embeddings or _default_embeddings(opened.collection)
    store = HydeChroma(location, embeddings, opened.client, opened.collection, opened.copy_of)
    check_embeddings(store, embeddings, location.describe())
    return store


def _default_embeddings(collection: Any) -> Embeddings:
    """The model an existing collection records, else ``$HYDE_LC_EMBEDDINGS`` or MiniLM.

    A collection built with the multilingual embedder is then opened with it without
    ``--embeddings``; a model named by the environment still wins (and a different one
    is refused by the model check, as before).
    """
    from hyde_lc import models  # looked up at call time, as the CLI does

    recorded = None
    if collection is not None and not os.environ.get(EMBEDDINGS_ENV):
        recorded = (collection.metadata or {}).get(META_MODEL)
    if isinstance(recorded, str) and recorded.startswith("local:"):
        try:
            return models.load_embeddings(recorded)
        except InvalidSettingError:  # a local model this version does not know
            pass
    return models.load_embeddings()


# -- reading everything -------------------------------------------------------------------


def iter_pages(
    store: Chroma,
    where: dict | None = None,
    include: Sequence[str] = ("metadatas",),
    page_size: int = _PAGE,
) -> Iterator[dict[str, Any]]:
    """The collection's records matching ``where``, ``page_size`` at a time (memory bounded).

    ``where`` is used as given: pass it through `visible_where` to see what searches see.
    """
    collection = _store_collection(store)
    if collection is None:
        return
    offset = 0
    while True:
        page = collection.get(where=where, include=list(include), limit=page_size, offset=offset)
        if page["ids"]:
            yield page
        if len(page["ids"]) < page_size:
            return
        offset += page_size


def iter_metadatas(store: Chroma, where: dict | None = None) -> list[tuple[str, dict]]:
    """All (id, metadata) pairs of the collection matching ``where`` (no embeddings)."""
    out: list[tuple[str, dict]] = []
    for page in iter_pages(store, where):
        metadatas: list[Any] = list(page["metadatas"] or [{}] * len(page["ids"]))
        out.extend(
            (id_, dict(meta or {})) for id_, meta in zip(page["ids"], metadatas, strict=True)
        )
    return out


SCRIPT_NOT_RECORDED = "unknown"
"""The script reported for chunks ingested before chunks recorded their script."""


def collection_info(store: Chroma) -> dict[str, Any]:
    """Facts about a collection: chunks, documents, scripts, embedding model and dimension.

    Counts what searches see. ``scripts`` counts chunks per script of their document
    (``latin``, ``cjk``, ...; `SCRIPT_NOT_RECORDED` for chunks ingested before chunks
    recorded it), most chunks first; each document lists its own ``script``. Documents
    whose writing was interrupted are listed apart under ``incomplete`` (chunks written
    so far, of how many): searches do not see them until the same file is ingested
    again, which completes them.

    Example:
        >>> info = collection_info(open_store())  # doctest: +SKIP
        >>> info["scripts"]  # doctest: +SKIP
        {'latin': 41, 'cjk': 12}

    """
    metadata = fresh_metadata(store)
    pending = pending_in(metadata)
    documents: dict[str, dict[str, Any]] = {}
    scripts: dict[str, int] = {}
    visible = 0
    where = {DOC_VERSION: {"$nin": pending}} if pending else None
    for page in iter_pages(store, where):
        for meta in page["metadatas"] or []:
            meta = meta or {}
            visible += 1
            source = str(meta.get("source", "?"))
            script = str(meta.get("script") or SCRIPT_NOT_RECORDED)
            scripts[script] = scripts.get(script, 0) + 1
            entry = documents.setdefault(
                source,
                {
                    "source": source,
                    "doc_id": meta.get("doc_id"),
                    "chunks": 0,
                    "pages": set(),
                    "script": script,
                },
            )
            entry["chunks"] += 1
            if "page" in meta:
                last = int(meta.get("page_end", meta["page"]))
                entry["pages"].update(range(int(meta["page"]), last + 1))
    incomplete: dict[str, dict[str, Any]] = {}
    if pending:
        for page in iter_pages(store, {DOC_VERSION: {"$in": pending}}):
            for meta in page["metadatas"] or []:
                meta = meta or {}
                entry = incomplete.setdefault(
                    str(meta.get(DOC_VERSION)),
                    {
                        "source": str(meta.get("source", "?")),
                        "doc_id": meta.get("doc_id"),
                        "chunks_written": 0,
                        "chunk_count": meta.get("chunk_count"),
                    },
                )
                entry["chunks_written"] += 1
    return {
        "collection": store._collection.name,
        "chunks": visible,
        "documents": [
            {**doc, "pages": len(doc["pages"])}
            for doc in sorted(documents.values(), key=lambda d: d["source"])
        ],
        "incomplete": sorted(incomplete.values(), key=lambda d: d["source"]),
        "scripts": dict(sorted(scripts.items(), key=lambda item: (-item[1], item[0]))),
        "embedding_model": metadata.get(META_MODEL),
        "embedding_dimension": metadata.get(META_DIMENSION),
    }


# -- writing --------------------------------------------------------------------------------


def max_write(store: Chroma) -> int:
    """The most records Chroma takes in one call (5,461 for embedded Chroma 1.5)."""
    try:
        return max(1, int(store._client.get_max_batch_size()))
    except Exception:
        return 1000


def present_ids(store: Chroma, ids: Sequence[str]) -> set[str]:
    """Which of ``ids`` the collection holds (visible or not)."""
    collection = _store_collection(store)
    if collection is None or not ids:
        return set()
    return set(collection.get(ids=list(ids), include=[])["ids"])


# -- servers ------------------------------------------------------------------------------


def server_url(store: Chroma) -> str | None:
    """The address of the Chroma server behind ``store``; None for an embedded store."""
    if isinstance(store, HydeChroma):
        return store.location.server
    try:
        settings = store._client.get_settings()
    except Exception:
        return None
    if settings.is_persistent or not settings.chroma_server_host:
        return None
    scheme = "https" if settings.chroma_server_ssl_enabled else "http"
    return f"{scheme}://{settings.chroma_server_host}:{settings.chroma_server_http_port}"


def lost_server(
    store: Chroma, exc: BaseException, resume: str = "rerun the same command to resume"
) -> StoreUnavailableError | None:
    """The error to raise when ``exc`` means ``store``'s Chroma server can no longer be reached.

    That is: somewhere in ``exc``'s chain (causes and contexts) a connection error of a
    request to this store's server (refused, reset, cut mid-reply, or no answer within
    the timeout). None for anything else, including connection errors to other hosts (a
    remote LLM's, say), so that callers can keep treating those as the failure of one
    step. ``resume`` ends the message: how the caller's work continues once the server
    is back.

    Example:
        >>> from hyde_lc import open_store
        >>> store = open_store(url="http://127.0.0.1:8000")  # doctest: +SKIP
        >>> try:
        ...     store.similarity_search("lamps")  # the server was stopped meanwhile
        ... except Exception as exc:
        ...     raise (lost_server(store, exc) or exc) from exc  # doctest: +SKIP

    """
    url = server_url(store)
    if url is None:
        return None
    wanted = httpx.URL(url)
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, httpx.TransportError):
            try:
                target = current.request.url
            except RuntimeError:  # no request attached: cannot tell whose it was
                target = None
            if target is not None and (target.host, target.port) == (wanted.host, wanted.port):
                if isinstance(current, httpx.TimeoutException):
                    where = getattr(store, "location", None)
                    seconds = f" within {where.timeout:g} s" if where else ""
                    return StoreUnavailableError(
                        f"the Chroma server at {url} did not answer{seconds} "
                        f"({type(current).__name__}). Check that it is running and not "
                        f"stuck; if it is only slow, raise {TIMEOUT_ENV} (seconds). Then "
                        f"{resume}."
                    )
                return StoreUnavailableError(
                    f"lost the Chroma server at {url} ({type(current).__name__}: {current}). "
                    f"Start it again on the same data folder (chroma run --path DIR "
                    f"--host {wanted.host} --port {wanted.port}), then {resume}."
                )
        current = current.__cause__ or current.__context__
    return None


@contextmanager
def server_lost_as_error(store: Chroma, resume: str) -> Iterator[None]:
    """Run the block; a lost connection to ``store``'s server becomes `lost_server`'s error.

    Every other failure passes through unchanged.
    """
    try:
        yield
    except Exception as exc:
        lost = lost_server(store, exc, resume)
        if lost is None:
            raise
        raise lost from exc


# -- one writer per folder ----------------------------------------------------------------

LOCK_FILE = "hyde_lc.lock"
"""In an embedded store's folder: locked (``flock``) by whichever process is writing it."""


def store_folder(store: Chroma) -> Path | None:
    """The folder of an embedded (persistent) Chroma store; None for a server or in memory."""
    if isinstance(store, HydeChroma):
        return store.location.path
    try:
        settings = store._client.get_settings()
    except Exception:
        return None
    if not settings.is_persistent or not settings.persist_directory:
        return None
    return Path(settings.persist_directory)


def refresh_store(store: Chroma) -> None:
    """Reload this process's view of an embedded store from disk.

    Embedded Chroma keeps each collection's vector index in memory, loaded once per
    process: writes made by another process since then are invisible to this one's
    searches (chroma-core/chroma#3792), and a write on top of such a stale index would
    drop the other process's vectors from the index. `write_lock` calls this once it
    holds the lock; a long-lived reader can call it to see what others ingested. Calls
    already running finish on the old view. A no-op for a Chroma server, and for a
    store whose client is not open yet.
    """
    if store_folder(store) is None:
        return
    if isinstance(store, HydeChroma) and store._hyde_lc_client is None:
        return
    from chromadb.api.rust import RustBindingsAPI

    server = getattr(store._client, "_server", None)
    if isinstance(server, RustBindingsAPI):
        server.start()  # fresh bindings: the old ones go when their last call returns


@contextmanager
def write_lock(store: Chroma) -> Iterator[None]:
    """Be the only writer of an embedded store while the block runs (processes and threads).

    Embedded Chroma is not process-safe: two processes writing one folder at once
    corrupt its vector index. So writers take an exclusive lock on ``hyde_lc.lock`` in
    the folder (creating the folder: call this only to write), and anyone else waits for
    it; the operating system releases it when its holder exits or is killed, so a crash
    never leaves it stuck. Once the lock is held, the store is refreshed
    (`refresh_store`) so the write builds on what other processes wrote. A Chroma server
    orders concurrent writes itself: no lock there.
    """
    folder = store_folder(store)
    if folder is None:
        yield
        return
    ensure_writable(store)
    folder.mkdir(parents=True, exist_ok=True)
    with file_lock(folder / LOCK_FILE, waiting_note=f"{folder} is being written"):
        refresh_store(store)
        yield


# -- what the lexical index and neighbour expansion read ----------------------------------


def visible_count(store: Chroma) -> int:
    """Chunks searches can see: all of them but those of pending document versions."""
    collection = _store_collection(store)
    if collection is None:
        return 0
    total = int(collection.count())
    pending = pending_versions(store)
    if not pending:
        return total
    hidden = collection.get(where={DOC_VERSION: {"$in": pending}}, include=[])["ids"]
    return total - len(hidden)


def iter_chunks(store: Chroma, where: dict | None = None) -> Iterator[Document]:
    """Every chunk searches can see (matching ``where``), as Documents, a page at a time.

    Pages of `_TEXT_PAGE` chunks: with their texts, a page of 5,000 large chunks alone
    would hold about 10 MB.
    """
    include = ("documents", "metadatas")
    for page in iter_pages(store, visible_where(store, where), include, page_size=_TEXT_PAGE):
        texts, metas = page["documents"] or [], page["metadatas"] or []
        for id_, text, meta in zip(page["ids"], texts, metas, strict=True):
            yield Document(page_content=text or "", metadata=dict(meta or {}), id=id_)


def chunks_around(
    store: Chroma, sources: Sequence[str], doc_ids: Sequence[str] | None, indexes: Sequence[int]
) -> list[Document]:
    """Visible chunks of these documents at these positions (a superset to narrow).

    For collections whose chunks carry no derivable ids: the documents (by doc id, else
    by source) and positions as two ``$in`` lists, 4-10x faster in Chroma than an
    ``$or`` of one range per window.
    """
    if doc_ids is not None:
        documents: Any = {"doc_id": {"$in": sorted(set(doc_ids))}}
    else:
        documents = {"source": {"$in": sorted(set(sources))}}
    where = visible_where(
        store, {"$and": [documents, {"chunk_index": {"$in": sorted(set(indexes))}}]}
    )
    collection = _store_collection(store)
    if collection is None:
        return []
    got = collection.get(where=where, include=["documents", "metadatas"])
    texts, metas = got["documents"] or [], got["metadatas"] or []
    return [
        Document(page_content=text or "", metadata=dict(meta or {}), id=id_)
        for id_, text, meta in zip(got["ids"], texts, metas, strict=True)
    ]


LEXICAL_FOLDER = "hyde_lc_lexical"
"""In an embedded store's folder: one lexical index per collection."""


def lexical_folder(store: Chroma) -> Path | None:
    """Where a hyde_lc collection's lexical index lives; None for other collections.

    Beside the collection in a writable store folder; for a Chroma server or a read-only
    folder, in this machine's cache (``$HYDE_LC_CACHE_DIR/lexical``), keyed by where the
    collection lives, and kept current from the collection like any other.
    """
    import hashlib

    from hyde_lc.weights import cache_dir

    collection = _store_collection(store)
    if collection is None or META_MODEL not in (collection.metadata or {}):
        return None
    name = f"{collection.name}-{collection.id}"
    folder = store_folder(store)
    read_only = isinstance(store, HydeChroma) and store.read_only_source is not None
    if folder is not None and not read_only:
        return folder / LEXICAL_FOLDER / name
    where = server_url(store) or str(folder)
    key = hashlib.sha256(where.encode("utf-8")).hexdigest()[:12]
    return cache_dir() / "lexical" / f"{key}-{name}"
