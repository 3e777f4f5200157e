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

Undo undoes exactly the last cell that ran, or refuses in one line that leads with what to
do. The server's path first waits for the kernel's `%autocheckpoint` write-behind (`settle`,
outside the runtime's slot, through which those checkpoints are recorded), so it plans from
the checkpoint of every cell that ran. Then it captures the live kernel: when the kernel is
not at the head's state and cells ran since the head (`%autocheckpoint` was off, a restart
re-run by hand, a checkpoint that could not be recorded), undoing would throw away what no
checkpoint holds, so undo refuses and changes nothing. When the kernel is at the head, or no
cell ran since it but its variables changed anyway (a widget's callback), undo goes on, and
the live variables are kept in `before-undo` beside the files as they were.

A cell whose automatic checkpoint could not be recorded (the store refused it, the capture
raised) is named in the refusal: the kernel's capture says which it was
(`ContextCapture.unrecorded_cell`), and the next checkpoint it records says it too
(`AutoCheckpointCell.unrecorded_before`): that checkpoint's parent is the state before the
unrecorded cell, so undoing it would undo two cells, and undo refuses it (`undone_alone`),
pointing to restore by name.

Two paths, as for restore: the server's (`undo`: an idle kernel, whose variables the
server restores after the files), and a kernel's own (`record_undo`: `%undo` restored its
variables itself first, the server brings the files back and moves the head; the kernel
checks itself that its last cell is the head, `AutoCheckpointer.undo_refusal`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from ditto_jupyter.control.files_back import FilesBack
from ditto_jupyter.control.runtime_parts import RuntimeParts
from ditto_jupyter.core.errors import Conflict
from ditto_jupyter.core.models import (
    AutoCheckpointCell,
    CheckpointSummary,
    ContextCapture,
    RuntimeCheckpoint,
    RuntimeUndoResult,
    SessionRecord,
    UnrestorableValue,
)

#: The name of the checkpoint that keeps the files an undo replaced or could not put back.
BEFORE_UNDO_NAME = "before-undo"
#: What every refusal for want of an automatic checkpoint leads with.
TURN_ON_HINT = "turn %autocheckpoint on to undo cells"
#: The handle_state key checkpointing keeps a checkpoint's run mark under (`checkpointing`).
_CHECKPOINTED_RUN = "checkpointed_run"


def notebook_label(conversation_id: str | None, runtime_id: str) -> str:
    """What a message calls a runtime: its notebook's file name, else a short runtime id."""
    name = PurePosixPath(conversation_id).name if conversation_id else ""
    return name if name.endswith(".ipynb") else f"runtime {runtime_id[:12]}"


def undo_target(
    runtime_id: str,
    head: RuntimeCheckpoint | CheckpointSummary | None,
    notebook: str | None = None,
) -> str:
    """The checkpoint undo goes back to: the parent of the head, the last cell's automatic
    checkpoint. Conflict, leading with what to do, when there is nothing to undo.
    `notebook`: what the message calls the runtime (`notebook_label`)."""
    label = notebook or f"runtime {runtime_id[:12]}"
    if head is None:
        raise Conflict(f"{TURN_ON_HINT}: {label} has no checkpoint, so there is nothing to undo")
    if head.automatic is None:
        name = f" ({head.name})" if head.name else ""
        raise Conflict(
            f"{TURN_ON_HINT}, or restore a checkpoint by name: the head of {label}, "
            f"checkpoint {head.checkpoint_id[:12]}{name}, was not taken by %autocheckpoint, "
            "so there is no last cell to undo"
        )
    if head.parent_checkpoint_id is None:
        raise Conflict(
            f"nothing to undo: cell {head.automatic.execution_count} is {label}'s first "
            "checkpoint, there is no earlier one to go back to"
        )
    return head.parent_checkpoint_id


def undone_alone(cell: AutoCheckpointCell, target: str, label: str) -> None:
    """Conflict, leading with what to do, when undoing the checkpoint of `cell` would undo
    more than that cell: a cell between it and the checkpoint before it (`target`, as a
    message names it) had its automatic checkpoint not recorded."""
    missing = cell.unrecorded_before
    if missing is None:
        return
    raise Conflict(
        f"restore {target} by name to go back to before cell {missing}: the automatic "
        f"checkpoint of cell {missing} of {label} was not recorded, so no checkpoint holds "
        f"the state just before cell {cell.execution_count} and undo cannot undo it alone; "
        "nothing was undone"
    )


