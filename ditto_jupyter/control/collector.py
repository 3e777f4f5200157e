"""Garbage collection in the background: asked for by close and delete-snapshot, run on a
worker thread, never on the caller's thread (the server's event loop).

`request()` returns at once. A worker thread (started when needed) runs one collection,
then waits for the grace period and runs once more, so what was still too young to go the
first time goes then; requests that arrive meanwhile are folded into the next run. With
nothing left to do the thread ends. A collection that fails is logged, kept as
`last_error` and tried again at the next request; it never reaches the caller.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ditto_jupyter.core.blobs import GcReport

_log = logging.getLogger(__name__)


class BackgroundCollector:
    """Runs `collect` on a worker thread when asked, one run at a time."""

    def __init__(self, collect: Callable[[], GcReport], *, follow_up_seconds: float) -> None:
        self._collect = collect
        self._follow_up_seconds = follow_up_seconds
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._thread: threading.Thread | None = None
        self._pending = False
        self._stopping = False
        self.runs = 0
        self.last_report: GcReport | None = None
        self.last_error: BaseException | None = None

    def request(self) -> None:
        """Ask for a collection soon; returns at once."""
        with self._lock:
            if self._stopping:
                return
            self._pending = True
            self._idle.clear()
            self._wake.set()
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="ditto-gc", daemon=True)
                self._thread.start()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until no collection is asked for or running (True), or `timeout` passes."""
        return self._idle.wait(timeout)

    def stop(self, timeout: float | None = None) -> None:
        """Run nothing more; wait up to `timeout` for a run in progress to end."""
        with self._lock:
            self._stopping = True
            self._wake.set()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _take_request(self) -> bool:
        with self._lock:
            if self._stopping or not self._pending:
                return False
            self._pending = False
            self._wake.clear()
            return True

    def _run(self) -> None:
        follow_up_due: float | None = None
        while True:
            if self._take_request():
                self._collect_once()
                follow_up_due = time.monotonic() + self._follow_up_seconds
                continue
            with self._lock:
                if self._stopping or (follow_up_due is None and not self._pending):
                    self._thread = None
                    self._idle.set()
                    return
                if not self._pending:
                    self._idle.set()
            assert follow_up_due is not None or self._pending
            if follow_up_due is not None and not self._wake.wait(
                max(0.0, follow_up_due - time.monotonic())
            ):
                follow_up_due = None
                self._idle.clear()
                self._collect_once()

    def _collect_once(self) -> None:
        try:
            self.last_report = self._collect()
            self.last_error = None
        except Exception as error:  # kept for whoever looks; the next request tries again
            _log.warning(
                "ditto: garbage collection failed (%s: %s); unreferenced blobs stay on disk "
                "until the next collection",
                type(error).__name__,
                error,
            )
            self.last_error = error
        self.runs += 1
