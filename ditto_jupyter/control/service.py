"""RuntimeService: the one control-plane core that every front end calls.

Its rules: checkpoint, checkout and pause need an idle runtime; a second control operation
on a runtime while one is in flight is refused with `SessionBusy`; checkout never changes
its source and generates the child id; a clean backend with a ref reuses it; pause
snapshots, releases the backend and keeps the id; resume keeps the id; close deletes a
provider sandbox only when no runtime remains bound to it; delete-snapshot deletes only the
recorded provider snapshot and is idempotent. The store is persistent, and a local kernel
restores in place.

Workspace files are never lost: "no cell ran since the last checkpoint" is judged per kernel
(the kernel's handle and its execution count, never a count compared across kernels), and
a local workspace is deleted only after a snapshot taken for that purpose (pause, a lost
runtime), never on the strength of a reused one.

Every operation leaves the store as it was when it fails: provider work done before the
failure (a new snapshot, a started kernel, a checked-out backend) is undone, and store
writes happen in one transaction after it.

Why one module of some 900 lines: it is one class whose operations share the per-runtime
operation lock, the idle and state checks, and the undo-then-commit discipline above;
split by operation, each part would need all of that, and the rules would be harder to
check side by side.
"""

from __future__ import annotations

import contextlib
import re
import threading
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ditto_jupyter.backends.base import BackendLocator, ExecResult
from ditto_jupyter.backends.dirty import DirtyTrackingBackend
from ditto_jupyter.backends.manager import BackendManager
from ditto_jupyter.control.autocheckpoints import (
    held_whole,
    prune_plan,
    refuse_pruned,
    thinned,
    whole_automatic,
)
from ditto_jupyter.control.collector import BackgroundCollector
from ditto_jupyter.control.context_capture import SessionContextCapture
from ditto_jupyter.control.lookups import checkpoint_page, resolve_checkpoint
from ditto_jupyter.control.store import CheckpointStore, collecting_damaged_rows
from ditto_jupyter.core.blobs import (
    GRACE_SECONDS,
    NAMESPACE_MANIFEST_KIND,
    BlobError,
    BlobStore,
    GcReport,
)
from ditto_jupyter.core.errors import (
    CheckpointNotFound,
    DittoError,
    InvalidRequest,
    RuntimeClosed,
    RuntimeNotFound,
    RuntimeNotPaused,
    RuntimePaused,
    SessionBusy,
    UnsupportedBackend,
)
from ditto_jupyter.core.limits import MAX_NAME_LENGTH, metadata_problem
from ditto_jupyter.core.models import (
    AutoCheckpointPruneResult,
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

_HEX_ID = re.compile(r"\b[0-9a-f]{64}\b")


def _without_snapshot(checkpoint: RuntimeCheckpoint) -> RuntimeCheckpoint:
    """The checkpoint with its backend snapshot id cleared (after delete-snapshot)."""
    ref = checkpoint.backend_ref
    if ref is None:
        return checkpoint
    cleared = ref.model_copy(update={"provider_snapshot_id": None})
    return checkpoint.model_copy(update={"backend_ref": cleared})


#: handle_state key: which kernel had run how many cells at the runtime's last checkpoint.
_CHECKPOINTED_RUN = "checkpointed_run"
#: What older records kept instead: a bare count, compared across kernels. Ignored now.
_LEGACY_COUNT = "checkpointed_execution_count"
_BOOKKEEPING = (_CHECKPOINTED_RUN, _LEGACY_COUNT)

#: The name of the checkpoint that keeps a lost runtime's workspace.
LOST_CHECKPOINT_NAME = "lost"


def new_checkpoint_id() -> str:
    """A fresh checkpoint id (32 hex digits; magics accept any unique prefix)."""
    return uuid.uuid4().hex


def child_runtime_id(source_runtime_id: str) -> str:
    """The id of a checkout's child: the source id, `-`, and a UUID-based suffix."""
    return f"{source_runtime_id}-{uuid.uuid4().hex[:12]}"


def run_mark(handle_state: Mapping[str, Any], execution_count: int | None) -> dict[str, Any] | None:
    """Which context (its handle, e.g. the kernel id) had run how many cells; None: unknown.

    Two marks are equal only for the same kernel at the same count: a checkout child or a
    resumed runtime has a new kernel whose count restarts, so it never matches its source.
    """
    if execution_count is None:
        return None
    context = {k: v for k, v in handle_state.items() if k not in _BOOKKEEPING}
    return {"context": context, "execution_count": execution_count}


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
        self._held: dict[str, set[str]] = {}  # manifests of checkpoints being recorded
        self._held_lock = threading.Lock()
        self.collector = BackgroundCollector(self.gc, follow_up_seconds=GRACE_SECONDS + 1)

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
    def _check_request(name: str | None, metadata: Mapping[str, Any] | None, whose: str) -> None:
        """InvalidRequest when a name or metadata breaks a limit of `core.limits` (the REST
        models check requests already; this holds in-process callers and merges to them)."""
        if name is not None and len(name) > MAX_NAME_LENGTH:
            raise InvalidRequest(
                f"the checkpoint name is {len(name)} characters long; the limit is "
                f"{MAX_NAME_LENGTH}"
            )
        problem = metadata_problem(metadata) if metadata else None
        if problem is not None:
            raise InvalidRequest(f"{whose}{problem}")

    def _merged(self, base: Mapping[str, Any], extra: Mapping[str, Any] | None) -> dict[str, Any]:
        """`base` updated with `extra`, within the metadata limits (each request is within
        them, but merges could grow a runtime's metadata without end)."""
        merged = dict(base)
        merged.update(extra or {})
        if extra:
            self._check_request(None, merged, "merged with the runtime's own, ")
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
        # reused: a recorded checkpoint (of any runtime: a checkout child's clean checkpoint
        # reuses its parent's snapshot) already records this snapshot
        if self.store.checkpoints_with_snapshot(ref.provider_snapshot_id):
            return
        with contextlib.suppress(Exception):
            await self.backends.delete_snapshot(ref)

    def _manifests_of(self, checkpoint: RuntimeCheckpoint) -> list[str]:
        """The blob-store manifests a checkpoint keeps alive."""
        manifests = [checkpoint.context_manifest_id] if checkpoint.context_manifest_id else []
        ref = checkpoint.backend_ref
        if ref is not None and ref.provider_snapshot_id:
            manifests += self.backends.referenced_manifests(ref)
        return manifests

    def _hold(self, runtime_id: str, manifests: Iterable[str | None]) -> None:
        """Keep manifests from garbage collection in this process while `runtime_id`'s
        checkpoint is being taken and recorded (a write intent; `_let_go` ends it)."""
        with self._held_lock:
            self._held.setdefault(runtime_id, set()).update(m for m in manifests if m)

    def _let_go(self, runtime_id: str) -> None:
        with self._held_lock:
            self._held.pop(runtime_id, None)

    def _referenced(self, manifest_ids: Sequence[str]) -> set[str]:
        """Which of these manifests a checkpoint references or one being recorded holds."""
        with self._held_lock:
            held = set().union(*self._held.values()).intersection(manifest_ids)
        return held | self.store.referenced_manifests(manifest_ids)

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
        """The current snapshot of a live runtime; changes nothing."""
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

    async def workspace(self, runtime_id: str) -> Path | None:
        """The local workspace of a live runtime, re-attached after a restart if need be.

        None when its files live in a remote sandbox (E2B).
        """
        backend = await self._backend(self._live_session(runtime_id))
        return backend.local_path if backend is not None else None

    async def exec(
        self, runtime_id: str, command: str, *, timeout: float | None = None
    ) -> ExecResult:
        """Run a shell command in the runtime's backend (marks it dirty: the next checkpoint
        takes a new snapshot)."""
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
        asked again and the busy check does not apply). It must be a kernel-namespace
        manifest of this blob store captured for this runtime (InvalidRequest otherwise).
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
        *,
        fresh: bool = False,
    ) -> tuple[RuntimeCheckpoint, SessionRecord]:
        """Checkpoint an idle live runtime and make it the head (checkpoint and pause).

        The caller holds the runtime's operation slot. When the store refuses the new
        records, a snapshot taken for them is discarded and the store is unchanged.
        `fresh`: a local workspace gets a new snapshot even when no cell ran (pause).
        """
        self._check_request(name, metadata, "")
        session = self._live_session(runtime_id)
        if precaptured is None:
            await self._require_idle(session)
        else:
            self._check_self_capture(runtime_id, precaptured)
        try:
            checkpoint, session = await self._take_checkpoint(
                session, name, metadata, precaptured, fresh=fresh
            )
            manifests = self._manifests_of(checkpoint)
            self._hold(runtime_id, manifests)
            try:
                with self.store.transaction():
                    self.store.put_checkpoint(checkpoint)
                    self.store.set_head(runtime_id, checkpoint.checkpoint_id)
                    self.store.put_session(session)
            except BaseException:
                await self._discard_new_ref(runtime_id, checkpoint.backend_ref)
                raise
            with contextlib.suppress(BlobError):  # a hint: gc checks the store instead
                self.blobs.mark_referenced(manifests)
        finally:
            self._let_go(runtime_id)
        return checkpoint, session

    def _check_self_capture(self, runtime_id: str, capture: ContextCapture) -> None:
        """Refuse a kernel's own capture unless it can become this runtime's checkpoint.

        Its manifest must be in this blob store with a valid signature, of the
        kernel-namespace kind (so a resume can restore it), and captured for `runtime_id`.
        A restored manifest (a checkout child's first head, a resumed runtime's) names the
        runtime it was captured for; new captures name the runtime that made them.
        Manifests written before the runtime was named stay restorable but are refused here.
        """
        manifest_id = capture.manifest_id
        try:
            body = self.blobs.get_manifest(manifest_id)
        except (BlobError, OSError) as error:
            raise InvalidRequest(
                f"capture.manifest_id {manifest_id!r} is not a valid manifest of this "
                f"server's store ({error})"
            ) from None
        kind = body.get("kind")
        if kind != NAMESPACE_MANIFEST_KIND:
            raise InvalidRequest(
                f"capture.manifest_id {manifest_id!r} is a {kind!r} manifest, not a "
                f"{NAMESPACE_MANIFEST_KIND!r} capture of a kernel"
            )
        captured_for = body.get("runtime_id")
        if captured_for != runtime_id:
            whose = f"runtime {captured_for}" if captured_for else "no runtime"
            raise InvalidRequest(
                f"capture.manifest_id {manifest_id!r} was captured for {whose}, not for "
                f"runtime {runtime_id}"
            )

    async def _take_checkpoint(
        self,
        session: SessionRecord,
        name: str | None,
        metadata: dict[str, Any] | None,
        precaptured: ContextCapture | None,
        *,
        fresh: bool = False,
    ) -> tuple[RuntimeCheckpoint, SessionRecord]:
        """Capture context and backend; nothing is written to the store here.

        The backend's last snapshot is reused only when it is clean and this same kernel
        has run no cell since the last checkpoint; with `fresh`, a local workspace (which
        the kernel and its threads write directly) is snapshotted anyway.
        """
        capture = precaptured or await self.context.capture(session)
        self._hold(session.session_id, [capture.manifest_id])
        backend = await self._backend(session)
        mark = run_mark(session.handle_state, capture.execution_count)
        ref: BackendCheckpointRef | None = None
        if backend is not None:
            ran_code = mark is None or session.handle_state.get(_CHECKPOINTED_RUN) != mark
            if ran_code or (fresh and backend.local_path is not None):
                backend.mark_dirty()  # running a cell counts as exec for dirty tracking
            ref = await self.backends.checkpoint_backend(runtime_id=session.session_id)
        handle_state = {k: v for k, v in session.handle_state.items() if k not in _BOOKKEEPING}
        if mark is not None:
            handle_state[_CHECKPOINTED_RUN] = mark
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

    async def list_checkpoints(
        self,
        runtime_id: str,
        *,
        limit: int | None = None,
        cursor: str | None = None,
        newest_first: bool = False,
    ) -> CheckpointListResult:
        """A runtime's checkpoints, oldest (or newest) first, a page at a time (see
        `lookups.checkpoint_page`); without `limit`, every checkpoint."""
        self._session(runtime_id)
        return checkpoint_page(
            self.store, runtime_id, limit=limit, cursor=cursor, newest_first=newest_first
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
        """A checkpoint named by id, unique id prefix, or name within `runtime_id` (see
        `lookups.resolve_checkpoint`: a name shared by several runtimes is ambiguous)."""
        return resolve_checkpoint(self.store, reference, runtime_id)

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
        refuse_pruned(checkpoint)
        source = self._session(checkpoint.runtime_id)
        merged_metadata = self._merged(checkpoint.session.metadata, metadata)
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
                    "metadata": merged_metadata,
                    "handle_state": {},
                    "created_at_ms": now_ms(),
                    "updated_at_ms": now_ms(),
                    "source_runtime_id": source.session_id,
                    "source_checkpoint_id": checkpoint.checkpoint_id,
                }
            )
            child, unrestorable = await self._start_context(
                child, backend, checkpoint, handle_state
            )
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
            unrestorable=unrestorable,
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
    ) -> tuple[SessionRecord, list[UnrestorableValue]]:
        """Start (or adopt) a context for `session` and restore the checkpoint into it.

        Returns the session and every value the new context does not hold.
        """
        started = handle_state is None
        try:
            if handle_state is None:
                handle_state = await self.context.start(session, backend.local_path)
            session = session.model_copy(update={"handle_state": handle_state})
            unrestorable = await self.context.restore(session, checkpoint.context_manifest_id)
        except BaseException:
            if started:
                with contextlib.suppress(Exception):
                    await self.context.stop(session)
            with contextlib.suppress(Exception):
                await self.backends.release(session.session_id)
            raise
        return session, unrestorable

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
            refuse_pruned(checkpoint)
            unrestorable = await self.context.restore(session, checkpoint.context_manifest_id)
            self.store.set_head(runtime_id, checkpoint.checkpoint_id)
        return checkpoint, unrestorable

    def record_restore(self, runtime_id: str, checkpoint_id: str) -> None:
        """Make a checkpoint the head of a runtime that restored it itself.

        Its kernel is busy only with the magic asking; another control operation on the
        runtime in flight is refused with SessionBusy, as for restore.
        """
        if runtime_id in self._in_flight:
            raise SessionBusy(f"runtime {runtime_id} has another control operation in flight")
        self._live_session(runtime_id)
        refuse_pruned(self._checkpoint(checkpoint_id))
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
        """Snapshot an idle runtime, then free its context and backend; the id stays.

        A local workspace is snapshotted anew (unchanged files cost a stat each) before it
        is deleted, whatever the kernel ran: a reused snapshot could miss a file.
        """
        async with self._operation(runtime_id):
            checkpoint, session = await self._checkpoint_live(
                runtime_id, name or "pause", metadata, precaptured, fresh=True
            )
            await self.context.stop(session)
            await self._backend(session)  # attach first so release really frees it
            await self.backends.release(runtime_id)
            session = session.model_copy(
                update={
                    "status": SessionLifecycleStatus.PAUSED,
                    "backend_instance": None,
                    "handle_state": {},
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
            merged_metadata = self._merged(session.metadata, metadata)
            backend = await self._materialise_backend(checkpoint, runtime_id)
            session = session.model_copy(
                update={
                    "status": SessionLifecycleStatus.IDLE,
                    "backend_kind": backend.kind,
                    "backend_instance": backend.backend_id,
                    "metadata": merged_metadata,
                    "handle_state": {},
                    "updated_at_ms": now_ms(),
                }
            )
            session, unrestorable = await self._start_context(
                session, backend, checkpoint, handle_state
            )
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
            unrestorable=unrestorable,
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
        self.collector.request()  # the runtime's unrecorded captures, if any, in the background
        return RuntimeCloseResult(
            runtime=await self._public(session),
            backend_released=released,
            provider_sandbox_deleted=deleted,
        )

    async def mark_lost(self, runtime_id: str) -> RuntimeRecord:
        """Record that a live runtime's context ended outside the control plane.

        A kernel that died, or a server restart, loses the variables set since the head
        checkpoint, never the workspace's files: the backend is snapshotted before it is
        released, into a checkpoint named `lost` (the head's variables, the files as they
        are now) that becomes the head. The runtime is then paused at its head (resume
        brings it back), or closed when it has none (no checkpoint, an empty workspace).
        A workspace that is gone holds nothing to keep; one that cannot be snapshotted is
        left where it is, never deleted. Paused or closed runtimes are left as they are.
        """
        async with self._operation(runtime_id):
            session = self._session(runtime_id)
            if session.status in (SessionLifecycleStatus.PAUSED, SessionLifecycleStatus.CLOSED):
                return session.to_runtime()
            with contextlib.suppress(Exception):
                await self.context.stop(session)
            head = self.store.get_head(runtime_id)
            ref = await self._snapshot_before_release(session)
            lost = self._lost_checkpoint(session, head, ref)
            head = lost.checkpoint_id if lost is not None else head
            status = SessionLifecycleStatus.PAUSED if head else SessionLifecycleStatus.CLOSED
            session = session.model_copy(
                update={
                    "status": status,
                    "backend_instance": None,
                    "handle_state": {},
                    "updated_at_ms": now_ms(),
                }
            )
            try:
                with self.store.transaction():
                    if lost is not None:
                        self.store.put_checkpoint(lost)
                        self.store.set_head(runtime_id, lost.checkpoint_id)
                    self.store.put_session(session)
                    self.store.delete_binding(runtime_id)
            except BaseException:
                await self._discard_new_ref(runtime_id, ref)
                raise
            if lost is None:  # an empty workspace's snapshot, or the head's own
                await self._discard_new_ref(runtime_id, ref)
            if ref is None:  # gone, or not safely in a snapshot: never deleted
                self.backends.forget(runtime_id)
            else:
                with contextlib.suppress(Exception):
                    await self.backends.release(runtime_id)
        return session.to_runtime()

    async def _snapshot_before_release(self, session: SessionRecord) -> BackendCheckpointRef | None:
        """A snapshot of a runtime's backend as it is now (a local workspace: always new).

        None when the runtime has no backend, or it is gone, or it cannot be snapshotted:
        then it must not be released.
        """
        try:
            backend = await self._backend(session)
            if backend is None:
                return None
            if backend.local_path is not None:  # the kernel may have written it directly
                backend.mark_dirty()
            return await self.backends.checkpoint_backend(runtime_id=session.session_id)
        except (DittoError, OSError):
            return None

    def _lost_checkpoint(
        self, session: SessionRecord, head_id: str | None, ref: BackendCheckpointRef | None
    ) -> RuntimeCheckpoint | None:
        """The checkpoint keeping a lost runtime's files, or None when nothing needs it."""
        if ref is None:
            return None
        head = self.store.get_checkpoint(head_id) if head_id else None
        if head is not None and head.backend_ref == ref:  # clean: the head holds these files
            return None
        if head is None and ref.details.get("entries") == 0:  # nothing to keep
            return None
        return RuntimeCheckpoint(
            checkpoint_id=new_checkpoint_id(),
            runtime_id=session.session_id,
            parent_checkpoint_id=head_id,
            session=session.model_copy(update={"handle_state": {}, "updated_at_ms": now_ms()}),
            backend_ref=ref,
            context_manifest_id=head.context_manifest_id if head is not None else None,
            unrestorable=head.unrestorable if head is not None else [],
            name=LOST_CHECKPOINT_NAME,
            metadata={"variables_from": head_id},
        )

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
        snapshot_id = ref.provider_snapshot_id
        async with self._operation(checkpoint.runtime_id):
            # The store records the deletion first, so no record ever names a deleted
            # snapshot; when the provider then fails, the records get the snapshot back.
            # The snapshot's manifests are marked too: the next collection checks them
            # again (and keeps them if a checkpoint still names them).
            self.blobs.mark_for_collection(self.backends.referenced_manifests(ref))
            with self.store.transaction():
                sharing = [
                    other
                    for other in self.store.checkpoints_with_snapshot(snapshot_id)
                    if other.backend_ref is not None
                    and other.backend_ref.provider_snapshot_id == snapshot_id
                ]
                for other in sharing:
                    self.store.put_checkpoint(_without_snapshot(other))
            try:
                deleted = await self.backends.delete_snapshot(ref)
            except BaseException:
                with self.store.transaction():
                    for other in sharing:
                        self.store.put_checkpoint(other)
                raise
        self.collector.request()  # its chunks, in the background
        return RuntimeCheckpointSnapshotDeleteResult(
            checkpoint_id=checkpoint_id, deleted=deleted, already_deleted=not deleted
        )

    async def prune_automatic(self, runtime_id: str, keep: int) -> AutoCheckpointPruneResult:
        """Thin a runtime's automatic checkpoints beyond the newest `keep` (see
        `autocheckpoints`): rows stay, their variables and workspace snapshots go.

        Named checkpoints, heads and checkout sources are never thinned. A provider
        snapshot no remaining checkpoint records is deleted; blob gc frees the chunks.
        """
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise InvalidRequest(f"keep must be a whole number of at least 1, not {keep!r}")
        self._session(runtime_id)
        async with self._operation(runtime_id):
            mine = self.store.list_checkpoints(runtime_id)
            sessions = self.store.list_sessions()
            heads = [self.store.get_head(s.session_id) for s in sessions]
            sources = [
                s.source_checkpoint_id
                for s in sessions
                if s.source_runtime_id == runtime_id and s.source_checkpoint_id
            ]
            held = held_whole(mine, [h for h in heads + sources if h is not None])
            pruned, held_ids = prune_plan(mine, keep, held)
            if pruned:
                # Recorded first: the next collection checks these manifests again (and
                # keeps any a checkpoint still names).
                self.blobs.mark_for_collection([m for c in pruned for m in self._manifests_of(c)])
                with self.store.transaction():
                    for checkpoint in pruned:
                        self.store.put_checkpoint(thinned(checkpoint))
                dropped = {
                    c.backend_ref.provider_snapshot_id: c.backend_ref
                    for c in pruned
                    if c.backend_ref is not None and c.backend_ref.provider_snapshot_id
                }
                for snapshot_id, ref in dropped.items():
                    if not self.store.checkpoints_with_snapshot(snapshot_id):
                        await self.backends.delete_snapshot(ref)
        if pruned:
            self.collector.request()  # their chunks, in the background
        return AutoCheckpointPruneResult(
            runtime_id=runtime_id,
            keep=keep,
            pruned=[c.checkpoint_id for c in pruned],
            held=held_ids,
            whole=whole_automatic(mine) - len(pruned),
        )

    # ---- housekeeping ---------------------------------------------------------------

    def live_manifests(self) -> set[str]:
        """Blob-store manifests some checkpoint still references.

        Reads every checkpoint: for checks and tests, never on a request path (garbage
        collection asks the store's index about its candidates instead). A damaged
        checkpoint row cannot be read, so every manifest id its text holds counts as
        referenced.
        """
        with collecting_damaged_rows() as damaged:
            checkpoints = self.store.list_checkpoints()
        live = {found for row in damaged for found in _HEX_ID.findall(row.text)}
        for checkpoint in checkpoints:
            live.update(self._manifests_of(checkpoint))
        return live

    def gc(self, *, grace_seconds: float = GRACE_SECONDS) -> GcReport:
        """Free blob-store chunks and manifests no checkpoint references any more.

        Its cost follows the garbage: it visits only manifests nobody has vouched for and
        chunks no manifest lists, and asks the store's index about the manifests. Runs on
        the calling thread; close and delete-snapshot ask `collector` to run it on a worker
        thread instead.
        """
        return self.blobs.gc(self._referenced, grace_seconds=grace_seconds)

    def close_store(self) -> None:
        """Stop background collection and close the store (the service is unusable after)."""
        self.collector.stop(timeout=60)
        self.store.close()
