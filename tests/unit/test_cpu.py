"""The local LLMs' default thread count: the cores other work leaves free."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hyde_lc.core import cpu
from hyde_lc.models.local_llm import _default_threads


def counters(*readings):
    """A fake ``/proc/stat``: each call returns the next (busy, total) ticks."""
    it = iter(readings)
    return lambda: next(it)


def test_busy_share_of_the_machine_less_this_process_own_use():
    # 2 cores, 100 ticks over the look of which 75 busy: 1.5 cores; this process used
    # 0.1 s of CPU over the 0.2 s look: half a core
    own, wall = iter([10.0, 10.1]), iter([5.0, 5.2])
    busy = cpu.busy_elsewhere(
        look_s=0.2, cores=2, ticks=counters((0, 0), (75, 100)), own_cpu=lambda: next(own),
        sleep=lambda s: None, clock=lambda: next(wall),
    )  # fmt: skip
    assert busy == pytest.approx(1.0)


def test_unreadable_counters_mean_unknown():
    assert cpu.busy_elsewhere(ticks=lambda: None, sleep=lambda s: None) is None
    assert cpu.busy_elsewhere(ticks=counters((5, 10), (5, 10)), sleep=lambda s: None) is None


@pytest.mark.parametrize(
    ("usable", "busy", "threads"),
    [(2, 0.0, 2), (2, 0.4, 2), (2, 0.6, 1), (2, 1.0, 1), (2, 7.0, 1), (8, 2.2, 6), (4, None, 4)],
)
def test_threads_are_the_free_cores_at_least_one(usable, busy, threads):
    assert cpu.threads_for(usable, busy) == threads


@pytest.fixture
def fresh_look():
    """No look kept from another test, and none left for the next."""
    cpu.forget()
    yield
    cpu.forget()


def test_one_look_serves_models_made_together(fresh_look):
    looks = []
    first = cpu.free_cores(look=lambda: looks.append(1) or 0.0)
    second = cpu.free_cores(look=lambda: looks.append(1) or 9.0)
    assert first == second == cpu.usable_cores() and len(looks) == 1
    cpu.forget()
    assert cpu.free_cores(look=lambda: 9.0) == 1


def test_the_setting_wins_over_the_look(monkeypatch, fresh_look):
    monkeypatch.setenv("HYDE_LC_THREADS", "3")
    assert _default_threads() == 3
    monkeypatch.setenv("HYDE_LC_THREADS", "0")
    assert _default_threads() == cpu.free_cores() >= 1


@pytest.mark.skipif(not cpu._PROC_STAT.exists(), reason="reads Linux's /proc/stat")
def test_a_process_spinning_on_a_core_is_seen():
    spin = subprocess.Popen(
        [sys.executable, "-c", "import time\nt=time.time()+30\nwhile time.time()<t: pass"]
    )
    try:
        busy = cpu.busy_elsewhere(look_s=1.0)
    finally:
        spin.kill()
        spin.wait()
    assert busy is not None and busy >= 0.6  # the spinner's core (and whatever else runs)
