"""A kernel killed in the middle of a call, and revived under the same id, for the tests.

The cells put a value in the kernel whose pickling (`SLOW_TO_PICKLE`) or unpickling
(`SLOW_TO_LOAD`) first writes the kernel's pid to a marker file and then sleeps: a capture
or a restore of it is a call that is still running when the test kills the kernel.

`kill_and_revive` SIGKILLs the process (as the OOM killer would) and then does what
Jupyter's restarter does when it finds a kernel dead, `restart_kernel(now=True)` on the
kernel's manager, before anything else runs on the event loop. The real restarter does the
same within its poll interval; here no liveness poll can fall between the death and the
revival, so "is the kernel alive?" answers yes the whole time, as in the unlucky runs.
"""

from __future__ import annotations

import asyncio
import os
import signal
import textwrap
from pathlib import Path
from typing import Any

#: A value whose pickling reports the kernel's pid, then sleeps ({marker}: a path).
SLOW_TO_PICKLE = textwrap.dedent(
    """
    import os as _os, time as _time

    class SlowToPickle:
        def __init__(self, marker):
            self.marker = marker

        def __reduce__(self):
            with open(self.marker, "w") as out:
                out.write(str(_os.getpid()))
            _time.sleep(600)
            return (SlowToPickle, (self.marker,))

    slow = SlowToPickle({marker!r})
    """
)

#: A value that pickles at once and whose unpickling reports the pid, then sleeps.
SLOW_TO_LOAD = textwrap.dedent(
    """
    def slow_load(marker):
        import os, time
        with open(marker, "w") as out:
            out.write(str(os.getpid()))
        time.sleep(600)

    class SlowToLoad:
        def __init__(self, marker):
            self.marker = marker

        def __reduce__(self):
            return (slow_load, (self.marker,))

    slow = SlowToLoad({marker!r})
    """
)


async def pid_written_to(marker: Path) -> int:
    """The pid a slow value wrote to `marker`, once it has (a functional wait, no limit)."""
    while True:
        text = marker.read_text() if marker.exists() else ""
        if text.strip():
            return int(text)
        await asyncio.sleep(0.02)


async def kill_and_revive(kernel: Any, pid: int) -> None:
    """SIGKILL the kernel process `pid`, then restart `kernel` (its manager) at once."""
    os.kill(pid, signal.SIGKILL)
    await kernel.restart_kernel(now=True)


def manager_of(kernel_manager: Any, pid: int) -> Any:
    """The manager, among a multi-kernel manager's kernels, of the kernel process `pid`."""
    for kernel_id in kernel_manager.list_kernel_ids():
        kernel = kernel_manager.get_kernel(kernel_id)
        if getattr(kernel.provisioner, "pid", None) == pid:
            return kernel
    raise AssertionError(f"no kernel runs as process {pid}")
