"""`LocalControl`: the magics over an in-process RuntimeService (see `runtime_control`;
`control_choice` picks it when no server started the kernel).

With no server (plain IPython, `jupyter console`, nbval) the calling kernel is a runtime
whose context is captured in-process; runtimes it checks out or resumes get kernels of
their own from jupyter_client, run in the notebook's folder (the calling kernel's working
directory when it loaded the magics).
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
import threading
import uuid
from collections.abc import Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from jupyter_client.connect import find_connection_file

from ditto_jupyter.backends.base import ExecResult
from ditto_jupyter.control.fanout import fan_out_answer
from ditto_jupyter.control.service import RuntimeService
from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.core.environment import WORKSPACE_ENV, default_data_dir
from ditto_jupyter.core.errors import BackendError
from ditto_jupyter.core.models import (
    AutoCheckpointCell,
    AutoCheckpointPruneResult,
    CheckpointSummary,
    ContextCapture,
    RuntimeCheckoutResult,
    RuntimeCheckpointResult,
    RuntimeCompareResult,
    RuntimeDiffResult,
    RuntimePauseResult,
    RuntimeRecord,
    RuntimeResumeResult,
    RuntimeUndoResult,
    SessionRecord,
    UnrestorableValue,
)
from ditto_jupyter.hosts.jupyter_client_host import JupyterClientHost
from ditto_jupyter.hosts.kernel_context_driver import KernelContextDriver
from ditto_jupyter.kernel.capture import capture_following, restore_namespace
from ditto_jupyter.kernel.runtime_control import (
    Checkout,
    Lineage,
    Namespace,
    ResolvedCheckpoint,
    T,
    UndoPlan,
    local_workspace,
    resolved_of,
)
from ditto_jupyter.wiring import open_runtime_service


class _LoopThread:
    """One event loop in a daemon thread: the kernel's own loop is busy running the magic.

    Its thread and those of its default executor (`asyncio.to_thread`: the workspace
    snapshot) are named "ditto-...": the capture's change journal takes any other live
    thread for code that may change the namespace behind the cells' back, and then
    captures everything (every %autocheckpoint cell pickled the whole namespace again).
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.loop.set_default_executor(ThreadPoolExecutor(thread_name_prefix="ditto-control-io"))
        self.thread = threading.Thread(
            target=self.loop.run_forever, daemon=True, name="ditto-control"
        )
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result()


class StandaloneContext:
    """The calling kernel captured in-process; every other runtime on its own kernel.

    Those kernels run in `notebook_folder`, the calling kernel's folder.
    """

    def __init__(
        self, blobs: BlobStore, namespace: Namespace, token: str, notebook_folder: Path
    ) -> None:
        self.blobs = blobs
        self.namespace = namespace
        self.token = token
        self.host = JupyterClientHost()
        self.kernels = KernelContextDriver(
            self.host, blobs.root, notebook_folder=lambda session: notebook_folder
        )
        self.last_manifest: str | None = None

    def is_self(self, session: SessionRecord) -> bool:
        return session.handle_state.get("self") == self.token

    async def start(self, session: SessionRecord, workspace: Path | None) -> dict[str, Any]:
        return await self.kernels.start(session, workspace)

    async def stop(self, session: SessionRecord) -> None:
        if not self.is_self(session):  # the calling kernel stops itself after its cell
            await self.kernels.stop(session)

    async def is_busy(self, session: SessionRecord) -> bool:
        if self.is_self(session) or "kernel_id" not in session.handle_state:
            return False
        return await self.kernels.is_busy(session)

    async def capture(self, session: SessionRecord) -> ContextCapture:
        if self.is_self(session):
            capture = capture_following(
                self.namespace,
                self.blobs,
                previous_manifest_id=self.last_manifest,
                runtime_id=session.session_id,
            )
            self.last_manifest = capture.manifest_id
            return capture
        if "kernel_id" not in session.handle_state:
            raise BackendError(
                f"runtime {session.session_id} runs in another process; "
                "checkpoint it from its own kernel"
            )
        return await self.kernels.capture(session)

    async def settle(self, session: SessionRecord) -> None:
        # the calling kernel's magics wait for its own write-behind before they act
        if not self.is_self(session) and "kernel_id" in session.handle_state:
            await self.kernels.settle(session)

    async def fence(self, session: SessionRecord) -> None:
        if not self.is_self(session):  # the calling kernel is busy with the asking magic
            await self.kernels.fence(session)

    async def seal(self, session: SessionRecord) -> bool:
        return True if self.is_self(session) else await self.kernels.seal(session)

    async def unseal(self, session: SessionRecord) -> None:
        if not self.is_self(session):
            await self.kernels.unseal(session)

    async def restore(
        self, session: SessionRecord, manifest_id: str | None, *, arrivals: str | None = None
    ) -> list[UnrestorableValue]:
        if self.is_self(session):
            self.last_manifest = manifest_id
            with self.blobs.reading_arrivals(arrivals) as blobs:
                return restore_namespace(self.namespace, blobs, manifest_id)
        return await self.kernels.restore(session, manifest_id, arrivals=arrivals)


