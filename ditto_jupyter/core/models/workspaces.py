"""Requests and answers about a runtime's files: where its workspace is, and shell
commands run there (`%%sandbox`).
"""

from __future__ import annotations

from pydantic import Field

from ditto_jupyter.core.models.fields import RequestId, ShellCommand, StrictModel


class RuntimeWorkspace(StrictModel):
    """GET .../{runtime_id}/workspace: where a live runtime's files are.

    `path` is the local workspace directory (what checkpoints version and `%%sandbox` runs
    in; the kernel itself runs in its notebook's folder), or None when the files live in a
    remote sandbox (`backend_kind` "e2b").
    """

    runtime_id: str
    backend_kind: str
    path: str | None


class ExecRequest(StrictModel):
    """POST /api/v1/runtimes/exec: a shell command in the runtime's backend (`%%sandbox`)."""

    runtime_id: RequestId
    command: ShellCommand
    timeout: float | None = Field(default=None, gt=0)


class ExecResponse(StrictModel):
    """The command's outcome; a non-zero exit code is a result, not an error."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool
    truncated: bool
