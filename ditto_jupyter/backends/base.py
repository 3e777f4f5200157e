"""The backend protocol: the substrate for files and exec.

A backend is a local workspace directory or an E2B sandbox. Paths are relative to the
backend's root (for local workspaces, not the kernel's cwd). A `BackendProvider` creates
backends, checks a snapshot out into a new backend, deletes snapshots and re-attaches to
a live backend after a process restart. Backend ids never leave the control plane.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from ditto_jupyter.core.errors import BackendError
from ditto_jupyter.core.models import BackendCheckpointRef

FileKind = Literal["file", "dir", "symlink", "other"]


@dataclass(frozen=True)
class FileStat:
    """What `stat` reports about one path."""

    path: str
    kind: FileKind
    size: int
    mtime_ns: int


@dataclass(frozen=True)
class ExecResult:
    """The outcome of a command; a non-zero exit code is still a result, not an error."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    truncated: bool = False


@dataclass(frozen=True)
class SearchMatch:
    """One line matching a `search` pattern."""

    path: str
    line_number: int
    line: str


@dataclass(frozen=True)
class BackendLocator:
    """How to find a live backend again after a restart (stored with the binding)."""

    kind: str
    backend_id: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LeftBehind:
    """A provider resource a failed call could not free: its kind, its id, and why."""

    kind: str  # "e2b-sandbox", "workspace", ...
    resource_id: str
    reason: str


class ResourceLeftBehind(BackendError):
    """A provider call failed, and so did its own cleanup: `left_behind` says what stayed.

    The control plane records it (`ditto doctor` lists it), since nothing else knows its id.
    """

    def __init__(self, message: str, left_behind: LeftBehind) -> None:
        super().__init__(message)
        self.left_behind = left_behind


@runtime_checkable
class Backend(Protocol):
    """Files and exec on one live backend instance."""

    @property
    def backend_id(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def local_path(self) -> Path | None:
        """The workspace directory on this machine (None for remote sandboxes)."""
        ...

    def locator(self) -> BackendLocator: ...

    async def stat(self, path: str) -> FileStat: ...

    async def read_bytes(self, path: str) -> bytes: ...

    async def write_bytes(self, path: str, data: bytes) -> None: ...

    async def create_dir_all(self, path: str) -> None: ...

    async def temp_path(self, suffix: str = "") -> str: ...

    async def exec(
        self,
        command: str,
        *,
        cwd: str | None = None,
        timeout: float | None = None,
        env: dict[str, str] | None = None,
    ) -> ExecResult: ...

    async def search(
        self, pattern: str, path: str = ".", *, max_results: int = 1000
    ) -> list[SearchMatch]: ...

    async def export(self, path: str = ".") -> bytes:
        """A tar archive of `path` (uncompressed)."""
        ...

    async def checkpoint(self) -> BackendCheckpointRef:
        """Take a new snapshot of the backend (the dirty-tracking wrapper decides reuse)."""
        ...

    async def release(self) -> bool:
        """Free the live instance (kill the sandbox, drop the workspace handle).

        Returns True when a provider resource (an E2B sandbox) was deleted.
        """
        ...


@runtime_checkable
class BackendProvider(Protocol):
    """Creates backends of one kind and manages that kind's snapshots."""

    @property
    def kind(self) -> str: ...

    async def create(self, runtime_id: str) -> Backend: ...

    async def checkout(self, ref: BackendCheckpointRef, runtime_id: str) -> Backend:
        """A new, independent backend materialised from a snapshot."""
        ...

    async def attach(self, locator: BackendLocator) -> Backend:
        """Re-open a live backend recorded before a restart."""
        ...

    async def delete_snapshot(self, ref: BackendCheckpointRef) -> bool:
        """Delete the snapshot `ref` records; False when it was already gone."""
        ...

    def referenced_manifests(self, ref: BackendCheckpointRef) -> list[str]:
        """Blob-store manifest ids the snapshot keeps alive (empty for provider snapshots)."""
        ...