def last_cell_unrecorded(missing: int, cell: AutoCheckpointCell, head: str, label: str) -> str:
    """Why undo refuses when the automatic checkpoint of cell `missing`, which ran after the
    head (`head`, as a message names it, the checkpoint of `cell`), was not recorded:
    undoing the head would go back two cells. Leads with what to do."""
    return (
        f"restore {head} by name to go back to before cell {missing}: the automatic "
        f"checkpoint of cell {missing} of {label} was not recorded, so undo would go back "
        f"to before cell {cell.execution_count} too; nothing was undone"
    )


def unrecorded_cells(head: RuntimeCheckpoint, live: ContextCapture, label: str) -> str | None:
    """Why undoing `head` would lose what the live kernel holds (cells ran since it that no
    checkpoint holds), leading with what to do; None when the head is the last cell."""
    if live.manifest_id == head.context_manifest_id:
        return None  # the kernel is at the head: cells since changed nothing
    if live.unrecorded_cell is not None and head.automatic is not None:
        name = head.name or head.checkpoint_id[:12]
        return last_cell_unrecorded(live.unrecorded_cell, head.automatic, name, label)
    if same_run(head.session.handle_state.get(_CHECKPOINTED_RUN), live):
        return None  # no cell ran since the head; what changed outside cells is kept
    assert head.automatic is not None
    return (
        f"{TURN_ON_HINT}, or %checkpoint first: {label} ran cells after cell "
        f"{head.automatic.execution_count} ({head.name or head.checkpoint_id[:12]}) that no "
        "checkpoint holds, and undo would lose them; nothing was undone"
    )


def same_run(mark: object, live: ContextCapture) -> bool:
    """Whether the head's run mark (`checkpointing.run_mark`) names the live kernel process
    at the same point: no cell ran since (counted by `cells_run` when the kernel counts
    cells, else by the execution count)."""
    if not isinstance(mark, Mapping) or live.kernel_process is None:
        return False
    recorded: Mapping[str, Any] = mark
    if recorded.get("process") != live.kernel_process:
        return False
    if live.cells_run is not None:
        return bool(recorded.get("cells_run") == live.cells_run)
    return live.execution_count is not None and recorded.get("execution_count") == (
        live.execution_count
    )


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
        session = parts.store.get_session(runtime_id)
        label = notebook_label(session.conversation_id if session else None, runtime_id)
        target = parts.checkpoint(undo_target(runtime_id, head, label))
        assert head is not None and head.automatic is not None
        if target.pruned:
            raise Conflict(
                f"nothing to undo: the checkpoint before cell {head.automatic.execution_count} "
                f"({target.name or target.checkpoint_id[:12]}) was pruned by %autocheckpoint "
                "--keep"
            )
        undone_alone(head.automatic, target.name or target.checkpoint_id[:12], label)
        return head, target

    async def undo(self, runtime_id: str) -> RuntimeUndoResult:
        """Undo the last cell of a runtime whose kernel is idle (the server restores it);
        Conflict, and nothing changed, when cells ran since the head that no checkpoint
        holds."""
        parts = self.parts
        await parts.guard.settle(runtime_id)  # outside the slot: they record through it
        async with parts.guard.operation(runtime_id):
            session = parts.guard.live_session(runtime_id)
            await parts.guard.require_idle(session)
            head, target = self.plan(runtime_id)
            backend = await self.files.required_backend(session, target)
            async with parts.replication.writing():
                live = await parts.context.capture(session)
                parts.guard.hold(runtime_id, [live.manifest_id])
                problem = unrecorded_cells(
                    head, live, notebook_label(session.conversation_id, runtime_id)
                )
                if problem is not None:
                    parts.guard.let_go(runtime_id)
                    raise Conflict(problem)
                unrestorable = await self.files.move(
                    session,
                    backend,
                    head,
                    target,
                    lambda: parts.context.restore(session, target.context_manifest_id),
                    live=live if live.manifest_id != head.context_manifest_id else None,
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
