"""A runtime's life: create, checkout, pause, resume, close, and lost.

- **Create** gives a runtime a fresh backend and a context (a kernel it starts, or one it
  adopts). **Checkout** makes a new runtime from a checkpoint: a generated id, a backend
  checked out from the checkpoint's snapshot, a context holding its state, the checkpoint
  as its head; the source never changes. **Resume** does the same under the paused
  runtime's own id.
- **Pause** checkpoints (a new snapshot of a local workspace, whatever the kernel ran),
  then frees the context and the backend; the id stays. A cell that arrives while it runs
  gives it up (the kernel is fenced before the capture and sealed before the store writes).
- **Close** takes a final checkpoint (variables and files) unless the caller discards, then
  frees the context and the backend for good; checkpoints stay. A final checkpoint that
  fails refuses the close, and nothing is deleted.
- **Lost**: a context that ended outside the control plane (a kernel that died) keeps its
  files: the backend is snapshotted before it is released, into a checkpoint named `lost`.
  A context restarted outside it (Jupyter's restarter revived a dead kernel) lost its
  variables but runs on: its files go into a `lost` checkpoint too (with the head's
  variables, to restore), and the runtime stays live.

Create, checkout, resume and lost do their provider work first and their store writes
last, in one transaction (`provider_work`): when a step fails, the work done so far is
undone and the store is as it was. Close, once its final checkpoint is recorded, records
the close next and only then stops the kernel and frees the backend, which cannot be
undone: a store that refuses leaves the runtime whole, and a kernel or backend that would
not go is a recorded leftover. A local workspace is deleted only after a snapshot taken
for that purpose (pause, close, a lost runtime), never on the strength of a reused one.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from ditto_jupyter.backends.dirty import DirtyTrackingBackend
from ditto_jupyter.control import lifecycle_records as records
from ditto_jupyter.control.autocheckpoint_pruning import refuse_pruned
from ditto_jupyter.control.checkpointing import (
    Checkpointing,
    merged_metadata,
    new_checkpoint,
    replicate_behind,
    without_bookkeeping,
)
from ditto_jupyter.control.leftovers import backend_resource, kernel_resource
from ditto_jupyter.control.off_loop import off_loop
from ditto_jupyter.control.provider_work import ProviderWork
from ditto_jupyter.control.runtime_parts import RuntimeParts
from ditto_jupyter.core.blobs import BlobError
from ditto_jupyter.core.blobs.errors import FULL_ERRNOS
from ditto_jupyter.core.errors import (
    BackendError,
    CheckpointNotFound,
    DittoError,
    InvalidRequest,
    RuntimeClosed,
    RuntimeNotPaused,
    StorageFull,
    UnsupportedBackend,
)
from ditto_jupyter.core.models import (
    BackendCheckpointRef,
    ContextCapture,
    FanOutMember,
    RuntimeCheckoutResult,
    RuntimeCheckpoint,
    RuntimeCloseResult,
    RuntimePauseResult,
    RuntimeRecord,
    RuntimeResumeResult,
    SessionLifecycleStatus,
    SessionRecord,
    UnrestorableValue,
    now_ms,
)

_log = logging.getLogger(__name__)

#: The name of the checkpoint that keeps a lost runtime's workspace.
LOST_CHECKPOINT_NAME = "lost"
#: The name of the final checkpoint close takes.
CLOSE_CHECKPOINT_NAME = "close"
#: The name of the checkpoint pause takes when it is given none.
PAUSE_CHECKPOINT_NAME = "pause"


def _context_of(handle_state: dict[str, Any]) -> dict[str, Any]:
    """Which context a handle names (without what checkpointing keeps in it)."""
    return without_bookkeeping(handle_state)


def _variables(checkpoint: RuntimeCheckpoint) -> list[str]:
    """The manifest of a checkpoint's variables, if it has one."""
    return [checkpoint.context_manifest_id] if checkpoint.context_manifest_id else []


