"""What may run behind the cells' back, and whether it ran between two captures.

Code that runs outside every cell (a thread that is neither the kernel's own nor ditto's, a
pending asyncio task of notebook code) can change any value without the change journal
seeing it. Such a thread often just sits there: joblib's loky executor keeps two threads
alive after the first cell with `n_jobs`, blocked until the next parallel call. The
operating system counts how long each thread ran and how often it was scheduled
(`/proc/self/task/<id>/schedstat`): a thread whose counts did not move between two captures
ran no code at all in between, so it changed nothing.

`ThreadActivity.now()` is read when a capture starts; the next capture may follow that one
only when `quiet_since` holds: the same threads, each with the same counts, no notebook task
pending at either time, and every count readable. A thread that started or ended in between
ran; where the counts cannot be read (not Linux), nothing is vouched for.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass

from ditto_jupyter.kernel.capture.trusted_code import is_trusted_file_name

#: Modules whose threads belong to the kernel itself, and the prefix of ditto's own threads.
KERNEL_THREAD_MODULES = ("ipykernel", "IPython", "jupyter_client", "zmq", "tornado", "comm")
DITTO_THREAD_PREFIX = "ditto-"


@dataclass(frozen=True)
class ThreadActivity:
    """The foreign threads at one moment, each with the OS's counts of its running (by
    Python ident and native id), and whether a notebook task was pending or a thread's
    counts could not be read."""

    threads: frozenset[tuple[int, int, str]] = frozenset()
    tasks: bool = False
    unreadable: bool = False

    @classmethod
    def now(cls) -> ThreadActivity:
        """What runs behind the cells' back at this moment."""
        counted: set[tuple[int, int, str]] = set()
        unreadable = False
        for thread in foreign_threads():
            counts = run_counts(thread)
            if counts is None:
                unreadable = True
            else:
                counted.add((thread.ident or 0, thread.native_id or 0, counts))
        return cls(frozenset(counted), notebook_tasks_pending(), unreadable)

    def any(self) -> bool:
        """Whether anything may run behind the cells' back."""
        return bool(self.threads) or self.tasks or self.unreadable

    def quiet_since(self, before: ThreadActivity) -> bool:
        """Whether nothing ran behind the cells' back from `before` to this moment."""
        if self.tasks or before.tasks or self.unreadable or before.unreadable:
            return False
        return self.threads == before.threads


def run_counts(thread: threading.Thread) -> str | None:
    """The OS's counts of a live thread's running so far (time on a CPU in ns, time waiting
    to run, times scheduled), or None where they cannot be read."""
    if thread.native_id is None:
        return None
    try:
        with open(f"/proc/self/task/{thread.native_id}/schedstat", encoding="ascii") as file:
            return file.read().strip()
    except OSError:  # not Linux, or the thread ended just now
        return None


def foreign_threads() -> list[threading.Thread]:
    """Live threads that are neither the kernel's own nor ditto's."""
    found = []
    for thread in threading.enumerate():
        if thread is threading.main_thread() or thread.name.startswith(DITTO_THREAD_PREFIX):
            continue
        target = getattr(thread, "_target", None)
        module = str(getattr(target, "__module__", None) or type(thread).__module__)
        if module.split(".")[0] in KERNEL_THREAD_MODULES:
            continue
        found.append(thread)
    return found


def notebook_tasks_pending() -> bool:
    """Whether the kernel's event loop has a pending task running code of the notebook (a
    coroutine whose code is not from an installed package or the standard library)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return False
    for task in asyncio.all_tasks(loop):
        code = getattr(task.get_coro(), "cr_code", None)
        if task.done() or code is None:
            continue
        if not is_trusted_file_name(code.co_filename):
            return True
    return False
