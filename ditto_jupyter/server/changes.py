"""What changed, and going back: the session mapping's comparisons, undo, and the cells a
restore leaves different.

- `diff`: two checkpoints, or a checkpoint and the live runtime. The live notebook is the
  request's document when it carries one (the side panel sends the notebook as the user
  sees it), else the saved file; a kernel comparing itself (`%diff`) sends its own capture.
- `undo` / `record_undo`: back to just before the last cell `%autocheckpoint` recorded
  (see `control.undo`), with an `undo` event.
- `restore`: a restore in place never touches the open notebook; its answer says how many
  cells of the checkpoint's document differ from the document the request carried.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ditto_jupyter.control.diff.comparisons import LiveNotebook
from ditto_jupyter.control.off_loop import off_loop
from ditto_jupyter.core.models import (
    LIVE,
    ContextCapture,
    NotebookDocument,
    RuntimeDiffResult,
    RuntimeRestoreResult,
    RuntimeUndoResult,
)

if TYPE_CHECKING:
    from ditto_jupyter.server.sessions import RuntimeSessions


class SessionChanges:
    """Comparisons, undo and restores with their notebook, for the REST routes."""

    def __init__(self, sessions: RuntimeSessions) -> None:
        self.sessions = sessions

    async def _live_notebook(
        self, runtime_id: str, document: NotebookDocument | None
    ) -> LiveNotebook | None:
        if document is not None:
            return LiveNotebook(document, "notebook as sent")
        session = await off_loop(self.sessions.service.find_session, runtime_id)
        if session is None:
            return None
        saved = await self.sessions.documents.saved_document(session.conversation_id)
        return LiveNotebook(saved, "saved notebook") if saved is not None else None

    async def diff(
        self,
        runtime_id: str,
        from_ref: str | None,
        to_ref: str | None,
        user: str,
        *,
        document: NotebookDocument | None = None,
        capture: ContextCapture | None = None,
    ) -> RuntimeDiffResult:
        """What changed from `from_ref` (default: the head) to `to_ref` (default: live)."""
        sessions = self.sessions
        await sessions.ensure_runtime(runtime_id, user)
        # Resolved among the user's own checkpoints: another's id compares with nothing.
        scope = sessions.scope
        from_ref, to_ref = [
            ref
            if ref in (None, LIVE)
            else (await scope.resolve(ref, runtime_id, user)).checkpoint_id
            for ref in (from_ref, to_ref)
        ]
        live = LIVE in (from_ref, to_ref or LIVE)
        notebook = await self._live_notebook(runtime_id, document) if live else None
        return await sessions.service.diff(
            runtime_id, from_ref, to_ref, capture=capture, notebook=notebook
        )

    async def undo(self, runtime_id: str, user: str) -> RuntimeUndoResult:
        """Undo the last cell of an idle runtime (variables and files)."""
        sessions = self.sessions
        with sessions.events.operation("undo", runtime_id) as event:
            await sessions.ensure_runtime(runtime_id, user)
            result = await sessions.service.undo(runtime_id)
            event.checkpoint_id = result.checkpoint_id
            event.status = result.runtime.status.value
            event.unrestorable = result.unrestorable
        return result

    async def record_undo(
        self, runtime_id: str, checkpoint_id: str, undone_checkpoint_id: str, user: str
    ) -> RuntimeUndoResult:
        """A kernel undid its last cell itself: its files come back, the head moves."""
        sessions = self.sessions
        with sessions.events.operation("undo", runtime_id) as event:
            await sessions.ensure_runtime(runtime_id, user)
            for own in (checkpoint_id, undone_checkpoint_id):
                await sessions.scope.checkpoint(own, user)
            event.checkpoint_id = checkpoint_id
            result = await sessions.service.record_undo(
                runtime_id, checkpoint_id, undone_checkpoint_id
            )
            event.status = result.runtime.status.value
        return result

    async def restore(
        self, runtime_id: str, reference: str, user: str, document: NotebookDocument | None
    ) -> RuntimeRestoreResult:
        """Restore in place; the answer counts the cells that differ from `document` (off
        the event loop), with the comparison's note when it has one."""
        result = await self.sessions.restore(runtime_id, reference, user)
        changed, note = await asyncio.to_thread(
            self.sessions.service.changed_cells, result.checkpoint_id, document
        )
        return result.model_copy(update={"cells_changed": changed, "cells_note": note})
