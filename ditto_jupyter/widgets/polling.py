"""A timer thread that keeps a widget current: it calls `tick` every `interval` seconds.

A widget's model lives in the kernel, so the kernel has to notice changes and send them.
The main thread is busy while a cell runs (that is when budgets are charged and branches
committed), so a daemon thread does the noticing; ipywidgets sends state updates from any
thread. `tick` is the widget's own refresh, which compares a cheap fingerprint first and
sends nothing when nothing changed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


def check_interval(interval: float | None) -> float | None:
    """A poll interval in seconds (None: no polling); ValueError names a bad one."""
    if interval is None:
        return None
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or interval <= 0:
        raise ValueError(f"poll_interval must be a positive number of seconds, not {interval!r}")
    return float(interval)


class Poller:
    """Calls `tick` every `interval` seconds in a daemon thread until `stop()`."""

    def __init__(self, tick: Callable[[], object], interval: float, name: str) -> None:
        self.interval = interval
        self._tick = tick
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.wait(self.interval):
            self._tick()

    @property
    def running(self) -> bool:
        """True until `stop()` has ended the thread."""
        return self._thread.is_alive()

    def stop(self) -> None:
        """End the thread (waits for a tick in progress, unless called from the tick)."""
        self._stopped.set()
        if threading.current_thread() is not self._thread:
            self._thread.join()


class Polled:
    """Mixin of a widget that keeps its `Poller` (or None) in `_poller`."""

    _poller: Poller | None

    @property
    def polling(self) -> bool:
        """True while the widget's poller runs."""
        return self._poller is not None and self._poller.running

    def stop_polling(self) -> None:
        """Stop the poller, if any (safe when `__init__` failed before starting it)."""
        poller, self._poller = getattr(self, "_poller", None), None
        if poller is not None:
            poller.stop()
