"""RuntimeService: the one control-plane core that every front end calls.

It keeps the seed's rules (runtime-checkpoint-control): checkpoint, checkout and pause need
an idle runtime; a second control operation on a runtime while one is in flight is
refused with `SessionBusy`; checkout never changes its source and generates the child id;
a clean backend with a ref reuses it; pause snapshots, releases the backend and keeps the
id; resume keeps the id; close deletes a provider sandbox only when no runtime remains
bound to it; delete-snapshot deletes only the recorded provider snapshot and is
idempotent. Unlike the seed, the store is persistent and local restore works.

Every operation leaves the store as it was when it fails: provider work done before the
failure (a new snapshot, a started kernel, a checked-out backend) is undone, and store
writes happen in one transaction after it.

Why one module of some 700 lines: it is one class whose operations share the per-runtime
operation lock, the idle and state checks, and the undo-then-commit discipline above;
split by operation, each part would need all of that, and the rules would be harder to
check side by side.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

from ditto_jupyter.backends.base import BackendLocator, ExecResult
from ditto_jupyter.backends.dirty import DirtyTrackingBackend
from ditto_jupyter.backends.manager import BackendManager
from ditto_jupyter.control.context_capture import SessionContextCapture
from ditto_jupyter.control.store import CheckpointStore
from ditto_jupyter.core.blobs import BlobStore, GcReport
from ditto_jupyter.core.errors import (
    CheckpointNotFound,
    InvalidRequest,
    RuntimeClosed,
    RuntimeNotFound,
    RuntimeNotPaused,
    RuntimePaused,
    SessionBusy,
    UnsupportedBackend,
)
from ditto_jupyter.core.models import (
    BackendBinding,
    BackendCheckpointRef,
    CheckpointListResult,
    ContextCapture,
    RuntimeCheckoutResult,
    RuntimeCheckpoint,
    RuntimeCheckpointResult,
    RuntimeCheckpointSnapshotDeleteResult,
    RuntimeCloseResult,
    RuntimeListResult,
    RuntimePauseResult,
    RuntimeRecord,
    RuntimeResumeResult,
    SessionLifecycleStatus,
    SessionRecord,
    UnrestorableValue,
    now_ms,
)

_EXECUTION_COUNT = "checkpointed_execution_count"


def new_checkpoint_id() -> str:
    """A fresh checkpoint id (32 hex digits; magics accept any unique prefix)."""
    return uuid.uuid4().hex


def child_runtime_id(source_runtime_id: str) -> str:
    """The id of a checkout's child: the source id, `-`, and a UUID-based suffix."""
    return f"{source_runtime_id}-{uuid.uuid4().hex[:12]}"


