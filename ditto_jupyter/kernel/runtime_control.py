"""What the magics talk to: the server's REST API, or an in-process RuntimeService.

`ServerControl` is used when the kernel was started by a Jupyter server with the
extension (`DITTO_SERVER_URL`, `DITTO_TOKEN`, `DITTO_RUNTIME_ID` in its environment, and
`DITTO_RUNTIME_TOKEN`, which the `self/...` routes require as proof that the request
comes from this runtime's own kernel).
`LocalControl` runs the same RuntimeService in-process on the embedded store when there is
no server (plain IPython, `jupyter console`, nbval): the calling kernel is a runtime whose
context is captured in-process, and runtimes it checks out or resumes get kernels of their
own from jupyter_client, reachable with `jupyter console --existing <connection file>`.
With no server, "the notebook's folder" is the calling kernel's working directory when it
loaded the magics: the kernels LocalControl starts run there too, and every kernel learns
its workspace from `DITTO_WORKSPACE`.

Both capture and restore the calling kernel's namespace themselves (it is busy running the
magic, so nobody else can), and return the control plane's own result models.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
import threading
import uuid
from collections.abc import Coroutine
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from jupyter_client.connect import find_connection_file
from pydantic import BaseModel, ValidationError

from ditto_jupyter.backends.base import ExecResult
from ditto_jupyter.control.service import RuntimeService
from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.core.environment import (
    DATA_DIR_ENV,
    RUNTIME_ID_ENV,
    RUNTIME_TOKEN_ENV,
    SERVER_URL_ENV,
    TOKEN_ENV,
    WORKSPACE_ENV,
)
from ditto_jupyter.core.errors import BackendError, DittoError, UnsupportedBackend
from ditto_jupyter.core.models import (
    AutoCheckpointCell,
    AutoCheckpointPruneResult,
    CheckpointSummary,
    ContextCapture,
    RuntimeCheckoutResult,
    RuntimeCheckpointResult,
    RuntimePauseResult,
    RuntimeRecord,
    RuntimeResumeResult,
    SessionRecord,
    UnrestorableValue,
)
from ditto_jupyter.hosts.jupyter_client_host import JupyterClientHost
from ditto_jupyter.hosts.kernel_context_driver import KernelContextDriver
from ditto_jupyter.kernel.capture import capture_namespace, restore_namespace
from ditto_jupyter.wiring import default_data_dir, open_runtime_service

T = TypeVar("T")
Namespace = dict[str, Any]


class ResolvedCheckpoint(Protocol):
    """A checkpoint the magics can restore: its id, manifest and known losses."""

    checkpoint_id: str
    runtime_id: str
    name: str | None
    context_manifest_id: str | None
    unrestorable: list[UnrestorableValue]
    #: A prune (`%autocheckpoint --keep`) dropped its state: nothing to restore.
    pruned: bool


@dataclass(frozen=True)
class Checkout:
    """A runtime checked out from one of another runtime's checkpoints."""

    runtime_id: str
    checkpoint_id: str
    conversation_id: str
    status: str


@dataclass(frozen=True)
class Lineage:
    """A runtime's head checkpoint and the runtimes checked out from its checkpoints."""

    head_checkpoint_id: str | None
    checkouts: list[Checkout]


class RuntimeControl(Protocol):
    """The operations behind the magics, for the calling kernel's runtime."""

    runtime_id: str
    blob_root: Path
    mode: str

    def checkpoint(
        self,
        capture: ContextCapture,
        name: str | None,
        metadata: dict[str, Any] | None,
        automatic: AutoCheckpointCell | None = None,
    ) -> RuntimeCheckpointResult:
        """Record this kernel's capture; `automatic`: the cell `%autocheckpoint` took it after."""
        ...

    def resolve(self, reference: str, runtime_id: str | None = None) -> ResolvedCheckpoint: ...

    def record_restore(self, checkpoint_id: str) -> None: ...

    def checkout(
        self, checkpoint_id: str, conversation_id: str | None, sender_id: str | None
    ) -> RuntimeCheckoutResult: ...

    def pause_self(self, capture: ContextCapture, name: str | None) -> RuntimePauseResult: ...

    def resume(self, runtime_id: str) -> RuntimeResumeResult: ...

    def prune_automatic(self, keep: int) -> AutoCheckpointPruneResult:
        """Thin this runtime's automatic checkpoints beyond the newest `keep`."""
        ...

    def runtimes(self) -> list[RuntimeRecord]: ...

    def checkpoints(self, runtime_id: str) -> list[CheckpointSummary]: ...

    def lineage(self, runtime_id: str) -> Lineage:
        """The runtime's head and the checkouts made from it (the checkpoint tree)."""
        ...

    def exec(self, command: str) -> ExecResult: ...

    def workspace_path(self) -> Path:
        """The runtime's local workspace (UnsupportedBackend when it is a remote sandbox)."""
        ...

    def connection_hint(self, kernel_id: str | None) -> str | None: ...


