"""A TEST DOUBLE of the context driver: a JSON namespace per runtime, no kernel.

The control plane's tests (`test_service*.py`) run RuntimeService on it, so they need no
kernel: `execute` stands in for running a cell, `busy` for a kernel running one,
dropping a runtime's namespace for a kernel that died, and `refuse_stop` for a kernel that
would not stop (its `stop` raises, and the namespace stays). Each start is a new process
(`kernel_process`); `during_capture` is a cell that arrives while a capture runs (it runs
right after it, as a queued cell would), and a sealed context refuses cells. Captures go to
the real blob store as signed manifests, like the kernel capture's. The product never uses
it: the server and the magics capture real kernels (`ditto_jupyter.hosts.kernel_context_driver`).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.core.errors import BackendError
from ditto_jupyter.core.models import ContextCapture, SessionRecord, UnrestorableValue

if TYPE_CHECKING:
    from ditto_jupyter.control.service import RuntimeService


class InMemoryContextCapture:
    """A JSON namespace per runtime, captured to the blob store (a ContextDriver)."""

    def __init__(self, blobs: BlobStore) -> None:
        self.blobs = blobs
        self.namespaces: dict[str, dict[str, Any]] = {}
        self.busy: set[str] = set()
        self.execution_counts: dict[str, int] = {}
        self.refuse_stop: set[str] = set()
        self.started = 0
        self.processes: dict[str, str] = {}
        self.during_capture: dict[str, dict[str, Any]] = {}
        self.fenced: dict[str, int] = {}
        self.sealed: set[str] = set()

    def namespace(self, runtime_id: str) -> dict[str, Any]:
        """The live namespace of a started runtime."""
        try:
            return self.namespaces[runtime_id]
        except KeyError:
            raise BackendError(f"runtime {runtime_id} has no live context") from None

    def execute(self, runtime_id: str, **assignments: Any) -> None:
        """Stand-in for running a cell: assign variables and bump the execution count."""
        if runtime_id in self.sealed:
            raise BackendError(f"runtime {runtime_id} is pausing: this cell did not run")
        self.namespace(runtime_id).update(assignments)
        self.execution_counts[runtime_id] = self.execution_counts.get(runtime_id, 0) + 1

    async def start(self, session: SessionRecord, workspace: Path | None) -> dict[str, Any]:
        self.namespaces[session.session_id] = {}
        self.execution_counts[session.session_id] = 0
        self.started += 1  # each start is a new context, as each kernel has its own id
        self.processes[session.session_id] = uuid.uuid4().hex
        self.sealed.discard(session.session_id)
        return {"context": "memory", "instance": self.started}

    async def stop(self, session: SessionRecord) -> None:
        if session.session_id in self.refuse_stop:
            raise BackendError(f"the kernel of runtime {session.session_id} would not stop")
        self.namespaces.pop(session.session_id, None)
        self.busy.discard(session.session_id)
        self.processes.pop(session.session_id, None)
        self.sealed.discard(session.session_id)

    async def is_busy(self, session: SessionRecord) -> bool:
        return session.session_id in self.busy

    async def capture(self, session: SessionRecord) -> ContextCapture:
        data = orjson.dumps(self.namespace(session.session_id), option=orjson.OPT_SORT_KEYS)
        stored = self.blobs.put_bytes(data)
        manifest_id, manifest_bytes = self.blobs.put_manifest(
            {"kind": "memory-context", "chunks": stored.chunks, "size": stored.size}
        )
        capture = ContextCapture(
            manifest_id=manifest_id,
            bytes_written=stored.bytes_written + manifest_bytes,
            execution_count=self.execution_counts.get(session.session_id),
            kernel_process=self.processes.get(session.session_id),
        )
        queued = self.during_capture.pop(session.session_id, None)
        if queued is not None:  # a cell sent during the capture runs right after it
            self.execute(session.session_id, **queued)
        return capture

    async def settle(self, session: SessionRecord) -> None:
        self.settled = getattr(self, "settled", 0) + 1  # nothing is written behind here

    async def fence(self, session: SessionRecord) -> None:
        self.fenced[session.session_id] = self.execution_counts.get(session.session_id, 0)

    async def seal(self, session: SessionRecord) -> bool:
        fence = self.fenced.pop(session.session_id, None)
        if fence is None or fence != self.execution_counts.get(session.session_id, 0):
            return False
        self.sealed.add(session.session_id)
        return True

    async def unseal(self, session: SessionRecord) -> None:
        self.sealed.discard(session.session_id)

    async def restore(
        self, session: SessionRecord, manifest_id: str | None, *, arrivals: str | None = None
    ) -> list[UnrestorableValue]:
        namespace: dict[str, Any] = {}
        if manifest_id is not None:
            with self.blobs.reading_arrivals(arrivals) as blobs:
                body = blobs.get_manifest(manifest_id)
                namespace = orjson.loads(blobs.get_bytes(body["chunks"]))
        self.namespaces[session.session_id] = namespace
        return []


def ctx(service: RuntimeService) -> InMemoryContextCapture:
    """The in-memory context capture a test's service runs on."""
    assert isinstance(service.context, InMemoryContextCapture)
    return service.context
