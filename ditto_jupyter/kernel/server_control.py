"""`ServerControl`: the magics over the server's REST API (see `runtime_control`).

Used when the kernel was started by a Jupyter server with the extension: its `self/...`
requests carry `DITTO_RUNTIME_TOKEN`, proof that they come from this runtime's own kernel.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ditto_jupyter.backends.base import ExecResult
from ditto_jupyter.core.environment import (
    RUNTIME_ID_ENV,
    RUNTIME_TOKEN_ENV,
    SERVER_URL_ENV,
    TOKEN_ENV,
    default_data_dir,
)
from ditto_jupyter.core.errors import BackendError, DittoError
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
)
from ditto_jupyter.kernel.runtime_control import (
    Checkout,
    Lineage,
    Resolved,
    ResolvedCheckpoint,
    UndoPlan,
    data_dir_from_environment,
    local_workspace,
)


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
        return Resolved(
            summary.checkpoint_id,
            summary.runtime_id,
            summary.name,
            detail.get("context_manifest_id"),
            summary.unrestorable,
            summary.pruned,
            summary.parent_checkpoint_id,
        )

    def record_restore(self, checkpoint_id: str) -> None:
        self._post("self/restore", self._self_body(checkpoint_id=checkpoint_id))

    def checkout(
        self,
        checkpoint_id: str,
        conversation_id: str | None,
        sender_id: str | None,
        count: int = 1,
    ) -> RuntimeCheckoutResult:
        body = self._self_body(
            checkpoint_id=checkpoint_id,
            conversation_id=conversation_id,
            sender_id=sender_id,
            count=count,
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
        return local_workspace(self.runtime_id, answer.get("path"))

    def connection_hint(self, kernel_id: str | None) -> str | None:
        return None

    def diff(
        self, from_ref: str | None, to_ref: str | None, capture: ContextCapture | None
    ) -> RuntimeDiffResult:
        body = self._self_body(
            to=to_ref, capture=capture.model_dump(mode="json") if capture else None
        )
        body["from"] = from_ref
        return _parse(RuntimeDiffResult, self._post("self/diff", body))

    def compare(self, sides: list[tuple[str, str | None]]) -> RuntimeCompareResult:
        body = [{"runtime_id": runtime_id, "at": at} for runtime_id, at in sides]
        return _parse(RuntimeCompareResult, self._post("compare", {"sides": body}))

    def undo_plan(self) -> UndoPlan:
        from ditto_jupyter.client import api_path
        from ditto_jupyter.control.undo import notebook_label, undo_target, undone_alone

        record = _parse(RuntimeRecord, self._get(api_path(self.runtime_id)))
        notebook = notebook_label(record.conversation_id, self.runtime_id)
        head = self._get(api_path(self.runtime_id, "lineage")).get("head")
        summary = _parse(CheckpointSummary, head) if head else None
        target = self.resolve(undo_target(self.runtime_id, summary, notebook))
        assert summary is not None and summary.automatic is not None
        undone_alone(summary.automatic, target.name or target.checkpoint_id[:12], notebook)
        head_detail = self.resolve(summary.checkpoint_id)
        return UndoPlan(
            summary.checkpoint_id,
            head_detail.context_manifest_id,
            summary.automatic,
            target,
            notebook,
            summary.name,
        )

    def record_undo(self, checkpoint_id: str, undone_checkpoint_id: str) -> RuntimeUndoResult:
        body = self._self_body(
            checkpoint_id=checkpoint_id, undone_checkpoint_id=undone_checkpoint_id
        )
        return _parse(RuntimeUndoResult, self._post("self/undo", body))


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
        data_dir_from_environment() or default_data_dir(),
        os.environ.get(RUNTIME_TOKEN_ENV, ""),
    )
