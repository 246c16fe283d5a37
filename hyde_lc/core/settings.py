"""hyde_lc's settings from the environment: every ``HYDE_LC_*`` variable, read here only.

`settings()` reads all of them at once into a frozen `Settings`, one typed field per
variable. A variable that is unset or blank leaves its field at the default. A bad value
raises `hyde_lc.errors.InvalidSettingError` naming the variable, the value found and
what is allowed, before any work starts (a context window of 100 million tokens would
otherwise allocate tens of GB, and 2,000 threads abort the OpenMP runtime).

What `settings()` returns is kept for as long as the raw values of these variables stay
the same: a program that leaves its environment alone parses it once, and a change (a
test's ``monkeypatch.setenv``, a script that points ``HYDE_LC_CACHE_DIR`` elsewhere) is
seen at the next call.

Example:
    >>> import os
    >>> os.environ["HYDE_LC_N_CTX"] = "8192"
    >>> settings().n_ctx
    8192
    >>> del os.environ["HYDE_LC_N_CTX"]
    >>> settings().n_ctx
    4096

"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from typing import Any

from hyde_lc.errors import InvalidSettingError, InvalidStoreSettingError

__all__ = [
    "CHROMA_TIMEOUT_ENV",
    "DEFAULT_AUDIT_INTERVAL",
    "DEFAULT_CHROMA_TIMEOUT",
    "DEFAULT_CONTEXT_SIZE",
    "DEFAULT_REFRESH_INTERVAL",
    "DEFAULT_REQUEST_TIMEOUT",
    "DEFAULT_WRITER_LEASE",
    "DEFAULT_WRITE_WAIT",
    "ENV_NAMES",
    "MAX_CONTEXT_SIZE",
    "MAX_THREADS",
    "Settings",
    "check_chroma_timeout",
    "settings",
]

CHROMA_TIMEOUT_ENV = "HYDE_LC_CHROMA_TIMEOUT"
"""The variable with the seconds one request to a Chroma server may take."""
DEFAULT_CHROMA_TIMEOUT = 30.0
"""Seconds a Chroma server request may take unless ``HYDE_LC_CHROMA_TIMEOUT`` says."""
DEFAULT_REQUEST_TIMEOUT = 60.0
"""Seconds a remote model request may take unless ``HYDE_LC_REQUEST_TIMEOUT`` says."""
DEFAULT_CONTEXT_SIZE = 4096
"""Tokens of context window per request of a local model unless ``HYDE_LC_N_CTX`` says."""
MAX_CONTEXT_SIZE = 131_072
"""The largest ``HYDE_LC_N_CTX``: 128K tokens, beyond any embedded model's trained window
(32K for Qwen2.5-Coder); memory grows with it (100 million tokens took over 20 GB)."""
DEFAULT_REFRESH_INTERVAL = 1.0
"""Seconds a search may reuse the collection's state unless ``HYDE_LC_REFRESH_INTERVAL`` says."""
DEFAULT_AUDIT_INTERVAL = 600.0
"""Seconds between background index audits unless ``HYDE_LC_AUDIT_INTERVAL`` says."""
DEFAULT_WRITER_LEASE = 30.0
"""Seconds a server writer's lease lasts unless renewed, unless ``HYDE_LC_WRITER_LEASE`` says."""
DEFAULT_WRITE_WAIT = 600.0
"""Seconds a writer waits for another one to finish unless ``HYDE_LC_WRITE_WAIT`` says."""
MAX_THREADS = 256
"""The most CPU threads ``HYDE_LC_THREADS`` may ask for (thousands abort the OpenMP runtime)."""


_Parse = Callable[[str, str, Any], Any]
"""How a field reads its variable: ``parse(name, raw, default)``, ``raw`` as found (not blank)."""


def _reads(name: str, parse: _Parse) -> dict[str, Any]:
    """The metadata of a `Settings` field that ``parse`` reads from ``$name``."""
    return {"env": name, "parse": parse}


def _text(name: str, raw: str, default: Any) -> str:
    return raw.strip()


def _path(name: str, raw: str, default: Any) -> Path:
    return Path(raw.strip())


def _flag(name: str, raw: str, default: Any) -> bool:
    return True


