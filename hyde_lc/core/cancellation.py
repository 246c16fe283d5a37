"""Cancelling generations that nobody waits for any more.

A `CancelScope` is a flag shared by every generation started while it is current (it
travels in a context variable, so it reaches worker threads that run with a copy of the
caller's context, as LangChain's executors do). `LocalChatModel` checks it before it
takes an engine slot and after every generated token: once the scope is cancelled, its
requests stop within one decoding step and free the llama.cpp engine for the next call.
`write_hypotheses` cancels its scope when its timeout expires, and stops waiting as soon
as its scope is cancelled (`CancelScope.on_cancel` tells it, in whichever thread cancels).

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
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
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
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
        self.parent = parent

    def cancel(self, reason: str = "cancelled") -> None:
        """Cancel every generation under this scope (idempotent; the first reason stays).

        The callbacks registered with `on_cancel` run here, in the calling thread.
        """
        with self._lock:
            if self._event.is_set():
                return
            self._reason = reason
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def on_cancel(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` once, when this scope or an enclosing one is cancelled.

        It runs at once if one already is, otherwise in the thread that cancels (so it
        should only record the fact and wake a waiter). Returns a function that
        unregisters it, for when nobody waits any more.

        Example:
            >>> outer = CancelScope()
            >>> heard = []
            >>> forget = CancelScope(parent=outer).on_cancel(lambda: heard.append("stop"))
            >>> outer.cancel("shutting down")
            >>> outer.cancel("again")
            >>> heard
            ['stop']

        """
        guard = threading.Lock()
        called = False

        def once() -> None:
            nonlocal called
            with guard:
                if called:
                    return
                called = True
            callback()

        registered: list[CancelScope] = []
        scope: CancelScope | None = self
        while scope is not None:
            with scope._lock:
                if not scope._event.is_set():
                    scope._callbacks.append(once)
                    registered.append(scope)
                    scope = scope.parent
                    continue
            once()
            break

        def forget() -> None:
            for each in registered:
                with each._lock, suppress(ValueError):
                    each._callbacks.remove(once)

        return forget

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
