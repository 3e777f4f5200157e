"""Requests of the `self/...` routes: a kernel reporting what it did to its own namespace.
Each carries the kernel's runtime token, proof that it is that runtime's kernel.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field

from ditto_jupyter.core.models.fields import (
    CheckoutCount,
    CheckpointName,
    RequestId,
    RequestMetadata,
    RequestText,
    StrictModel,
)
from ditto_jupyter.core.models.records import AutoCheckpointCell, ContextCapture


class SelfRestoreRequest(StrictModel):
    """POST /api/v1/runtimes/self/restore: a kernel restored a checkpoint into itself.

    `runtime_token` is the kernel's `DITTO_RUNTIME_TOKEN`, proof that it is `runtime_id`'s.
    """

    runtime_id: RequestId
    runtime_token: RequestText
    checkpoint_id: RequestId


class SelfPauseRequest(StrictModel):
    """POST /api/v1/runtimes/self/pause: a kernel pauses itself with its own capture.

    `runtime_token` is the kernel's `DITTO_RUNTIME_TOKEN`; the capture's manifest must be
    a kernel-namespace manifest captured for `runtime_id`.
    """

    runtime_id: RequestId
    runtime_token: RequestText
    capture: ContextCapture
    name: CheckpointName | None = None
    metadata: RequestMetadata | None = None


class SelfCheckpointRequest(SelfPauseRequest):
    """POST /api/v1/runtimes/self/checkpoint: a kernel's own capture, recorded.

    `runtime_token` and `capture` as for self/pause. `automatic` is set by `%autocheckpoint`
    only: the cell the checkpoint follows. It makes the checkpoint one a prune may thin;
    metadata never does.
    """

    automatic: AutoCheckpointCell | None = None


class SelfPruneRequest(StrictModel):
    """POST /api/v1/runtimes/self/prune: a kernel prunes its automatic checkpoints.

    `runtime_token` is the kernel's `DITTO_RUNTIME_TOKEN`; `keep` is how many of the newest
    automatic checkpoints (`%autocheckpoint`) stay whole.
    """

    runtime_id: RequestId
    runtime_token: RequestText
    keep: int = Field(ge=1)


class SelfCheckoutRequest(StrictModel):
    """POST /api/v1/runtimes/self/checkout: a kernel branches from a magic.

    `runtime_id` is the calling runtime, proven by `runtime_token` (the kernel's
    `DITTO_RUNTIME_TOKEN`): when the checkpoint is its own, its kernel is busy only with the
    magic asking, so the idle check of checkout does not apply to it.
    """

    runtime_id: RequestId
    runtime_token: RequestText
    checkpoint_id: RequestId
    conversation_id: RequestText | None = None
    sender_id: RequestText | None = None
    metadata: RequestMetadata | None = None
    count: CheckoutCount = 1


class SelfUndoRequest(StrictModel):
    """POST /api/v1/runtimes/self/undo: a kernel has restored its variables to
    `checkpoint_id`, the parent of `undone_checkpoint_id` (its head, the last cell's
    automatic checkpoint): the server brings the workspace files back to that checkpoint and
    makes it the head."""

    runtime_id: RequestId
    runtime_token: RequestText
    checkpoint_id: RequestId
    undone_checkpoint_id: RequestId


class SelfDiffRequest(StrictModel):
    """POST /api/v1/runtimes/self/diff: a kernel compares (`%diff`); `"live"` means its own
    `capture` (taken by the magic, not recorded), its workspace and its saved notebook."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        frozen=True,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
    )

    runtime_id: RequestId
    runtime_token: RequestText
    from_: RequestId | None = Field(
        default=None, validation_alias="from", serialization_alias="from"
    )
    to: RequestId | None = None
    capture: ContextCapture | None = None
