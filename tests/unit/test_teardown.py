"""What hyde_lc ends at exit runs in order, waits for its own threads only, and a step
that fails does not keep the others from running."""

from __future__ import annotations

import threading

from hyde_lc.core import teardown


def test_steps_run_in_order_once_and_a_failing_one_does_not_stop_the_rest() -> None:
    ran: list[str] = []

    def fail() -> None:
        ran.append("fail")
        raise RuntimeError("engine already gone")

    teardown.at_exit("test-sessions", teardown.RELEASE_SESSIONS, lambda: ran.append("sessions"))
    teardown.at_exit("test-stop", teardown.STOP_WORK, lambda: ran.append("stop"))
    teardown.at_exit("test-engines", teardown.CLOSE_ENGINES, fail)
    names = ["test-sessions", "test-stop", "test-engines"]
    teardown.run_exit_steps(only=names)
    teardown.run_exit_steps(only=names)
    assert ran == ["stop", "fail", "sessions"]


def test_the_end_waits_for_hyde_lc_threads_and_no_other() -> None:
    release = threading.Event()
    finished: list[str] = []

    def audit() -> None:
        release.wait(5)
        finished.append("audit")

    ours = threading.Thread(target=audit, name="hyde_lc-audit", daemon=True)
    theirs = threading.Thread(target=release.wait, args=(30,), name="someone-else", daemon=True)
    ours.start()
    theirs.start()
    threading.Timer(0.2, release.set).start()
    assert teardown.join_threads(timeout=10) == []
    assert finished == ["audit"]
    release.set()


def test_a_thread_that_does_not_end_in_time_is_named() -> None:
    stop = threading.Event()
    stuck = threading.Thread(target=stop.wait, args=(30,), name="hyde-lc-llamacpp", daemon=True)
    stuck.start()
    try:
        assert teardown.join_threads(timeout=0.1) == ["hyde-lc-llamacpp"]
    finally:
        stop.set()
