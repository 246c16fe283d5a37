"""Where a hyde_lc collection lives, and how to reach it: a folder or a Chroma server.

`StoreLocation` resolves the arguments, then ``HYDE_LC_CHROMA_URL`` (a server) or
``HYDE_LC_STORE`` (a folder), then ``./.hyde_lc``; the collection is
``HYDE_LC_COLLECTION`` or ``hyde_lc``. Every request to a server waits at most
``HYDE_LC_CHROMA_TIMEOUT`` seconds (default 30), and a server that goes away becomes a
`StoreUnavailableError` naming it and what to do (`lost_server`). A read-only store folder
is read through a private copy (Chroma cannot open a store it cannot write).

Example:
    >>> StoreLocation.resolve(path="/tmp/x").describe()
    'chroma folder /tmp/x, collection hyde_lc'

"""

from __future__ import annotations

import atexit
import ipaddress
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
from chromadb.api.client import Client as ChromaClient
from chromadb.config import DEFAULT_DATABASE, DEFAULT_TENANT, Settings

from hyde_lc.core.settings import (
    CHROMA_TIMEOUT_ENV,
    DEFAULT_CHROMA_TIMEOUT,
    check_chroma_timeout,
    settings,
)
from hyde_lc.errors import (
    NotPortableError,
    StoreError,
    StoreUnavailableError,
)

logger = logging.getLogger(__name__)

DEFAULT_STORE_DIR = ".hyde_lc"


DEFAULT_COLLECTION = "hyde_lc"


DEFAULT_TIMEOUT_S = DEFAULT_CHROMA_TIMEOUT


TIMEOUT_ENV = CHROMA_TIMEOUT_ENV


SQLITE_FILE = "chroma.sqlite3"


_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9._-]{1,510}[a-zA-Z0-9]")


LOCK_FILE = "hyde_lc.lock"
"""In an embedded store's folder: locked (``flock``) by whichever process is writing it."""
LEXICAL_FOLDER = "hyde_lc_lexical"
"""In an embedded store's folder: one lexical index per collection."""


def _timeout_from(value: float | str | None) -> float:
    """Seconds a Chroma server request may take: ``value``, ``$HYDE_LC_CHROMA_TIMEOUT`` or 30."""
    if value is None:
        return settings().chroma_timeout
    if isinstance(value, str) and not value.strip():
        return DEFAULT_TIMEOUT_S
    return check_chroma_timeout(value, "timeout")


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
        path: str | os.PathLike[str] | None = None,
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
        if path is not None and url is not None:
            raise StoreError("give either a store folder or a Chroma server URL, not both")
        env = settings()
        name = collection or env.collection or DEFAULT_COLLECTION
        if path is None and url is None:
            url = env.chroma_url
            if url is None:
                path = env.store or DEFAULT_STORE_DIR
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
        check_not_forked(f"the store folder {self.path}")
        global _opened_embedded
        _opened_embedded = True
        return chromadb.PersistentClient(path=str(self.path), settings=settings)

    def has_store(self) -> bool:
        """For a folder: whether it holds a Chroma database; a server always may."""
        if self.path is None:
            return True
        if self.path.exists() and not self.path.is_dir():
            raise StoreError(f"store location {self.path} is a file, not a folder")
        return (self.path / SQLITE_FILE).is_file()


_opened_embedded = False
"""Whether this process has opened a store folder (chromadb's embedded engine)."""
_forked_from_embedded = False
"""Whether this process was forked from one that had opened a store folder."""


def _clients_of_its_own() -> None:
    """In a forked child: forget the parent's chromadb clients, and say whether it had any.

    chromadb shares one client system per folder or server within a process. Its
    embedded engine does not survive ``fork``: a forked child that asks it, or opens a
    folder anew, waits forever. So such a child refuses to open a folder, saying what to
    do (`check_not_forked`); a server is reached by a client of the child's own, not
    through the parent's connections.
    """
    global _forked_from_embedded
    _forked_from_embedded = _forked_from_embedded or _opened_embedded
    ChromaClient.clear_system_cache()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_clients_of_its_own)


def check_not_forked(where: str) -> None:
    """Refuse to open an embedded store in a child forked after its parent opened one.

    Raises `NotPortableError` naming ``where`` and the ways out (spawn, a server).
    """
    if _forked_from_embedded:
        raise NotPortableError(
            f"cannot open {where} in this process: it was forked (multiprocessing's 'fork' "
            "start method, the default on Linux before Python 3.14) from a process that had "
            "opened an embedded Chroma store, and Chroma's engine does not work in a forked "
            "copy (its calls would wait forever). Start the workers with 'spawn' or "
            "'forkserver' (ProcessPoolExecutor(mp_context=multiprocessing.get_context("
            "'spawn'))), or serve the store (chroma run --path DIR) and open it with "
            "open_store(url=...)"
        )


class _BoundedHttpClient(ChromaClient):
    """chromadb's HTTP client, with a bounded wait for each request.

    chromadb 1.5 makes its httpx session with no timeout and has no setting for one,
    and its constructor already sends requests (who am I, which tenant): so the timeout
    is put on the session just before the first of them, `get_user_identity`. This is
    hyde_lc's one use of chromadb's private members (the client's ``_server`` and its
    ``_session``): chromadb offers no public route (its ``chroma_api_impl`` setting
    refuses any class of one's own). tests/unit/test_chroma_contract.py pins it.
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


_READ_ONLY_COPIES: dict[Path, Path] = {}


def _is_read_only(folder: Path) -> bool:
    """Whether this process cannot write a store folder that Chroma must write to open."""
    sqlite = folder / SQLITE_FILE
    if not sqlite.is_file():
        return False
    # Chroma's own folders; the BM25 indexes' folder is not Chroma's (`HybridCollection`
    # says when it cannot be written).
    places = [
        folder,
        sqlite,
        *(p for p in folder.iterdir() if p.is_dir() and p.name != LEXICAL_FOLDER),
    ]
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


def lost_server(
    location: StoreLocation, exc: BaseException, resume: str = "rerun the same command to resume"
) -> StoreUnavailableError | None:
    """The error to raise when ``exc`` means ``location``'s server can no longer be reached.

    That is: somewhere in ``exc``'s chain (causes and contexts) a connection error of a
    request to this server (refused, reset, cut mid-reply, or no answer within
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
        ...     raise (lost_server(store.location, exc) or exc) from exc  # doctest: +SKIP

    """
    url = location.server
    if url is None:  # an embedded store
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
                    return StoreUnavailableError(
                        f"the Chroma server at {url} did not answer within "
                        f"{location.timeout:g} s "
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
def server_lost_as_error(location: StoreLocation, resume: str) -> Iterator[None]:
    """Run the block; a lost connection to ``location``'s server becomes `lost_server`'s error.

    Every other failure passes through unchanged.
    """
    try:
        yield
    except StoreUnavailableError:
        raise  # said already, by a call inside this one
    except Exception as exc:
        lost = lost_server(location, exc, resume)
        if lost is None:
            raise
        raise lost from exc
