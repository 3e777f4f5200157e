"""BackendManager: live backends, the session index, and snapshot routing by kind.

The session index maps a runtime id to the id of the backend that carries it. Several
runtimes may share one live backend (`bind`); the instance is released, and an E2B sandbox
deleted, only when the last runtime bound to it lets go. Backend ids stay inside the control
plane: callers address backends by runtime.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

from ditto_jupyter.backends.base import BackendLocator, BackendProvider, FileTree, SnapshotReader
from ditto_jupyter.backends.dirty import DirtyTrackingBackend
from ditto_jupyter.core.errors import InvalidRequest, UnsupportedBackend
from ditto_jupyter.core.models import BackendCheckpointRef


@dataclass(frozen=True)
class ReleaseResult:
    """What releasing a runtime's backend did."""

    backend_released: bool
    provider_sandbox_deleted: bool


class BackendManager:
    """Owns the live backends of this process and which runtime each one carries."""

    def __init__(self, providers: Mapping[str, BackendProvider]) -> None:
        for kind, provider in providers.items():
            if provider.kind != kind:
                raise InvalidRequest(
                    f"provider registered as {kind!r} says it is {provider.kind!r}"
                )
        self._providers = dict(providers)
        self._backends: dict[str, DirtyTrackingBackend] = {}
        self._index: dict[str, str] = {}
        self._lock = asyncio.Lock()

    # ---- providers ------------------------------------------------------------------------

    def provider(self, kind: str) -> BackendProvider:
        """The provider of backends of `kind`; `UnsupportedBackend` when there is none."""
        try:
            return self._providers[kind]
        except KeyError:
            raise UnsupportedBackend(
                f"no backend provider of kind {kind!r} is configured"
            ) from None

    # ---- session index --------------------------------------------------------------------

    def get(self, runtime_id: str) -> DirtyTrackingBackend | None:
        """The live backend bound to `runtime_id`, if any."""
        backend_id = self._index.get(runtime_id)
        return self._backends.get(backend_id) if backend_id is not None else None

    def runtimes_bound_to(self, backend_id: str) -> set[str]:
        """Every runtime currently bound to `backend_id`."""
        return {runtime for runtime, bound in self._index.items() if bound == backend_id}

    def _require_unbound(self, runtime_id: str) -> None:
        if runtime_id in self._index:
            raise InvalidRequest(
                f"runtime {runtime_id!r} is already bound to a backend; release it first"
            )

    def bind(self, runtime_id: str, backend_id: str) -> None:
        """Bind `runtime_id` to a live backend (several runtimes may share one)."""
        if backend_id not in self._backends:
            raise InvalidRequest(
                f"no live backend {backend_id!r} to bind runtime {runtime_id!r} to"
            )
        current = self._index.get(runtime_id)
        if current == backend_id:
            return
        self._require_unbound(runtime_id)
        self._index[runtime_id] = backend_id

    def _adopt(self, runtime_id: str, backend: DirtyTrackingBackend) -> None:
        self._backends[backend.backend_id] = backend
        self._index[runtime_id] = backend.backend_id

    # ---- life cycle -------------------------------------------------------------------------

    async def create(self, runtime_id: str, kind: str) -> DirtyTrackingBackend:
        """Create a fresh backend of `kind` and bind it to `runtime_id`."""
        provider = self.provider(kind)
        self._require_unbound(runtime_id)
        inner = await provider.create(runtime_id)
        return await self._bind_new(runtime_id, DirtyTrackingBackend(inner), created=True)

    async def attach(
        self,
        runtime_id: str,
        locator: BackendLocator,
        last_ref: BackendCheckpointRef | None = None,
    ) -> DirtyTrackingBackend:
        """Re-open a backend recorded before a restart and bind it to `runtime_id`.

        With `last_ref` the backend starts clean (a checkpoint reuses that ref); without, dirty.
        A backend already live in this process is shared, not opened twice.
        """
        live = self._backends.get(locator.backend_id)
        if live is not None:
            self.bind(runtime_id, locator.backend_id)
            return live
        provider = self.provider(locator.kind)
        self._require_unbound(runtime_id)
        inner = await provider.attach(locator)
        return await self._bind_new(
            runtime_id, DirtyTrackingBackend(inner, last_ref=last_ref), created=False
        )

    async def _bind_new(
        self, runtime_id: str, backend: DirtyTrackingBackend, *, created: bool
    ) -> DirtyTrackingBackend:
        """Bind a backend just opened; if the runtime got bound meanwhile, give it back.

        A backend this call `created` is released again; an attached one (an existing
        workspace or sandbox) is only dropped, never destroyed.
        """
        async with self._lock:
            if runtime_id not in self._index:
                existing = self._backends.get(backend.backend_id)
                if existing is not None:  # attached twice concurrently: share the first
                    self._index[runtime_id] = backend.backend_id
                    return existing
                self._adopt(runtime_id, backend)
                return backend
        if created and backend.backend_id not in self._backends:
            await backend.release()
        raise InvalidRequest(f"runtime {runtime_id!r} was bound to another backend meanwhile")

    async def checkpoint_backend(
        self, *, runtime_id: str | None = None, backend_id: str | None = None
    ) -> BackendCheckpointRef:
        """Snapshot a backend named by runtime id or backend id (clean + ref -> the same ref)."""
        if runtime_id is None and backend_id is None:
            raise InvalidRequest("checkpoint_backend needs a runtime_id or a backend_id")
        if runtime_id is not None:
            bound = self._index.get(runtime_id)
            if bound is None:
                raise InvalidRequest(f"runtime {runtime_id!r} has no backend bound")
            if backend_id is not None and backend_id != bound:
                raise InvalidRequest(
                    f"runtime {runtime_id!r} is not bound to backend {backend_id!r}"
                )
            backend_id = bound
        assert backend_id is not None
        backend = self._backends.get(backend_id)
        if backend is None:
            raise InvalidRequest(f"no live backend {backend_id!r}")
        return await backend.checkpoint()

    async def checkout_backend(
        self, ref: BackendCheckpointRef, runtime_id: str
    ) -> DirtyTrackingBackend:
        """A new backend materialised from `ref`, bound to `runtime_id`, clean with `ref`.

        `UnsupportedBackend` when no provider handles `ref.backend_kind` or the snapshot id
        has been cleared by delete-snapshot.
        """
        if ref.backend_kind not in self._providers:
            raise UnsupportedBackend(
                f"checkpoints of a {ref.backend_kind!r} backend cannot be checked out here"
            )
        if not ref.provider_snapshot_id:
            raise UnsupportedBackend("the checkpoint's backend snapshot has been deleted")
        self._require_unbound(runtime_id)
        inner = await self._providers[ref.backend_kind].checkout(ref, runtime_id)
        return await self._bind_new(
            runtime_id, DirtyTrackingBackend(inner, last_ref=ref), created=True
        )

    async def release(self, runtime_id: str) -> ReleaseResult:
        """Unbind `runtime_id`; release the backend only if no other runtime is bound to it.

        If the provider fails to release, the binding is kept and the error propagates.
        """
        backend_id = self._index.get(runtime_id)
        if backend_id is None:
            return ReleaseResult(backend_released=False, provider_sandbox_deleted=False)
        others = self.runtimes_bound_to(backend_id) - {runtime_id}
        backend = self._backends.get(backend_id)
        if others or backend is None:
            self._index.pop(runtime_id, None)
            return ReleaseResult(backend_released=False, provider_sandbox_deleted=False)
        deleted = await backend.release()
        if self._index.get(runtime_id) == backend_id:
            del self._index[runtime_id]
        if not self.runtimes_bound_to(backend_id):
            self._backends.pop(backend_id, None)
        return ReleaseResult(backend_released=True, provider_sandbox_deleted=deleted)

    def forget(self, runtime_id: str) -> None:
        """Unbind `runtime_id` without releasing its backend: its files stay where they are.

        For a backend that is gone, or one whose files are not safely in a snapshot.
        """
        backend_id = self._index.pop(runtime_id, None)
        if backend_id is not None and not self.runtimes_bound_to(backend_id):
            self._backends.pop(backend_id, None)

    async def delete_snapshot(self, ref: BackendCheckpointRef) -> bool:
        """Delete the provider snapshot `ref` records; False when it was already gone.

        Live backends whose last ref is that snapshot forget it, so their next checkpoint
        takes a new snapshot instead of returning a deleted one.
        """
        provider = self.provider(ref.backend_kind)
        if not ref.provider_snapshot_id:
            return False
        deleted = await provider.delete_snapshot(ref)
        for backend in self._backends.values():
            backend.forget_snapshot(ref.provider_snapshot_id)
        return deleted

    def snapshot_tree(self, ref: BackendCheckpointRef) -> FileTree | None:
        """The files of a snapshot, when its provider can read them so and it still exists
        (None: an E2B snapshot, a deleted one)."""
        provider = self._providers.get(ref.backend_kind)
        if not isinstance(provider, SnapshotReader) or not ref.provider_snapshot_id:
            return None
        return provider.snapshot_tree(ref)

    def referenced_manifests(self, ref: BackendCheckpointRef) -> list[str]:
        """Blob-store manifests a backend snapshot keeps alive (for blob gc)."""
        provider = self._providers.get(ref.backend_kind)
        return provider.referenced_manifests(ref) if provider is not None else []
