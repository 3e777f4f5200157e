"""Undo the last cell: back to just before the last cell `%autocheckpoint` recorded.

With `%autocheckpoint` on, a runtime's head is the automatic checkpoint of the last cell
that ran (or changed something), and that checkpoint's parent is the state just before it
(the cell that turned `%autocheckpoint on` is checkpointed too, so the first cell after it
can be undone). Undo makes the parent the head again, with its variables AND its workspace
files, and names the cell it undid. Nothing to undo (no checkpoint, a head not taken by
`%autocheckpoint`, no earlier checkpoint, or one a prune thinned) is a `Conflict`.

Files come back in place (`InPlaceRestorer`: the local workspace; an E2B sandbox cannot,
so undo there is `UnsupportedBackend` before anything changes). Safely: a snapshot of the
files as they are is taken first; if bringing the parent's files back, or the kernel's
variables after them, fails, that snapshot is brought back. Should even that fail, the
snapshot is recorded as a checkpoint named `before-undo` (the head's variables, the files
as they were), so no file is lost, and the error says so.

Two paths, as for restore: the server's (`undo`: an idle kernel, whose variables the
server restores after the files), and a kernel's own (`record_undo`: `%undo` restored its
variables itself first, the server brings the files back and moves the head).
"""

from __future__ import annotations

import logging

from ditto_jupyter.backends.base import InPlaceRestorer
from ditto_jupyter.backends.dirty import DirtyTrackingBackend
from ditto_jupyter.control.checkpointing import new_checkpoint_id
from ditto_jupyter.control.runtime_parts import RuntimeParts
from ditto_jupyter.core.errors import Conflict, UnsupportedBackend
from ditto_jupyter.core.models import (
    AutoCheckpointCell,
    BackendCheckpointRef,
    CheckpointSummary,
    RuntimeCheckpoint,
    RuntimeUndoResult,
    SessionRecord,
    UnrestorableValue,
    now_ms,
)

_log = logging.getLogger(__name__)

#: The name of the checkpoint that keeps the files of an undo that could not be undone.
BEFORE_UNDO_NAME = "before-undo"


def undo_target(runtime_id: str, head: RuntimeCheckpoint | CheckpointSummary | None) -> str:
    """The checkpoint undo goes back to: the parent of the head, the last cell's automatic
    checkpoint. Conflict, saying why, when there is nothing to undo."""
    if head is None:
        raise Conflict(f"runtime {runtime_id} has no checkpoint: there is nothing to undo")
    if head.automatic is None:
        label = f" ({head.name})" if head.name else ""
        raise Conflict(
            f"the head of runtime {runtime_id}, checkpoint {head.checkpoint_id[:12]}{label}, "
            "was not taken by %autocheckpoint: there is no last cell to undo (turn "
            "%autocheckpoint on, or restore a checkpoint by name)"
        )
    if head.parent_checkpoint_id is None:
        raise Conflict(
            f"cell {head.automatic.execution_count} is runtime {runtime_id}'s first "
            "checkpoint: there is no earlier one to go back to"
        )
    return head.parent_checkpoint_id


