"""The Chroma collection: where it lives, which embedding model built it, what it holds.

A hyde_lc collection records the embedding model id and dimension in its Chroma
metadata when it is created. Opening it with another embedding model is refused
before anything is read or written: vectors from two models in one index make every
search silently wrong.

Location, in order: the arguments, then ``HYDE_LC_CHROMA_URL`` (a Chroma server) or
``HYDE_LC_STORE`` (a folder), then ``./.hyde_lc`` in the current working directory.
The collection name is ``HYDE_LC_COLLECTION`` or ``hyde_lc``.

Example:
    >>> from hyde_lc import open_store
    >>> store = open_store()  # doctest: +SKIP
    >>> store.similarity_search("Who invented the Fresnel lens?", k=2)  # doctest: +SKIP

"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from langchain_chroma import Chroma
from langchain_core.embeddings import Embeddings

from hyde_lc.errors import EmbeddingMismatchError, StoreError, StoreUnavailableError
from hyde_lc.models import embedding_model_id, load_embeddings

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory file locks
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

DEFAULT_STORE_DIR = ".hyde_lc"
DEFAULT_COLLECTION = "hyde_lc"
META_MODEL = "hyde_lc_embedding_model"
META_DIMENSION = "hyde_lc_embedding_dimension"
_PAGE = 5000


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

    @classmethod
    def resolve(
        cls,
        path: str | os.PathLike | None = None,
        url: str | None = None,
        collection: str | None = None,
    ) -> StoreLocation:
        """Apply arguments, then environment variables, then defaults."""
        name = collection or os.environ.get("HYDE_LC_COLLECTION") or DEFAULT_COLLECTION
        if path is None and url is None:
            url = os.environ.get("HYDE_LC_CHROMA_URL") or None
            if url is None:
                path = os.environ.get("HYDE_LC_STORE") or DEFAULT_STORE_DIR
        if path is not None and url is not None:
            raise StoreError("give either a store folder or a Chroma server URL, not both")
        return cls(
            path=Path(path).expanduser().resolve() if path else None, url=url, collection=name
        )

    def describe(self) -> str:
        """One line for messages and ``info``."""
        where = f"chroma server {self.url}" if self.url else f"chroma folder {self.path}"
        return f"{where}, collection {self.collection}"

    def client(self) -> Any:
        """A chromadb client for this location (telemetry off, nothing fetched)."""
        import chromadb
        from chromadb.config import Settings

        settings = Settings(anonymized_telemetry=False)
        if self.url:
            parsed = urlparse(self.url if "://" in self.url else f"http://{self.url}")
            try:
                return chromadb.HttpClient(
                    host=parsed.hostname or "127.0.0.1",
                    port=parsed.port or (443 if parsed.scheme == "https" else 8000),
                    ssl=parsed.scheme == "https",
                    settings=settings,
                )
            except Exception as exc:
                raise StoreError(
                    f"cannot reach the Chroma server at {self.url} ({exc}). Start it "
                    "(chroma run --path DIR --port N) or check HYDE_LC_CHROMA_URL."
                ) from exc
        assert self.path is not None
        if self.path.exists() and not self.path.is_dir():
            raise StoreError(f"store location {self.path} is a file, not a folder")
        return chromadb.PersistentClient(path=str(self.path), settings=settings)


def server_url(store: Chroma) -> str | None:
    """The address of the Chroma server behind ``store``; None for an embedded store."""
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
    request to this store's server (refused, reset, cut mid-reply). None for anything
    else, including connection errors to other hosts (a remote LLM's, say), so that
    callers can keep treating those as the failure of one step. ``resume`` ends the
    message: how the caller's work continues once the server is back.

    Example:
        >>> from hyde_lc import open_store
        >>> store = open_store(url="http://127.0.0.1:8000")  # doctest: +SKIP
        >>> try:
        ...     store.similarity_search("lamps")  # the server was stopped meanwhile
        ... except Exception as exc:
        ...     raise (lost_server(store, exc) or exc) from exc  # doctest: +SKIP

    """
    import httpx

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


def collection_exists(location: StoreLocation) -> bool:
    """Whether the collection exists, without creating the store or the collection."""
    if location.path is not None and not location.path.exists():
        return False
    try:
        names = [getattr(c, "name", c) for c in location.client().list_collections()]
    except StoreError:
        raise
    except Exception as exc:
        raise StoreError(f"cannot open {location.describe()}: {exc}") from exc
    return location.collection in names


