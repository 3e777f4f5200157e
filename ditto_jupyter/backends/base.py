"""The backend protocol: the substrate for files and exec.

A backend is a local workspace directory or an E2B sandbox. Paths are relative to the
backend's root (for local workspaces, not the kernel's cwd). A `BackendProvider` creates
backends, checks a snapshot out into a new backend, deletes snapshots and re-attaches to
a live backend after a process restart. Backend ids never leave the control plane.

Two capabilities only some backends have (the local workspace has both, E2B neither):
reading a snapshot's or the live backend's files as a `FileTree` (`SnapshotReader`,
`LiveTreeReader`: what comparing two points in time needs), and bringing a snapshot's
files back into the live backend itself (`InPlaceRestorer`: what undo needs).
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


@dataclass(frozen=True)
class TreeEntry:
    """One entry of a backend's file tree: its kind, size, mode, and what it holds (a file's
    chunk names, which are hashes of its bytes; a symlink's target; nothing for a folder)."""

    path: str
    kind: FileKind
    size: int | None
    mode: int
    content: tuple[str, ...]


class FileTree(Protocol):
    """A backend's files at one point in time (a snapshot, or the live files)."""

    @property
    def entries(self) -> dict[str, TreeEntry]:
        """Every entry by path (relative, POSIX)."""
        ...

    def read(self, path: str, limit: int) -> bytes | None:
        """A file's bytes when it holds at most `limit` of them (None otherwise)."""
        ...


@runtime_checkable
class SnapshotReader(Protocol):
    """A provider whose snapshots can be read file by file."""

    def snapshot_tree(self, ref: BackendCheckpointRef) -> FileTree:
        """The files a snapshot holds (BackendError when it cannot be read)."""
        ...


@runtime_checkable
class LiveTreeReader(Protocol):
    """A backend whose live files can be read file by file, without a snapshot."""

    async def live_tree(self) -> FileTree:
        """The files as they are now (nothing is stored)."""
        ...


@runtime_checkable
class InPlaceRestorer(Protocol):
    """A backend that can bring a snapshot's files back into itself."""

    async def restore_snapshot(self, ref: BackendCheckpointRef) -> None:
        """Make the files exactly the snapshot's: files added since are removed, changed
        ones written back (each replaced in one rename), unchanged ones left alone. A
        failure part way leaves some files changed: a caller takes a snapshot first and
        restores that one to undo the attempt."""
        ...


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
