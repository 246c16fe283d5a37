"""Reading ``HYDE_LC_*`` settings from the environment: checked, bounded, named in errors.

A setting read from the environment is a whole number or a number of seconds within a
stated range; anything else raises `hyde_lc.errors.InvalidSettingError` naming the
variable, the value found and the range allowed, before any work starts (a context
window of 100 million tokens would otherwise allocate tens of GB, and 2,000 threads
abort the OpenMP runtime).

Example:
    >>> env_int("HYDE_LC_N_CTX", 4096, low=256, high=131_072, what="tokens")  # doctest: +SKIP
    8192

"""

from __future__ import annotations

import math
import os

from hyde_lc.errors import InvalidSettingError

__all__ = ["MAX_THREADS", "THREADS_ENV", "env_float", "env_int", "threads_setting"]

THREADS_ENV = "HYDE_LC_THREADS"
MAX_THREADS = 256
"""The most CPU threads ``HYDE_LC_THREADS`` may ask for (thousands abort the OpenMP runtime)."""


def _raw(name: str) -> str | None:
    raw = os.environ.get(name)
    return None if raw is None or not raw.strip() else raw.strip()


def env_int(
    name: str, default: int, *, low: int, high: int, what: str, example: int | None = None
) -> int:
    """``$name`` as a whole number from ``low`` to ``high``; ``default`` when unset or blank.

    ``what`` says what the number is (``"tokens of context per request"``) in the error,
    and ``example`` (default: ``default``) is the value it suggests.
    """
    raw = _raw(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        raise InvalidSettingError(
            f"{name}={raw[:40]!r} is not valid: give a whole number from {low:,} to "
            f"{high:,} ({what}), e.g. {name}={default if example is None else example}; "
            "or unset it for the default"
        )
    return value


def env_float(name: str, default: float, *, low: float, high: float, what: str) -> float:
    """``$name`` as a number from ``low`` to ``high``; ``default`` when unset or blank."""
    raw = _raw(name)
    if raw is None:
        return default
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


def threads_setting() -> int:
    """``HYDE_LC_THREADS``: CPU threads for the local models (1 to `MAX_THREADS`; 0 if unset)."""
    return env_int(
        THREADS_ENV, 0, low=0, high=MAX_THREADS, what="CPU threads; 0 for one per core", example=2
    )