class _Resolved:
    """A resolved checkpoint as the magics need it."""

    def __init__(
        self,
        checkpoint_id: str,
        runtime_id: str,
        name: str | None,
        context_manifest_id: str | None,
        unrestorable: list[UnrestorableValue],
        pruned: bool,
    ) -> None:
        self.checkpoint_id = checkpoint_id
        self.runtime_id = runtime_id
        self.name = name
        self.context_manifest_id = context_manifest_id
        self.unrestorable = unrestorable
        self.pruned = pruned


# ---- with a server ------------------------------------------------------------------------


class ServerControl:
    """The magics over the server's REST API (the kernel's own runtime is the session)."""

    mode = "server"

    def __init__(
        self, url: str, token: str, runtime_id: str, data_dir: Path, runtime_token: str = ""
    ) -> None:
        from ditto_jupyter.client import RuntimeClient

        self.client = RuntimeClient(url, token)
        self.runtime_id = runtime_id
        self.runtime_token = runtime_token
        self.blob_root = data_dir / "blobs"

    def _self_body(self, **fields: Any) -> dict[str, Any]:
        """The body of a `self/...` request: this runtime, its token, and `fields`."""
        return {"runtime_id": self.runtime_id, "runtime_token": self.runtime_token, **fields}

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        from ditto_jupyter.client import CliError

        try:
            return self.client.post(path, body)
        except CliError as error:
            raise _as_ditto_error(error) from None

    def _get(self, path: str) -> Any:
        from ditto_jupyter.client import CliError

        try:
            return self.client.get(path)
        except CliError as error:
            raise _as_ditto_error(error) from None

    def checkpoint(
        self,
        capture: ContextCapture,
        name: str | None,
        metadata: dict[str, Any] | None,
        automatic: AutoCheckpointCell | None = None,
    ) -> RuntimeCheckpointResult:
        body = self._self_body(
            capture=capture.model_dump(mode="json"), name=name, metadata=metadata
        )
        if automatic is not None:
            body["automatic"] = automatic.model_dump(mode="json")
        return _parse(RuntimeCheckpointResult, self._post("self/checkpoint", body))

    def resolve(self, reference: str, runtime_id: str | None = None) -> ResolvedCheckpoint:
        from ditto_jupyter.client import CliError

        try:  # a reference is taken whole within the runtime, like LocalControl.resolve
            detail = self.client.checkpoint_detail(reference, runtime_id or self.runtime_id)
        except CliError as error:
            raise _as_ditto_error(error) from None
        summary = _parse(CheckpointSummary, detail["checkpoint"])
        return _Resolved(
            summary.checkpoint_id,
            summary.runtime_id,
            summary.name,
            detail.get("context_manifest_id"),
            summary.unrestorable,
            summary.pruned,
        )

    def record_restore(self, checkpoint_id: str) -> None:
        self._post("self/restore", self._self_body(checkpoint_id=checkpoint_id))

    def checkout(
        self, checkpoint_id: str, conversation_id: str | None, sender_id: str | None
    ) -> RuntimeCheckoutResult:
        body = self._self_body(
            checkpoint_id=checkpoint_id, conversation_id=conversation_id, sender_id=sender_id
        )
        return _parse(RuntimeCheckoutResult, self._post("self/checkout", body))

    def pause_self(self, capture: ContextCapture, name: str | None) -> RuntimePauseResult:
        body = self._self_body(capture=capture.model_dump(mode="json"), name=name)
        return _parse(RuntimePauseResult, self._post("self/pause", body))

    def resume(self, runtime_id: str) -> RuntimeResumeResult:
        return _parse(RuntimeResumeResult, self._post("resume", {"runtime_id": runtime_id}))

    def prune_automatic(self, keep: int) -> AutoCheckpointPruneResult:
        answer = self._post("self/prune", self._self_body(keep=keep))
        return _parse(AutoCheckpointPruneResult, answer)

    def runtimes(self) -> list[RuntimeRecord]:
        return [_parse(RuntimeRecord, r) for r in self._get("")["runtimes"]]

    def checkpoints(self, runtime_id: str) -> list[CheckpointSummary]:
        from ditto_jupyter.client import api_path

        listed = self._get(api_path(runtime_id, "checkpoints"))["checkpoints"]
        return [_parse(CheckpointSummary, c) for c in listed]

    def lineage(self, runtime_id: str) -> Lineage:
        from ditto_jupyter.client import api_path

        answer = self._get(api_path(runtime_id, "lineage"))
        head = answer.get("head")
        return Lineage(
            str(head["checkpoint_id"]) if head else None,
            [
                Checkout(
                    str(c["runtime_id"]),
                    str(c["checkpoint_id"]),
                    str(c["conversation_id"]),
                    str(c["status"]),
                )
                for c in answer.get("checkouts", [])
            ],
        )

    def exec(self, command: str) -> ExecResult:
        result = self._post("exec", {"runtime_id": self.runtime_id, "command": command})
        return ExecResult(
            exit_code=int(result["exit_code"]),
            stdout=str(result["stdout"]),
            stderr=str(result["stderr"]),
            timed_out=bool(result.get("timed_out", False)),
            truncated=bool(result.get("truncated", False)),
        )

    def workspace_path(self) -> Path:
        from ditto_jupyter.client import api_path

        answer = self._get(api_path(self.runtime_id, "workspace"))
        return _local_workspace(self.runtime_id, answer.get("path"))

    def connection_hint(self, kernel_id: str | None) -> str | None:
        return None


