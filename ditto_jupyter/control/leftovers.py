"""Cleanups that must not fail the operation they follow, and what they leave behind.

Stopping a kernel, releasing a backend or deleting a snapshot is often the last step of an
operation that failed, or one whose result is already recorded. Such a step may fail (a
kernel that would not stop, an E2B sandbox or snapshot E2B would not delete, a workspace
that could not be removed) without failing the operation, but never silently: the failure
is logged, and the resource it left behind is recorded in the store as a `Leftover`, which
`ditto doctor` lists. A provider call whose own cleanup failed says what it left behind
(`ResourceLeftBehind`), and that is recorded too.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ditto_jupyter.backends.base import ResourceLeftBehind
from ditto_jupyter.control.store import CheckpointStore
from ditto_jupyter.core.models import BackendCheckpointRef, Leftover, SessionRecord

_log = logging.getLogger(__name__)

#: What a backend of each kind is called in a leftover's kind.
_BACKEND_KINDS = {"local": "workspace", "e2b": "e2b-sandbox"}


@dataclass(frozen=True)
class Resource:
    """Something a cleanup frees: its kind, its id, and the runtime it served."""

    kind: str
    resource_id: str
    runtime_id: str | None


def kernel_resource(session: SessionRecord) -> Resource:
    """A runtime's kernel, by its kernel id (a context without one: by the runtime's id)."""
    kernel = session.handle_state.get("kernel_id")
    if not isinstance(kernel, str) or not kernel:
        kernel = session.session_id
    return Resource("kernel", kernel, session.session_id)


def backend_resource(runtime_id: str, kind: str, backend_id: str) -> Resource:
    """A runtime's backend: a local workspace, an E2B sandbox."""
    return Resource(_BACKEND_KINDS.get(kind, f"{kind}-backend"), backend_id, runtime_id)


def snapshot_resource(ref: BackendCheckpointRef, runtime_id: str) -> Resource:
    """A backend snapshot: a local workspace snapshot's manifest, an E2B snapshot."""
    return Resource(f"{ref.backend_kind}-snapshot", ref.provider_snapshot_id or "", runtime_id)


class LeftoverLog:
    """Runs cleanups that may fail; logs each failure and records what it left behind."""

    def __init__(self, store: CheckpointStore) -> None:
        self._store = store

    async def attempt(
        self, what: str, step: Callable[[], Awaitable[object]], left: Resource | None
    ) -> bool:
        """Run one cleanup step; False (logged, and `left` recorded) when it failed."""
        try:
            await step()
        except Exception as error:  # a cleanup never fails the operation: it is recorded
            self.failed(what, error, left)
            return False
        return True

    def failed(self, what: str, error: BaseException, left: Resource | None) -> None:
        """Log a cleanup that failed and record the resource it left behind, if any."""
        reason = f"{what} failed: {_reason(error)}"
        if left is None:
            _log.warning("ditto: %s; nothing was left behind", reason)
            return
        _log.warning(
            "ditto: %s; left behind: %s %s (runtime %s), listed by `ditto doctor`",
            reason,
            left.kind,
            left.resource_id,
            left.runtime_id,
        )
        self.record(left, reason)

    def note_left_behind(self, error: BaseException, runtime_id: str | None) -> None:
        """Record what a provider call said it left behind when it failed (if it did)."""
        if isinstance(error, ResourceLeftBehind):
            item = error.left_behind
            _log.warning(
                "ditto: %s; left behind: %s %s (runtime %s), listed by `ditto doctor`",
                error,
                item.kind,
                item.resource_id,
                runtime_id,
            )
            self.record(Resource(item.kind, item.resource_id, runtime_id), item.reason)

    def record(self, left: Resource, reason: str) -> None:
        """Record a leftover; a store that refuses even that is logged (it is all we have)."""
        leftover = Leftover(
            kind=left.kind, resource_id=left.resource_id, runtime_id=left.runtime_id, reason=reason
        )
        try:
            self._store.record_leftover(leftover)
        except Exception as error:  # the log line above is then the only trace
            _log.warning(
                "ditto: could not record leftover %s %s in the store: %s",
                left.kind,
                left.resource_id,
                _reason(error),
            )


def _reason(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
