"""Cancelling generations that nobody waits for any more.

A `CancelScope` is a flag shared by every generation started while it is current (it
travels in a context variable, so it reaches worker threads that run with a copy of the
caller's context, as LangChain's executors do). `LocalChatModel` checks it before it
takes an engine slot and after every generated token: once the scope is cancelled, its
requests stop within one decoding step and free the llama.cpp engine for the next call.
`write_hypotheses` gives its scope a deadline (its timeout), and stops waiting as soon as
its scope is cancelled (`CancelScope.on_cancel` tells it, in whichever thread cancels).

A scope with a deadline cancels itself when it passes: whichever thread asks first
(`CancelScope.cancelled`, the waiter or a generation between two tokens) finds it
cancelled, so the limit holds even while the thread that waits is not running.

Scopes nest: a scope opened inside another is cancelled when either is.

Example:
    >>> scope = CancelScope()
    >>> with cancel_scope(scope):
    ...     current_scope() is scope
    True
    >>> scope.cancel("timeout after 3s")
    >>> scope.cancelled, scope.reason
    (True, 'timeout after 3s')
    >>> late = CancelScope(deadline=time.monotonic() - 1, expiry="timeout after 3s")
    >>> late.cancelled, late.expired, late.reason
    (True, True, 'timeout after 3s')

"""

from __future__ import annotations

import threading
import time
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

    def __init__(
        self,
        parent: CancelScope | None = None,
        *,
        deadline: float | None = None,
        expiry: str = "deadline passed",
    ) -> None:
        self._event = threading.Event()
        self._reason: str | None = None
        self._expired = False
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
        self.parent = parent
        self.deadline = deadline
        """When the scope cancels itself, on the `time.monotonic` clock (None: never)."""
        self.expiry = expiry
        """The reason given when the deadline cancels it (``timeout after 3s``)."""

    def cancel(self, reason: str = "cancelled") -> None:
        """Cancel every generation under this scope (idempotent; the first reason stays).

        The callbacks registered with `on_cancel` run here, in the calling thread.
        """
        self._cancel(reason, expired=False)

    def expire(self) -> None:
        """Cancel the scope as its deadline does: with `expiry` as reason, `expired` True."""
        self._cancel(self.expiry, expired=True)

    def _cancel(self, reason: str, *, expired: bool) -> None:
        with self._lock:
            if self._event.is_set():
                return
            self._reason = reason
            self._expired = expired
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def remaining(self) -> float | None:
        """Seconds until this scope's deadline (at least 0; None without a deadline)."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - time.monotonic())

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

        self._settle()  # a deadline passed already: the callback runs at once
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

    def _chain(self) -> Iterator[CancelScope]:
        scope: CancelScope | None = self
        while scope is not None:
            yield scope
            scope = scope.parent

    @property
    def cancelled(self) -> bool:
        """True once this scope or an enclosing one was cancelled, or its deadline passed.

        A deadline found passed cancels its scope here (the innermost one first).
        """
        return self._settle()

    def _settle(self) -> bool:
        """Whether the scope is cancelled (a deadline passed cancels its scope here).

        If no scope in the chain is cancelled yet, the innermost one whose deadline passed
        expires.
        """
        if any(scope._event.is_set() for scope in self._chain()):
            return True
        now = time.monotonic()
        for scope in self._chain():
            if scope.deadline is not None and now >= scope.deadline:
                scope.expire()
                return True
        return False

    @property
    def expired(self) -> bool:
        """True when this scope's own deadline cancelled it (not a cancel, not a parent)."""
        return self._expired

    @property
    def reason(self) -> str | None:
        """Why the scope (or the enclosing one that was cancelled) was cancelled."""
        if not self.cancelled:
            return None
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
