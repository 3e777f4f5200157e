"""The Jupyter-session <-> runtime mapping: a runtime IS a Jupyter session.

`runtime_id == session id`. A Jupyter session becomes a runtime when Jupyter creates it
(`register_session`, called from the session hook in `jupyter_hooks`; the sessions that
exist when the extension starts are registered then, `register_existing`): its notebook
path is the conversation, the server's user the sender, its kernel the handle. An
operation on a session that is not registered yet registers it first (`ensure_runtime`).
Reads never change anything: they answer from the store, and a read of an id the store
does not know is `RuntimeNotFound`.

The REST routes (`routes.py`) talk to this mapping only, never to the service behind it.
The runtime work itself is RuntimeService's; this module adds the Jupyter side around it:
checkout writes the child's notebook beside the original (from the checkpoint's document,
`documents`; comparisons and undo are `changes`) and saves a Jupyter session for the child
(so it opens like any other), pause and close drop the Jupyter session row of the stopped
kernel, resume saves a new row with the same id for the new kernel. A `self/...` route
first proves that its caller is the runtime's own kernel (`check_runtime_token`). Every
operation emits one runtime event; so do the changes the kernel watcher records (`lost`:
a kernel died or its server is gone, `restarted` kernels too). When a Jupyter-side step
fails after the service succeeded, the service step is not undone (the runtime stays
consistent in the store) but the error propagates.
"""

from __future__ import annotations

import asyncio
import logging
import posixpath
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from jupyter_server.utils import ensure_async
from tornado.web import HTTPError

from ditto_jupyter.backends.base import ExecResult
from ditto_jupyter.control.budget_registry import RuntimeBudgets
from ditto_jupyter.control.off_loop import off_loop
from ditto_jupyter.control.service import RuntimeService
from ditto_jupyter.control.store import DamagedRecord
from ditto_jupyter.core.errors import DittoError, InvalidRequest, RuntimeNotFound
from ditto_jupyter.core.models import (
    AutoCheckpointCell,
    AutoCheckpointPruneResult,
    CheckoutBranch,
    CheckoutChild,
    CheckoutOrigin,
    CheckpointListResult,
    ContextCapture,
    NotebookDocument,
    RuntimeBudgetResult,
    RuntimeCheckoutResult,
    RuntimeCheckpoint,
    RuntimeCheckpointResult,
    RuntimeCheckpointSnapshotDeleteResult,
    RuntimeCloseResult,
    RuntimeLineage,
    RuntimeListResult,
    RuntimePauseResult,
    RuntimeRecord,
    RuntimeRestoreResult,
    RuntimeResumeResult,
    RuntimeWorkspace,
)
from ditto_jupyter.server.branches import SessionBranches
from ditto_jupyter.server.changes import SessionChanges
from ditto_jupyter.server.documents import SessionDocuments, sibling_notebook_path
from ditto_jupyter.server.events import RuntimeEvents
from ditto_jupyter.server.fanout_sessions import SessionFanOut
from ditto_jupyter.server.jupyter_hooks import forget_session_row
from ditto_jupyter.server.kernel_pool import KernelPool
from ditto_jupyter.server.runtime_tokens import RuntimeTokens
from ditto_jupyter.server.server_kernel_host import ServerKernelHost
from ditto_jupyter.server.user_scope import UserScope

if TYPE_CHECKING:
    from jupyter_server.services.contents.manager import ContentsManager
    from jupyter_server.services.sessions.sessionmanager import SessionManager

#: Why a runtime paused, as its pause event says.
PauseReason = Literal["idle", "asked"]
#: Why a runtime was recorded lost, as its lost event says: its kernel is gone (`died`),
#: Jupyter restarted it (`restarted`: the runtime stays live), or the server that ran it
#: is gone and this one took it over (`owner-gone`).
LostReason = Literal["died", "restarted", "owner-gone", "fenced"]

log = logging.getLogger(__name__)