M = TypeVar("M", bound=BaseModel)


def _parse(model: type[M], data: Any) -> M:
    """A REST answer as its model (JSON strings become enums); BackendError if it is not one."""
    try:
        return model.model_validate(data, strict=False)
    except ValidationError as error:
        raise BackendError(
            f"the server's answer is not a {model.__name__}: {error.errors()[0]['msg']}"
        ) from None


def _as_ditto_error(error: Exception) -> DittoError:
    """A REST error answer as the DittoError of its code (one line for the user)."""
    from ditto_jupyter.core.errors import error_type_of

    body = getattr(error, "body", None)
    code = body.get("error") if isinstance(body, dict) else None
    message = body.get("message") if isinstance(body, dict) else None
    kind = error_type_of(code)
    return kind(str(message)) if kind is not None else BackendError(str(error))


# ---- without a server ---------------------------------------------------------------------


class _LoopThread:
    """One event loop in a daemon thread: the kernel's own loop is busy running the magic."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="ditto")
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
            capture = capture_namespace(
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

    async def fence(self, session: SessionRecord) -> None:
        if not self.is_self(session):  # the calling kernel is busy with the asking magic
            await self.kernels.fence(session)

    async def seal(self, session: SessionRecord) -> bool:
        return True if self.is_self(session) else await self.kernels.seal(session)

    async def unseal(self, session: SessionRecord) -> None:
        if not self.is_self(session):
            await self.kernels.unseal(session)

    async def restore(
        self, session: SessionRecord, manifest_id: str | None
    ) -> list[UnrestorableValue]:
        if self.is_self(session):
            self.last_manifest = manifest_id
            return restore_namespace(self.namespace, self.blobs, manifest_id)
        return await self.kernels.restore(session, manifest_id)


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
        return _Resolved(
            checkpoint.checkpoint_id,
            checkpoint.runtime_id,
            checkpoint.name,
            checkpoint.context_manifest_id,
            checkpoint.unrestorable,
            checkpoint.pruned,
        )

    def record_restore(self, checkpoint_id: str) -> None:
        self.service.record_restore(self.runtime_id, checkpoint_id)
        if self.context is not None:
            self.context.last_manifest = self.service.get_checkpoint(
                checkpoint_id
            ).context_manifest_id

    def checkout(
        self, checkpoint_id: str, conversation_id: str | None, sender_id: str | None
    ) -> RuntimeCheckoutResult:
        return self._run(
            self.service.checkout(
                checkpoint_id, conversation_id, sender_id, caller_runtime_id=self.runtime_id
            )
        )

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
        return _local_workspace(self.runtime_id, str(path) if path is not None else None)

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


def _local_workspace(runtime_id: str, path: object) -> Path:
    if not isinstance(path, str) or not path:
        raise UnsupportedBackend(
            f"runtime {runtime_id} keeps its files in a remote sandbox, not in a local "
            "workspace; reach them with %%sandbox"
        )
    return Path(path)


def _data_dir() -> Path | None:
    return Path(os.environ[DATA_DIR_ENV]) if os.environ.get(DATA_DIR_ENV) else None


def server_control_from_environment() -> ServerControl | None:
    """The ServerControl of a kernel a server started (DITTO_SERVER_URL, DITTO_RUNTIME_ID)."""
    url = os.environ.get(SERVER_URL_ENV)
    runtime_id = os.environ.get(RUNTIME_ID_ENV)
    if not (url and runtime_id):
        return None
    token = os.environ.get(TOKEN_ENV, "")
    return ServerControl(
        url,
        token,
        runtime_id,
        _data_dir() or default_data_dir(),
        os.environ.get(RUNTIME_TOKEN_ENV, ""),
    )


def control_from_environment(
    namespace: Namespace, conversation_id: str, *, notebook_folder: Path | None = None
) -> RuntimeControl:
    """ServerControl when a server started this kernel (or DITTO_SERVER_URL says so).

    Otherwise a LocalControl whose kernels run in `notebook_folder` (default: the cwd).
    """
    server = server_control_from_environment()
    if server is not None:
        return server
    return LocalControl(
        namespace,
        data_dir=_data_dir(),
        conversation_id=conversation_id,
        notebook_folder=notebook_folder,
    )
