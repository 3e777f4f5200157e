"""Session context capture: the pluggable part of a checkpoint that holds live state.

For a notebook runtime the session context is the kernel's namespace (the kernel
implementation lives in `ditto_jupyter.kernel`); the control plane only sees this
protocol. `InMemoryContextCapture` keeps a JSON namespace per runtime: it serves the
control plane's own tests and runtimes that have no kernel.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import orjson

from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.core.errors import BackendError
from ditto_jupyter.core.models import ContextCapture, SessionRecord, UnrestorableValue


@runtime_checkable
class SessionContextCapture(Protocol):
    """Start, stop, capture and restore the live context of a runtime."""

    async def start(self, session: SessionRecord, cwd: Path | None) -> dict[str, Any]:
        """Start a fresh context (a kernel) for `session`; return its new handle state."""
        ...

    async def stop(self, session: SessionRecord) -> None:
        """Stop the context and free what it holds (shut the kernel down)."""
        ...

    async def is_busy(self, session: SessionRecord) -> bool:
        """Whether the context is running user code right now."""
        ...

    async def capture(self, session: SessionRecord) -> ContextCapture:
        """Capture the live context into the blob store as one signed manifest."""
        ...

    async def restore(
        self, session: SessionRecord, manifest_id: str | None
    ) -> list[UnrestorableValue]:
        """Replace the live context with a captured one (None: an empty context).

        Returns the values the checkpoint could not keep, to show the user again.
        """
        ...


class InMemoryContextCapture:
    """A JSON namespace per runtime, captured to the blob store (for tests and kernel-less use)."""

    def __init__(self, blobs: BlobStore) -> None:
        self.blobs = blobs
        self.namespaces: dict[str, dict[str, Any]] = {}
        self.busy: set[str] = set()
        self.execution_counts: dict[str, int] = {}

    def namespace(self, runtime_id: str) -> dict[str, Any]:
        """The live namespace of a started runtime."""
        try:
            return self.namespaces[runtime_id]
        except KeyError:
            raise BackendError(f"runtime {runtime_id} has no live context") from None

    def execute(self, runtime_id: str, **assignments: Any) -> None:
        """Stand-in for running a cell: assign variables and bump the execution count."""
        self.namespace(runtime_id).update(assignments)
        self.execution_counts[runtime_id] = self.execution_counts.get(runtime_id, 0) + 1

    async def start(self, session: SessionRecord, cwd: Path | None) -> dict[str, Any]:
        self.namespaces[session.session_id] = {}
        self.execution_counts[session.session_id] = 0
        return {"context": "memory"}

    async def stop(self, session: SessionRecord) -> None:
        self.namespaces.pop(session.session_id, None)
        self.busy.discard(session.session_id)

    async def is_busy(self, session: SessionRecord) -> bool:
        return session.session_id in self.busy

    async def capture(self, session: SessionRecord) -> ContextCapture:
        data = orjson.dumps(self.namespace(session.session_id), option=orjson.OPT_SORT_KEYS)
        stored = self.blobs.put_bytes(data)
        manifest_id, manifest_bytes = self.blobs.put_manifest(
            {"kind": "memory-context", "chunks": stored.chunks, "size": stored.size}
        )
        return ContextCapture(
            manifest_id=manifest_id,
            bytes_written=stored.bytes_written + manifest_bytes,
            execution_count=self.execution_counts.get(session.session_id),
        )

    async def restore(
        self, session: SessionRecord, manifest_id: str | None
    ) -> list[UnrestorableValue]:
        namespace: dict[str, Any] = {}
        if manifest_id is not None:
            body = self.blobs.get_manifest(manifest_id)
            namespace = orjson.loads(self.blobs.get_bytes(body["chunks"]))
        self.namespaces[session.session_id] = namespace
        return []
