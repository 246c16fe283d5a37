"""Cancelling generations that nobody waits for any more.

A `CancelScope` is a flag shared by every generation started while it is current (it
travels in a context variable, so it reaches worker threads that run with a copy of the
caller's context, as LangChain's executors do). `LocalChatModel` checks it before it
takes an engine slot and after every generated token: once the scope is cancelled, its
requests stop within one decoding step and free the llama.cpp engine for the next call.
`write_hypotheses` cancels its scope when its timeout expires.

Scopes nest: a scope opened inside another is cancelled when either is.

Example:
    >>> scope = CancelScope()
    >>> with cancel_scope(scope):
    ...     current_scope() is scope
    True
    >>> scope.cancel("timeout after 3s")
    >>> scope.cancelled, scope.reason
    (True, 'timeout after 3s')

"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from hyde_lc.errors import HydeLcError


class GenerationCancelled(HydeLcError):
    """A generation stopped because its `CancelScope` was cancelled (nobody waits for it)."""


class CancelScope:
    """A cancellation flag for the generations started under it (see the module docstring).

    Example:
        >>> outer = CancelScope()
        >>> inner = CancelScope(parent=outer)
        >>> outer.cancel("shutting down")
        >>> inner.cancelled
        True

    """

    def __init__(self, parent: CancelScope | None = None) -> None:
        self._event = threading.Event()
        self._reason: str | None = None
        self.parent = parent

    def cancel(self, reason: str = "cancelled") -> None:
        """Cancel every generation under this scope (idempotent; the first reason stays)."""
        if not self._event.is_set():
            self._reason = reason
            self._event.set()

    @property
    def cancelled(self) -> bool:
        """True once this scope or an enclosing one was cancelled."""
        scope: CancelScope | None = self
        while scope is not None:
            if scope._event.is_set():
                return True
            scope = scope.parent
        return False

    @property
    def reason(self) -> str | None:
        """Why the scope (or the enclosing one that was cancelled) was cancelled."""
        scope: CancelScope | None = self
        while scope is not None:
            if scope._event.is_set():
                return scope._reason
            scope = scope.parent
        return None

    def check(self) -> None:
        """Raise `GenerationCancelled` if the scope was cancelled."""
        if self.cancelled:
            raise GenerationCancelled(f"generation cancelled: {self.reason}")


_CURRENT: ContextVar[CancelScope | None] = ContextVar("hyde_lc_cancel_scope", default=None)


def current_scope() -> CancelScope | None:
    """The innermost scope of the running context, if any."""
    return _CURRENT.get()


@contextmanager
def cancel_scope(scope: CancelScope | None = None) -> Iterator[CancelScope]:
    """Make ``scope`` (a new one nested in the current scope by default) current."""
    scope = scope or CancelScope(parent=current_scope())
    token = _CURRENT.set(scope)
    try:
        yield scope
    finally:
        _CURRENT.reset(token)
