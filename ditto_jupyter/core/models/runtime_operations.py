"""Requests and answers of the runtime operations: checkpoint, delete-snapshot, checkout,
restore, undo, pause, resume, close, pruning, and the runtime and checkpoint listings.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ditto_jupyter.core.models.documents import NotebookDocument
from ditto_jupyter.core.models.fields import (
    MAX_PAGE,
    CheckoutCount,
    CheckpointName,
    RequestId,
    RequestMetadata,
    RequestText,
    StrictModel,
)
from ditto_jupyter.core.models.records import (
    AutoCheckpointCell,
    CheckpointSummary,
    RuntimeRecord,
    UnrestorableValue,
)


class RuntimeCheckpointRequest(StrictModel):
    """POST /api/v1/runtimes/checkpoint.

    `document` is the notebook as the user sees it (unsaved edits included); without it,
    the checkpoint holds the document a front end sends while it is pending, else the saved
    file, else none.
    """

    runtime_id: RequestId
    name: CheckpointName | None = None
    metadata: RequestMetadata | None = None
    document: NotebookDocument | None = None


class RuntimeCheckpointSnapshotDeleteRequest(StrictModel):
    """POST /api/v1/runtimes/checkpoint/delete-snapshot."""

    checkpoint_id: RequestId


class RuntimeCheckoutRequest(StrictModel):
    """POST /api/v1/runtimes/checkout.

    `count` children (1 to 20) come from the one checkpoint, each with its own runtime,
    kernel, workspace and notebook copy; each succeeds or fails on its own (`children`).
    A `conversation_id` is the notebook of the only child: with a count above 1, each
    child gets a notebook copy of its own beside the original.
    """

    checkpoint_id: RequestId
    conversation_id: RequestText | None = None
    sender_id: RequestText | None = None
    metadata: RequestMetadata | None = None
    count: CheckoutCount = 1


class RuntimePauseRequest(StrictModel):
    """POST /api/v1/runtimes/pause."""

    runtime_id: RequestId
    name: CheckpointName | None = None
    metadata: RequestMetadata | None = None


class RuntimeResumeRequest(StrictModel):
    """POST /api/v1/runtimes/resume."""

    runtime_id: RequestId
    metadata: RequestMetadata | None = None


class RuntimeCloseRequest(StrictModel):
    """POST /api/v1/runtimes/close.

    A live runtime gets a final checkpoint first (its variables and files), so nothing
    done since its head is lost; `discard: true` closes it without one.
    """

    runtime_id: RequestId
    discard: bool = Field(
        default=False,
        description="Close without a final checkpoint: what changed since the head is lost.",
    )


class RuntimeRestoreRequest(StrictModel):
    """POST /api/v1/runtimes/restore: a checkpoint by id, prefix or name.

    `document` is the open notebook: the answer says how many of its cells differ from the
    checkpoint's document (the restore never touches the notebook).
    """

    runtime_id: RequestId
    checkpoint_id: RequestId
    document: NotebookDocument | None = None


class RuntimeUndoRequest(StrictModel):
    """POST /api/v1/runtimes/undo: roll back the last cell `%autocheckpoint` recorded."""

    runtime_id: RequestId


class RuntimeCheckpointResult(StrictModel):
    """Result of checkpoint: the new id, the runtime, the head it replaced, and what it
    wrote to disk."""

    checkpoint_id: str
    runtime: RuntimeRecord
    previous_checkpoint_id: str | None
    #: Every byte the checkpoint put on disk: the blobs of its variables and workspace with
    #: the blob catalogue's log, and the checkpoint store's log (its own record's commit).
    bytes_written: int = 0


class RuntimeCheckpointSnapshotDeleteResult(StrictModel):
    """Result of delete-snapshot: idempotent; `already_deleted` when nothing was left."""

    checkpoint_id: str
    deleted: bool
    already_deleted: bool


class AutoCheckpointPruneResult(StrictModel):
    """Result of pruning a runtime's automatic checkpoints (`%autocheckpoint --keep N`).

    `pruned`: checkpoints whose variables and workspace snapshot were dropped (their rows
    stay, as history); `held`: checkpoints beyond the newest N kept whole all the same,
    because a runtime's head is one or a checkout branched from one; `whole`: how many of
    the runtime's automatic checkpoints are whole now (held ones included).
    """

    runtime_id: str
    keep: int
    pruned: list[str]
    held: list[str]
    whole: int


class CheckedOutRuntime(StrictModel):
    """One runtime a checkout made: the new child runtime, its kernel and notebook copy.

    `unrestorable` lists every value the child does not hold: those the checkpoint could not
    keep, and those its new kernel could not load (a module only the source could import).
    """

    runtime: RuntimeRecord
    checkpoint_id: str
    source_runtime_id: str
    unrestorable: list[UnrestorableValue]
    kernel_id: str | None = None
    notebook_path: str | None = None
    #: `checkpoint`: the child's notebook was written from the checkpoint's document;
    #: `current_file`: the checkpoint holds none, so today's file was copied (see
    #: `notebook_note`); None: no notebook was written (`notebook_note` says why when today's
    #: file is missing or unreadable). The note also says when the notebook's folder was
    #: gone, so the child's notebook went to the root.
    notebook_source: Literal["checkpoint", "current_file"] | None = None
    notebook_note: str | None = None


class CheckoutChild(StrictModel):
    """One child of a checkout: `checkout` when it succeeded, else `error` and `message`
    (the code and sentence an operation's failure answers); `index` counts from 0."""

    index: int
    checkout: CheckedOutRuntime | None = None
    error: str | None = None
    message: str | None = None


class RuntimeCheckoutResult(CheckedOutRuntime):
    """Result of checkout: the first child that succeeded (its fields as a single checkout
    always answered them), and `children`, every child with its own outcome, in order."""

    children: list[CheckoutChild] = Field(
        default_factory=list,
        description="Every child of the checkout, in order, each with its own success or "
        "failure (one for a single checkout).",
    )

    def one(self) -> CheckedOutRuntime:
        """This child without the list of children."""
        return CheckedOutRuntime.model_validate(self.model_dump(exclude={"children"}))


class RuntimePauseResult(StrictModel):
    """Result of pause: the paused runtime and the checkpoint that holds its state."""

    runtime: RuntimeRecord
    checkpoint_id: str


class RuntimeResumeResult(StrictModel):
    """Result of resume: same runtime id, the checkpoint resumed from, the new kernel.

    `unrestorable` lists every value the new kernel does not hold (as for checkout).
    """

    runtime: RuntimeRecord
    checkpoint_id: str
    unrestorable: list[UnrestorableValue]
    kernel_id: str | None = None


class RuntimeCloseResult(StrictModel):
    """Result of close: `checkpoint_id` is the final checkpoint close took (null when the
    runtime was paused already, or the caller asked to discard)."""

    runtime: RuntimeRecord
    backend_released: bool
    provider_sandbox_deleted: bool
    checkpoint_id: str | None = None


class RuntimeRestoreResult(StrictModel):
    """Result of a restore: the runtime, the checkpoint restored, what it could not keep.

    `cells_changed`: how many cells of the checkpoint's document differ from the document
    the request carried (None when either is missing); `cells_note`: how they were counted,
    when not the best way (too many cells without ids for nbdime: aligned by their
    sources; see `CellsDiff.note`).
    """

    runtime: RuntimeRecord
    checkpoint_id: str
    unrestorable: list[UnrestorableValue]
    cells_changed: int | None = None
    cells_note: str | None = None


class RuntimeUndoResult(StrictModel):
    """Result of undo: the runtime, the checkpoint it is back at (the state just before the
    cell), the cell undone, and what the kernel does not hold."""

    runtime: RuntimeRecord
    checkpoint_id: str
    undone_cell: AutoCheckpointCell
    unrestorable: list[UnrestorableValue]


class RuntimeListResult(StrictModel):
    """GET /api/v1/runtimes."""

    runtimes: list[RuntimeRecord]


class CheckpointListResult(StrictModel):
    """GET /api/v1/runtimes/{runtime_id}/checkpoints: one page of a runtime's checkpoints.

    `next_cursor` is set when more follow: pass it as `cursor` to get the next page.
    """

    checkpoints: list[CheckpointSummary]
    next_cursor: str | None = None


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


class CheckpointDetail(StrictModel):
    """GET .../checkpoints/{reference}: the checkpoint and its context manifest id."""

    checkpoint: CheckpointSummary
    context_manifest_id: str | None


class RuntimeKeepRequest(StrictModel):
    """POST /api/v1/runtimes/{runtime_id}/keep: keep this child of a fan-out, close the
    others (nothing to say: the body is `{}`)."""


class KeepFailure(StrictModel):
    """A sibling keep could not close: its id, the error's code and message."""

    runtime_id: str
    error: str
    message: str


class RuntimeKeepResult(StrictModel):
    """Result of keep: the runtime kept, the siblings closed (their checkpoints stay), and
    those that could not be, each with its error."""

    kept: str
    closed: list[str]
    failed: list[KeepFailure]
