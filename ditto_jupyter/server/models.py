"""Request and result models of the routes that serve the magics and the side panel.

The runtime operations (checkpoint, delete-snapshot, checkout, pause, resume, close, and
reading runtimes and their checkpoints) use the core models (`ditto_jupyter.core.models`);
the routes that serve the magics and the side panel use these. They are strict like the core
models: an unknown or mistyped field is refused before any service code runs.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic_core import PydanticCustomError

from ditto_jupyter.core.models import (
    AutoCheckpointCell,
    CheckpointName,
    CheckpointSummary,
    ContextCapture,
    RequestId,
    RequestMetadata,
    RequestText,
    RuntimeRecord,
    SessionLifecycleStatus,
    UnrestorableValue,
)

#: The largest page GET .../checkpoints answers.
MAX_PAGE = 1000


def _without_nul(command: str) -> str:
    if "\x00" in command:
        raise PydanticCustomError("nul_byte", "a shell command cannot hold a NUL byte")
    return command


#: A shell command: any text but a NUL byte, which no command line can hold.
ShellCommand = Annotated[
    str, AfterValidator(_without_nul), Field(json_schema_extra={"pattern": "^[^\\u0000]*$"})
]


class _ExtensionModel(BaseModel):
    """Request/result models of the extension's own routes: strict like the core models."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class RuntimeRestoreRequest(_ExtensionModel):
    """POST /api/v1/runtimes/restore: a checkpoint by id, prefix or name."""

    runtime_id: RequestId
    checkpoint_id: RequestId


class RuntimeRestoreResult(_ExtensionModel):
    """Result of a restore: the runtime, the checkpoint restored, what it could not keep."""

    runtime: RuntimeRecord
    checkpoint_id: str
    unrestorable: list[UnrestorableValue]


class SelfRestoreRequest(_ExtensionModel):
    """POST /api/v1/runtimes/self/restore: a kernel restored a checkpoint into itself.

    `runtime_token` is the kernel's `DITTO_RUNTIME_TOKEN`, proof that it is `runtime_id`'s.
    """

    runtime_id: RequestId
    runtime_token: RequestText
    checkpoint_id: RequestId


class SelfPauseRequest(_ExtensionModel):
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


class SelfPruneRequest(_ExtensionModel):
    """POST /api/v1/runtimes/self/prune: a kernel prunes its automatic checkpoints.

    `runtime_token` is the kernel's `DITTO_RUNTIME_TOKEN`; `keep` is how many of the newest
    automatic checkpoints (`%autocheckpoint`) stay whole.
    """

    runtime_id: RequestId
    runtime_token: RequestText
    keep: int = Field(ge=1)


class SelfCheckoutRequest(_ExtensionModel):
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


class ExecRequest(_ExtensionModel):
    """POST /api/v1/runtimes/exec: a shell command in the runtime's backend (`%%sandbox`)."""

    runtime_id: RequestId
    command: ShellCommand
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


class RuntimeWorkspace(_ExtensionModel):
    """GET .../{runtime_id}/workspace: where a live runtime's files are.

    `path` is the local workspace directory (what checkpoints version and `%%sandbox` runs
    in; the kernel itself runs in its notebook's folder), or None when the files live in a
    remote sandbox (`backend_kind` "e2b").
    """

    runtime_id: str
    backend_kind: str
    path: str | None


class BudgetFigures(_ExtensionModel):
    """A token budget's figures: the same numbers `%budget` and its view show."""

    owner_runtime_id: str = Field(
        description="The runtime whose budget this is: the runtime itself, or the runtime "
        "it was checked out from when it has none of its own."
    )
    inherited: bool
    limit: int
    reserved: int
    charged: int
    remaining: int
    replayed: int
    closed: bool
    closed_reason: str | None
    records: int
    by_status: dict[str, int]


class RuntimeBudgetResult(_ExtensionModel):
    """GET /api/v1/runtimes/{runtime_id}/budget: the budget the runtime counts against."""

    runtime_id: str
    budget: BudgetFigures | None = Field(
        description="None when the runtime has no budget (set one with `%budget LIMIT`)."
    )


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
