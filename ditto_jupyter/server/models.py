"""Request and result models of the extension's own routes (beyond DESIGN.md section 6).

The section 6 routes use the core models (`ditto_jupyter.core.models`); the routes that serve
the magics and the side panel use these. They are strict like the core models: an unknown or
mistyped field is refused before any service code runs.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ditto_jupyter.core.models import (
    CheckpointSummary,
    ContextCapture,
    RuntimeRecord,
    SessionLifecycleStatus,
    UnrestorableValue,
)


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


class CheckoutOrigin(_ExtensionModel):
    """Where a checkout child came from: the source runtime and its checkpoint."""

    runtime_id: str
    checkpoint_id: str


class CheckoutBranch(_ExtensionModel):
    """A runtime checked out from one of this runtime's checkpoints."""

    runtime_id: str
    checkpoint_id: str
    conversation_id: str
    status: SessionLifecycleStatus


class RuntimeLineage(_ExtensionModel):
    """GET /api/v1/runtimes/{runtime_id}/lineage: head, checkout origin, checkouts from it.

    What a checkpoint tree needs beside the listing; the side panel draws the checkouts
    made from a checkpoint as branches, and the origin as where the tree starts.
    """

    runtime_id: str
    head: CheckpointSummary | None
    source: CheckoutOrigin | None
    checkouts: list[CheckoutBranch]
