"""What the store keeps: runtimes and their sessions, checkpoints, backend bindings and
refs, what a capture holds, and resources a failed cleanup left behind. `RuntimeRecord`
is all that callers see of a runtime; backend placement and kernel handles stay inside
`SessionRecord` and never leak. Stored records are read without the request limits.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from pydantic import Field

from ditto_jupyter.core.models.documents import NO_DOCUMENT, CheckpointDocument, DocumentInfo
from ditto_jupyter.core.models.fields import MAX_CELL_SOURCE_LENGTH, StrictModel, now_ms


class SessionLifecycleStatus(str, Enum):
    """Where a runtime is in its life: the public `status` of a RuntimeRecord."""

    IDLE = "idle"
    BUSY = "busy"
    PAUSED = "paused"
    CLOSED = "closed"


class FanOutMember(StrictModel):
    """A child of one checkout of 2 or more (a fan-out): the fan-out's id (one per call),
    the child's place in it (0-based) and how many children it asked for."""

    id: str
    index: int
    size: int


class RuntimeRecord(StrictModel):
    """The public face of a runtime: identity, notebook, status and times, never a backend id.

    `fanout` names the fan-out a checkout child belongs to; None for any other runtime.
    """

    runtime_id: str
    conversation_id: str
    sender_id: str
    status: SessionLifecycleStatus
    created_at_ms: int
    updated_at_ms: int
    fanout: FanOutMember | None = None


class SessionRecord(StrictModel):
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
    #: The user the runtime belongs to (the identity-provider user who made it, a
    #: checkout's source's owner); None in records made before owners were kept, which
    #: belong to their sender. Never taken from a request body.
    owner: str | None = None
    #: The fan-out (a checkout of 2 or more) this checkout child was made by, else None.
    fanout: FanOutMember | None = None

    def belongs_to(self, user: str) -> bool:
        """Whether `user` may see and operate on this runtime (its owner, else its sender)."""
        return (self.owner if self.owner is not None else self.sender_id) == user

    def to_runtime(self) -> RuntimeRecord:
        """The public RuntimeRecord of this session."""
        return RuntimeRecord(
            runtime_id=self.session_id,
            conversation_id=self.conversation_id,
            sender_id=self.sender_id,
            status=self.status,
            created_at_ms=self.created_at_ms,
            updated_at_ms=self.updated_at_ms,
            fanout=self.fanout,
        )


class BackendCheckpointRef(StrictModel):
    """Internal reference to a backend snapshot; never returned by a route.

    `provider_snapshot_id` is the E2B snapshot id, or the blob-store manifest id of a
    local workspace snapshot; `None` once delete-snapshot has cleared it.
    """

    backend_kind: str
    backend_id: str
    provider_snapshot_id: str | None
    created_at_ms: int = Field(default_factory=now_ms)
    details: dict[str, Any] = Field(default_factory=dict)


class UnrestorableValue(StrictModel):
    """A kernel variable a checkpoint could not keep, shown at checkpoint and at restore."""

    name: str
    type: str
    reason: str


class ContextCapture(StrictModel):
    """What a session-context capture produced: its signed manifest and what it cost."""

    manifest_id: str
    bytes_written: int = Field(default=0, ge=0)
    #: What the blob catalogue's log took beyond those bytes (page images of its rows).
    database_bytes: int = Field(default=0, ge=0)
    unrestorable: list[UnrestorableValue] = Field(default_factory=list)
    execution_count: int | None = Field(default=None, ge=0)
    #: Cells the kernel ran, with or without history (the execution count moves only with).
    cells_run: int | None = Field(default=None, ge=0)
    #: The kernel process that was captured (drawn when it started; a restart draws anew).
    kernel_process: str | None = None
    #: The first cell whose automatic checkpoint (`%autocheckpoint`) could not be recorded,
    #: when no checkpoint has held the kernel's state since: an undo would lose it.
    unrecorded_cell: int | None = Field(default=None, ge=0)


class AutoCheckpointCell(StrictModel):
    """The cell an automatic checkpoint (`%autocheckpoint`) was taken after.

    A field of the checkpoint, never of its metadata: which checkpoints a prune may thin is
    decided from it, so nothing a user writes into metadata can make a checkpoint automatic.
    """

    execution_count: int = Field(ge=0)
    source: str = Field(default="", max_length=MAX_CELL_SOURCE_LENGTH)
    failed: bool = False
    #: A cell that ran after this checkpoint's parent and before this cell, whose automatic
    #: checkpoint could not be recorded (the first such): undoing this cell alone is not
    #: possible, since no checkpoint holds the state just before it.
    unrecorded_before: int | None = Field(default=None, ge=0)


class RuntimeCheckpoint(StrictModel):
    """One checkpoint of a runtime: session snapshot, backend ref, session-context manifest.

    `automatic` says which cell `%autocheckpoint` took it after (None: taken on request);
    `pruned` that a prune dropped its variables and workspace snapshot (its row is history
    only). Both are the system's own fields: metadata is the user's and decides nothing.
    `replication` is where its bytes were durable when it was recorded, with a blob store
    replicated to an object store (`control.replication`): `local` (this server's disk;
    uploaded behind it) or `replicated` (in the bucket already); None without one.
    `document` is the notebook as the user saw it (None: the checkpoint holds none).
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
    replication: Literal["local", "replicated"] | None = None
    document: CheckpointDocument | None = None

    @property
    def document_manifest_id(self) -> str | None:
        """The blob-store manifest of the checkpoint's notebook document, if it holds one."""
        return self.document.manifest_id if self.document is not None else None

    def summary(
        self, replication: Literal["local", "replicated"] | None = None
    ) -> CheckpointSummary:
        """The public listing shape of this checkpoint (`replication`: its state now, when
        the caller knows better than the record)."""
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
            replication=replication or self.replication,
            document=self.document.info() if self.document is not None else NO_DOCUMENT,
        )


class CheckpointSummary(StrictModel):
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
    #: With an object store: `local` (on the server that took it, uploading) or
    #: `replicated` (in the object store: any server can restore it); None without one.
    replication: Literal["local", "replicated"] | None = None
    #: Where its notebook document came from and how many cells it has (`pending` while a
    #: front end may still send the notebook as the user sees it).
    document: DocumentInfo = NO_DOCUMENT


class BackendBinding(StrictModel):
    """Which backend carries a runtime, and how to find it again after a restart."""

    runtime_id: str
    backend_id: str
    kind: str
    details: dict[str, Any] = Field(default_factory=dict)


class Leftover(StrictModel):
    """A resource a cleanup could not free (a kernel that would not stop, a sandbox, snapshot
    or workspace that could not be deleted): recorded in the store, listed by `ditto doctor`.
    """

    kind: str
    resource_id: str
    runtime_id: str | None = None
    reason: str
    created_at_ms: int = Field(default_factory=now_ms)
