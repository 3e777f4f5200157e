"""A checkpoint store that records every call a server makes to it on its event loop.

No store call may run on the loop (issue 40 section 2): a store that waits (for the write
lock a frozen server holds) would stop the whole server. Configured as the server's
`store_class`, `LoopWatchedStore` is the real SQL store its URL names, bounded by
`DITTO_TEST_LOCK_TIMEOUT_MS`; each public method called from a thread that runs an asyncio
loop appends one line to the file `DITTO_TEST_LOOP_CALLS` names: the method, then the
ditto frames that called it, innermost first. A test reads them back with `loop_calls`.
"""

from __future__ import annotations

import asyncio
import functools
import os
import sys
import threading
from pathlib import Path
from typing import Any

from ditto_jupyter.control.store.interface import BUSY_TIMEOUT_MS
from ditto_jupyter.control.store.sql import SqlCheckpointStore

#: The file the calls are written to (one line each), and the store's lock bound (ms).
CALLS_ENV = "DITTO_TEST_LOOP_CALLS"
LOCK_TIMEOUT_ENV = "DITTO_TEST_LOCK_TIMEOUT_MS"
#: The trait value that names this class.
STORE_CLASS = f"{__name__}.LoopWatchedStore"

_write_lock = threading.Lock()


def _on_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _caller(depth: int = 4) -> str:
    """The nearest ditto frames outside the store (and this module) that made the call,
    innermost first (`depth` of them)."""
    frame = sys._getframe(2)
    seen: list[str] = []
    while frame is not None and len(seen) < depth:
        path = frame.f_code.co_filename
        if "ditto_jupyter" in path and "/control/store/" not in path:
            where = path.rpartition("ditto_jupyter/")[2]
            seen.append(f"{where}:{frame.f_lineno} {frame.f_code.co_name}")
        frame = frame.f_back  # type: ignore[assignment]
    return " < ".join(seen) or "?"


class LoopWatchedStore(SqlCheckpointStore):
    """The SQL store its URL names; calls made on an event loop are written down."""

    def __init__(self, url: str | None = None, data_dir: Path | None = None) -> None:
        bound = int(os.environ.get(LOCK_TIMEOUT_ENV, BUSY_TIMEOUT_MS))
        target = url or f"sqlite:///{Path(data_dir or '.').resolve() / 'ditto.db'}"
        super().__init__(target, busy_timeout_ms=bound)

    def __getattribute__(self, name: str) -> Any:
        value = super().__getattribute__(name)
        if name.startswith("_") or not callable(value):
            return value
        # Checked when called, not when looked up: `off_loop(store.get_session, ...)` looks
        # the method up on the loop and calls it on a store thread.
        log = os.environ.get(CALLS_ENV)

        @functools.wraps(value)
        def watched(*args: Any, **kwargs: Any) -> Any:
            if log and _on_loop():
                with _write_lock, open(log, "a", encoding="utf-8") as out:
                    out.write(f"{name} <- {_caller()}\n")
            return value(*args, **kwargs)

        return watched


def loop_calls(path: Path) -> list[str]:
    """The calls written down so far: `method <- file:line function`, oldest first."""
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []
