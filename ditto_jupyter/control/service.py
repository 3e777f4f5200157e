"""RuntimeService: the one control-plane door that every front end calls.

It keeps the runtime rules: checkpoint, checkout and pause need an idle runtime; a second
control operation on a runtime while one is in flight is refused with `SessionBusy`;
checkout never changes its source and generates the child id; a clean backend with a ref
reuses it; pause snapshots, releases the backend and keeps the id; resume keeps the id;
close takes a final checkpoint and deletes a provider sandbox only when no runtime remains
bound to it; delete-snapshot deletes only the recorded provider snapshot and is
idempotent. Every operation leaves the store as it was when it fails.

The door delegates; each job lives in a module of its own, over one shared `RuntimeParts`:

- `operation_guard`: slots, holds, live and idle checks, the lease (`ownership`);
- `checkpointing`: checkpoint, and the one builder of every checkpoint record;
- `in_place_restore`, `files_back`: back to a checkpoint in place, variables and files;
- `lifecycle`: create, checkout, pause, resume, close, lost; `fanout`: N checkouts at once;
- `housekeeping`: delete-snapshot, prune, garbage collection;
- `checkpoint_documents`: a checkpoint's notebook document, stored, answered, read;
- `diff`: what a checkpoint holds, what changed between two points in time, N side by side;
- `undo`: back to just before the last cell `%autocheckpoint` recorded, files included;
- `provider_work`, `leftovers`: provider work, then the store writes, or the work undone;
  cleanups that fail logged, and what they leave behind recorded;
- `replication`, `incoming_blobs`, `bucket_gc`: checkpoints to and from an object store;
- `langgraph_threads`: LangGraph's checkpoints of each runtime.

The reads (a runtime, its checkpoints, its workspace) are answered here, from the store.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ditto_jupyter.backends.base import ExecResult
from ditto_jupyter.backends.manager import BackendManager
from ditto_jupyter.control.bucket_gc import BucketCoordination, BucketGcReport
from ditto_jupyter.control.checkpoint_documents import CheckpointDocuments, DocumentToRecord
from ditto_jupyter.control.checkpointing import Checkpointing
from ditto_jupyter.control.collector import BackgroundCollector
from ditto_jupyter.control.context_driver import ContextDriver
from ditto_jupyter.control.diff.comparisons import Comparisons, LiveNotebook
from ditto_jupyter.control.fanout import ChildOutcome, FanOut
from ditto_jupyter.control.fencing import Fencing
from ditto_jupyter.control.housekeeping import Housekeeping
from ditto_jupyter.control.in_place_restore import InPlaceRestore
from ditto_jupyter.control.langgraph_threads import LangGraphThreads
from ditto_jupyter.control.leftovers import LeftoverLog
from ditto_jupyter.control.lifecycle import Lifecycle
from ditto_jupyter.control.lookups import checkpoint_page, resolve_checkpoint
from ditto_jupyter.control.off_loop import off_loop
from ditto_jupyter.control.operation_guard import OperationGuard
from ditto_jupyter.control.ownership import RuntimeOwnership
from ditto_jupyter.control.replication import Replication
from ditto_jupyter.control.runtime_parts import RuntimeParts
from ditto_jupyter.control.store import CheckpointStore
from ditto_jupyter.control.undo import Undo
from ditto_jupyter.core.blobs import GRACE_SECONDS, BlobStore, GcReport
from ditto_jupyter.core.errors import InvalidRequest, UnsupportedBackend
from ditto_jupyter.core.limits import MAX_ID_LENGTH
from ditto_jupyter.core.models import (
    AutoCheckpointCell,
    AutoCheckpointPruneResult,
    CellsCounted,
    CheckpointContents,
    CheckpointDocumentResult,
    CheckpointListResult,
    CheckpointSummary,
    ContextCapture,
    LeaseHolder,
    Leftover,
    NotebookDocument,
    RuntimeCheckoutResult,
    RuntimeCheckpoint,
    RuntimeCheckpointResult,
    RuntimeCheckpointSnapshotDeleteResult,
    RuntimeCloseResult,
    RuntimeCompareResult,
    RuntimeDiffResult,
    RuntimeListResult,
    RuntimePauseResult,
    RuntimeRecord,
    RuntimeResumeResult,
    RuntimeUndoResult,
    SessionRecord,
    UnrestorableValue,
    now_ms,
)


class RuntimeService:
    """Checkpoint, checkout, pause, resume and close runtimes over one persistent store."""

    def __init__(
        self,
        store: CheckpointStore,
        blobs: BlobStore,
        backends: BackendManager,
        context: ContextDriver,
        *,
        default_backend: str = "local",
        lease_holder: LeaseHolder | None = None,
        lease_ttl_ms: int | None = None,
        replication: Replication | None = None,
    ) -> None:
        """`lease_holder` is who this service is to other processes on the same store
        (default: this process, no URL); `lease_ttl_ms` how long its leases last between
        heartbeats (None: while this process lives; a server renews them)."""
        self.store = store
        self.blobs = blobs
        self.backends = backends
        self.context = context
        self.default_backend = default_backend
        self.ownership = RuntimeOwnership(store, lease_holder, ttl_ms=lease_ttl_ms)
        self.guard = OperationGuard(store, context, self.ownership)
        self.collector = BackgroundCollector(
            lambda: self._housekeeping.gc_everywhere(), follow_up_seconds=GRACE_SECONDS + 1
        )
        self.parts = RuntimeParts(
            store=store,
            blobs=blobs,
            backends=backends,
            context=context,
            guard=self.guard,
            leftovers=LeftoverLog(store),
            request_collection=lambda: self.collector.request(),
            replication=replication or Replication(),
        )
        self.replication = self.parts.replication
        self.replication.mark_replicated = self._mark_replicated
        if self.replication.replica is not None:
            self.replication.coordinate(
                BucketCoordination(store, self.ownership, self.replication.replica)
            )
        self.replication.start()
        self._checkpointing = Checkpointing(self.parts)
        self._lifecycle = Lifecycle(
            self.parts, self._checkpointing, default_backend=default_backend
        )
        self._fan_out = FanOut(self.parts, self._lifecycle)
        self._housekeeping = Housekeeping(self.parts)
        self._documents = CheckpointDocuments(self.parts)
        self._comparisons = Comparisons(self.parts, self._documents)
        self._undo = Undo(self.parts)
        self._restore = InPlaceRestore(self.parts)
        #: LangGraph's checkpoints of each runtime (`ditto_jupyter.langgraph` reaches them).
        self.langgraph = LangGraphThreads(store, blobs, self.replication)

    def has_operation_in_flight(self, runtime_id: str) -> bool:
        """Whether a control operation on this runtime is running now."""
        return self.guard.in_flight(runtime_id)

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
        """Register a new runtime with a fresh backend. With `handle_state` it adopts a
        context that already runs (a kernel the Jupyter server started); otherwise the
        context driver starts one."""
        return await self._lifecycle.create_runtime(
            conversation_id,
            sender_id,
            runtime_id=runtime_id,
            kernel_name=kernel_name,
            backend_kind=backend_kind,
            handle_state=handle_state,
            metadata=metadata,
        )

    async def get_runtime(self, runtime_id: str) -> RuntimeRecord:
        """The public record of one runtime."""
        return await self.guard.public(await off_loop(self.guard.session, runtime_id))

    async def list_runtimes(
        self, visible: Callable[[SessionRecord], bool] | None = None
    ) -> RuntimeListResult:
        """Every runtime the store knows (that `visible` keeps: a user's own), oldest first."""
        kept = [s for s in await off_loop(self.store.list_sessions) if not visible or visible(s)]
        return RuntimeListResult(runtimes=[await self.guard.public(s) for s in kept])

    async def resume_session(self, runtime_id: str) -> RuntimeRecord:
        """The current snapshot of a live runtime; changes nothing."""
        return await self.guard.public(await off_loop(self.guard.live_session, runtime_id))

    def find_session(self, runtime_id: str) -> SessionRecord | None:
        """The internal session record, or None when the runtime is unknown."""
        return self.store.get_session(runtime_id)

    def sessions(self) -> list[SessionRecord]:
        """Every internal session record, oldest first."""
        return self.store.list_sessions()

    def session(self, runtime_id: str) -> SessionRecord:
        """The internal session record (for front ends that need the kernel handle)."""
        return self.guard.session(runtime_id)

    def live_session_with_kernel(self, kernel_id: str) -> SessionRecord | None:
        """The live runtime whose kernel is `kernel_id`, or None (one index lookup)."""
        return self.store.live_session_with_kernel(kernel_id)

    def update_handle(self, runtime_id: str, **handle: Any) -> None:
        """Record a live runtime's new context handle (a kernel switched outside us)."""
        session = self._live_to_update(runtime_id)
        handle_state = {**session.handle_state, **handle}
        self.store.put_session(
            session.model_copy(update={"handle_state": handle_state, "updated_at_ms": now_ms()})
        )

    def update_conversation(self, runtime_id: str, conversation_id: str) -> None:
        """Record a live runtime's new notebook path (set after its session began, or a
        rename); InvalidRequest for a path over the id limit."""
        if not conversation_id or len(conversation_id) > MAX_ID_LENGTH:
            raise InvalidRequest(
                f"a notebook path must be 1 to {MAX_ID_LENGTH} characters, not "
                f"{len(conversation_id)}"
            )
        session = self._live_to_update(runtime_id)
        self.store.put_session(
            session.model_copy(
                update={"conversation_id": conversation_id, "updated_at_ms": now_ms()}
            )
        )

    def _live_to_update(self, runtime_id: str) -> SessionRecord:
        """A live runtime no operation is working on, held by this service."""
        self.guard.refuse_in_flight(runtime_id)
        self.guard.claim(runtime_id)
        return self.guard.live_session(runtime_id)

    def workspace_path(self, runtime_id: str) -> Path | None:
        """The local workspace directory of a live runtime, if it has one."""
        backend = self.backends.get(runtime_id)
        return backend.local_path if backend is not None else None

    async def workspace(self, runtime_id: str) -> Path | None:
        """The local workspace of a live runtime, re-attached after a restart if need be.

        None when its files live in a remote sandbox (E2B).
        """
        backend = await self.parts.backend(await off_loop(self.guard.live_session, runtime_id))
        return backend.local_path if backend is not None else None

    async def exec(
        self, runtime_id: str, command: str, *, timeout: float | None = None
    ) -> ExecResult:
        """Run a shell command in the runtime's backend (marks it dirty).

        The command counts as in flight: no operation (a pause, idle or asked) runs on the
        runtime until it has finished, and it is refused while one does.
        """
        async with self.guard.command(runtime_id):
            session = await off_loop(self.guard.live_session, runtime_id)
            backend = await self.parts.backend(session)
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
        automatic: AutoCheckpointCell | None = None,
        document: DocumentToRecord | None = None,
    ) -> RuntimeCheckpointResult:
        """Capture an idle runtime: its context, its backend, and its session record.

        `precaptured` is the self-capture path: a magic running inside the kernel has
        captured its own namespace (the kernel is busy running the magic, so it is not
        asked again and the busy check does not apply). It must be a kernel-namespace
        manifest of this blob store captured for this runtime (InvalidRequest otherwise).
        `automatic` is the cell `%autocheckpoint` took it after (a prune may thin it).
        `document` is the notebook the checkpoint holds, and where it came from (None:
        no document; a front end may still send one while it is awaited).
        """
        stored = await self._documents.save_for(document)
        return await self._checkpointing.checkpoint(
            runtime_id,
            name,
            metadata,
            precaptured=precaptured,
            automatic=automatic,
            document=stored,
        )

    async def record_document(
        self, runtime_id: str, checkpoint_id: str, document: NotebookDocument
    ) -> CheckpointDocumentResult:
        """A front end's document for a checkpoint that awaits one (once, in time; else
        Conflict)."""
        return await self._documents.answer(runtime_id, checkpoint_id, document)

    def checkpoint_document(self, checkpoint_id: str) -> dict[str, Any]:
        """The nbformat 4 document a checkpoint holds (CheckpointNotFound when none)."""
        return self._documents.document(self.parts.checkpoint(checkpoint_id))

    def checkpoint_contents(self, checkpoint_id: str) -> CheckpointContents:
        """What a checkpoint holds: variables (as recorded), files, document; never unpickled."""
        return self._comparisons.contents(self.parts.checkpoint(checkpoint_id))

    async def diff(
        self,
        runtime_id: str,
        from_ref: str | None = None,
        to_ref: str | None = None,
        *,
        capture: ContextCapture | None = None,
        notebook: LiveNotebook | None = None,
    ) -> RuntimeDiffResult:
        """What changed from a checkpoint (`from`: the head) to another or `"live"` (the
        default; variables: `capture`, else the idle kernel's; cells: `notebook`'s)."""
        return await self._comparisons.diff(
            runtime_id, from_ref, to_ref, capture=capture, notebook=notebook
        )

    async def compare(
        self, sides: Sequence[tuple[str, str | None]], notebooks: Mapping[str, LiveNotebook]
    ) -> RuntimeCompareResult:
        """2 to 8 (runtime, `at`) side by side (`Comparisons.compare`); nothing unpickled."""
        return await self._comparisons.compare(sides, notebooks)

    def changed_cells(self, checkpoint_id: str, document: NotebookDocument | None) -> CellsCounted:
        """How many cells differ from `document` (None: no document), and a note (blocking)."""
        return self._comparisons.changed_cells(self.parts.checkpoint(checkpoint_id), document)

    async def list_checkpoints(
        self,
        runtime_id: str,
        *,
        limit: int | None = None,
        cursor: str | None = None,
        newest_first: bool = False,
    ) -> CheckpointListResult:
        """A runtime's checkpoints a page at a time (`lookups.checkpoint_page`), off the loop."""
        await off_loop(self.guard.session, runtime_id)
        return await off_loop(
            checkpoint_page,
            self.store,
            runtime_id,
            limit=limit,
            cursor=cursor,
            newest_first=newest_first,
            summarise=self.summary,
        )

    def _mark_replicated(self, checkpoint_id: str) -> None:
        """Record that a checkpoint's blobs are in the object store (the uploader's thread).

        Read and written in one write transaction, so it never puts back an older copy of
        a record another operation changed meanwhile (a prune, a delete-snapshot)."""
        with self.store.transaction():
            checkpoint = self.store.get_checkpoint(checkpoint_id)
            if checkpoint is not None and checkpoint.replication != "replicated":
                self.store.put_checkpoint(
                    checkpoint.model_copy(update={"replication": "replicated"})
                )

    def summary(self, checkpoint: RuntimeCheckpoint) -> CheckpointSummary:
        """A checkpoint's public listing, with where its bytes are now (`replication`)."""
        manifests = self.parts.manifests_of(checkpoint)
        return checkpoint.summary(self.replication.state(checkpoint, manifests))

    def head_checkpoint(self, runtime_id: str) -> RuntimeCheckpoint | None:
        """The runtime's current checkpoint, or None before its first one."""
        self.guard.session(runtime_id)
        head = self.store.get_head(runtime_id)
        return self.parts.checkpoint(head) if head is not None else None

    def checkouts_of(self, runtime_id: str) -> list[SessionRecord]:
        """The runtimes checked out from this runtime's checkpoints, oldest first."""
        self.guard.session(runtime_id)
        return self.store.checkouts_of(runtime_id)

    def get_checkpoint(self, checkpoint_id: str) -> RuntimeCheckpoint:
        """The internal checkpoint record (manifest ids included)."""
        return self.parts.checkpoint(checkpoint_id)

    async def make_local(self, checkpoint: RuntimeCheckpoint) -> None:
        """Fetch what this server lacks of a checkpoint's blobs (variables, files, document)
        before a front end reads them: it may have been taken on another server."""
        await self.parts.make_local(checkpoint)

    def resolve_checkpoint(
        self,
        reference: str,
        runtime_id: str | None = None,
        *,
        visible: Callable[[str], bool] | None = None,
    ) -> RuntimeCheckpoint:
        """A checkpoint named by id, unique id prefix, or name within `runtime_id` (see
        `lookups.resolve_checkpoint`: a name shared by several runtimes is ambiguous;
        only the runtimes `visible` keeps count)."""
        return resolve_checkpoint(self.store, reference, runtime_id, visible=visible)

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
        return await self._lifecycle.checkout(
            checkpoint_id,
            conversation_id,
            sender_id,
            metadata,
            handle_state=handle_state,
            caller_runtime_id=caller_runtime_id,
        )

    async def checkout_many(
        self, checkpoint_id: str, count: int, **options: Any
    ) -> list[ChildOutcome]:
        """`count` children of a checkpoint at once (1 to 20), each on its own (`FanOut`)."""
        return await self._fan_out.checkout(checkpoint_id, count, **options)

    async def restore(
        self, runtime_id: str, checkpoint_id: str
    ) -> tuple[RuntimeCheckpoint, list[UnrestorableValue]]:
        """Restore a checkpoint's context into a live runtime in place (server path).

        The workspace files come back (a local workspace; files written since the head are
        kept in a `before-restore` checkpoint), then the namespace is replaced, and the
        checkpoint becomes the head (`in_place_restore`). The magic restores its own
        kernel through `ditto_jupyter.kernel` and then calls `record_restore`.
        """
        return await self._restore.restore(runtime_id, checkpoint_id)

    async def undo(self, runtime_id: str) -> RuntimeUndoResult:
        """Back to just before the last cell `%autocheckpoint` recorded: the head's parent
        becomes the head, with its variables and workspace files (see `undo`). Conflict
        when there is nothing to undo; UnsupportedBackend when the files cannot come back
        in place (E2B)."""
        return await self._undo.undo(runtime_id)

    def undo_plan(self, runtime_id: str) -> tuple[RuntimeCheckpoint, RuntimeCheckpoint]:
        """(the head undo would undo, the checkpoint it would go back to), or Conflict:
        for a kernel that restores its own variables first (`%undo`)."""
        self.guard.session(runtime_id)
        return self._undo.plan(runtime_id)

    async def record_undo(
        self, runtime_id: str, checkpoint_id: str, undone_checkpoint_id: str
    ) -> RuntimeUndoResult:
        """A kernel restored `checkpoint_id`'s variables itself (`%undo`): bring the files
        back and make it the head (Conflict unless the head is still `undone_checkpoint_id`
        and `checkpoint_id` its parent)."""
        return await self._undo.record_undo(runtime_id, checkpoint_id, undone_checkpoint_id)

    async def record_restore(self, runtime_id: str, checkpoint_id: str) -> None:
        """A kernel restored a checkpoint's variables itself (`%restore`): bring the files
        back (as `restore` does) and make it the head.

        Its kernel is busy only with the magic asking; another control operation on the
        runtime in flight is refused with SessionBusy, as for restore.
        """
        await self._restore.record_restore(runtime_id, checkpoint_id)

    # ---- pause, resume, close, lost -------------------------------------------------

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
        return await self._lifecycle.pause(runtime_id, name, metadata, precaptured=precaptured)

    async def resume(
        self,
        runtime_id: str,
        metadata: dict[str, Any] | None = None,
        *,
        handle_state: dict[str, Any] | None = None,
    ) -> RuntimeResumeResult:
        """Bring a paused runtime back from its head checkpoint, under the same id."""
        return await self._lifecycle.resume(runtime_id, metadata, handle_state=handle_state)

    async def close(self, runtime_id: str, *, discard: bool = False) -> RuntimeCloseResult:
        """Stop a runtime for good: free its context and backend; checkpoints stay.

        A live runtime first gets a final checkpoint (its variables and files, a new
        snapshot of a local workspace), named `close`, which becomes its head: nothing done
        since its last checkpoint is lost. When that checkpoint fails (a full disk, a dead
        or busy kernel), close is refused with that failure's code and nothing is deleted.
        `discard=True` closes without a final checkpoint.
        """
        return await self._lifecycle.close(runtime_id, discard=discard)

    async def mark_lost(
        self, runtime_id: str, *, handle: dict[str, Any] | None = None
    ) -> RuntimeRecord:
        """Record that a live runtime's context ended outside the control plane.

        A kernel that died, or a server restart, loses the variables set since the head
        checkpoint, never the workspace's files: the backend is snapshotted before it is
        released, into a checkpoint named `lost` (the head's variables, the files as they
        are now) that becomes the head. The runtime is then paused at its head (resume
        brings it back), or closed when it has none (no checkpoint, an empty workspace).
        A workspace that is gone holds nothing to keep; one that cannot be snapshotted is
        left where it is, never deleted. Paused or closed runtimes are left as they are, and
        so is one whose context is no longer `handle` (it was resumed meanwhile).
        """
        return await self._lifecycle.mark_lost(runtime_id, handle=handle)

    async def mark_restarted(
        self, runtime_id: str, *, handle: dict[str, Any]
    ) -> RuntimeCheckpoint | None:
        """A live runtime's context `handle` was restarted outside the control plane: its
        files kept with the head's variables in a `lost` head, the runtime live on the new
        context; the checkpoint to offer back, or None (nothing to offer, another context)."""
        return await self._lifecycle.mark_restarted(runtime_id, handle=handle)

    async def fence(self, runtime_id: str, handle: dict[str, Any]) -> RuntimeCheckpoint | None:
        """Stop the context `handle` of a runtime whose lease this service lost, keeping
        what it holds in a `lost` checkpoint if it can (`fencing`)."""
        return await Fencing(self.parts).fence(runtime_id, handle)

    # ---- housekeeping ---------------------------------------------------------------

    async def delete_snapshot(self, checkpoint_id: str) -> RuntimeCheckpointSnapshotDeleteResult:
        """Delete the provider snapshot a checkpoint records; idempotent; the record stays.

        Clean re-checkpoints share one snapshot, so every checkpoint that records the same
        snapshot loses its id too, and live backends whose last ref it was become dirty
        (the manager makes their next checkpoint take a new snapshot, never reuse it).
        """
        return await self._housekeeping.delete_snapshot(checkpoint_id)

    async def prune_automatic(self, runtime_id: str, keep: int) -> AutoCheckpointPruneResult:
        """Thin a runtime's automatic checkpoints beyond the newest `keep` (see
        `autocheckpoint_pruning`): rows stay, their variables and workspace snapshots go.

        Checkpoints taken on request, heads and checkout sources are never thinned. A
        provider snapshot no remaining checkpoint records is deleted; blob gc frees the
        chunks. One indexed store query finds what to thin.
        """
        return await self._housekeeping.prune_automatic(runtime_id, keep)

    def leftovers(self) -> list[Leftover]:
        """Resources cleanups could not free (kernels, sandboxes, snapshots, workspaces)."""
        return self.store.list_leftovers()

    def live_manifests(self) -> set[str]:
        """Blob-store manifests some checkpoint still references (reads every checkpoint:
        for checks and tests; a damaged row counts every manifest id its text holds)."""
        return self._housekeeping.live_manifests()

    def gc(self, *, grace_seconds: float = GRACE_SECONDS) -> GcReport:
        """Free blob-store chunks and manifests no checkpoint references any more; its cost
        follows the garbage. Runs on the calling thread (close and delete-snapshot ask
        `collector` to run it on a worker thread)."""
        return self._housekeeping.gc(grace_seconds=grace_seconds)

    def bucket_gc(self, *, grace_seconds: float = GRACE_SECONDS) -> BucketGcReport | None:
        """Delete from the shared bucket what no checkpoint references (None: no bucket).
        One server at a time: another one's collection answers `collected=False`."""
        return self._housekeeping.bucket_gc(grace_seconds=grace_seconds)

    def close_store(self, *, upload_timeout: float = 60.0) -> None:
        """Upload what waits for the object store (for up to `upload_timeout` seconds; the
        rest goes after the next start), stop background collection, let this service's
        leases run out (another may take its runtimes over) and close the store (the
        service is unusable after)."""
        self.replication.close(upload_timeout)
        self.collector.stop(timeout=60)
        self.ownership.close()
        self.store.close()