def child_runtime_id(source_runtime_id: str) -> str:
    """The id of a checkout's child: the source id, `-`, and a UUID-based suffix."""
    return f"{source_runtime_id}-{uuid.uuid4().hex[:12]}"


def close_refused(runtime_id: str, error: Exception) -> Exception:
    """The error that refuses a close whose final checkpoint failed: the failure's own code
    (507 for a full disk, 502 for a dead kernel, 409 for a busy one) and a message that
    says nothing was deleted and how to close anyway. An error of no known kind (a bug) is
    given back as it is."""
    message = (
        f"runtime {runtime_id} was not closed: its final checkpoint failed ({error}); "
        "nothing was deleted. Close it with discard: true to lose what changed since its "
        "last checkpoint"
    )
    if isinstance(error, OSError) and error.errno in FULL_ERRNOS:
        return StorageFull(message)
    if isinstance(error, DittoError):
        try:
            return type(error)(message)
        except TypeError:  # an error type that needs more than a message
            return BackendError(message)
    if isinstance(error, OSError | BlobError):
        return BackendError(message)
    return error


class Lifecycle:
    """Create, check out, pause, resume, close and mark lost the runtimes of one service."""

    def __init__(
        self, parts: RuntimeParts, checkpointing: Checkpointing, *, default_backend: str
    ) -> None:
        self.parts = parts
        self.checkpointing = checkpointing
        self.default_backend = default_backend

    # ---- undo steps ----------------------------------------------------------------------

    def _undo_backend(
        self, work: ProviderWork, runtime_id: str, backend: DirtyTrackingBackend
    ) -> None:
        work.undo_with(
            f"releasing the new backend of runtime {runtime_id}",
            lambda: self.parts.backends.release(runtime_id),
            backend_resource(runtime_id, backend.kind, backend.backend_id),
        )

    def _undo_context(self, work: ProviderWork, session: SessionRecord) -> None:
        work.undo_with(
            f"stopping the new kernel of runtime {session.session_id}",
            lambda: self.parts.context.stop(session),
            kernel_resource(session),
        )

    # ---- create, checkout, resume --------------------------------------------------------

    async def create_runtime(
        self,
        conversation_id: str,
        sender_id: str,
        *,
        runtime_id: str | None,
        kernel_name: str,
        backend_kind: str | None,
        handle_state: dict[str, Any] | None,
        metadata: dict[str, Any] | None,
    ) -> RuntimeRecord:
        """Register a new runtime with a fresh backend (see `RuntimeService.create_runtime`)."""
        parts = self.parts
        runtime_id = runtime_id or uuid.uuid4().hex
        if parts.store.get_session(runtime_id) is not None:
            raise InvalidRequest(f"a runtime with id {runtime_id!r} already exists")
        kind = backend_kind or self.default_backend
        async with parts.guard.operation(runtime_id), parts.provider_work(runtime_id) as work:
            backend = await parts.backends.create(runtime_id, kind)
            self._undo_backend(work, runtime_id, backend)
            session = SessionRecord(
                session_id=runtime_id,
                conversation_id=conversation_id,
                sender_id=sender_id,
                owner=sender_id,
                kernel_name=kernel_name,
                backend_kind=kind,
                backend_instance=backend.backend_id,
                metadata=dict(metadata or {}),
            )
            if handle_state is None:
                handle_state = await parts.context.start(session, backend.local_path)
                session = session.model_copy(update={"handle_state": handle_state})
                self._undo_context(work, session)
            else:
                session = session.model_copy(update={"handle_state": handle_state})
            await work.record(lambda: records.started(parts, session, backend, new=True))
        return await parts.guard.public(session)

    async def checkout(
        self,
        checkpoint_id: str,
        conversation_id: str | None,
        sender_id: str | None,
        metadata: dict[str, Any] | None,
        *,
        handle_state: dict[str, Any] | None,
        caller_runtime_id: str | None,
    ) -> RuntimeCheckoutResult:
        """Create a new runtime from a checkpoint (see `RuntimeService.checkout`)."""
        parts = self.parts
        checkpoint = parts.checkpoint(checkpoint_id)
        refuse_pruned(checkpoint)
        source = parts.guard.session(checkpoint.runtime_id)
        # The source is only read (its checkpoint): it may be live on another server.
        async with parts.guard.operation(source.session_id, claim=False):
            await self.require_source_idle(source, caller_runtime_id)
            return await self.checkout_child(
                checkpoint, source, conversation_id, sender_id, metadata, handle_state
            )

    async def require_source_idle(
        self, source: SessionRecord, caller_runtime_id: str | None
    ) -> None:
        """SessionBusy when a live source runs a cell, unless its own kernel asks (a magic)."""
        live = source.status in (SessionLifecycleStatus.IDLE, SessionLifecycleStatus.BUSY)
        if live and caller_runtime_id != source.session_id:
            await self.parts.guard.require_idle(source)

    async def checkout_child(
        self,
        checkpoint: RuntimeCheckpoint,
        source: SessionRecord,
        conversation_id: str | None,
        sender_id: str | None,
        metadata: dict[str, Any] | None,
        handle_state: dict[str, Any] | None,
        fanout: FanOutMember | None = None,
    ) -> RuntimeCheckoutResult:
        """One child of a checkout, the source's slot held by the caller: a backend, a
        context holding the checkpoint's state, then its store records; or nothing.
        `fanout`: the fan-out it is a child of (a checkout of 2 or more)."""
        parts = self.parts
        merged = merged_metadata(checkpoint.session.metadata, metadata)
        child_id = child_runtime_id(source.session_id)
        async with (
            parts.guard.operation(child_id),
            parts.replication.fetching(
                _variables(checkpoint), replicated=checkpoint.replication == "replicated"
            ) as incoming,
            parts.provider_work(child_id) as work,
        ):
            await parts.make_local(checkpoint, variables=False)  # the files: read first
            backend = await self._materialise_backend(work, checkpoint, child_id)
            child = checkpoint.session.model_copy(
                update={
                    "session_id": child_id,
                    "conversation_id": conversation_id or checkpoint.session.conversation_id,
                    "sender_id": sender_id or checkpoint.session.sender_id,
                    # Whoever sends it, a checkout belongs to its source's owner.
                    "owner": source.owner if source.owner is not None else source.sender_id,
                    "status": SessionLifecycleStatus.IDLE,
                    "backend_kind": backend.kind,
                    "backend_instance": backend.backend_id,
                    "metadata": merged,
                    "handle_state": {},
                    "created_at_ms": now_ms(),
                    "updated_at_ms": now_ms(),
                    "source_runtime_id": source.session_id,
                    "source_checkpoint_id": checkpoint.checkpoint_id,
                    "fanout": fanout,
                }
            )
            child, unrestorable = await self._start_context(
                work, child, backend, checkpoint, handle_state, arrivals=incoming.log
            )
            await incoming.commit()
            source_id = source.session_id
            await work.record(
                lambda: records.checked_out(parts, child, backend, checkpoint, source_id)
            )
        return RuntimeCheckoutResult(
            runtime=await parts.guard.public(child),
            checkpoint_id=checkpoint.checkpoint_id,
            source_runtime_id=source.session_id,
            unrestorable=unrestorable,
            kernel_id=child.handle_state.get("kernel_id"),
        )

    async def resume(
        self,
        runtime_id: str,
        metadata: dict[str, Any] | None,
        *,
        handle_state: dict[str, Any] | None,
    ) -> RuntimeResumeResult:
        """Bring a paused runtime back from its head checkpoint, under the same id."""
        parts = self.parts
        async with parts.guard.operation(runtime_id):
            session = parts.guard.session(runtime_id)
            if session.status is SessionLifecycleStatus.CLOSED:
                raise RuntimeClosed(f"runtime {runtime_id} is closed")
            if session.status is not SessionLifecycleStatus.PAUSED:
                raise RuntimeNotPaused(f"runtime {runtime_id} is not paused")
            head = parts.store.get_head(runtime_id)
            if head is None:
                raise CheckpointNotFound(f"paused runtime {runtime_id} has no checkpoint")
            checkpoint = parts.checkpoint(head)
            merged = merged_metadata(session.metadata, metadata)
            async with (
                parts.replication.fetching(
                    _variables(checkpoint), replicated=checkpoint.replication == "replicated"
                ) as incoming,
                parts.provider_work(runtime_id) as work,
            ):
                await parts.make_local(checkpoint, variables=False)  # the files: read first
                backend = await self._materialise_backend(work, checkpoint, runtime_id)
                session = session.model_copy(
                    update={
                        "status": SessionLifecycleStatus.IDLE,
                        "backend_kind": backend.kind,
                        "backend_instance": backend.backend_id,
                        "metadata": merged,
                        "handle_state": {},
                        "updated_at_ms": now_ms(),
                    }
                )
                session, unrestorable = await self._start_context(
                    work, session, backend, checkpoint, handle_state, arrivals=incoming.log
                )
                await incoming.commit()
                await work.record(lambda: records.started(parts, session, backend, new=False))
        return RuntimeResumeResult(
            runtime=await parts.guard.public(session),
            checkpoint_id=checkpoint.checkpoint_id,
            unrestorable=unrestorable,
            kernel_id=session.handle_state.get("kernel_id"),
        )

    async def _materialise_backend(
        self, work: ProviderWork, checkpoint: RuntimeCheckpoint, runtime_id: str
    ) -> DirtyTrackingBackend:
        """A backend for `runtime_id` holding the checkpoint's files (undone on failure)."""
        ref = checkpoint.backend_ref
        if ref is None:
            backend = await self.parts.backends.create(runtime_id, checkpoint.session.backend_kind)
        elif not ref.provider_snapshot_id:
            raise UnsupportedBackend(
                f"checkpoint {checkpoint.checkpoint_id} has no backend snapshot any more "
                "(it was deleted), so it cannot be checked out"
            )
        else:
            backend = await self.parts.backends.checkout_backend(ref, runtime_id)
        self._undo_backend(work, runtime_id, backend)
        return backend

    async def _start_context(
        self,
        work: ProviderWork,
        session: SessionRecord,
        backend: DirtyTrackingBackend,
        checkpoint: RuntimeCheckpoint,
        handle_state: dict[str, Any] | None,
        *,
        arrivals: str | None = None,
    ) -> tuple[SessionRecord, list[UnrestorableValue]]:
        """Start (or adopt) a context for `session` and restore the checkpoint into it,
        reading what is still being fetched from the arrival log `arrivals`.

        Returns the session and every value the new context does not hold. A context this
        call started is stopped again when the operation fails.
        """
        if handle_state is None:
            handle_state = await self.parts.context.start(session, backend.local_path)
            session = session.model_copy(update={"handle_state": handle_state})
            self._undo_context(work, session)
        else:
            session = session.model_copy(update={"handle_state": handle_state})
        manifest_id = checkpoint.context_manifest_id
        if arrivals is None:  # no fetch under way: a context driver of any age serves
            return session, await self.parts.context.restore(session, manifest_id)
        unrestorable = await self.parts.context.restore(session, manifest_id, arrivals=arrivals)
        return session, unrestorable

    # ---- pause, close --------------------------------------------------------------------

    async def pause(
        self,
        runtime_id: str,
        name: str | None,
        metadata: dict[str, Any] | None,
        *,
        precaptured: ContextCapture | None,
    ) -> RuntimePauseResult:
        """Snapshot an idle runtime, then free its context and backend; the id stays."""
        parts = self.parts
        if precaptured is None:  # the kernel's automatic checkpoints are recorded first
            await parts.guard.settle(runtime_id)
        async with parts.guard.operation(runtime_id):
            checkpoint, session, _ = await self.checkpointing.checkpoint_live(
                runtime_id,
                name or PAUSE_CHECKPOINT_NAME,
                metadata,
                precaptured,
                seal=True,
                pause=True,  # the node may be gone when it resumes: in the object store first
                unique_name=name is None,  # `pause`, `pause-2`: %restore finds each
            )
            await parts.context.stop(session)
            await parts.backend(session)  # attach first so release really frees it
            await parts.backends.release(runtime_id)
            session = self._stopped(session, SessionLifecycleStatus.PAUSED)
            await off_loop(records.stopped, parts, session)
        return RuntimePauseResult(
            runtime=await parts.guard.public(session), checkpoint_id=checkpoint.checkpoint_id
        )

    async def close(self, runtime_id: str, *, discard: bool) -> RuntimeCloseResult:
        """Stop a runtime for good, after a final checkpoint unless `discard`.

        The store records the close before the kernel is stopped and the backend released:
        a store that refuses (a full disk) leaves the runtime as it was, and a kernel that
        would not stop or a backend that could not be released is recorded as left behind.
        """
        parts = self.parts
        final: str | None = None
        released = deleted = False
        async with parts.guard.operation(runtime_id):
            session = parts.guard.session(runtime_id)
            if session.status is SessionLifecycleStatus.CLOSED:
                raise RuntimeClosed(f"runtime {runtime_id} is already closed")
            live = session.status is not SessionLifecycleStatus.PAUSED
            if live and not discard:
                try:
                    checkpoint, session, _ = await self.checkpointing.checkpoint_live(
                        runtime_id, CLOSE_CHECKPOINT_NAME, None, None
                    )
                except Exception as error:
                    refused = close_refused(runtime_id, error)
                    if refused is error:
                        raise
                    raise refused from error
                final = checkpoint.checkpoint_id
            backend = await parts.backend(session) if live else None  # attached: really freed
            closed = self._stopped(session, SessionLifecycleStatus.CLOSED)
            await off_loop(records.stopped, parts, closed)
            if live:
                await parts.stop_context(session)
            if backend is not None:
                result = await parts.release_backend(runtime_id)
                if result is not None:
                    released, deleted = result.backend_released, result.provider_sandbox_deleted
        parts.request_collection()  # the runtime's unrecorded captures, if any
        return RuntimeCloseResult(
            runtime=await parts.guard.public(closed),
            backend_released=released,
            provider_sandbox_deleted=deleted,
            checkpoint_id=final,
        )

    @staticmethod
    def _stopped(session: SessionRecord, status: SessionLifecycleStatus) -> SessionRecord:
        return session.model_copy(
            update={
                "status": status,
                "backend_instance": None,
                "handle_state": {},
                "updated_at_ms": now_ms(),
            }
        )

    # ---- lost ----------------------------------------------------------------------------

    async def mark_lost(
        self, runtime_id: str, *, handle: dict[str, Any] | None = None
    ) -> RuntimeRecord:
        """Record that a live runtime's context ended outside the control plane (see
        `RuntimeService.mark_lost`)."""
        parts = self.parts
        # a write intent from the snapshot to its record: no collection on another server
        # deletes what the snapshot reuses in the bucket (`bucket_gc`)
        async with parts.guard.operation(runtime_id), parts.replication.writing():
            session = parts.guard.session(runtime_id)
            if session.status in (SessionLifecycleStatus.PAUSED, SessionLifecycleStatus.CLOSED):
                return session.to_runtime()
            if handle is not None and _context_of(session.handle_state) != _context_of(handle):
                return session.to_runtime()  # it has another context now (resumed): alive
            await parts.stop_context(session)
            head = parts.store.get_head(runtime_id)
            ref = await self._snapshot_before_release(session)
            lost = self._lost_checkpoint(session, head, ref)
            head = lost.checkpoint_id if lost is not None else head
            status = SessionLifecycleStatus.PAUSED if head else SessionLifecycleStatus.CLOSED
            session = self._stopped(session, status)
            async with parts.provider_work(runtime_id) as work:
                work.undo_with(
                    f"discarding the lost snapshot of runtime {runtime_id}",
                    lambda: parts.discard_new_ref(runtime_id, ref),
                )
                await work.record(lambda: records.stopped(parts, session, lost))
            if lost is not None:
                replicate_behind(parts, lost)
            if lost is None:  # an empty workspace's snapshot, or the head's own
                await parts.discard_new_ref(runtime_id, ref)
            if ref is None:  # gone, or not safely in a snapshot: never deleted
                parts.backends.forget(runtime_id)
            else:
                await parts.release_backend(runtime_id)
        return session.to_runtime()

    async def mark_restarted(
        self, runtime_id: str, *, handle: dict[str, Any]
    ) -> RuntimeCheckpoint | None:
        """Record that a live runtime's context was restarted outside the control plane
        (see `RuntimeService.mark_restarted`); the checkpoint to offer back, if any."""
        parts = self.parts
        async with parts.guard.operation(runtime_id):
            session = parts.guard.session(runtime_id)
            if session.status not in (SessionLifecycleStatus.IDLE, SessionLifecycleStatus.BUSY):
                return None
            if _context_of(session.handle_state) != _context_of(handle):
                return None  # another context since: not the one that restarted
            head = parts.store.get_head(runtime_id)
            ref = await self._snapshot_before_release(session)
            lost = self._lost_checkpoint(session, head, ref)
            if lost is None:  # the head's files, or an empty workspace and no head
                await parts.discard_new_ref(runtime_id, ref)
                return parts.checkpoint(head) if head is not None else None
            live = session.model_copy(
                update={"handle_state": without_bookkeeping(session.handle_state)}
            )
            async with parts.provider_work(runtime_id) as work:
                work.undo_with(
                    f"discarding the snapshot of restarted runtime {runtime_id}",
                    lambda: parts.discard_new_ref(runtime_id, ref),
                )
                kept = lost
                await work.record(lambda: records.restarted(parts, live, kept))
            replicate_behind(parts, lost)
        return lost

    async def _snapshot_before_release(self, session: SessionRecord) -> BackendCheckpointRef | None:
        """A snapshot of a runtime's backend as it is now (a local workspace: always new).

        None when the runtime has no backend, or it is gone, or it cannot be snapshotted:
        then it must not be released. One that is there but cannot be snapshotted is kept
        where it is, and recorded as left behind.
        """
        runtime_id = session.session_id
        try:
            backend = await self.parts.backend(session)
        except (DittoError, OSError) as error:
            _log.warning(
                "ditto: runtime %s is lost and its backend cannot be reached (%s): "
                "nothing of it was snapshotted",
                runtime_id,
                error,
            )
            return None
        if backend is None:
            return None
        if backend.local_path is not None:  # the kernel may have written it directly
            backend.mark_dirty()
        try:
            return await self.parts.backends.checkpoint_backend(runtime_id=runtime_id)
        except (DittoError, OSError) as error:
            self.parts.leftovers.failed(
                f"snapshotting the backend of lost runtime {runtime_id} (kept where it is)",
                error,
                backend_resource(runtime_id, backend.kind, backend.backend_id),
            )
            return None

    def _lost_checkpoint(
        self, session: SessionRecord, head_id: str | None, ref: BackendCheckpointRef | None
    ) -> RuntimeCheckpoint | None:
        """The checkpoint keeping a lost runtime's files, or None when nothing needs it."""
        if ref is None:
            return None
        head = self.parts.store.get_checkpoint(head_id) if head_id else None
        if head is not None and head.backend_ref == ref:  # clean: the head holds these files
            return None
        if head is None and ref.details.get("entries") == 0:  # nothing to keep
            return None
        return new_checkpoint(
            self.parts,
            session.model_copy(update={"handle_state": {}, "updated_at_ms": now_ms()}),
            parent_checkpoint_id=head_id,
            backend_ref=ref,
            context_manifest_id=head.context_manifest_id if head is not None else None,
            unrestorable=head.unrestorable if head is not None else [],
            name=LOST_CHECKPOINT_NAME,
            metadata={"variables_from": head_id},
        )
