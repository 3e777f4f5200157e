"""The store writes of the lifecycle's operations: a runtime started, checked out, stopped
(paused, closed or lost) or restarted.

Each is the body of one write transaction, run on a store thread (`ProviderWork.record`,
`off_loop`), never on the server's event loop: a store that waits for its write lock
stops no server.
"""

from __future__ import annotations

from ditto_jupyter.backends.dirty import DirtyTrackingBackend
from ditto_jupyter.control.langgraph_threads import copy_on_checkout
from ditto_jupyter.control.runtime_parts import RuntimeParts
from ditto_jupyter.core.models import RuntimeCheckpoint, SessionRecord


def started(
    parts: RuntimeParts, session: SessionRecord, backend: DirtyTrackingBackend, *, new: bool
) -> None:
    """A runtime created (`new`) or resumed, on `backend`."""
    if new:
        parts.store.insert_session(session)
    else:
        parts.store.put_session(session)
    parts.store.put_binding(parts.binding(session.session_id, backend))


def checked_out(
    parts: RuntimeParts,
    child: SessionRecord,
    backend: DirtyTrackingBackend,
    checkpoint: RuntimeCheckpoint,
    source_id: str,
) -> None:
    """A checkout's child, at `checkpoint`, with the source's LangGraph threads as they
    stood then (`langgraph_threads`)."""
    started(parts, child, backend, new=True)
    parts.store.set_head(child.session_id, checkpoint.checkpoint_id)
    copy_on_checkout(parts.store, source_id, child.session_id, checkpoint.created_at_ms)


def stopped(
    parts: RuntimeParts, session: SessionRecord, head: RuntimeCheckpoint | None = None
) -> None:
    """A runtime paused, closed or lost (its binding gone), at a new `head` if any."""
    with parts.store.transaction():
        if head is not None:
            parts.store.put_checkpoint(head)
            parts.store.set_head(session.session_id, head.checkpoint_id)
        parts.store.put_session(session)
        parts.store.delete_binding(session.session_id)


def restarted(parts: RuntimeParts, session: SessionRecord, head: RuntimeCheckpoint) -> None:
    """A runtime whose context was restarted: live on, at its new `head`."""
    parts.store.put_checkpoint(head)
    parts.store.set_head(session.session_id, head.checkpoint_id)
    parts.store.put_session(session)
