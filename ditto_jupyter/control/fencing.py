"""Fence a kernel this service still runs for a runtime whose lease it lost (issue 40 §5).

A server frozen long enough (a paused VM, a partition) has its runtimes taken over by
another server: recorded lost and paused there, resumable. When the frozen server comes
back, its kernel still runs cells in the open notebook, but nothing it does can be
recorded any more, and a resume would throw that work away. So the kernel is fenced at
once:

- it counts every cell from now on (`fence`), what it holds is captured, and it is sealed
  (a cell that arrived in between is captured again);
- the capture is kept in a checkpoint named `lost` (`new_checkpoint`), a child of the
  runtime's head, with a snapshot of its workspace as it is (else the head's files): when
  the runtime is still paused, it becomes its head (the lease claimed for the write), so a
  resume brings the work back; when it runs elsewhere meanwhile, the checkpoint is kept
  beside it (restore or check it out);
- then the kernel is stopped.

A capture that fails (the kernel is gone, the blob store refuses) keeps nothing, said in
the log; the kernel is stopped all the same. The front end tells the notebook (a `lost`
event, reason `fenced`).
"""

from __future__ import annotations

import logging
from typing import Any

from ditto_jupyter.control.checkpointing import new_checkpoint, replicate_behind
from ditto_jupyter.control.off_loop import off_loop
from ditto_jupyter.control.runtime_parts import RuntimeParts
from ditto_jupyter.core.errors import DittoError, SessionBusy
from ditto_jupyter.core.models import (
    BackendCheckpointRef,
    ContextCapture,
    RuntimeCheckpoint,
    SessionLifecycleStatus,
    SessionRecord,
    now_ms,
)

_log = logging.getLogger(__name__)

#: The name of the checkpoint keeping a fenced kernel's variables (as a lost runtime's).
FENCED_CHECKPOINT_NAME = "lost"


class Fencing:
    """Stop a kernel whose runtime's lease this service lost, keeping what it holds."""

    def __init__(self, parts: RuntimeParts) -> None:
        self.parts = parts

    async def fence(self, runtime_id: str, handle: dict[str, Any]) -> RuntimeCheckpoint | None:
        """Fence the kernel `handle` of `runtime_id` (see the module): the checkpoint that
        keeps its variables, or None when none could be kept."""
        parts = self.parts
        session = await off_loop(parts.store.get_session, runtime_id)
        if session is None:
            return None
        here = session.model_copy(update={"handle_state": dict(handle)})
        kept: RuntimeCheckpoint | None = None
        files: BackendCheckpointRef | None = None
        try:
            capture = await self._capture(here)
            files = await self._files(here)
            kept = await self._keep(session, capture, files)
        except DittoError as error:
            _log.warning(
                "ditto: the kernel of runtime %s, whose lease this server lost, is stopped; "
                "what it held could not be kept: %s",
                runtime_id,
                error,
            )
        finally:
            await parts.stop_context(here)
            if kept is None or files is None:  # not safely in a snapshot: never deleted
                parts.backends.forget(runtime_id)
            else:
                await parts.release_backend(runtime_id)
        return kept

    async def _files(self, here: SessionRecord) -> BackendCheckpointRef | None:
        """A snapshot of the runtime's workspace as it is now, or None (no backend here,
        or it cannot be snapshotted: then it is left where it is)."""
        try:
            backend = await self.parts.backend(here)
            if backend is None:
                return None
            if backend.local_path is not None:  # the kernel may have written it directly
                backend.mark_dirty()
            return await self.parts.backends.checkpoint_backend(runtime_id=here.session_id)
        except (DittoError, OSError) as error:
            _log.warning(
                "ditto: the workspace of runtime %s is left as it is: %s", here.session_id, error
            )
            return None

    async def _capture(self, here: SessionRecord) -> ContextCapture:
        """What the kernel holds, with no cell running after it (fenced, then sealed)."""
        context = self.parts.context
        await context.fence(here)
        capture = await context.capture(here)
        if not await context.seal(here):  # a cell ran since the fence: what it did too
            capture = await context.capture(here)
        return capture

    async def _keep(
        self,
        session: SessionRecord,
        capture: ContextCapture,
        files: BackendCheckpointRef | None,
    ) -> RuntimeCheckpoint:
        """Record the capture and the files (else the head's) in a `lost` checkpoint (the
        head when the runtime is paused and this service may claim it)."""
        parts = self.parts
        runtime_id = session.session_id
        head_id = await off_loop(parts.store.get_head, runtime_id)
        head = await off_loop(parts.store.get_checkpoint, head_id) if head_id else None
        kept = new_checkpoint(
            parts,
            session.model_copy(update={"handle_state": {}, "updated_at_ms": now_ms()}),
            parent_checkpoint_id=head_id,
            backend_ref=files or (head.backend_ref if head is not None else None),
            context_manifest_id=capture.manifest_id,
            unrestorable=capture.unrestorable,
            bytes_written=capture.bytes_written,
            name=FENCED_CHECKPOINT_NAME,
            metadata={"fenced": True},
        )
        parts.guard.hold(runtime_id, parts.manifests_of(kept))
        try:
            await off_loop(self._record, session, kept)
        finally:
            parts.guard.let_go(runtime_id)
        replicate_behind(parts, kept)
        return kept

    def _record(self, session: SessionRecord, kept: RuntimeCheckpoint) -> None:
        """Write the checkpoint; make it the head of a runtime still paused (on a store
        thread, its lease claimed for the write when no other server runs it)."""
        parts = self.parts
        runtime_id = session.session_id
        try:
            parts.guard.ownership.claim(runtime_id)
        except SessionBusy:  # live on another server now: kept beside its head
            parts.store.put_checkpoint(kept)
            return
        try:
            with parts.store.transaction():
                parts.store.put_checkpoint(kept)
                current = parts.store.get_session(runtime_id)
                if current is not None and current.status is SessionLifecycleStatus.PAUSED:
                    parts.store.set_head(runtime_id, kept.checkpoint_id)
        finally:
            parts.guard.ownership.release_unless_live(runtime_id)