class Undo:
    """Undo the last cell of a runtime (see the module)."""

    def __init__(self, parts: RuntimeParts) -> None:
        self.parts = parts

    def plan(self, runtime_id: str) -> tuple[RuntimeCheckpoint, RuntimeCheckpoint]:
        """(the head to undo, the checkpoint to go back to), or Conflict."""
        parts = self.parts
        head_id = parts.store.get_head(runtime_id)
        head = parts.checkpoint(head_id) if head_id is not None else None
        target = parts.checkpoint(undo_target(runtime_id, head))
        assert head is not None and head.automatic is not None
        if target.pruned:
            raise Conflict(
                f"the checkpoint before cell {head.automatic.execution_count} "
                f"({target.name or target.checkpoint_id[:12]}) was pruned by %autocheckpoint "
                "--keep: there is nothing to go back to"
            )
        return head, target

    async def undo(self, runtime_id: str) -> RuntimeUndoResult:
        """Undo the last cell of a runtime whose kernel is idle (the server restores it)."""
        parts = self.parts
        async with parts.guard.operation(runtime_id):
            session = parts.guard.live_session(runtime_id)
            await parts.guard.require_idle(session)
            head, target = self.plan(runtime_id)
            backend = await self._restorable_backend(session, target)
            try:
                safety = await self._files_back(session, backend, head, target)
                try:
                    unrestorable = await parts.context.restore(session, target.context_manifest_id)
                except BaseException:
                    await self._put_back(session, backend, head, safety)
                    raise
            finally:
                parts.guard.let_go(runtime_id)
            parts.store.set_head(runtime_id, target.checkpoint_id)
        return await self._result(session, target, head.automatic, unrestorable)

    async def record_undo(
        self, runtime_id: str, checkpoint_id: str, undone_checkpoint_id: str
    ) -> RuntimeUndoResult:
        """A kernel undid its last cell itself (`%undo` restored `checkpoint_id`'s variables):
        bring the files back and make that checkpoint the head. Conflict unless
        `undone_checkpoint_id` is still the head and `checkpoint_id` its parent."""
        parts = self.parts
        async with parts.guard.operation(runtime_id):
            session = parts.guard.live_session(runtime_id)
            head, target = self.plan(runtime_id)
            if (head.checkpoint_id, target.checkpoint_id) != (undone_checkpoint_id, checkpoint_id):
                raise Conflict(
                    f"runtime {runtime_id}'s head is checkpoint {head.checkpoint_id[:12]} now, "
                    f"not {undone_checkpoint_id[:12]}: undo again"
                )
            backend = await self._restorable_backend(session, target)
            try:
                await self._files_back(session, backend, head, target)
            finally:
                parts.guard.let_go(runtime_id)
            parts.store.set_head(runtime_id, target.checkpoint_id)
        return await self._result(session, target, head.automatic, target.unrestorable)

    async def _result(
        self,
        session: SessionRecord,
        target: RuntimeCheckpoint,
        cell: AutoCheckpointCell | None,
        unrestorable: list[UnrestorableValue],
    ) -> RuntimeUndoResult:
        assert cell is not None
        return RuntimeUndoResult(
            runtime=await self.parts.guard.public(session),
            checkpoint_id=target.checkpoint_id,
            undone_cell=cell,
            unrestorable=unrestorable,
        )

    async def _restorable_backend(
        self, session: SessionRecord, target: RuntimeCheckpoint
    ) -> DirtyTrackingBackend | None:
        """The runtime's backend, checked able to take the target's files back in place
        (UnsupportedBackend otherwise, before anything changes); None: it has none."""
        backend = await self.parts.backend(session)
        if backend is None:
            return None
        if not isinstance(backend.inner, InPlaceRestorer):
            raise UnsupportedBackend(
                f"runtime {session.session_id}'s files live in a {backend.kind} backend, "
                "which cannot bring a snapshot back in place, so its last cell cannot be "
                "undone; check the checkpoint out into a new runtime instead"
            )
        ref = target.backend_ref
        if ref is None or not ref.provider_snapshot_id:
            raise UnsupportedBackend(
                f"checkpoint {target.checkpoint_id[:12]} has no workspace snapshot any more "
                "(it was deleted), so its files cannot come back"
            )
        return backend

    async def _files_back(
        self,
        session: SessionRecord,
        backend: DirtyTrackingBackend | None,
        head: RuntimeCheckpoint,
        target: RuntimeCheckpoint,
    ) -> BackendCheckpointRef | None:
        """Snapshot the files as they are, then bring the target's back; the snapshot taken
        (None without a backend). A failure puts the snapshot back first."""
        if backend is None:
            return None
        parts = self.parts
        runtime_id = session.session_id
        backend.mark_dirty()  # the kernel writes the workspace directly: a new snapshot
        safety = await parts.backends.checkpoint_backend(runtime_id=runtime_id)
        parts.guard.hold(runtime_id, parts.backends.referenced_manifests(safety))
        assert target.backend_ref is not None
        try:
            await backend.restore_snapshot(target.backend_ref)
        except BaseException:
            await self._put_back(session, backend, head, safety)
            raise
        return safety

    async def _put_back(
        self,
        session: SessionRecord,
        backend: DirtyTrackingBackend | None,
        head: RuntimeCheckpoint,
        safety: BackendCheckpointRef | None,
    ) -> None:
        """Bring the files undo started from back; failing that, keep them in a checkpoint."""
        if backend is None or safety is None:
            return
        runtime_id = session.session_id
        try:
            await backend.restore_snapshot(safety)
            return
        except Exception as error:
            _log.error(
                "ditto: undo of runtime %s failed and its files could not be put back (%s); "
                "they are kept in a checkpoint named %r",
                runtime_id,
                error,
                BEFORE_UNDO_NAME,
            )
        backend.mark_dirty()
        kept = RuntimeCheckpoint(
            checkpoint_id=new_checkpoint_id(),
            runtime_id=runtime_id,
            parent_checkpoint_id=head.checkpoint_id,
            session=session.model_copy(update={"updated_at_ms": now_ms()}),
            backend_ref=safety,
            context_manifest_id=head.context_manifest_id,
            unrestorable=head.unrestorable,
            name=BEFORE_UNDO_NAME,
            metadata={"variables_from": head.checkpoint_id},
        )
        self.parts.store.put_checkpoint(kept)
