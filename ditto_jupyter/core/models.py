"""Pydantic models of the control plane: records, checkpoints, and every route's request/result.

Requests refuse unknown fields and wrong types (strict), so a front end that validates a
body with them answers 400 `InvalidRequest` naming the field. They also hold every field to
the limits of `core.limits` (`RequestId`, `CheckpointName`, `RequestMetadata`), so whatever a
request carries can be stored and read back; stored records are read without those limits.
`RuntimeRecord` is all that callers see of a runtime; backend placement and kernel handles
stay inside `SessionRecord` and never leak.
"""

from __future__ import annotations

import time
from enum import Enum
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic_core import PydanticCustomError

from ditto_jupyter.core.limits import (
    MAX_ID_LENGTH,
    MAX_METADATA_DEPTH,
    MAX_METADATA_KEYS,
    MAX_NAME_LENGTH,
    metadata_problem,
)


def now_ms() -> int:
    """Wall-clock milliseconds since the epoch, the unit of every `*_at_ms` field."""
    return time.time_ns() // 1_000_000


def _within_metadata_limits(value: dict[str, Any]) -> dict[str, Any]:
    problem = metadata_problem(value)
    if problem is not None:
        raise PydanticCustomError("metadata_limit", "{problem}", {"problem": problem})
    return value


#: A runtime or checkpoint id (or reference) in a request: not empty, at most 4096 characters.
RequestId = Annotated[str, Field(min_length=1, max_length=MAX_ID_LENGTH)]
#: A conversation (notebook path) or sender in a request: at most 4096 characters.
RequestText = Annotated[str, Field(max_length=MAX_ID_LENGTH)]
#: A checkpoint name in a request: at most 256 characters.
CheckpointName = Annotated[str, Field(max_length=MAX_NAME_LENGTH)]
#: Metadata in a request: JSON within every metadata limit of `core.limits`.
RequestMetadata = Annotated[
    dict[str, Any],
    AfterValidator(_within_metadata_limits),
    Field(
        description=f"At most {MAX_METADATA_KEYS} keys, nested at most {MAX_METADATA_DEPTH} "
        "deep; see Limits.",
        json_schema_extra={"maxProperties": MAX_METADATA_KEYS},
    ),
]


