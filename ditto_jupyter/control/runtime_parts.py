"""What every part of RuntimeService works with, and the few steps they all take.

`RuntimeParts` holds the store, the blob store, the backend manager, the context driver,
the guard, the leftover log and the replication policy of one service. Checkpointing,
lifecycle and housekeeping each get the same instance, so they share one set of operation
slots and holds.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field

from ditto_jupyter.backends.base import BackendLocator
from ditto_jupyter.backends.dirty import DirtyTrackingBackend
from ditto_jupyter.backends.manager import BackendManager, ReleaseResult
from ditto_jupyter.control.context_driver import ContextDriver
from ditto_jupyter.control.leftovers import (
    LeftoverLog,
    backend_resource,
    kernel_resource,
    snapshot_resource,
)
from ditto_jupyter.control.off_loop import off_loop
from ditto_jupyter.control.operation_guard import OperationGuard
from ditto_jupyter.control.provider_work import ProviderWork, provider_work
from ditto_jupyter.control.replication import Replication
from ditto_jupyter.control.store import CheckpointStore
from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.core.errors import CheckpointNotFound
from ditto_jupyter.core.models import (
    BackendBinding,
    BackendCheckpointRef,
    RuntimeCheckpoint,
    SessionRecord,
)


@dataclass
class RuntimeParts:
    """The store, blobs, backends and context driver of one service, with its guard."""

    store: CheckpointStore
    blobs: BlobStore
    backends: BackendManager
    context: ContextDriver
    guard: OperationGuard
    leftovers: LeftoverLog
    #: Ask for a garbage collection on the background thread (returns at once).
    request_collection: Callable[[], None]
    #: When checkpoints reach the object store (nothing happens without one).
    replication: Replication = field(default_factory=Replication)

    def provider_work(self, runtime_id: str) -> AbstractAsyncContextManager[ProviderWork]:
        """Provider work, then the store writes, or the work undone (see `provider_work`)."""
        return provider_work(self.store, self.leftovers, runtime_id)

    def checkpoint(self, checkpoint_id: str) -> RuntimeCheckpoint:
        """The checkpoint with that id; CheckpointNotFound when there is none."""
        checkpoint = self.store.get_checkpoint(checkpoint_id)
        if checkpoint is None:
            raise CheckpointNotFound(f"no checkpoint with id {checkpoint_id!r}")
        return checkpoint

    async def backend(self, session: SessionRecord) -> DirtyTrackingBackend | None:
        """The live backend of a runtime, re-attached from its binding after a restart, or
        when the binding names another backend now (another server sharing the store
        paused and resumed the runtime since this one attached it)."""
        backend = self.backends.get(session.session_id)
        binding = await off_loop(self.store.get_binding, session.session_id)
        if backend is not None and (binding is None or binding.backend_id == backend.backend_id):
            return backend
        if backend is not None:
            self.backends.forget(session.session_id)
        if binding is None:
            return None
        locator = BackendLocator(binding.kind, binding.backend_id, dict(binding.details))
        return await self.backends.attach(session.session_id, locator)

    @staticmethod
    def binding(runtime_id: str, backend: DirtyTrackingBackend) -> BackendBinding:
        """The store's record of which backend carries `runtime_id`."""
        locator = backend.locator()
        return BackendBinding(
            runtime_id=runtime_id,
            backend_id=locator.backend_id,
            kind=locator.kind,
            details=locator.details,
        )

    def manifests_of(self, checkpoint: RuntimeCheckpoint) -> list[str]:
        """The blob-store manifests a checkpoint keeps alive: its variables, its files, its
        notebook document."""
        manifests = [checkpoint.context_manifest_id] if checkpoint.context_manifest_id else []
        if checkpoint.document_manifest_id:
            manifests.append(checkpoint.document_manifest_id)
        ref = checkpoint.backend_ref
        if ref is not None and ref.provider_snapshot_id:
            manifests += self.backends.referenced_manifests(ref)
        return manifests

    async def make_local(self, checkpoint: RuntimeCheckpoint, *, variables: bool = True) -> None:
        """Fetch what this server lacks of a checkpoint's blobs before reading them; with
        `variables=False`, all but its variables (fetched while the kernel restores them:
        `Replication.fetching`)."""
        manifests = self.manifests_of(checkpoint)
        if not variables:
            manifests = [m for m in manifests if m != checkpoint.context_manifest_id]
        await self.replication.make_local(
            manifests, replicated=checkpoint.replication == "replicated"
        )

    # ---- cleanups that may fail (logged, and what they leave recorded) ------------------

    async def stop_context(self, session: SessionRecord) -> bool:
        """Stop a runtime's context; False when it would not stop (recorded)."""
        return await self.leftovers.attempt(
            f"stopping the kernel of runtime {session.session_id}",
            lambda: self.context.stop(session),
            kernel_resource(session),
        )

    async def release_backend(self, runtime_id: str) -> ReleaseResult | None:
        """Release a runtime's backend; None when it could not be released (recorded)."""
        backend = self.backends.get(runtime_id)
        left = (
            backend_resource(runtime_id, backend.kind, backend.backend_id)
            if backend is not None
            else None
        )
        released: list[ReleaseResult] = []

        async def release() -> None:
            released.append(await self.backends.release(runtime_id))

        await self.leftovers.attempt(
            f"releasing the backend of runtime {runtime_id}", release, left
        )
        return released[0] if released else None

    async def discard_new_ref(self, runtime_id: str, ref: BackendCheckpointRef | None) -> None:
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
        if await off_loop(self.store.checkpoints_with_snapshot, ref.provider_snapshot_id):
            return
        await self.delete_snapshot(ref, runtime_id)

    async def delete_snapshot(self, ref: BackendCheckpointRef, runtime_id: str) -> bool:
        """Delete a snapshot no record names; False when it could not be (recorded)."""
        return await self.leftovers.attempt(
            f"deleting snapshot {ref.provider_snapshot_id} of runtime {runtime_id}",
            lambda: self.backends.delete_snapshot(ref),
            snapshot_resource(ref, runtime_id),
        )
