"""Request and result models of the extension's own routes (beyond DESIGN.md section 6).

The section 6 routes use the core models (`ditto_jupyter.core.models`); the routes that serve
the magics and the side panel use these. They are strict like the core models: an unknown or
mistyped field is refused before any service code runs.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ditto_jupyter.core.models import (
    CheckpointSummary,
    ContextCapture,
    RuntimeRecord,
    UnrestorableValue,
)

#: The largest page GET .../checkpoints answers.
MAX_PAGE = 1000


class _ExtensionModel(BaseModel):
    """Request/result models of the extension's own routes: strict like the core models."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class RuntimeRestoreRequest(_ExtensionModel):
    """POST /api/v1/runtimes/restore and /self/restore: a checkpoint by id, prefix or name."""

    runtime_id: str
    checkpoint_id: str


class RuntimeRestoreResult(_ExtensionModel):
    """Result of a restore: the runtime, the checkpoint restored, what it could not keep."""

    runtime: RuntimeRecord
    checkpoint_id: str
    unrestorable: list[UnrestorableValue]


class SelfCheckpointRequest(_ExtensionModel):
    """POST /api/v1/runtimes/self/checkpoint and /self/pause: a kernel's own capture."""

    runtime_id: str
    capture: ContextCapture
    name: str | None = None
    metadata: dict[str, Any] | None = None


class SelfCheckoutRequest(_ExtensionModel):
    """POST /api/v1/runtimes/self/checkout: a kernel branches from a magic.

    `runtime_id` is the calling runtime: when the checkpoint is its own, its kernel is busy
    only with the magic asking, so the idle check of checkout does not apply to it.
    """

    runtime_id: str
    checkpoint_id: str
    conversation_id: str | None = None
    sender_id: str | None = None
    metadata: dict[str, Any] | None = None


class ExecRequest(_ExtensionModel):
    """POST /api/v1/runtimes/exec: a shell command in the runtime's backend (`%%sandbox`)."""

    runtime_id: str
    command: str
    timeout: float | None = Field(default=None, gt=0)


class ExecResponse(_ExtensionModel):
    """The command's outcome; a non-zero exit code is a result, not an error."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool
    truncated: bool


class CheckpointDetail(_ExtensionModel):
    """GET .../checkpoints/{reference}: the checkpoint and its context manifest id."""

    checkpoint: CheckpointSummary
    context_manifest_id: str | None


class CheckpointListQuery(BaseModel):
    """Query parameters of GET .../checkpoints: a runtime's checkpoints a page at a time.

    Not strict like the bodies: query values arrive as text (`limit=50`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    limit: int | None = Field(
        default=None,
        ge=1,
        le=MAX_PAGE,
        description=f"At most this many checkpoints (1 to {MAX_PAGE}); every one when absent.",
    )
    cursor: str | None = Field(
        default=None,
        min_length=1,
        description="Start after this checkpoint: the `next_cursor` of the previous page.",
    )
    order: Literal["oldest", "newest"] = Field(
        default="oldest", description="`oldest` first (the default) or `newest` first."
    )
