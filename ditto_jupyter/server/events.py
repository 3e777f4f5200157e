"""jupyter_events for runtime operations: one registered schema, one event per operation.

The side panel subscribes on `/api/events/subscribe` and filters on `RUNTIME_EVENT_SCHEMA_ID`;
every control operation the extension runs emits exactly one event when it ends, whether it
succeeded or failed, so a listener never misses a change of state.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_events import EventLogger

from ditto_jupyter.core.errors import DittoError
from ditto_jupyter.core.models import FanOutMember, UnrestorableValue

RUNTIME_EVENT_SCHEMA_ID = "https://events.ditto-jupyter.dev/ditto_jupyter/runtime/v1"
RUNTIME_EVENT_SCHEMA_PATH = Path(__file__).parent / "event_schemas" / "runtime" / "v1.yaml"


def register_runtime_schema(event_logger: EventLogger) -> None:
    """Register the runtime event schema once (a second registration is a no-op)."""
    if RUNTIME_EVENT_SCHEMA_ID not in event_logger.schemas.schema_ids:
        event_logger.register_event_schema(RUNTIME_EVENT_SCHEMA_PATH)


@dataclass
class OperationEvent:
    """The fields of one runtime event, filled in while the operation runs."""

    action: str
    runtime_id: str
    checkpoint_id: str | None = None
    source_runtime_id: str | None = None
    status: str | None = None
    unrestorable: list[UnrestorableValue] | None = None
    ok: bool = False
    error: str | None = None
    reason: str | None = None
    #: checkpoint and document events: `pending`, or where the checkpoint's document came from
    document: str | None = None
    #: checkout events of a fan-out: the child's group (`FanOutMember`), else None
    fanout: FanOutMember | None = None
    #: the operation emitted its own events (one per child of a fan-out): not this one
    replaced: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def data(self, duration_ms: float) -> dict[str, Any]:
        """The event body as the schema describes it."""
        return {
            "action": self.action,
            "runtime_id": self.runtime_id,
            "checkpoint_id": self.checkpoint_id,
            "source_runtime_id": self.source_runtime_id,
            "status": self.status,
            "unrestorable": (
                None
                if self.unrestorable is None
                else [value.model_dump() for value in self.unrestorable]
            ),
            "duration_ms": round(duration_ms, 3),
            "ok": self.ok,
            "error": self.error,
            "reason": self.reason,
            "document": self.document,
            "fanout": None if self.fanout is None else self.fanout.model_dump(),
        }


class RuntimeEvents:
    """Emits runtime events on the server's event logger."""

    def __init__(self, event_logger: EventLogger) -> None:
        self.event_logger = event_logger
        register_runtime_schema(event_logger)

    def emit(self, event: OperationEvent, duration_ms: float) -> None:
        """Emit one event now."""
        self.event_logger.emit(schema_id=RUNTIME_EVENT_SCHEMA_ID, data=event.data(duration_ms))

    @contextmanager
    def operation(self, action: str, runtime_id: str) -> Iterator[OperationEvent]:
        """Time an operation and emit its event when the block ends.

        The block fills in the event (checkpoint id, status) and sets `ok`; an exception
        leaving the block marks the event failed with the error's code, then propagates.
        A block that emitted its own events instead sets `replaced`: nothing more is emitted.
        """
        event = OperationEvent(action=action, runtime_id=runtime_id)
        started = time.perf_counter()
        try:
            yield event
        except DittoError as error:
            event.ok = False
            event.error = error.code
            raise
        except BaseException as error:
            event.ok = False
            event.error = type(error).__name__
            raise
        else:
            event.ok = True
        finally:
            if not event.replaced:
                self.emit(event, (time.perf_counter() - started) * 1000.0)
