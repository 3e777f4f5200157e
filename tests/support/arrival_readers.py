"""Whether a process reads a fetch's arrival log and waits for what comes next.

A restore that lacks a blob waits in the arrival log of the fetch bringing it
(`ditto_jupyter.core.blobs.arrivals`). A test holds a chunk back until a reader is so
waiting, then lets it land: Linux says which files a process has open (`/proc/<pid>/fd`)
and how far it has read each one (`/proc/<pid>/fdinfo`), so "waiting" is a fact read off the
process, not a guess made with a timer. `Reading` is a read on a thread of its own.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path


class Reading(threading.Thread):
    """A read of a store on a thread of its own (a restore waiting on a fetch)."""

    def __init__(self, read: Callable[[], object]) -> None:
        super().__init__(daemon=True)
        self._read = read
        self.result: object = None
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            self.result = self._read()
        except BaseException as error:
            self.error = error

    def outcome(self) -> object:
        self.join()
        if self.error is not None:
            raise self.error
        return self.result


_POSITION = re.compile(r"^pos:\s+(\d+)$", re.MULTILINE)
_FLAGS = re.compile(r"^flags:\s+([0-7]+)$", re.MULTILINE)


def waiting_in(pid: int, log: str) -> bool:
    """Whether process `pid` has `log` open for reading and has read all of it so far."""
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            if os.readlink(fd) != log:
                continue
            info = Path(f"/proc/{pid}/fdinfo/{fd.name}").read_text()
        except OSError:  # closed meanwhile
            continue
        flags, position = _FLAGS.search(info), _POSITION.search(info)
        if flags is None or position is None or int(flags.group(1), 8) & os.O_ACCMODE:
            continue  # the writer's own descriptor
        return int(position.group(1)) >= os.path.getsize(log)
    return False


def wait_for_reader(pid: int, log: str, *, given_up: Callable[[], bool]) -> bool:
    """Until `pid` waits in `log` (True), or `given_up()` says it never will (False)."""
    while not waiting_in(pid, log):
        if given_up():
            return False
        time.sleep(0.005)
    return True
