"""Restore in place: a live runtime back to a checkpoint's variables and workspace files.

Two paths, as for undo: the server's (`restore`: an idle kernel, whose variables the server
restores after the files), and a kernel's own (`record_restore`: `%restore` restored its
variables itself first; the server brings the files back and moves the head). Files come
back where the workspace can take a snapshot back in place (the local workspace); an E2B
sandbox keeps its files as they are (its variables still come back). Files the restore
replaces that neither the head nor the checkpoint holds (written since the head) are kept
in a checkpoint named `before-restore` (`files_back`), so no file is lost. The open
notebook is the front end's: a restore never touches it. Only a checkpoint of the
runtime's own tree is restored (its own, or the one it was checked out from): another
runtime's is checked out instead.
"""

from __future__ import annotations

from ditto_jupyter.backends.dirty import DirtyTrackingBackend
from ditto_jupyter.control.autocheckpoint_pruning import refuse_pruned
from ditto_jupyter.control.files_back import FilesBack, has_snapshot
from ditto_jupyter.control.off_loop import off_loop
from ditto_jupyter.control.runtime_parts import RuntimeParts
from ditto_jupyter.core.errors import InvalidRequest
from ditto_jupyter.core.models import RuntimeCheckpoint, SessionRecord, UnrestorableValue

#: The name of the checkpoint that keeps the files a restore replaced.
BEFORE_RESTORE_NAME = "before-restore"


def refuse_outside_tree(session: SessionRecord, checkpoint: RuntimeCheckpoint) -> None:
    """InvalidRequest unless `checkpoint` is in the runtime's own tree: one of its own, or
    the checkpoint it was checked out from. Another runtime's state is checked out, so the
    runtime's head never lies outside its tree."""
    own = checkpoint.runtime_id == session.session_id
    if own or checkpoint.checkpoint_id == session.source_checkpoint_id:
        return
    raise InvalidRequest(
        f"checkpoint {checkpoint.checkpoint_id} belongs to runtime {checkpoint.runtime_id}, "
        f"not to {session.session_id}: check it out instead (a new runtime from it: "
        f"`ditto checkout {checkpoint.checkpoint_id}`, or %checkout)"
    )


class InPlaceRestore:
    """Restore a checkpoint into its live runtime (see the module)."""

    def __init__(self, parts: RuntimeParts) -> None:
        self.parts = parts
        self.files = FilesBack(parts, keep_name=BEFORE_RESTORE_NAME, operation="restore")

    async def restore(
        self, runtime_id: str, checkpoint_id: str
    ) -> tuple[RuntimeCheckpoint, list[UnrestorableValue]]:
        """Restore a checkpoint's files, then its variables, into an idle kernel."""
        parts = self.parts
        async with parts.guard.operation(runtime_id):
            session = await off_loop(parts.guard.live_session, runtime_id)
            await parts.guard.require_idle(session)
            checkpoint = await off_loop(parts.checkpoint, checkpoint_id)
            refuse_outside_tree(session, checkpoint)
            refuse_pruned(checkpoint)
            await parts.make_local(checkpoint)
            head = await off_loop(self._head, runtime_id)
            backend = await self._files_backend(runtime_id, checkpoint, head)
            unrestorable = await self.files.move(
                session,
                backend,
                head,
                checkpoint,
                lambda: parts.context.restore(session, checkpoint.context_manifest_id),
            )
        return checkpoint, unrestorable

    async def record_restore(self, runtime_id: str, checkpoint_id: str) -> None:
        """A kernel restored a checkpoint's variables itself (`%restore`): bring its files
        back and make it the head."""
        parts = self.parts
        async with parts.guard.operation(runtime_id):
            session = await off_loop(parts.guard.live_session, runtime_id)
            checkpoint = await off_loop(parts.checkpoint, checkpoint_id)
            refuse_outside_tree(session, checkpoint)
            refuse_pruned(checkpoint)
            head = await off_loop(self._head, runtime_id)
            backend = await self._files_backend(runtime_id, checkpoint, head)
            await self.files.move(session, backend, head, checkpoint)

    def _head(self, runtime_id: str) -> RuntimeCheckpoint | None:
        head_id = self.parts.store.get_head(runtime_id)
        return self.parts.checkpoint(head_id) if head_id is not None else None

    async def _files_backend(
        self, runtime_id: str, checkpoint: RuntimeCheckpoint, head: RuntimeCheckpoint | None
    ) -> DirtyTrackingBackend | None:
        """The backend to bring the checkpoint's files back into, or None when they stay as
        they are: the workspace cannot take a snapshot back in place (E2B), the checkpoint
        has no snapshot (deleted, or of another kind of backend), or the runtime has no
        checkpoint yet beside which replaced files could be kept."""
        if head is None or not has_snapshot(checkpoint):
            return None
        backend = await self.files.in_place_backend(
            await off_loop(self.parts.guard.session, runtime_id)
        )
        ref = checkpoint.backend_ref
        if backend is None or ref is None or ref.backend_kind != backend.kind:
            return None
        return backend
