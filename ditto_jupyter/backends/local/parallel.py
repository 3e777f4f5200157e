"""Run one function over many files on a few threads (file I/O, BLAKE3, zstd drop the GIL).

Snapshots and checkouts spend their time reading, hashing, compressing and writing files,
all of which release the GIL, so two threads keep two cores busy. Workers pull the next job
from a shared queue, so a thread slowed by a big file or a busy core just takes fewer jobs.
The calling thread is one of the workers, so a call never waits for a free helper: when
the helpers are busy with another call, it does all of its jobs itself.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

J = TypeVar("J")
R = TypeVar("R")

#: Threads a snapshot or checkout uses (the caller's included); 1 runs everything inline.
MAX_THREADS = min(2, os.cpu_count() or 1)
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _helpers() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=max(MAX_THREADS - 1, 1), thread_name_prefix="ditto-files"
            )
        return _pool


def run_parallel(
    work: Callable[[J], R], jobs: Sequence[J], *, threads: int = MAX_THREADS
) -> list[R]:
    """`[work(job) for job in jobs]`, computed on up to `threads` threads, in order.

    The first exception stops every worker from taking new jobs and is raised here once
    all of them have stopped.
    """
    if threads <= 1 or len(jobs) < 2:
        return [work(job) for job in jobs]
    results: list[R | None] = [None] * len(jobs)
    cursor = iter(range(len(jobs)))
    lock = threading.Lock()
    failed: list[BaseException] = []

    def worker() -> None:
        while True:
            with lock:
                if failed:
                    return
                index = next(cursor, None)
            if index is None:
                return
            try:
                results[index] = work(jobs[index])
            except BaseException as exc:
                with lock:
                    failed.append(exc)
                return

    helpers = [_helpers().submit(worker) for _ in range(min(threads, len(jobs)) - 1)]
    worker()
    for helper in helpers:
        if not helper.cancel():  # a helper still queued behind another call is not waited for
            helper.result()
    if failed:
        raise failed[0]
    return results  # type: ignore[return-value]  # every slot is filled when none failed