def _whole_number(*, low: int, high: int, what: str, example: int) -> _Parse:
    """Read a whole number from ``low`` to ``high``; ``what`` it counts goes in the error."""

    def parse(name: str, raw: str, default: Any) -> int:
        raw = raw.strip()
        try:
            value: int | None = int(raw)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            raise InvalidSettingError(
                f"{name}={raw[:40]!r} is not valid: give a whole number from {low:,} to "
                f"{high:,} ({what}), e.g. {name}={example}; or unset it for the default"
            )
        return value

    return parse


def _number(*, low: float, high: float, what: str) -> _Parse:
    """Read a number from ``low`` to ``high``; ``what`` it measures goes in the error."""

    def parse(name: str, raw: str, default: Any) -> float:
        raw = raw.strip()
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not low <= value <= high:  # nan fails every comparison
            raise InvalidSettingError(
                f"{name}={raw[:40]!r} is not valid: give a number from {low:g} to {high:g} "
                f"({what}), e.g. {name}={default:g}; or unset it for the default"
            )
        return value

    return parse


def _request_timeout(name: str, raw: str, default: Any) -> float:
    raw = raw.strip()
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise InvalidSettingError(
            f"{name}={raw!r} is not a timeout: give a positive number of seconds, e.g. {name}=120"
        )
    return value


def check_chroma_timeout(value: float | str, where: str = CHROMA_TIMEOUT_ENV) -> float:
    """``value`` as the seconds a Chroma server request may take: a positive finite number.

    ``where`` names the value in the error (the variable, or ``timeout`` for an argument);
    the error is an `InvalidStoreSettingError`, a bad setting and a store error alike.
    """
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds < math.inf:
        raise InvalidStoreSettingError(
            f"{where} must be a positive number of seconds (how long a Chroma server may take "
            f"to answer one request), got {value!r}; e.g. {CHROMA_TIMEOUT_ENV}=30"
        )
    return seconds


def _chroma_timeout(name: str, raw: str, default: Any) -> float:
    return check_chroma_timeout(raw, name)


_REFRESH_INTERVAL = _number(
    low=0,
    high=3600,
    what="seconds: how old the collection's state a search may use; 0 reads it for every search",
)
_AUDIT_INTERVAL = _number(
    low=0,
    high=7 * 86400,
    what="seconds between background comparisons of the lexical index with its collection; "
    "0 turns them off",
)

_WRITER_LEASE = _number(
    low=3,
    high=3600,
    what="seconds a Chroma server writer's lease lasts unless renewed (it is renewed every "
    "third of that); a writer killed is taken over after it",
)
_WRITE_WAIT = _number(
    low=0,
    high=7 * 86400,
    what="seconds a writer waits for another writer of the same server collection to finish",
)


