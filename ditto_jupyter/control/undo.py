"""Undo the last cell: back to just before the last cell `%autocheckpoint` recorded.

With `%autocheckpoint` on, a runtime's head is the automatic checkpoint of the last cell
that ran (or changed something), and that checkpoint's parent is the state just before it
(the cell that turned `%autocheckpoint on` is checkpointed too, so the first cell after it
can be undone). Undo makes the parent the head again, with its variables AND its workspace
files, and names the cell it undid. Nothing to undo (no checkpoint, a head not taken by
`%autocheckpoint`, no earlier checkpoint, or one a prune thinned) is a `Conflict`.

Files come back in place (`files_back`: the local workspace; an E2B sandbox cannot, so
undo there is `UnsupportedBackend` before anything changes), safely: files written since
the head (a terminal's, say), which undo replaces, and the files it started from when
bringing them back fails and they cannot be put back either, are kept in a checkpoint named
`before-undo`.

Two paths, as for restore: the server's (`undo`: an idle kernel, whose variables the
server restores after the files), and a kernel's own (`record_undo`: `%undo` restored its
variables itself first, the server brings the files back and moves the head).
"""

from __future__ import annotations

from ditto_jupyter.control.files_back import FilesBack
from ditto_jupyter.control.runtime_parts import RuntimeParts
from ditto_jupyter.core.errors import Conflict
from ditto_jupyter.core.models import (
    AutoCheckpointCell,
    CheckpointSummary,
    RuntimeCheckpoint,
    RuntimeUndoResult,
    SessionRecord,
    UnrestorableValue,
)

#: The name of the checkpoint that keeps the files an undo replaced or could not put back.
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
        self.files = FilesBack(parts, keep_name=BEFORE_UNDO_NAME, operation="undo")

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
            backend = await self.files.required_backend(session, target)
            unrestorable = await self.files.move(
                session,
                backend,
                head,
                target,
                lambda: parts.context.restore(session, target.context_manifest_id),
            )
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
            backend = await self.files.required_backend(session, target)
            await self.files.move(session, backend, head, target)
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