class _Strict(BaseModel):
    """Unknown fields refused, no silent type coercion, values immutable once built."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class SessionLifecycleStatus(str, Enum):
    """Where a runtime is in its life: the public `status` of a RuntimeRecord."""

    IDLE = "idle"
    BUSY = "busy"
    PAUSED = "paused"
    CLOSED = "closed"


class RuntimeRecord(_Strict):
    """The public face of a runtime: identity, notebook, status and times, never a backend id."""

    runtime_id: str
    conversation_id: str
    sender_id: str
    status: SessionLifecycleStatus
    created_at_ms: int
    updated_at_ms: int


class SessionRecord(_Strict):
    """Internal runtime state: lifecycle, identity, kernel and backend binding.

    `runtime_id == session_id`: a runtime is known by its Jupyter session's id.
    `handle_state` holds host-specific handles (for example the live kernel id);
    `backend_kind` says which provider carries the runtime.
    """

    session_id: str
    conversation_id: str
    sender_id: str
    status: SessionLifecycleStatus = SessionLifecycleStatus.IDLE
    kernel_name: str = "python3"
    backend_kind: str = "local"
    backend_instance: str | None = None
    handle_state: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at_ms: int = Field(default_factory=now_ms)
    updated_at_ms: int = Field(default_factory=now_ms)
    #: A checkout child's origin: the runtime and checkpoint it was checked out from.
    source_runtime_id: str | None = None
    source_checkpoint_id: str | None = None

    def to_runtime(self) -> RuntimeRecord:
        """The public RuntimeRecord of this session."""
        return RuntimeRecord(
            runtime_id=self.session_id,
            conversation_id=self.conversation_id,
            sender_id=self.sender_id,
            status=self.status,
            created_at_ms=self.created_at_ms,
            updated_at_ms=self.updated_at_ms,
        )


class BackendCheckpointRef(_Strict):
    """Internal reference to a backend snapshot; never returned by a route.

    `provider_snapshot_id` is the E2B snapshot id, or the blob-store manifest id of a
    local workspace snapshot; `None` once delete-snapshot has cleared it.
    """

    backend_kind: str
    backend_id: str
    provider_snapshot_id: str | None
    created_at_ms: int = Field(default_factory=now_ms)
    details: dict[str, Any] = Field(default_factory=dict)


class UnrestorableValue(_Strict):
    """A kernel variable a checkpoint could not keep, shown at checkpoint and at restore."""

    name: str
    type: str
    reason: str


class ContextCapture(_Strict):
    """What a session-context capture produced: its signed manifest and what it cost."""

    manifest_id: str
    bytes_written: int = Field(default=0, ge=0)
    unrestorable: list[UnrestorableValue] = Field(default_factory=list)
    execution_count: int | None = Field(default=None, ge=0)


#: The most characters of a cell's source an automatic checkpoint records.
MAX_CELL_SOURCE_LENGTH = 64 * 1024


class AutoCheckpointCell(_Strict):
    """The cell an automatic checkpoint (`%autocheckpoint`) was taken after.

    A field of the checkpoint, never of its metadata: which checkpoints a prune may thin is
    decided from it, so nothing a user writes into metadata can make a checkpoint automatic.
    """

    execution_count: int = Field(ge=0)
    source: str = Field(default="", max_length=MAX_CELL_SOURCE_LENGTH)
    failed: bool = False


class RuntimeCheckpoint(_Strict):
    """One checkpoint of a runtime: session snapshot, backend ref, session-context manifest.

    `automatic` says which cell `%autocheckpoint` took it after (None: taken on request);
    `pruned` that a prune dropped its variables and workspace snapshot (its row is history
    only). Both are the system's own fields: metadata is the user's and decides nothing.
    """

    checkpoint_id: str
    runtime_id: str
    parent_checkpoint_id: str | None
    session: SessionRecord
    backend_ref: BackendCheckpointRef | None = None
    context_manifest_id: str | None = None
    unrestorable: list[UnrestorableValue] = Field(default_factory=list)
    bytes_written: int = 0
    created_at_ms: int = Field(default_factory=now_ms)
    name: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    automatic: AutoCheckpointCell | None = None
    pruned: bool = False

    def summary(self) -> CheckpointSummary:
        """The public listing shape of this checkpoint."""
        return CheckpointSummary(
            checkpoint_id=self.checkpoint_id,
            runtime_id=self.runtime_id,
            parent_checkpoint_id=self.parent_checkpoint_id,
            name=self.name,
            metadata=self.metadata,
            created_at_ms=self.created_at_ms,
            bytes_written=self.bytes_written,
            has_provider_snapshot=bool(
                self.backend_ref is not None and self.backend_ref.provider_snapshot_id
            ),
            unrestorable=self.unrestorable,
            automatic=self.automatic,
            pruned=self.pruned,
        )


# ---- route requests -------------------------------------------------------------------


class RuntimeCheckpointRequest(_Strict):
    """POST /api/v1/runtimes/checkpoint."""

    runtime_id: RequestId
    name: CheckpointName | None = None
    metadata: RequestMetadata | None = None


class RuntimeCheckpointSnapshotDeleteRequest(_Strict):
    """POST /api/v1/runtimes/checkpoint/delete-snapshot."""

    checkpoint_id: RequestId


class RuntimeCheckoutRequest(_Strict):
    """POST /api/v1/runtimes/checkout."""

    checkpoint_id: RequestId
    conversation_id: RequestText | None = None
    sender_id: RequestText | None = None
    metadata: RequestMetadata | None = None


class RuntimePauseRequest(_Strict):
    """POST /api/v1/runtimes/pause."""

    runtime_id: RequestId
    name: CheckpointName | None = None
    metadata: RequestMetadata | None = None


class RuntimeResumeRequest(_Strict):
    """POST /api/v1/runtimes/resume."""

    runtime_id: RequestId
    metadata: RequestMetadata | None = None


class RuntimeCloseRequest(_Strict):
    """POST /api/v1/runtimes/close.

    A live runtime gets a final checkpoint first (its variables and files), so nothing
    done since its head is lost; `discard: true` closes it without one.
    """

    runtime_id: RequestId
    discard: bool = Field(
        default=False,
        description="Close without a final checkpoint: what changed since the head is lost.",
    )


# ---- route results --------------------------------------------------------------------


class RuntimeCheckpointResult(_Strict):
    """Result of checkpoint: the new id, the runtime, and the head it replaced."""

    checkpoint_id: str
    runtime: RuntimeRecord
    previous_checkpoint_id: str | None


class RuntimeCheckpointSnapshotDeleteResult(_Strict):
    """Result of delete-snapshot: idempotent; `already_deleted` when nothing was left."""

    checkpoint_id: str
    deleted: bool
    already_deleted: bool


class AutoCheckpointPruneResult(_Strict):
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


class RuntimeCheckoutResult(_Strict):
    """Result of checkout: the new child runtime, its kernel and notebook copy.

    `unrestorable` lists every value the child does not hold: those the checkpoint could not
    keep, and those its new kernel could not load (a module only the source could import).
    """

    runtime: RuntimeRecord
    checkpoint_id: str
    source_runtime_id: str
    unrestorable: list[UnrestorableValue]
    kernel_id: str | None = None
    notebook_path: str | None = None


class RuntimePauseResult(_Strict):
    """Result of pause: the paused runtime and the checkpoint that holds its state."""

    runtime: RuntimeRecord
    checkpoint_id: str


class RuntimeResumeResult(_Strict):
    """Result of resume: same runtime id, the checkpoint resumed from, the new kernel.

    `unrestorable` lists every value the new kernel does not hold (as for checkout).
    """

    runtime: RuntimeRecord
    checkpoint_id: str
    unrestorable: list[UnrestorableValue]
    kernel_id: str | None = None


class RuntimeCloseResult(_Strict):
    """Result of close: `checkpoint_id` is the final checkpoint close took (null when the
    runtime was paused already, or the caller asked to discard)."""

    runtime: RuntimeRecord
    backend_released: bool
    provider_sandbox_deleted: bool
    checkpoint_id: str | None = None


class RuntimeListResult(_Strict):
    """GET /api/v1/runtimes."""

    runtimes: list[RuntimeRecord]


class CheckpointSummary(_Strict):
    """One row of GET /api/v1/runtimes/{runtime_id}/checkpoints."""

    checkpoint_id: str
    runtime_id: str
    parent_checkpoint_id: str | None
    name: str | None
    metadata: dict[str, Any]
    created_at_ms: int
    #: Bytes the checkpoint wrote to the blob store (0 when everything was already stored).
    bytes_written: int
    has_provider_snapshot: bool
    unrestorable: list[UnrestorableValue]
    #: The cell `%autocheckpoint` took the checkpoint after; None for a checkpoint on request.
    automatic: AutoCheckpointCell | None = None
    #: A prune dropped its variables and workspace snapshot: it cannot be restored.
    pruned: bool = False


class CheckpointListResult(_Strict):
    """GET /api/v1/runtimes/{runtime_id}/checkpoints: one page of a runtime's checkpoints.

    `next_cursor` is set when more follow: pass it as `cursor` to get the next page.
    """

    checkpoints: list[CheckpointSummary]
    next_cursor: str | None = None


class ErrorBody(_Strict):
    """The body of every error answer."""

    error: str
    message: str


class BackendBinding(_Strict):
    """Which backend carries a runtime, and how to find it again after a restart."""

    runtime_id: str
    backend_id: str
    kind: str
    details: dict[str, Any] = Field(default_factory=dict)


class Leftover(_Strict):
    """A resource a cleanup could not free (a kernel that would not stop, a sandbox, snapshot
    or workspace that could not be deleted): recorded in the store, listed by `ditto doctor`.
    """

    kind: str
    resource_id: str
    runtime_id: str | None = None
    reason: str
    created_at_ms: int = Field(default_factory=now_ms)
