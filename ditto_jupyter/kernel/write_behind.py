"""A single background thread that runs jobs in the order they were given.

`%autocheckpoint` hands it the second half of each cell's checkpoint (write the new chunks
and the manifest, record the checkpoint), so the cell's reply does not wait for the disk.
Everything that reads or changes checkpoints in the kernel waits for it first (`flush`).
The thread is not a daemon: an interpreter that exits finishes the writes it was given.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

#: Seconds a `submit_when_idle` job waits after the caller's task, unless waited for: long
#: enough for a kernel to deliver the cell's reply, too short for anyone to notice.
QUIET_S = 0.02

_every: weakref.WeakSet[WriteBehind] = weakref.WeakSet()


def flush_all() -> None:
    """Wait for the jobs of every write-behind of this process (a capture or restore asked
    from outside comes after them, never between)."""
    for writer in list(_every):
        writer.flush()


def settle() -> bool:
    """A host's call (`kernel_calls.SETTLE`): wait for every write-behind of this kernel, so
    that an operation from outside plans from the checkpoints of every cell that ran. Called
    before the operation takes the runtime's slot: the jobs record through it."""
    flush_all()
    return True


class WriteBehind:
    """Jobs run one at a time, in order, off the caller's thread."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._executor: ThreadPoolExecutor | None = None
        self._last: Future[None] | None = None
        self._waiting: list[Callable[[], None]] = []  # given, not started yet (in order)
        _every.add(self)

    def submit(self, job: Callable[[], None]) -> None:
        """Run `job` after every job given before it. A job reports its own errors."""
        self.start_waiting()
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self._name)
        self._last = self._executor.submit(job)

    def submit_when_idle(self, job: Callable[[], None]) -> None:
        """Like `submit`, but started `QUIET_S` after the caller's event loop has finished
        its current task, or as soon as anything waits for it (`start_waiting`, `flush`).

        In a kernel the loop's task is the cell: its reply is then on its way, but
        ipykernel 7 forwards it from another Python thread (the shell channel's), which
        needs the GIL; a job holding the GIL would delay the reply by the interpreter's
        switch interval (5 ms) every time that thread wakes. Without a running loop the
        job starts now."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.submit(job)
            return
        self._waiting.append(job)
        loop.call_soon(loop.call_later, QUIET_S, self.start_waiting)

    def start_waiting(self) -> None:
        """Start the jobs `submit_when_idle` holds back, now."""
        waiting, self._waiting = self._waiting, []
        for job in waiting:
            self.submit(job)

    def flush(self) -> None:
        """Wait until every job given so far has run."""
        self.start_waiting()
        last = self._last
        if last is not None:
            last.exception()  # waits; a job's own error is its business, not the caller's
