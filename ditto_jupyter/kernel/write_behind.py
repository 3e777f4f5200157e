"""A single background thread that runs jobs in the order they were given.

`%autocheckpoint` hands it the second half of each cell's checkpoint (write the new chunks
and the manifest, record the checkpoint), so the cell's reply does not wait for the disk.
Everything that reads or changes checkpoints in the kernel waits for it first (`flush`).
The thread is not a daemon: an interpreter that exits finishes the writes it was given.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor


class WriteBehind:
    """Jobs run one at a time, in order, off the caller's thread."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._executor: ThreadPoolExecutor | None = None
        self._last: Future[None] | None = None

    def submit(self, job: Callable[[], None]) -> None:
        """Run `job` after every job given before it. A job reports its own errors."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self._name)
        self._last = self._executor.submit(job)

    def pending(self) -> bool:
        """Whether a job has not finished yet."""
        return self._last is not None and not self._last.done()

    def flush(self) -> None:
        """Wait until every job given so far has run."""
        last = self._last
        if last is not None:
            last.exception()  # waits; a job's own error is its business, not the caller's
