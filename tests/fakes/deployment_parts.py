"""FAKE parts of a deployment: the classes a deployment would name in the extension's `Type`
traits (`store_class`, `backend_provider_class`, `context_driver_class`), each built on one
of ours and recording that the server used it.

- `FakeDeploymentStore`: the memory store, opened the way the server opens a store class.
- `FakeSandboxProvider`: a backend kind of its own (`fake-sandbox`), its sandboxes local
  workspaces under the data directory, every ref and locator relabelled with its kind.
- `FakeDeploymentDriver`: the kernel context driver, counting what the server asked of it.

The product never uses them: tests/server/test_swappable_parts.py does, and
tests/backends/test_backend_contract.py proves the fake provider against the contract a
deployment's own would be proven against.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ditto_jupyter.backends.base import Backend, BackendLocator
from ditto_jupyter.backends.local import LocalProvider
from ditto_jupyter.control.store import MemoryCheckpointStore
from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.core.errors import UnsupportedBackend
from ditto_jupyter.core.models import BackendCheckpointRef, ContextCapture, SessionRecord
from ditto_jupyter.hosts.kernel_context_driver import KernelContextDriver

FAKE_KIND = "fake-sandbox"
LOCAL = "local"


class FakeDeploymentStore(MemoryCheckpointStore):
    """The memory store, opened as `store_class(url=..., data_dir=...)`."""

    #: The (url, data_dir) of every store opened, in order.
    opened: list[tuple[str | None, Path]] = []

    def __init__(self, *, url: str | None, data_dir: Path) -> None:
        super().__init__()
        FakeDeploymentStore.opened.append((url, data_dir))


def _as(kind: str, ref: BackendCheckpointRef) -> BackendCheckpointRef:
    return ref.model_copy(update={"backend_kind": kind})


class FakeSandbox:
    """A local workspace that says it is a `fake-sandbox`."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner

    @property
    def kind(self) -> str:
        return FAKE_KIND

    def locator(self) -> BackendLocator:
        located = self.inner.locator()
        return BackendLocator(FAKE_KIND, located.backend_id, dict(located.details))

    async def checkpoint(self) -> BackendCheckpointRef:
        return _as(FAKE_KIND, await self.inner.checkpoint())

    def __getattr__(self, name: str) -> Any:  # files, exec, release...: the workspace's
        return getattr(self.inner, name)


class FakeSandboxProvider:
    """Backends of kind `fake-sandbox`, made as `backend_provider_class(data_dir=, blobs=)`."""

    #: The runtime ids it made a sandbox for, in order.
    created: list[str] = []

    def __init__(self, *, data_dir: Path, blobs: BlobStore) -> None:
        self.inner = LocalProvider(Path(data_dir) / "fake-sandboxes", blobs)

    @property
    def kind(self) -> str:
        return FAKE_KIND

    def _local(self, ref: BackendCheckpointRef) -> BackendCheckpointRef:
        if ref.backend_kind != FAKE_KIND:
            raise UnsupportedBackend(f"a {ref.backend_kind!r} snapshot is not a {FAKE_KIND}'s")
        return _as(LOCAL, ref)

    async def create(self, runtime_id: str) -> FakeSandbox:
        FakeSandboxProvider.created.append(runtime_id)
        return FakeSandbox(await self.inner.create(runtime_id))

    async def checkout(self, ref: BackendCheckpointRef, runtime_id: str) -> FakeSandbox:
        return FakeSandbox(await self.inner.checkout(self._local(ref), runtime_id))

    async def attach(self, locator: BackendLocator) -> FakeSandbox:
        if locator.kind != FAKE_KIND:
            raise UnsupportedBackend(f"a {locator.kind!r} locator is not a {FAKE_KIND}'s")
        local = BackendLocator(LOCAL, locator.backend_id, dict(locator.details))
        return FakeSandbox(await self.inner.attach(local))

    async def delete_snapshot(self, ref: BackendCheckpointRef) -> bool:
        return await self.inner.delete_snapshot(self._local(ref))

    def referenced_manifests(self, ref: BackendCheckpointRef) -> list[str]:
        return self.inner.referenced_manifests(self._local(ref))


class FakeDeploymentDriver(KernelContextDriver):
    """The kernel context driver, counting the captures the server asked of it."""

    #: The runtime ids it captured, in order.
    captured: list[str] = []

    async def capture(self, session: SessionRecord) -> ContextCapture:
        FakeDeploymentDriver.captured.append(session.session_id)
        return await super().capture(session)


class NotAStore:
    """A class a deployment named by mistake: it opens, but it is no store."""

    def __init__(self, **_: Any) -> None:
        pass

    def close(self) -> None:
        pass