class LocalControl:
    """The magics over an in-process RuntimeService on the embedded store."""

    mode = "local"

    def __init__(
        self,
        namespace: Namespace,
        *,
        data_dir: Path | None = None,
        conversation_id: str = "ipython",
        runtime_id: str | None = None,
        notebook_folder: Path | None = None,
    ) -> None:
        self._loop = _LoopThread()
        token = uuid.uuid4().hex
        self.context: StandaloneContext | None = None
        folder = notebook_folder or Path.cwd()

        def make_context(blobs: BlobStore) -> StandaloneContext:
            self.context = StandaloneContext(blobs, namespace, token, folder)
            return self.context

        self.service: RuntimeService = open_runtime_service(
            data_dir or default_data_dir(), context_factory=make_context
        )
        self.blob_root = self.service.blobs.root
        self.runtime_id = runtime_id or uuid.uuid4().hex
        record = self._run(
            self.service.create_runtime(
                conversation_id,
                _user(),
                runtime_id=self.runtime_id,
                handle_state={"self": token},
            )
        )
        self.runtime_id = record.runtime_id
        workspace = self.service.workspace_path(self.runtime_id)
        if workspace is not None:  # this kernel is the runtime's: code finds it here
            os.environ[WORKSPACE_ENV] = str(workspace)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._loop.run(coro)

    def checkpoint(
        self,
        capture: ContextCapture,
        name: str | None,
        metadata: dict[str, Any] | None,
        automatic: AutoCheckpointCell | None = None,
    ) -> RuntimeCheckpointResult:
        result = self._run(
            self.service.checkpoint(
                self.runtime_id, name, metadata, precaptured=capture, automatic=automatic
            )
        )
        if self.context is not None:
            self.context.last_manifest = capture.manifest_id
        return result

    def resolve(self, reference: str, runtime_id: str | None = None) -> ResolvedCheckpoint:
        checkpoint = self.service.resolve_checkpoint(reference, runtime_id or self.runtime_id)
        return resolved_of(checkpoint)

    def record_restore(self, checkpoint_id: str) -> None:
        self._run(self.service.record_restore(self.runtime_id, checkpoint_id))
        if self.context is not None:
            self.context.last_manifest = self.service.get_checkpoint(
                checkpoint_id
            ).context_manifest_id

    def checkout(
        self,
        checkpoint_id: str,
        conversation_id: str | None,
        sender_id: str | None,
        count: int = 1,
    ) -> RuntimeCheckoutResult:
        outcomes = self._run(
            self.service.checkout_many(
                checkpoint_id,
                count,
                conversation_ids=[conversation_id] * count,
                sender_id=sender_id,
                caller_runtime_id=self.runtime_id,
            )
        )
        return fan_out_answer(outcomes)

    def pause_self(self, capture: ContextCapture, name: str | None) -> RuntimePauseResult:
        return self._run(self.service.pause(self.runtime_id, name, precaptured=capture))

    def resume(self, runtime_id: str) -> RuntimeResumeResult:
        return self._run(self.service.resume(runtime_id))

    def prune_automatic(self, keep: int) -> AutoCheckpointPruneResult:
        return self._run(self.service.prune_automatic(self.runtime_id, keep))

    def runtimes(self) -> list[RuntimeRecord]:
        return self._run(self.service.list_runtimes()).runtimes

    def checkpoints(self, runtime_id: str) -> list[CheckpointSummary]:
        return self._run(self.service.list_checkpoints(runtime_id)).checkpoints

    def lineage(self, runtime_id: str) -> Lineage:
        head = self.service.head_checkpoint(runtime_id)
        return Lineage(
            head.checkpoint_id if head is not None else None,
            [
                Checkout(
                    child.session_id,
                    str(child.source_checkpoint_id),
                    child.conversation_id,
                    child.status.value,
                )
                for child in self.service.checkouts_of(runtime_id)
            ],
        )

    def exec(self, command: str) -> ExecResult:
        return self._run(self.service.exec(self.runtime_id, command))

    def workspace_path(self) -> Path:
        path = self._run(self.service.workspace(self.runtime_id))
        return local_workspace(self.runtime_id, str(path) if path is not None else None)

    def connection_hint(self, kernel_id: str | None) -> str | None:
        if kernel_id is None or self.context is None:
            return None
        manager = self.context.host.manager
        if kernel_id not in manager.list_kernel_ids():
            return None
        connection_file = manager.get_kernel(kernel_id).connection_file
        with contextlib.suppress(OSError):
            connection_file = find_connection_file(connection_file)
        return f"jupyter console --existing {connection_file}"

    def diff(
        self, from_ref: str | None, to_ref: str | None, capture: ContextCapture | None
    ) -> RuntimeDiffResult:
        return self._run(self.service.diff(self.runtime_id, from_ref, to_ref, capture=capture))

    def compare(self, sides: list[tuple[str, str | None]]) -> RuntimeCompareResult:
        return self._run(self.service.compare(sides, {}))

    def undo_plan(self) -> UndoPlan:
        from ditto_jupyter.control.undo import notebook_label

        head, target = self.service.undo_plan(self.runtime_id)
        assert head.automatic is not None
        notebook = notebook_label(head.session.conversation_id, self.runtime_id)
        return UndoPlan(
            head.checkpoint_id,
            head.context_manifest_id,
            head.automatic,
            resolved_of(target),
            notebook,
            head.name,
        )

    def record_undo(self, checkpoint_id: str, undone_checkpoint_id: str) -> RuntimeUndoResult:
        result = self._run(
            self.service.record_undo(self.runtime_id, checkpoint_id, undone_checkpoint_id)
        )
        if self.context is not None:
            self.context.last_manifest = self.service.get_checkpoint(
                checkpoint_id
            ).context_manifest_id
        return result

    def shutdown(self) -> None:
        """Stop the kernels this control started (checkout children, resumed runtimes)."""
        if self.context is not None:
            self._run(self.context.host.shutdown_all())
        self.service.close_store()


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "local"
