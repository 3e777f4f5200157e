"""ThreadActivity: whether code ran behind the cells' back between two captures, by the run
counts the operating system keeps for each thread (real threads, Linux's /proc)."""

from __future__ import annotations

import threading
import time

from ditto_jupyter.kernel.capture.thread_activity import ThreadActivity, foreign_threads


def settled() -> ThreadActivity:
    """The activity once every foreign thread has stopped running (blocked): two reads in a
    row with the same counts."""
    previous = ThreadActivity.now()
    for _ in range(1000):
        time.sleep(0.01)
        now = ThreadActivity.now()
        if now.quiet_since(previous):
            return now
        previous = now
    raise AssertionError("the threads never stopped running")


def test_a_blocked_thread_is_quiet_and_one_that_ran_is_not() -> None:
    wake, worked, done = threading.Event(), threading.Event(), threading.Event()

    def wait_then_work() -> None:
        wake.wait()
        sum(range(10_000))
        worked.set()
        done.wait()

    worker = threading.Thread(target=wait_then_work, name="notebook-worker", daemon=True)
    worker.start()
    try:
        assert worker in foreign_threads()
        before = settled()  # blocked on `wake`
        assert before.any() and not before.unreadable
        time.sleep(0.05)
        assert ThreadActivity.now().quiet_since(before)  # blocked: it ran nothing
        wake.set()
        worked.wait()
        assert not ThreadActivity.now().quiet_since(before)  # it woke and ran
    finally:
        wake.set()
        done.set()
        worker.join()


def test_a_thread_that_started_or_ended_since_is_not_quiet() -> None:
    before = ThreadActivity.now()
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait, name="notebook-worker", daemon=True)
    worker.start()
    during = ThreadActivity.now()
    assert not during.quiet_since(before)  # started since
    stop.set()
    worker.join()
    assert not ThreadActivity.now().quiet_since(during)  # ended since: it ran to its end


def test_counts_that_cannot_be_read_vouch_for_nothing() -> None:
    unread = ThreadActivity(unreadable=True)
    assert not ThreadActivity().quiet_since(unread)
    assert not unread.quiet_since(ThreadActivity())
    assert not ThreadActivity(tasks=True).quiet_since(ThreadActivity())
    assert ThreadActivity().quiet_since(ThreadActivity())