def check_embeddings(store: Chroma, embeddings: Embeddings, location: str = "") -> None:
    """Refuse an embedding model other than the one the collection was built with.

    An empty collection with no record adopts ``embeddings``; a non-empty one with no
    record (not built by hyde_lc) is refused, since its vectors cannot be vouched for.
    """
    collection = store._collection
    metadata = dict(collection.metadata or {})
    wanted = embedding_model_id(embeddings)
    built_with = metadata.get(META_MODEL)
    where = location or collection.name
    if built_with is None:
        if collection.count() > 0:
            raise StoreError(
                f"{where} holds {collection.count()} vectors but no record of their embedding "
                "model (it was not built by hyde_lc). Ingest into a new collection "
                "(--collection NAME) instead."
            )
        dimension = getattr(embeddings, "dimension", None) or len(embeddings.embed_query("dim"))
        metadata.update({META_MODEL: wanted, META_DIMENSION: int(dimension)})
        metadata.pop("hnsw:space", None)  # set through the configuration, not metadata
        collection.modify(metadata=metadata)
    elif built_with != wanted:
        raise EmbeddingMismatchError(
            f"{where} was built with embedding model {built_with!r} "
            f"({metadata.get(META_DIMENSION)} dimensions); you asked for {wanted!r}. "
            f"Use --embeddings {built_with} (HYDE_LC_EMBEDDINGS={built_with}), or ingest "
            "into another collection (--collection NAME) to use the new model."
        )
    else:
        dimension = declared_dimension(embeddings)
        if dimension is not None:
            check_dimension(store, dimension, location)


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
    error would come later and not say what to do.
    """
    collection = store._collection
    metadata = collection.metadata or {}
    recorded = metadata.get(META_DIMENSION)
    if recorded is None or int(recorded) == dimension:
        return
    model = metadata.get(META_MODEL)
    raise EmbeddingMismatchError(
        f"{location or collection.name} holds {recorded}-dimensional vectors from "
        f"{model!r}, but these embeddings give {dimension} dimensions (same model name, "
        f"other settings?). Use the settings the collection was built with ({recorded} "
        "dimensions), or ingest into another collection (--collection NAME)."
    )


def open_store(
    path: str | os.PathLike | None = None,
    *,
    url: str | None = None,
    collection: str | None = None,
    embeddings: Embeddings | None = None,
) -> Chroma:
    """Open (creating if needed) a hyde_lc collection as a LangChain `Chroma` store.

    With no arguments: the collection ``hyde_lc`` in ``./.hyde_lc`` with the default
    embeddings. The embedding model is checked against the one the collection was
    built with (`EmbeddingMismatchError` when they differ).
    """
    location = StoreLocation.resolve(path, url, collection)
    embeddings = embeddings or load_embeddings()
    try:
        store = Chroma(
            collection_name=location.collection,
            embedding_function=embeddings,
            client=location.client(),
            collection_configuration={"hnsw": {"space": "cosine"}},
        )
    except StoreError:
        raise
    except Exception as exc:  # chromadb's errors: bad name, unwritable folder, ...
        raise StoreError(f"cannot open {location.describe()}: {exc}") from exc
    check_embeddings(store, embeddings, location.describe())
    return store


def iter_metadatas(store: Chroma, where: dict | None = None) -> list[tuple[str, dict]]:
    """All (id, metadata) pairs of the collection, read in pages (no embeddings)."""
    collection = store._collection
    out: list[tuple[str, dict]] = []
    offset = 0
    while True:
        page = collection.get(where=where, include=["metadatas"], limit=_PAGE, offset=offset)
        metadatas: list[Any] = list(page["metadatas"] or [{}] * len(page["ids"]))
        out.extend(zip(page["ids"], metadatas, strict=True))
        if len(page["ids"]) < _PAGE:
            return out
        offset += _PAGE


def collection_info(store: Chroma) -> dict[str, Any]:
    """Facts about a collection: chunks, documents, embedding model and dimension."""
    collection = store._collection
    metadata = collection.metadata or {}
    documents: dict[str, dict[str, Any]] = {}
    for _, meta in iter_metadatas(store):
        source = str(meta.get("source", "?"))
        entry = documents.setdefault(
            source, {"source": source, "doc_id": meta.get("doc_id"), "chunks": 0, "pages": set()}
        )
        entry["chunks"] += 1
        if "page" in meta:
            last = int(meta.get("page_end", meta["page"]))
            entry["pages"].update(range(int(meta["page"]), last + 1))
    return {
        "collection": collection.name,
        "chunks": collection.count(),
        "documents": [
            {**doc, "pages": len(doc["pages"])}
            for doc in sorted(documents.values(), key=lambda d: d["source"])
        ],
        "embedding_model": metadata.get(META_MODEL),
        "embedding_dimension": metadata.get(META_DIMENSION),
    }


LOCK_FILE = "hyde_lc.lock"
"""In an embedded store's folder: locked (``flock``) by whichever process is writing it."""


def store_folder(store: Chroma) -> Path | None:
    """The folder of an embedded (persistent) Chroma store; None for a server or in memory."""
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
    already running finish on the old view. A no-op for a Chroma server.
    """
    if store_folder(store) is None:
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
    the folder, and anyone else waits for it; the operating system releases it when its
    holder exits or is killed, so a crash never leaves it stuck. Once the lock is held,
    the store is refreshed (`refresh_store`) so the write builds on what other
    processes wrote. A Chroma server orders concurrent writes itself: no lock there.
    """
    folder = store_folder(store)
    if folder is None or fcntl is None:
        yield
        return
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / LOCK_FILE).open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            logger.warning("%s is being written by %s; waiting for it to finish", folder, holder)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(f"process {os.getpid()}\n")
            handle.flush()
            refresh_store(store)
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
