"""What hyde_lc stops and frees when the program ends, in order, before Python finalises.

When a script's last line has run, Python finalises: it clears modules, collects objects
in whatever order they fall, and a thread of its own that then tries to take the
interpreter lock back from native code is ended on the spot (``pthread_exit``). For a
thread inside Chroma's or tantivy's Rust code (a background audit of a collection's BM25
index) or llama.cpp's C++ code, that forced unwinding through native frames crashes the
process (SIGSEGV or SIGABRT) after the script has printed everything.

So hyde_lc ends its own work first, from one ``atexit`` hook, while everything is alive:

1. generations still running are stopped (`STOP_WORK`);
2. hyde_lc's daemon threads still running (named ``hyde-...`` or ``hyde_lc-...``: an
   index audit, a generation's worker) are waited for, at most `EXIT_WAIT_S` in all
   (`JOIN_THREADS`);
3. the llama.cpp engines are closed, each joining its own threads (`CLOSE_ENGINES`);
4. the ONNX Runtime sessions are released with their thread pools (`RELEASE_SESSIONS`).

Modules add their steps with `at_exit`; each call also moves the hook after other
libraries' exit hooks, so that it runs before them (``atexit`` runs the last first).

Example:
    >>> calls = []
    >>> at_exit("example", JOIN_THREADS + 1, lambda: calls.append("freed"))
    >>> run_exit_steps(only=["example"])
    >>> calls
    ['freed']

"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Callable, Iterable

logger = logging.getLogger(__name__)

STOP_WORK = 0
JOIN_THREADS = 10
CLOSE_ENGINES = 20
RELEASE_SESSIONS = 30

EXIT_WAIT_S = 30.0
"""The longest the end of a program waits for hyde_lc's threads, in all."""
THREAD_PREFIXES = ("hyde-", "hyde_lc-")
"""How hyde_lc's threads are named (`join_threads` waits for these only)."""
QUICK_THREADS = {"hyde-hypotheses": 2.0}
"""Threads waited for briefly: a hypothesis writer still waiting on a remote model is in
Python's own socket code, which the interpreter can end safely."""

_STEPS: dict[str, tuple[int, Callable[[], object]]] = {}
_LOCK = threading.Lock()


def at_exit(name: str, order: int, step: Callable[[], object]) -> None:
    """Run ``step`` when the program ends, before Python finalises (lowest ``order`` first).

    A step registered again under the same ``name`` replaces the earlier one.
    """
    with _LOCK:
        _STEPS[name] = (order, step)
    atexit.unregister(run_exit_steps)  # moved last, so that it runs first
    atexit.register(run_exit_steps)


def join_threads(timeout: float = EXIT_WAIT_S) -> list[str]:
    """Wait for hyde_lc's daemon threads still running, at most ``timeout`` seconds in all.

    Returns the names of those still running then.
    """
    deadline = time.monotonic() + timeout
    current = threading.current_thread()
    left = []
    for thread in threading.enumerate():
        if thread is current or not thread.daemon or not thread.name.startswith(THREAD_PREFIXES):
            continue  # Python itself joins threads that are not daemons, before this
        wait = max(0.0, deadline - time.monotonic())
        thread.join(min(wait, QUICK_THREADS.get(thread.name, wait)))
        if thread.is_alive():
            left.append(thread.name)
    if left:
        logger.debug("exiting with hyde_lc threads still running: %s", ", ".join(left))
    return left


def run_exit_steps(only: Iterable[str] | None = None) -> None:
    """Run the registered steps in order (those named in ``only``, if given), once each."""
    with _LOCK:
        chosen = [name for name in _STEPS if only is None or name in set(only)]
        steps = sorted((_STEPS.pop(name) for name in chosen), key=lambda step: step[0])
    for _, step in steps:
        try:
            step()
        except Exception:  # one step failing must not keep the others from running
            logger.debug("exit step %r failed", step, exc_info=True)


at_exit("threads", JOIN_THREADS, join_threads)