class RuntimeSessions:
    """Runs runtime operations for the REST routes, keeping Jupyter sessions in step."""

    def __init__(
        self,
        service: RuntimeService,
        session_manager: SessionManager | Any,
        contents_manager: ContentsManager | Any,
        events: RuntimeEvents,
        host: ServerKernelHost | None = None,
        tokens: RuntimeTokens | None = None,
        budgets: RuntimeBudgets | None = None,
        *,
        pool: KernelPool | None = None,
        server_user: str | None = None,
    ) -> None:
        self.service = service
        #: What each user may see: their own runtimes and checkpoints (`user_scope`).
        self.scope = UserScope(service, server_user)
        self.pool = pool
        self.session_manager: Any = session_manager  # jupyter_server is untyped
        self.contents_manager: Any = contents_manager
        self.events = events
        self.host = host
        self.tokens = tokens or RuntimeTokens()
        # The runtimes' token budgets live in the data directory, beside the blob store.
        self.budgets = budgets or RuntimeBudgets(service.blobs.root.parent)
        self._register_lock = asyncio.Lock()
        #: Told (runtime id, kernel id) of every kernel a runtime gets (the kernel watcher).
        self.kernel_listeners: list[Callable[[str, str], None]] = []
        self.documents = SessionDocuments(self)  # the checkpoints' notebooks (issue 23)
        self.changes = SessionChanges(self)  # diff, undo, cells a restore leaves different
        self.fan_out = SessionFanOut(self)  # checkouts of N children at once (issue 44)
        self.branches = SessionBranches(self)  # compare of N, keep this branch (issue 44)

    def check_runtime_token(self, runtime_id: str, runtime_token: str) -> str:
        """InvalidRequest unless a `self/...` caller holds `runtime_id`'s kernel token; the
        user it then acts as (the runtime's owner)."""
        self.tokens.check(runtime_id, runtime_token)
        return self.scope.owner_of(runtime_id)

    # ---- Jupyter sessions --------------------------------------------------------------

    async def _jupyter_session(self, session_id: str) -> dict[str, Any] | None:
        """The Jupyter session model with this id, or None (also when its kernel died)."""
        try:
            model = await ensure_async(self.session_manager.get_session(session_id=session_id))
        except HTTPError:
            return None
        return dict(model)

    def _forget_jupyter_session(self, session_id: str) -> None:
        """Drop the Jupyter session row of a runtime whose kernel is stopped (not the runtime)."""
        forget_session_row(self.session_manager, session_id)

    async def _save_jupyter_session(self, session_id: str, path: str, kernel_id: str) -> None:
        self._forget_jupyter_session(session_id)
        await ensure_async(
            self.session_manager.save_session(
                session_id=session_id,
                path=path,
                name=posixpath.basename(path),
                type="notebook",
                kernel_id=kernel_id,
            )
        )
        self._kernel_started(session_id, kernel_id)

    def _kernel_started(self, runtime_id: str, kernel_id: str) -> None:
        for listener in self.kernel_listeners:
            listener(runtime_id, kernel_id)

    # ---- registering Jupyter sessions as runtimes ---------------------------------------

    async def register_session(self, model: dict[str, Any], user: str) -> None:
        """Make a Jupyter session (its model) a runtime, unless the store knows it already."""
        runtime_id = str(model.get("id") or "")
        kernel = model.get("kernel") or {}
        if not runtime_id or not kernel.get("id"):
            return
        async with self._register_lock:
            if self.service.find_session(runtime_id) is not None:
                return
            with self.events.operation("register", runtime_id) as event:
                record = await self.service.create_runtime(
                    conversation_id=str(model.get("path") or model.get("name") or runtime_id),
                    sender_id=user,
                    runtime_id=runtime_id,
                    kernel_name=str(kernel.get("name") or "python3"),
                    handle_state={"kernel_id": kernel["id"]},
                )
                event.status = record.status.value
        kernel_id = str(kernel["id"])
        if self.host is not None and record.status.value == "idle":
            self.host.warm_up(kernel_id, self.service.workspace_path(runtime_id))
        self._kernel_started(runtime_id, kernel_id)

    async def ensure_runtime(self, runtime_id: str, user: str) -> None:
        """Before an operation: register a Jupyter session the store does not know yet.

        RuntimeNotFound when neither the store nor the session manager has the id, or when
        the store has it as another user's runtime. A Jupyter session of this server
        becomes the server user's runtime, as the session hook makes it: another user who
        can reach the server (a hub admin) does not make it theirs.
        """
        if self.scope.known(runtime_id, user) is not None:
            return
        owner = self.scope.server_user
        model = await self._jupyter_session(runtime_id) if user == owner else None
        if model is None or not model.get("kernel"):
            raise RuntimeNotFound(f"no runtime or Jupyter session with id {runtime_id!r}")
        await self.register_session(model, owner)

    async def kernel_switched(self, runtime_id: str, kernel_id: str) -> None:
        """A Jupyter session switched kernels (JupyterLab's kernel picker): its runtime's
        kernel handle follows, and the new kernel learns where the workspace is."""
        known = self.service.find_session(runtime_id)
        if known is None or known.status.value in ("paused", "closed"):
            return
        if known.handle_state.get("kernel_id") == kernel_id:
            return
        await off_loop(self.service.update_handle, runtime_id, kernel_id=kernel_id)
        if self.host is not None:
            self.host.warm_up(kernel_id, self.service.workspace_path(runtime_id))
        self._kernel_started(runtime_id, kernel_id)

    async def path_changed(self, runtime_id: str, path: str) -> None:
        """A Jupyter session's notebook path changed: its live runtime's notebook follows."""
        known = self.service.find_session(runtime_id)
        if known is None or known.status.value in ("paused", "closed"):
            return
        if known.conversation_id != path:
            await off_loop(self.service.update_conversation, runtime_id, path)

    async def register_existing(self, user: str) -> None:
        """At start: register the Jupyter sessions that exist already (a session database
        kept on disk), and follow the kernels they switched to meanwhile."""
        for model in await ensure_async(self.session_manager.list_sessions()):
            runtime_id, kernel = str(model.get("id") or ""), model.get("kernel") or {}
            try:
                if self.service.find_session(runtime_id) is None:
                    await self.register_session(dict(model), user)
                elif kernel.get("id"):
                    await self.kernel_switched(runtime_id, str(kernel["id"]))
            except (DittoError, DamagedRecord) as error:  # that one session; the rest go on
                log.warning("ditto_jupyter: session %s not registered: %s", runtime_id, error)

    # ---- what the kernel watcher found ----------------------------------------------------

    async def mark_lost(
        self, runtime_id: str, handle: dict[str, Any], reason: LostReason
    ) -> RuntimeRecord:
        """The runtime's kernel `handle` is gone: record it lost (paused at a `lost`
        checkpoint keeping its files, or closed when there is nothing to keep)."""
        with self.events.operation("lost", runtime_id) as event:
            event.reason = reason
            record = await self.service.mark_lost(runtime_id, handle=handle)
            event.status = record.status.value
            head = self.service.store.get_head(runtime_id)
            event.checkpoint_id = head
        if record.status.value in ("paused", "closed"):
            self._forget_jupyter_session(runtime_id)
        return record

    async def fence(self, runtime_id: str, kernel_id: str) -> None:
        """Another server took over the runtime this server's kernel `kernel_id` still runs:
        keep what it holds and stop it (`RuntimeService.fence`), and tell the notebook (a
        `lost` event, reason `fenced`, naming the checkpoint a resume brings back)."""
        with self.events.operation("lost", runtime_id) as event:
            event.reason = "fenced"
            kept = await self.service.fence(runtime_id, {"kernel_id": kernel_id})
            event.checkpoint_id = kept.checkpoint_id if kept is not None else None
            record = await off_loop(self.service.find_session, runtime_id)
            event.status = record.status.value if record is not None else None
        self._forget_jupyter_session(runtime_id)

    async def mark_restarted(self, runtime_id: str, handle: dict[str, Any]) -> RuntimeRecord:
        """Jupyter restarted the runtime's kernel `handle` (its variables are gone): record
        a `lost` checkpoint keeping its files and the head's variables, offered back in the
        event; the runtime stays live on the restarted kernel."""
        with self.events.operation("lost", runtime_id) as event:
            event.reason = "restarted"
            offered = await self.service.mark_restarted(runtime_id, handle=handle)
            record = await self.service.get_runtime(runtime_id)
            event.checkpoint_id = offered.checkpoint_id if offered is not None else None
            event.status = record.status.value
        return record

    # ---- reads: from the store, changing nothing -----------------------------------------

    async def list_runtimes(self, user: str) -> RuntimeListResult:
        """The user's own runtimes, oldest first."""
        return await self.service.list_runtimes(lambda session: session.belongs_to(user))

    async def get_runtime(self, runtime_id: str, user: str) -> RuntimeRecord:
        self.scope.runtime(runtime_id, user)
        return await self.service.get_runtime(runtime_id)

    async def workspace(self, runtime_id: str, user: str) -> RuntimeWorkspace:
        """Where a live runtime's files are: a local directory, or a remote sandbox (None)."""
        self.scope.runtime(runtime_id, user)
        path = await self.service.workspace(runtime_id)
        return RuntimeWorkspace(
            runtime_id=runtime_id,
            backend_kind=self.service.session(runtime_id).backend_kind,
            path=str(path) if path is not None else None,
        )

    async def list_checkpoints(
        self,
        runtime_id: str,
        user: str,
        *,
        limit: int | None = None,
        cursor: str | None = None,
        newest_first: bool = False,
    ) -> CheckpointListResult:
        self.scope.runtime(runtime_id, user)
        return await self.service.list_checkpoints(
            runtime_id, limit=limit, cursor=cursor, newest_first=newest_first
        )

    async def lineage(self, runtime_id: str, user: str) -> RuntimeLineage:
        """The runtime's head, its checkout origin, and the checkouts made from it (the
        user's own)."""
        session = self.scope.runtime(runtime_id, user)
        head = self.service.head_checkpoint(runtime_id)
        source = None
        if session.source_runtime_id and session.source_checkpoint_id:
            source = CheckoutOrigin(
                runtime_id=session.source_runtime_id,
                checkpoint_id=session.source_checkpoint_id,
            )
        return RuntimeLineage(
            runtime_id=runtime_id,
            head=self.service.summary(head) if head is not None else None,
            source=source,
            checkouts=[
                CheckoutBranch(
                    runtime_id=child.session_id,
                    checkpoint_id=str(child.source_checkpoint_id),
                    conversation_id=child.conversation_id,
                    status=child.status,
                    fanout=child.fanout,
                )
                for child in self.service.checkouts_of(runtime_id)
                if child.belongs_to(user)
            ],
        )

    async def find_checkpoint(
        self, reference: str, runtime_id: str | None, user: str
    ) -> RuntimeCheckpoint:
        """A checkpoint by id, unique id prefix or name, within one runtime or across all.

        CheckpointNotFound when nothing matches; InvalidRequest when a prefix is ambiguous.
        Only the user's own checkpoints match (RuntimeNotFound for another's runtime).
        """
        return self.scope.resolve(reference, runtime_id, user)

    async def budget(self, runtime_id: str, user: str) -> RuntimeBudgetResult:
        """The token budget the runtime counts against: its own or its source's, if any."""
        self.scope.runtime(runtime_id, user)  # RuntimeNotFound for an unknown runtime
        found = self.budgets.find(runtime_id)
        if found is None:
            return RuntimeBudgetResult(runtime_id=runtime_id, budget=None)
        figures = found.figures()  # each branch beside the total
        return RuntimeBudgetResult(runtime_id=runtime_id, budget=figures)

    # ---- operations ----------------------------------------------------------------------

    async def checkpoint(
        self,
        runtime_id: str,
        name: str | None,
        metadata: dict[str, Any] | None,
        user: str,
        *,
        precaptured: ContextCapture | None = None,
        automatic: AutoCheckpointCell | None = None,
        document: NotebookDocument | None = None,
    ) -> RuntimeCheckpointResult:
        with self.events.operation("checkpoint", runtime_id) as event:
            await self.ensure_runtime(runtime_id, user)
            record = await self.documents.for_checkpoint(runtime_id, document)
            result = await self.service.checkpoint(
                runtime_id,
                name,
                metadata,
                precaptured=precaptured,
                automatic=automatic,
                document=record,
            )
            event.checkpoint_id = result.checkpoint_id
            event.status = result.runtime.status.value
            event.document = "pending" if record.awaiting_until_ms else record.origin
        if record.awaiting_until_ms is not None:
            self.documents.awaiting(runtime_id, result.checkpoint_id)
        return result

    async def prune_automatic(
        self, runtime_id: str, keep: int, user: str
    ) -> AutoCheckpointPruneResult:
        with self.events.operation("prune", runtime_id):
            await self.ensure_runtime(runtime_id, user)
            return await self.service.prune_automatic(runtime_id, keep)

    async def delete_snapshot(
        self, checkpoint_id: str, user: str
    ) -> RuntimeCheckpointSnapshotDeleteResult:
        checkpoint = self.scope.checkpoint(checkpoint_id, user)
        with self.events.operation("delete-snapshot", checkpoint.runtime_id) as event:
            event.checkpoint_id = checkpoint_id
            return await self.service.delete_snapshot(checkpoint_id)

    async def checkout(
        self,
        checkpoint_id: str,
        conversation_id: str | None,
        sender_id: str | None,
        metadata: dict[str, Any] | None,
        user: str,
        *,
        caller_runtime_id: str | None = None,
        count: int = 1,
    ) -> RuntimeCheckoutResult:
        """Branch a new runtime (the user's, from one of their checkpoints), write its
        notebook beside the original (from the checkpoint's document, else a copy of
        today's file), open it as a session; `count` above 1: so many (`fan_out`).

        `caller_runtime_id` is the runtime whose kernel asks from a magic (busy with it).
        """
        if count != 1:
            if conversation_id:
                raise InvalidRequest(
                    "conversation_id names one notebook: leave it out with a count above 1 "
                    "(each child gets a notebook copy of its own)"
                )
            return await self.fan_out.checkout(
                checkpoint_id, count, sender_id, metadata, user, caller_runtime_id=caller_runtime_id
            )
        checkpoint = self.scope.checkpoint(checkpoint_id, user)
        with self.events.operation("checkout", checkpoint.runtime_id) as event:
            event.checkpoint_id = checkpoint_id
            event.source_runtime_id = checkpoint.runtime_id
            source_path = checkpoint.session.conversation_id
            target, moved = conversation_id, None
            if target is None:
                target, moved = await self.documents.child_target(
                    source_path, sibling_notebook_path(source_path, uuid.uuid4().hex[:8])
                )
            await self.service.make_local(checkpoint)  # its document may be in the bucket only
            copied, written_from, note = await self.documents.write_child_notebook(
                checkpoint, target
            )
            note = "; ".join(n for n in (moved, note) if n) or None
            try:
                result = await self.service.checkout(
                    checkpoint_id,
                    target,
                    sender_id,
                    metadata,
                    caller_runtime_id=caller_runtime_id,
                )
            except BaseException:
                if copied:
                    await ensure_async(self.contents_manager.delete(target))
                raise
            finally:
                self._refill_pool()
            event.runtime_id = result.runtime.runtime_id
            event.status = result.runtime.status.value
            event.unrestorable = result.unrestorable
            kernel_id = result.kernel_id
            if kernel_id is not None:
                await self._save_jupyter_session(result.runtime.runtime_id, target, kernel_id)
            notebook = target if await self._is_file(target) else None
            result = result.model_copy(
                update={
                    "notebook_path": notebook,
                    "notebook_source": written_from,
                    "notebook_note": note,
                }
            )
            return result.model_copy(
                update={"children": [CheckoutChild(index=0, checkout=result.one())]}
            )

    def _refill_pool(self) -> None:
        """Top the warm kernel pool up once this operation's answer has gone out."""
        if self.pool is not None:
            self.pool.refill_soon()

    async def _is_file(self, path: str) -> bool:
        try:
            return bool(await ensure_async(self.contents_manager.file_exists(path)))
        except HTTPError:
            return False

    async def restore(self, runtime_id: str, reference: str, user: str) -> RuntimeRestoreResult:
        """Restore a checkpoint (id, id prefix or name) into the runtime's idle kernel."""
        with self.events.operation("restore", runtime_id) as event:
            await self.ensure_runtime(runtime_id, user)
            checkpoint = self.scope.resolve(reference, runtime_id, user)
            event.checkpoint_id = checkpoint.checkpoint_id
            _, unrestorable = await self.service.restore(runtime_id, checkpoint.checkpoint_id)
            runtime = await self.service.get_runtime(runtime_id)
            event.status = runtime.status.value
            event.unrestorable = unrestorable
        return RuntimeRestoreResult(
            runtime=runtime, checkpoint_id=checkpoint.checkpoint_id, unrestorable=unrestorable
        )

    async def record_restore(
        self, runtime_id: str, checkpoint_id: str, user: str
    ) -> RuntimeRestoreResult:
        """A kernel restored itself (the magic): make the checkpoint its head."""
        with self.events.operation("restore", runtime_id) as event:
            await self.ensure_runtime(runtime_id, user)
            self.scope.checkpoint(checkpoint_id, user)
            event.checkpoint_id = checkpoint_id
            await self.service.record_restore(runtime_id, checkpoint_id)
            runtime = await self.service.get_runtime(runtime_id)
            event.status = runtime.status.value
        checkpoint = self.service.get_checkpoint(checkpoint_id)
        return RuntimeRestoreResult(
            runtime=runtime,
            checkpoint_id=checkpoint.checkpoint_id,
            unrestorable=checkpoint.unrestorable,
        )

    async def pause(
        self,
        runtime_id: str,
        name: str | None,
        metadata: dict[str, Any] | None,
        user: str,
        *,
        precaptured: ContextCapture | None = None,
        reason: PauseReason = "asked",
    ) -> RuntimePauseResult:
        """Snapshot and stop the runtime; its Jupyter session row goes with its kernel.

        With `precaptured` (a kernel pausing itself from a magic) the kernel is shut down
        only after the cell running the magic has finished, so the magic gets the answer.
        `reason` goes into the pause event: `asked` (a route) or `idle` (the idle pauser).
        """
        with self.events.operation("pause", runtime_id) as event:
            event.reason = reason
            await self.ensure_runtime(runtime_id, user)
            kernel_id = self.service.session(runtime_id).handle_state.get("kernel_id")
            if precaptured is not None and self.host is not None and kernel_id:
                self.host.defer_shutdown(str(kernel_id))
            try:
                result = await self.service.pause(
                    runtime_id, name, metadata, precaptured=precaptured
                )
            finally:
                if self.host is not None and kernel_id:
                    self.host.cancel_deferred_shutdown(str(kernel_id))
            self._forget_jupyter_session(runtime_id)
            event.checkpoint_id = result.checkpoint_id
            event.status = result.runtime.status.value
        return result

    async def resume(
        self, runtime_id: str, metadata: dict[str, Any] | None, user: str
    ) -> RuntimeResumeResult:
        """Start a kernel from the paused checkpoint and bind it to the same session id."""
        with self.events.operation("resume", runtime_id) as event:
            await self.ensure_runtime(runtime_id, user)
            try:
                result = await self.service.resume(runtime_id, metadata)
            finally:
                self._refill_pool()
            event.checkpoint_id = result.checkpoint_id
            event.status = result.runtime.status.value
            event.unrestorable = result.unrestorable
            if result.kernel_id is not None:
                await self._save_jupyter_session(
                    runtime_id, result.runtime.conversation_id, result.kernel_id
                )
        return result

    async def close(
        self, runtime_id: str, user: str, *, discard: bool = False
    ) -> RuntimeCloseResult:
        """Shut the runtime down for good, after a final checkpoint unless `discard`; its
        checkpoints stay."""
        with self.events.operation("close", runtime_id) as event:
            await self.ensure_runtime(runtime_id, user)
            result = await self.service.close(runtime_id, discard=discard)
            event.checkpoint_id = result.checkpoint_id
            self._forget_jupyter_session(runtime_id)
            event.status = result.runtime.status.value
        return result

    async def exec(
        self, runtime_id: str, command: str, timeout: float | None, user: str
    ) -> ExecResult:
        """Run a shell command in the runtime's backend (the `%%sandbox` magic)."""
        await self.ensure_runtime(runtime_id, user)
        return await self.service.exec(runtime_id, command, timeout=timeout)
