"""How many cores other work leaves free: the default thread count of the local LLMs.

llama.cpp on every core is fastest on an idle machine, and slowest when another process
already keeps a core busy: its threads wait on each other at every step, and one that
shares a core holds up the rest (on 2 cores with one busy process, two threads generate
16-45% slower than one; BENCHMARKS.md, "llama.cpp threads and polling on 2 cores"). So the
default is the cores that other processes leave free right now, measured over a short
look at the kernel's CPU counters (``/proc/stat``, Linux), with this process's own use
taken out. Elsewhere, or when the counters cannot be read, it is every usable core.

The load average is no use here: it trails by a minute, so a script that has just
ingested would see its own work as someone else's.

Example:
    >>> from hyde_lc.core.cpu import free_cores, usable_cores
    >>> 1 <= free_cores() <= usable_cores()
    True

"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

LOOK_S = 0.2
"""How long the CPU counters are watched."""
KEEP_S = 30.0
"""How long one look is reused (models made together share it)."""

_PROC_STAT = Path("/proc/stat")
_last: tuple[float, int] | None = None
_lock = threading.Lock()


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the system has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _cpu_ticks() -> tuple[int, int] | None:
    """(busy, total) clock ticks of all cores since boot, or None where unreadable."""
    try:
        first = _PROC_STAT.read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    if not first or first[0] != "cpu" or len(first) < 5:
        return None
    ticks = [int(t) for t in first[1:9]]  # user nice system idle iowait irq softirq steal
    total = sum(ticks)
    return total - ticks[3] - (ticks[4] if len(ticks) > 4 else 0), total


def busy_elsewhere(
    look_s: float = LOOK_S,
    cores: int | None = None,
    ticks: Callable[[], tuple[int, int] | None] = _cpu_ticks,
    own_cpu: Callable[[], float] = time.process_time,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> float | None:
    """Cores kept busy by other processes over the next ``look_s`` seconds, or None.

    The machine's busy share over the look, times its core count, less this process's
    own CPU time over the same look (``cores``: the machine's, by default).
    """
    before, own_before, wall_before = ticks(), own_cpu(), clock()
    if before is None:
        return None
    sleep(look_s)
    after, own_after, wall = ticks(), own_cpu(), clock() - wall_before
    if after is None or after[1] <= before[1] or wall <= 0:
        return None
    busy = (after[0] - before[0]) / (after[1] - before[1]) * (cores or os.cpu_count() or 1)
    return max(0.0, busy - (own_after - own_before) / wall)


def threads_for(usable: int, busy: float | None) -> int:
    """The threads to run on ``usable`` cores when ``busy`` of them are taken (None: unknown).

    A core counts as free when less than half of it is busy, so a machine running the
    odd short task still gets every core.

    Example:
        >>> threads_for(2, 0.1), threads_for(2, 1.0), threads_for(2, 3.5), threads_for(8, None)
        (2, 1, 1, 8)

    """
    if busy is None:
        return usable
    return max(1, min(usable, math.floor(usable - busy + 0.5)))


def free_cores(look: Callable[[], float | None] = busy_elsewhere) -> int:
    """The cores other work leaves free now, at least 1 (one look reused for `KEEP_S`)."""
    global _last
    with _lock:
        now = time.monotonic()
        if _last is not None and now - _last[0] < KEEP_S:
            return _last[1]
        chosen = threads_for(usable_cores(), look())
        _last = (now, chosen)
        return chosen


def forget() -> None:
    """Drop the last look: the next `free_cores` looks at the machine again."""
    global _last
    with _lock:
        _last = None