class RuntimeService:
    """Checkpoint, checkout, pause, resume and close runtimes over one persistent store."""

    def __init__(
        self,
        store: CheckpointStore,
        blobs: BlobStore,
        backends: BackendManager,
        context: SessionContextCapture,
        *,
        default_backend: str = "local",
    ) -> None:
        self.store = store
        self.blobs = blobs
        self.backends = backends
        self.context = context
        self.default_backend = default_backend
        self._in_flight: set[str] = set()

    # ---- helpers --------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _operation(self, *runtime_ids: str) -> AsyncIterator[None]:
        """Hold the control-operation slot of each runtime, or refuse with SessionBusy."""
        for runtime_id in runtime_ids:
            if runtime_id in self._in_flight:
                raise SessionBusy(f"runtime {runtime_id} has another control operation in flight")
        self._in_flight.update(runtime_ids)
        try:
            yield
        finally:
            self._in_flight.difference_update(runtime_ids)

    def has_operation_in_flight(self, runtime_id: str) -> bool:
        """Whether a control operation on this runtime is running now."""
        return runtime_id in self._in_flight

    def _session(self, runtime_id: str) -> SessionRecord:
        session = self.store.get_session(runtime_id)
        if session is None:
            raise RuntimeNotFound(f"no runtime with id {runtime_id!r}")
        return session

    def _live_session(self, runtime_id: str) -> SessionRecord:
        """A session that can be operated on: not paused, not closed."""
        session = self._session(runtime_id)
        if session.status is SessionLifecycleStatus.CLOSED:
            raise RuntimeClosed(f"runtime {runtime_id} is closed")
        if session.status is SessionLifecycleStatus.PAUSED:
            raise RuntimePaused(f"runtime {runtime_id} is paused; resume it first")
        return session

    async def _require_idle(self, session: SessionRecord) -> None:
        if await self.context.is_busy(session):
            raise SessionBusy(
                f"runtime {session.session_id} is busy running code; try again when it is idle"
            )

    def _checkpoint(self, checkpoint_id: str) -> RuntimeCheckpoint:
        checkpoint = self.store.get_checkpoint(checkpoint_id)
        if checkpoint is None:
            raise CheckpointNotFound(f"no checkpoint with id {checkpoint_id!r}")
        return checkpoint

    async def _backend(self, session: SessionRecord) -> DirtyTrackingBackend | None:
        """The live backend of a runtime, re-attached from its binding after a restart."""
        backend = self.backends.get(session.session_id)
        if backend is not None:
            return backend
        binding = self.store.get_binding(session.session_id)
        if binding is None:
            return None
        locator = BackendLocator(binding.kind, binding.backend_id, dict(binding.details))
        return await self.backends.attach(session.session_id, locator)

    def _binding(self, runtime_id: str, backend: DirtyTrackingBackend) -> BackendBinding:
        locator = backend.locator()
        return BackendBinding(
            runtime_id=runtime_id,
            backend_id=locator.backend_id,
            kind=locator.kind,
            details=locator.details,
        )

    async def _public(self, session: SessionRecord) -> RuntimeRecord:
        """The RuntimeRecord with a live status: busy while code or an operation runs."""
        record = session.to_runtime()
        if record.status is SessionLifecycleStatus.IDLE and (
            session.session_id in self._in_flight or await self.context.is_busy(session)
        ):
            record = record.model_copy(update={"status": SessionLifecycleStatus.BUSY})
        return record

    @staticmethod
    def _merged(base: Mapping[str, Any], extra: Mapping[str, Any] | None) -> dict[str, Any]:
        merged = dict(base)
        merged.update(extra or {})
        return merged

    async def _discard_new_ref(self, runtime_id: str, ref: BackendCheckpointRef | None) -> None:
        """Undo a snapshot taken by an operation that then failed (a reused ref is kept).

        The backend is marked dirty, so its next checkpoint never reuses the discarded ref.
        """
        backend = self.backends.get(runtime_id)
        if backend is not None:
            backend.mark_dirty()
        if ref is None or not ref.provider_snapshot_id:
            return
        if any(  # reused: an earlier checkpoint already records this snapshot
            c.backend_ref is not None
            and c.backend_ref.provider_snapshot_id == ref.provider_snapshot_id
            for c in self.store.list_checkpoints(runtime_id)
        ):
            return
        with contextlib.suppress(Exception):
            await self.backends.delete_snapshot(ref)

    # ---- runtimes -------------------------------------------------------------------

    async def create_runtime(
        self,
        conversation_id: str,
        sender_id: str = "local",
        *,
        runtime_id: str | None = None,
        kernel_name: str = "python3",
        backend_kind: str | None = None,
        handle_state: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> RuntimeRecord:
        """Register a new runtime with a fresh backend.

        With `handle_state` the runtime adopts a context that already runs (for example a
        kernel the Jupyter server started); otherwise the context capture starts one.
        """
        runtime_id = runtime_id or uuid.uuid4().hex
        if self.store.get_session(runtime_id) is not None:
            raise InvalidRequest(f"a runtime with id {runtime_id!r} already exists")
        kind = backend_kind or self.default_backend
        async with self._operation(runtime_id):
            backend = await self.backends.create(runtime_id, kind)
            session = SessionRecord(
                session_id=runtime_id,
                conversation_id=conversation_id,
                sender_id=sender_id,
                kernel_name=kernel_name,
                backend_kind=kind,
                backend_instance=backend.backend_id,
                metadata=dict(metadata or {}),
            )
            started = False
            try:
                if handle_state is None:
                    handle_state = await self.context.start(session, backend.local_path)
                    started = True
                session = session.model_copy(update={"handle_state": handle_state})
                with self.store.transaction():
                    self.store.insert_session(session)
                    self.store.put_binding(self._binding(runtime_id, backend))
            except BaseException:
                if started:
                    with contextlib.suppress(Exception):
                        await self.context.stop(session)
                with contextlib.suppress(Exception):
                    await self.backends.release(runtime_id)
                raise
        return await self._public(session)

    async def get_runtime(self, runtime_id: str) -> RuntimeRecord:
        """The public record of one runtime."""
        return await self._public(self._session(runtime_id))

    async def list_runtimes(self) -> RuntimeListResult:
        """Every runtime the store knows, oldest first."""
        return RuntimeListResult(
            runtimes=[await self._public(s) for s in self.store.list_sessions()]
        )

    async def resume_session(self, runtime_id: str) -> RuntimeRecord:
        """The current snapshot of a live runtime; changes nothing (seed: resume_session)."""
        return await self._public(self._live_session(runtime_id))

    def find_session(self, runtime_id: str) -> SessionRecord | None:
        """The internal session record, or None when the runtime is unknown."""
        return self.store.get_session(runtime_id)

    def sessions(self) -> list[SessionRecord]:
        """Every internal session record, oldest first."""
        return self.store.list_sessions()

    def session(self, runtime_id: str) -> SessionRecord:
        """The internal session record (for front ends that need the kernel handle)."""
        return self._session(runtime_id)

    def update_handle(self, runtime_id: str, **handle: Any) -> None:
        """Record a live runtime's new context handle (a kernel switched outside us)."""
        session = self._live_session(runtime_id)
        handle_state = {**session.handle_state, **handle}
        self.store.put_session(
            session.model_copy(update={"handle_state": handle_state, "updated_at_ms": now_ms()})
        )

    def workspace_path(self, runtime_id: str) -> Path | None:
        """The local workspace directory of a live runtime, if it has one."""
        backend = self.backends.get(runtime_id)
        return backend.local_path if backend is not None else None

    async def exec(
        self, runtime_id: str, command: str, *, timeout: float | None = None
    ) -> ExecResult:
        """Run a shell command in the runtime's backend (marks it dirty, as the seed says)."""
        session = self._live_session(runtime_id)
        backend = await self._backend(session)
        if backend is None:
            raise UnsupportedBackend(f"runtime {runtime_id} has no backend to run commands in")
        return await backend.exec(command, timeout=timeout)

    # ---- checkpoints ----------------------------------------------------------------

    async def checkpoint(
        self,
        runtime_id: str,
        name: str | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        precaptured: ContextCapture | None = None,
    ) -> RuntimeCheckpointResult:
        """Capture an idle runtime: its context, its backend, and its session record.

        `precaptured` is the self-capture path: a magic running inside the kernel has
        captured its own namespace (the kernel is busy running the magic, so it is not
        asked again and the busy check does not apply).
        """
        async with self._operation(runtime_id):
            previous = self.store.get_head(runtime_id)
            checkpoint, session = await self._checkpoint_live(
                runtime_id, name, metadata, precaptured
            )
        return RuntimeCheckpointResult(
            checkpoint_id=checkpoint.checkpoint_id,
            runtime=await self._public(session),
            previous_checkpoint_id=previous,
        )

    async def _checkpoint_live(
        self,
        runtime_id: str,
        name: str | None,
        metadata: dict[str, Any] | None,
        precaptured: ContextCapture | None,
    ) -> tuple[RuntimeCheckpoint, SessionRecord]:
        """Checkpoint an idle live runtime and make it the head (checkpoint and pause).

        The caller holds the runtime's operation slot. When the store refuses the new
        records, a snapshot taken for them is discarded and the store is unchanged.
        """
        session = self._live_session(runtime_id)
        if precaptured is None:
            await self._require_idle(session)
        checkpoint, session = await self._take_checkpoint(session, name, metadata, precaptured)
        try:
            with self.store.transaction():
                self.store.put_checkpoint(checkpoint)
                self.store.set_head(runtime_id, checkpoint.checkpoint_id)
                self.store.put_session(session)
        except BaseException:
            await self._discard_new_ref(runtime_id, checkpoint.backend_ref)
            raise
        return checkpoint, session

    async def _take_checkpoint(
        self,
        session: SessionRecord,
        name: str | None,
        metadata: dict[str, Any] | None,
        precaptured: ContextCapture | None,
    ) -> tuple[RuntimeCheckpoint, SessionRecord]:
        """Capture context and backend; nothing is written to the store here."""
        capture = precaptured or await self.context.capture(session)
        backend = await self._backend(session)
        ref: BackendCheckpointRef | None = None
        if backend is not None:
            ran_code = capture.execution_count is None or capture.execution_count != (
                session.handle_state.get(_EXECUTION_COUNT)
            )
            if ran_code:  # running a cell counts as exec for dirty tracking
                backend.mark_dirty()
            ref = await self.backends.checkpoint_backend(runtime_id=session.session_id)
        handle_state = dict(session.handle_state)
        if capture.execution_count is not None:
            handle_state[_EXECUTION_COUNT] = capture.execution_count
        session = session.model_copy(
            update={"handle_state": handle_state, "updated_at_ms": now_ms()}
        )
        checkpoint = RuntimeCheckpoint(
            checkpoint_id=new_checkpoint_id(),
            runtime_id=session.session_id,
            parent_checkpoint_id=self.store.get_head(session.session_id),
            session=session,
            backend_ref=ref,
            context_manifest_id=capture.manifest_id,
            unrestorable=capture.unrestorable,
            bytes_written=capture.bytes_written,
            name=name,
            metadata=dict(metadata or {}),
        )
        return checkpoint, session

    async def list_checkpoints(self, runtime_id: str) -> CheckpointListResult:
        """Every checkpoint of a runtime, oldest first."""
        self._session(runtime_id)
        return CheckpointListResult(
            checkpoints=[c.summary() for c in self.store.list_checkpoints(runtime_id)]
        )

    def head_checkpoint(self, runtime_id: str) -> RuntimeCheckpoint | None:
        """The runtime's current checkpoint, or None before its first one."""
        self._session(runtime_id)
        head = self.store.get_head(runtime_id)
        return self._checkpoint(head) if head is not None else None

    def checkouts_of(self, runtime_id: str) -> list[SessionRecord]:
        """The runtimes checked out from this runtime's checkpoints, oldest first."""
        self._session(runtime_id)
        return [s for s in self.store.list_sessions() if s.source_runtime_id == runtime_id]

    def get_checkpoint(self, checkpoint_id: str) -> RuntimeCheckpoint:
        """The internal checkpoint record (manifest ids included)."""
        return self._checkpoint(checkpoint_id)

    def resolve_checkpoint(
        self, reference: str, runtime_id: str | None = None
    ) -> RuntimeCheckpoint:
        """A checkpoint named by id, unique id prefix, or name within `runtime_id`."""
        exact = self.store.get_checkpoint(reference)
        if exact is not None:
            return exact
        matches = self.store.find_checkpoints(reference, runtime_id)
        if not matches:
            where = f" in runtime {runtime_id}" if runtime_id else ""
            raise CheckpointNotFound(f"no checkpoint named or starting with {reference!r}{where}")
        named = [c for c in matches if c.name == reference]
        if named:  # a name wins over an id prefix; the newest of a reused name
            return named[-1]
        if len(matches) > 1:
            raise InvalidRequest(
                f"{reference!r} matches {len(matches)} checkpoints; give more of the id"
            )
        return matches[0]

    # ---- checkout, restore ----------------------------------------------------------

    async def checkout(
        self,
        checkpoint_id: str,
        conversation_id: str | None = None,
        sender_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        handle_state: dict[str, Any] | None = None,
        caller_runtime_id: str | None = None,
    ) -> RuntimeCheckoutResult:
        """Create a new runtime from a checkpoint; the source never changes.

        The child gets a generated id, a backend checked out from the checkpoint's ref,
        a fresh context holding the checkpoint's state, and the checkpoint as its head.
        A live source must be idle, except when the caller is the source's own kernel
        (`caller_runtime_id`, a magic): it is busy only with the magic asking.
        """
        checkpoint = self._checkpoint(checkpoint_id)
        source = self._session(checkpoint.runtime_id)
        child_id = child_runtime_id(source.session_id)
        async with self._operation(source.session_id, child_id):
            live = source.status in (SessionLifecycleStatus.IDLE, SessionLifecycleStatus.BUSY)
            if live and caller_runtime_id != source.session_id:
                await self._require_idle(source)
            backend = await self._materialise_backend(checkpoint, child_id)
            child = checkpoint.session.model_copy(
                update={
                    "session_id": child_id,
                    "conversation_id": conversation_id or checkpoint.session.conversation_id,
                    "sender_id": sender_id or checkpoint.session.sender_id,
                    "status": SessionLifecycleStatus.IDLE,
                    "backend_kind": backend.kind,
                    "backend_instance": backend.backend_id,
                    "metadata": self._merged(checkpoint.session.metadata, metadata),
                    "handle_state": {},
                    "created_at_ms": now_ms(),
                    "updated_at_ms": now_ms(),
                    "source_runtime_id": source.session_id,
                    "source_checkpoint_id": checkpoint.checkpoint_id,
                }
            )
            child = await self._start_context(child, backend, checkpoint, handle_state)
            try:
                with self.store.transaction():
                    self.store.insert_session(child)
                    self.store.put_binding(self._binding(child_id, backend))
                    self.store.set_head(child_id, checkpoint.checkpoint_id)
            except BaseException:
                await self._undo_start(child)
                raise
        return RuntimeCheckoutResult(
            runtime=await self._public(child),
            checkpoint_id=checkpoint.checkpoint_id,
            source_runtime_id=source.session_id,
            kernel_id=child.handle_state.get("kernel_id"),
        )

    async def _materialise_backend(
        self, checkpoint: RuntimeCheckpoint, runtime_id: str
    ) -> DirtyTrackingBackend:
        ref = checkpoint.backend_ref
        if ref is None:
            return await self.backends.create(runtime_id, checkpoint.session.backend_kind)
        if not ref.provider_snapshot_id:
            raise UnsupportedBackend(
                f"checkpoint {checkpoint.checkpoint_id} has no backend snapshot any more "
                "(it was deleted), so it cannot be checked out"
            )
        return await self.backends.checkout_backend(ref, runtime_id)

    async def _start_context(
        self,
        session: SessionRecord,
        backend: DirtyTrackingBackend,
        checkpoint: RuntimeCheckpoint,
        handle_state: dict[str, Any] | None,
    ) -> SessionRecord:
        """Start (or adopt) a context for `session` and restore the checkpoint into it."""
        started = handle_state is None
        try:
            if handle_state is None:
                handle_state = await self.context.start(session, backend.local_path)
            execution_count = checkpoint.session.handle_state.get(_EXECUTION_COUNT)
            if execution_count is not None:
                handle_state = {**handle_state, _EXECUTION_COUNT: execution_count}
            session = session.model_copy(update={"handle_state": handle_state})
            await self.context.restore(session, checkpoint.context_manifest_id)
        except BaseException:
            if started:
                with contextlib.suppress(Exception):
                    await self.context.stop(session)
            with contextlib.suppress(Exception):
                await self.backends.release(session.session_id)
            raise
        return session

    async def _undo_start(self, session: SessionRecord) -> None:
        with contextlib.suppress(Exception):
            await self.context.stop(session)
        with contextlib.suppress(Exception):
            await self.backends.release(session.session_id)

    async def restore(
        self, runtime_id: str, checkpoint_id: str
    ) -> tuple[RuntimeCheckpoint, list[UnrestorableValue]]:
        """Restore a checkpoint's context into a live runtime in place (server path).

        The runtime's namespace is replaced and the checkpoint becomes its head; the
        workspace files are left as they are. The magic restores its own kernel through
        `ditto_jupyter.kernel` and then calls `record_restore`.
        """
        async with self._operation(runtime_id):
            session = self._live_session(runtime_id)
            await self._require_idle(session)
            checkpoint = self._checkpoint(checkpoint_id)
            unrestorable = await self.context.restore(session, checkpoint.context_manifest_id)
            self.store.set_head(runtime_id, checkpoint.checkpoint_id)
        return checkpoint, unrestorable

    def record_restore(self, runtime_id: str, checkpoint_id: str) -> None:
        """Make a checkpoint the head of a runtime that restored it itself."""
        self._live_session(runtime_id)
        self._checkpoint(checkpoint_id)
        self.store.set_head(runtime_id, checkpoint_id)

    # ---- pause, resume, close -------------------------------------------------------

    async def pause(
        self,
        runtime_id: str,
        name: str | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        precaptured: ContextCapture | None = None,
    ) -> RuntimePauseResult:
        """Snapshot an idle runtime, then free its context and backend; the id stays."""
        async with self._operation(runtime_id):
            checkpoint, session = await self._checkpoint_live(
                runtime_id, name or "pause", metadata, precaptured
            )
            await self.context.stop(session)
            await self._backend(session)  # attach first so release really frees it
            await self.backends.release(runtime_id)
            session = session.model_copy(
                update={
                    "status": SessionLifecycleStatus.PAUSED,
                    "backend_instance": None,
                    "handle_state": {
                        k: v for k, v in session.handle_state.items() if k == _EXECUTION_COUNT
                    },
                    "updated_at_ms": now_ms(),
                }
            )
            with self.store.transaction():
                self.store.put_session(session)
                self.store.delete_binding(runtime_id)
        return RuntimePauseResult(
            runtime=await self._public(session), checkpoint_id=checkpoint.checkpoint_id
        )

    async def resume(
        self,
        runtime_id: str,
        metadata: dict[str, Any] | None = None,
        *,
        handle_state: dict[str, Any] | None = None,
    ) -> RuntimeResumeResult:
        """Bring a paused runtime back from its head checkpoint, under the same id."""
        async with self._operation(runtime_id):
            session = self._session(runtime_id)
            if session.status is SessionLifecycleStatus.CLOSED:
                raise RuntimeClosed(f"runtime {runtime_id} is closed")
            if session.status is not SessionLifecycleStatus.PAUSED:
                raise RuntimeNotPaused(f"runtime {runtime_id} is not paused")
            head = self.store.get_head(runtime_id)
            if head is None:
                raise CheckpointNotFound(f"paused runtime {runtime_id} has no checkpoint")
            checkpoint = self._checkpoint(head)
            backend = await self._materialise_backend(checkpoint, runtime_id)
            session = session.model_copy(
                update={
                    "status": SessionLifecycleStatus.IDLE,
                    "backend_kind": backend.kind,
                    "backend_instance": backend.backend_id,
                    "metadata": self._merged(session.metadata, metadata),
                    "handle_state": {},
                    "updated_at_ms": now_ms(),
                }
            )
            session = await self._start_context(session, backend, checkpoint, handle_state)
            try:
                with self.store.transaction():
                    self.store.put_session(session)
                    self.store.put_binding(self._binding(runtime_id, backend))
            except BaseException:
                await self._undo_start(session)
                raise
        return RuntimeResumeResult(
            runtime=await self._public(session),
            checkpoint_id=checkpoint.checkpoint_id,
            kernel_id=session.handle_state.get("kernel_id"),
        )

    async def close(self, runtime_id: str) -> RuntimeCloseResult:
        """Stop a runtime for good: free its context and backend; checkpoints stay."""
        async with self._operation(runtime_id):
            session = self._session(runtime_id)
            if session.status is SessionLifecycleStatus.CLOSED:
                raise RuntimeClosed(f"runtime {runtime_id} is already closed")
            released = deleted = False
            if session.status is not SessionLifecycleStatus.PAUSED:
                await self.context.stop(session)
                if await self._backend(session) is not None:
                    result = await self.backends.release(runtime_id)
                    released = result.backend_released
                    deleted = result.provider_sandbox_deleted
            session = session.model_copy(
                update={
                    "status": SessionLifecycleStatus.CLOSED,
                    "backend_instance": None,
                    "handle_state": {},
                    "updated_at_ms": now_ms(),
                }
            )
            with self.store.transaction():
                self.store.put_session(session)
                self.store.delete_binding(runtime_id)
        self.gc()
        return RuntimeCloseResult(
            runtime=await self._public(session),
            backend_released=released,
            provider_sandbox_deleted=deleted,
        )

    async def mark_lost(self, runtime_id: str) -> RuntimeRecord:
        """Record that a live runtime's context ended outside the control plane.

        A kernel that died, or a server restart, loses the unsaved state; the runtime is
        paused at its head checkpoint when it has one (resume restores that), otherwise
        closed. Its backend is released either way. Paused or closed runtimes are left
        as they are.
        """
        async with self._operation(runtime_id):
            session = self._session(runtime_id)
            if session.status in (SessionLifecycleStatus.PAUSED, SessionLifecycleStatus.CLOSED):
                return session.to_runtime()
            with contextlib.suppress(Exception):
                await self.context.stop(session)
            if await self._backend(session) is not None:
                await self.backends.release(runtime_id)
            head = self.store.get_head(runtime_id)
            status = SessionLifecycleStatus.PAUSED if head else SessionLifecycleStatus.CLOSED
            session = session.model_copy(
                update={
                    "status": status,
                    "backend_instance": None,
                    "handle_state": {},
                    "updated_at_ms": now_ms(),
                }
            )
            with self.store.transaction():
                self.store.put_session(session)
                self.store.delete_binding(runtime_id)
        return session.to_runtime()

    async def delete_snapshot(self, checkpoint_id: str) -> RuntimeCheckpointSnapshotDeleteResult:
        """Delete the provider snapshot a checkpoint records; idempotent; the record stays.

        Clean re-checkpoints share one snapshot, so every checkpoint that records the same
        snapshot loses its id too, and live backends whose last ref it was become dirty
        (the manager makes their next checkpoint take a new snapshot, never reuse it).
        """
        checkpoint = self._checkpoint(checkpoint_id)
        ref = checkpoint.backend_ref
        if ref is None or not ref.provider_snapshot_id:
            return RuntimeCheckpointSnapshotDeleteResult(
                checkpoint_id=checkpoint_id, deleted=False, already_deleted=True
            )
        async with self._operation(checkpoint.runtime_id):
            deleted = await self.backends.delete_snapshot(ref)
            snapshot_id = ref.provider_snapshot_id
            with self.store.transaction():
                for other in self.store.list_checkpoints():
                    other_ref = other.backend_ref
                    if other_ref is not None and other_ref.provider_snapshot_id == snapshot_id:
                        cleared = other_ref.model_copy(update={"provider_snapshot_id": None})
                        self.store.put_checkpoint(other.model_copy(update={"backend_ref": cleared}))
        self.gc()
        return RuntimeCheckpointSnapshotDeleteResult(
            checkpoint_id=checkpoint_id, deleted=deleted, already_deleted=not deleted
        )

    # ---- housekeeping ---------------------------------------------------------------

    def live_manifests(self) -> set[str]:
        """Blob-store manifests some checkpoint still references."""
        live: set[str] = set()
        for checkpoint in self.store.list_checkpoints():
            if checkpoint.context_manifest_id:
                live.add(checkpoint.context_manifest_id)
            ref = checkpoint.backend_ref
            if ref is not None and ref.provider_snapshot_id:
                live.update(self.backends.referenced_manifests(ref))
        return live

    def gc(self, *, grace_seconds: float = 60.0) -> GcReport:
        """Free blob-store chunks and manifests no checkpoint references any more."""
        return self.blobs.gc(self.live_manifests(), grace_seconds=grace_seconds)

    def close_store(self) -> None:
        """Close the persistent store (the service is unusable afterwards)."""
        self.store.close()
