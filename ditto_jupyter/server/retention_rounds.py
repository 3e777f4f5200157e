"""Retention rounds in the server: every `retention_interval` seconds, off the event loop.

A round (`control.retention.Retention.round`) makes every store call, its garbage
collection and its measure of the data directory on the store's threads (`off_loop`), as
the lease heartbeat does; the loop only awaits them. Rounds never overlap. A round that
fails is logged by the retention, with its reason, kept as the last thinning
(`GET /api/v1/retention`), and the next round tries again. Each runtime a thinning took
from gets a `thin` event (`events`), so its owner's panel updates.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from tornado.ioloop import PeriodicCallback

from ditto_jupyter.core.models import RetentionReport
from ditto_jupyter.server.events import OperationEvent, RuntimeEvents

if TYPE_CHECKING:
    from ditto_jupyter.control.retention import Retention


def thin_events(report: RetentionReport) -> list[OperationEvent]:
    """One `thin` event per runtime the thinning took from."""
    return [
        OperationEvent(
            action="thin",
            runtime_id=runtime.runtime_id,
            ok=report.error is None,
            error=None if report.error is None else report.error.split(":", 1)[0],
            thinned={
                "rules": list(report.rules),
                "checkpoints": runtime.checkpoints,
                "cells": [cells.model_dump() for cells in runtime.cells],
                "checkpoint_ids": list(runtime.checkpoint_ids),
                "bytes_freed": report.bytes_freed,
            },
        )
        for runtime in report.runtimes
    ]


class RetentionRounds:
    """Runs the retention's rounds on a timer and tells the event stream what they thinned."""

    def __init__(
        self,
        retention: Retention,
        events: RuntimeEvents,
        interval: float,
        *,
        log: logging.Logger | None = None,
    ) -> None:
        self.retention = retention
        self.events = events
        self.interval = interval
        self.log = log or logging.getLogger(__name__)
        self._callback: PeriodicCallback | None = None
        retention.listeners.append(self._tell)

    def start(self) -> None:
        """A round every `interval` seconds (the first one `interval` after start)."""
        if self._callback is None and self.interval > 0:
            self._callback = PeriodicCallback(self.round_logged, self.interval * 1000.0)
            self._callback.start()

    def stop(self) -> None:
        if self._callback is not None:
            self._callback.stop()
            self._callback = None
        if self._tell in self.retention.listeners:
            self.retention.listeners.remove(self._tell)

    async def round_logged(self) -> None:
        """One round; its failure was logged by the retention (with its reason) and is
        kept as the last thinning: the timer goes on, the next round tries again."""
        try:
            await self.retention.round()
        except Exception as error:
            self.log.debug("ditto_jupyter: the retention round failed: %s", error)

    def _tell(self, report: RetentionReport) -> None:
        for event in thin_events(report):
            self.events.emit(event, report.finished_at_ms - report.started_at_ms)