@dataclass(frozen=True)
class Settings:
    """Every ``HYDE_LC_*`` variable, read from the environment and checked (`settings()`).

    A field keeps its default when its variable is unset or blank; ``None`` stands for
    "not set", where the code that uses the field chooses (a model spec's default depends
    on the role, for instance). Text is stripped of surrounding whitespace. Paths are kept
    as given: ``~`` is expanded where they are used.

    Example:
        >>> Settings().request_timeout
        60.0

    """

    store: Path | None = field(default=None, metadata=_reads("HYDE_LC_STORE", _path))
    """``HYDE_LC_STORE``: the Chroma folder (None: ``./.hyde_lc``, unless ``chroma_url``)."""
    chroma_url: str | None = field(default=None, metadata=_reads("HYDE_LC_CHROMA_URL", _text))
    """``HYDE_LC_CHROMA_URL``: a Chroma server to use instead of a folder."""
    collection: str | None = field(default=None, metadata=_reads("HYDE_LC_COLLECTION", _text))
    """``HYDE_LC_COLLECTION``: the collection's name (None: ``hyde_lc``)."""
    chroma_timeout: float = field(
        default=DEFAULT_CHROMA_TIMEOUT, metadata=_reads(CHROMA_TIMEOUT_ENV, _chroma_timeout)
    )
    """``HYDE_LC_CHROMA_TIMEOUT``: seconds one Chroma server request may take (positive, 30)."""
    embeddings: str | None = field(default=None, metadata=_reads("HYDE_LC_EMBEDDINGS", _text))
    """``HYDE_LC_EMBEDDINGS``: the embeddings spec of new collections (None: the default)."""
    hypothesis_llm: str | None = field(
        default=None, metadata=_reads("HYDE_LC_HYPOTHESIS_LLM", _text)
    )
    """``HYDE_LC_HYPOTHESIS_LLM``: the hypothesis model's spec (set, it turns HyDE on)."""
    answer_llm: str | None = field(default=None, metadata=_reads("HYDE_LC_ANSWER_LLM", _text))
    """``HYDE_LC_ANSWER_LLM``: the answer model's spec (None: the default)."""
    request_timeout: float = field(
        default=DEFAULT_REQUEST_TIMEOUT,
        metadata=_reads("HYDE_LC_REQUEST_TIMEOUT", _request_timeout),
    )
    """``HYDE_LC_REQUEST_TIMEOUT``: seconds one remote model request may take (positive, 60)."""
    refresh_interval: float = field(
        default=DEFAULT_REFRESH_INTERVAL,
        metadata=_reads("HYDE_LC_REFRESH_INTERVAL", _REFRESH_INTERVAL),
    )
    """``HYDE_LC_REFRESH_INTERVAL``: how old (0 to 3600 s; 1) a search's collection state may be."""
    audit_interval: float = field(
        default=DEFAULT_AUDIT_INTERVAL, metadata=_reads("HYDE_LC_AUDIT_INTERVAL", _AUDIT_INTERVAL)
    )
    """``HYDE_LC_AUDIT_INTERVAL``: seconds (0 to 7 days; 600; 0 = off) between index audits."""
    writer_lease: float = field(
        default=DEFAULT_WRITER_LEASE, metadata=_reads("HYDE_LC_WRITER_LEASE", _WRITER_LEASE)
    )
    """``HYDE_LC_WRITER_LEASE``: seconds (3 to 3600; 30) a server writer's lease lasts unrenewed."""
    write_wait: float = field(
        default=DEFAULT_WRITE_WAIT, metadata=_reads("HYDE_LC_WRITE_WAIT", _WRITE_WAIT)
    )
    """``HYDE_LC_WRITE_WAIT``: seconds (0 to 7 days; 600) a server writer waits for another."""
    n_ctx: int = field(
        default=DEFAULT_CONTEXT_SIZE,
        metadata=_reads(
            "HYDE_LC_N_CTX",
            _whole_number(
                low=256,
                high=MAX_CONTEXT_SIZE,
                what="tokens of context window per request",
                example=8192,
            ),
        ),
    )
    """``HYDE_LC_N_CTX``: a local model's context window, in tokens (256 to 131,072; 4,096)."""
    threads: int = field(
        default=0,
        metadata=_reads(
            "HYDE_LC_THREADS",
            _whole_number(
                low=0, high=MAX_THREADS, what="CPU threads; 0 for one per core", example=2
            ),
        ),
    )
    """``HYDE_LC_THREADS``: CPU threads of the local models (0 to 256; 0: one per core)."""
    cache_dir: Path | None = field(default=None, metadata=_reads("HYDE_LC_CACHE_DIR", _path))
    """``HYDE_LC_CACHE_DIR``: weights and indexes cache (None: ``$XDG_CACHE_HOME/hyde_lc``)."""
    pricing: Path | None = field(default=None, metadata=_reads("HYDE_LC_PRICING", _path))
    """``HYDE_LC_PRICING``: a pricing table to use instead of the bundled one."""
    debug: bool = field(default=False, metadata=_reads("HYDE_LC_DEBUG", _flag))
    """``HYDE_LC_DEBUG``: any value makes the CLI show an unexpected error's traceback."""


ENV_NAMES: tuple[str, ...] = tuple(f.metadata["env"] for f in fields(Settings))
"""Every variable `settings()` reads, in field order."""


def settings() -> Settings:
    """The settings in the environment now, checked; raises `InvalidSettingError`.

    Parsed once per distinct set of raw values: the same environment gives the same
    object, and a changed value is read at the next call.
    """
    return _parse(tuple(os.environ.get(name) for name in ENV_NAMES))


@lru_cache(maxsize=16)
def _parse(raw: tuple[str | None, ...]) -> Settings:
    """`Settings` from the raw values of `ENV_NAMES` (errors are not cached)."""
    values = {
        f.name: f.metadata["parse"](f.metadata["env"], value, f.default)
        for f, value in zip(fields(Settings), raw, strict=True)
        if value is not None and value.strip()
    }
    return Settings(**values)
