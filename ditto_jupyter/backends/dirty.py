"""Dirty tracking: reuse the last backend snapshot while nothing could have changed.

The rules, exactly: the backend is marked dirty after a SUCCESSFUL `write_bytes`,
`create_dir_all`, `temp_path`, or `exec` (once exec returns a result, whatever its exit
code); `stat`, `read_bytes`, `search` and `export` never mark it, nor does a call that
raised. A clean backend with a last ref returns that ref from `checkpoint()` without
touching the inner backend; otherwise a new snapshot is taken, remembered, and the flag
cleared. It is an operation-level invalidation, not a diff: conservative by design.

The flag is a generation counter so that a write finishing while a snapshot is being
taken keeps the backend dirty (the snapshot may have missed it).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from ditto_jupyter.backends.base import (
    Backend,
    BackendLocator,
    ExecResult,
    FileStat,
    FileTree,
    InPlaceRestorer,
    LiveTreeReader,
    SearchMatch,
)
from ditto_jupyter.core.errors import UnsupportedBackend
from ditto_jupyter.core.models import BackendCheckpointRef


class DirtyTrackingBackend:
    """A `Backend` that delegates to `inner` and knows whether it changed since its last ref."""

    def __init__(self, inner: Backend, *, last_ref: BackendCheckpointRef | None = None) -> None:
        self._inner = inner
        self._last_ref = last_ref
        self._generation = 0
        # Generation the last ref describes; None = no trustworthy snapshot (dirty).
        self._clean_generation: int | None = 0 if last_ref is not None else None
        self._checkpoint_lock = asyncio.Lock()

    # ---- state --------------------------------------------------------------------------

    @property
    def inner(self) -> Backend:
        """The wrapped backend."""
        return self._inner

    @property
    def dirty(self) -> bool:
        """True when the backend may differ from `last_ref` (or there is no ref)."""
        return self._last_ref is None or self._clean_generation != self._generation

    @property
    def last_ref(self) -> BackendCheckpointRef | None:
        """The ref of the latest snapshot taken (or given), if any."""
        return self._last_ref

    def mark_dirty(self) -> None:
        """Record a change made outside these methods (a notebook cell ran: counts as exec)."""
        self._generation += 1

    def forget_snapshot(self, provider_snapshot_id: str) -> bool:
        """Drop `last_ref` if it names a snapshot that was deleted; True when it did."""
        if (
            self._last_ref is not None
            and self._last_ref.provider_snapshot_id == provider_snapshot_id
        ):
            self._last_ref = None
            self._clean_generation = None
            return True
        return False

    # ---- identity -----------------------------------------------------------------------

    @property
    def backend_id(self) -> str:
        """The inner backend's id."""
        return self._inner.backend_id

    @property
    def kind(self) -> str:
        """The inner backend's kind."""
        return self._inner.kind

    @property
    def local_path(self) -> Path | None:
        """The inner backend's directory on this machine, if it has one."""
        return self._inner.local_path

    def locator(self) -> BackendLocator:
        """The inner backend's locator."""
        return self._inner.locator()

    # ---- read-only operations: never dirty ----------------------------------------------

    async def stat(self, path: str) -> FileStat:
        """Delegate; read-only."""
        return await self._inner.stat(path)

    async def read_bytes(self, path: str) -> bytes:
        """Delegate; read-only."""
        return await self._inner.read_bytes(path)

    async def search(
        self, pattern: str, path: str = ".", *, max_results: int = 1000
    ) -> list[SearchMatch]:
        """Delegate; read-only."""
        return await self._inner.search(pattern, path, max_results=max_results)

    async def export(self, path: str = ".") -> bytes:
        """Delegate; read-only."""
        return await self._inner.export(path)

    # ---- mutating operations: dirty once they succeed -----------------------------------

    async def write_bytes(self, path: str, data: bytes) -> None:
        """Delegate, then mark dirty."""
        await self._inner.write_bytes(path, data)
        self.mark_dirty()

    async def create_dir_all(self, path: str) -> None:
        """Delegate, then mark dirty."""
        await self._inner.create_dir_all(path)
        self.mark_dirty()

    async def temp_path(self, suffix: str = "") -> str:
        """Delegate, then mark dirty."""
        result = await self._inner.temp_path(suffix)
        self.mark_dirty()
        return result

    async def exec(
        self,
        command: str,
        *,
        cwd: str | None = None,
        timeout: float | None = None,
        env: dict[str, str] | None = None,
    ) -> ExecResult:
        """Delegate, then mark dirty whatever the exit code (a result came back)."""
        result = await self._inner.exec(command, cwd=cwd, timeout=timeout, env=env)
        self.mark_dirty()
        return result

    # ---- snapshots ------------------------------------------------------------------------

    async def checkpoint(self) -> BackendCheckpointRef:
        """Reuse `last_ref` when clean; otherwise snapshot the inner backend and clear the flag.

        Concurrent calls are serialised, so the second one reuses the first one's ref.
        """
        async with self._checkpoint_lock:
            if not self.dirty and self._last_ref is not None:
                return self._last_ref
            started_at = self._generation
            ref = await self._inner.checkpoint()
            self._last_ref = ref
            self._clean_generation = started_at
            return ref

    async def live_tree(self) -> FileTree | None:
        """The live files as a tree, when the backend can read them so (None: it cannot)."""
        inner = self._inner
        return await inner.live_tree() if isinstance(inner, LiveTreeReader) else None

    async def restore_snapshot(self, ref: BackendCheckpointRef) -> None:
        """Bring the snapshot `ref` back into the backend itself; then clean, with `ref` as
        its last snapshot. UnsupportedBackend when the backend cannot; a failure part way
        leaves it dirty (its files are neither `ref`'s nor what they were)."""
        inner = self._inner
        if not isinstance(inner, InPlaceRestorer):
            raise UnsupportedBackend(
                f"a {self.kind} backend cannot bring a snapshot's files back in place; "
                "check the checkpoint out into a new runtime instead"
            )
        async with self._checkpoint_lock:
            self._generation += 1
            try:
                await inner.restore_snapshot(ref)
            except BaseException:
                self._generation += 1
                raise
            self._last_ref = ref
            self._clean_generation = self._generation

    async def release(self) -> bool:
        """Delegate: free the live instance."""
        return await self._inner.release()
