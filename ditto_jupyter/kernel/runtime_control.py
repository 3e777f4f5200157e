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
magic, so nobody else can), and return the control plane's own result models. This module
holds what they share (the protocol and its data); `server_control` and `local_control` are
the two implementations, and `control_choice.control_from_environment` chooses one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from ditto_jupyter.backends.base import ExecResult
from ditto_jupyter.core.environment import (
    DATA_DIR_ENV,
)
from ditto_jupyter.core.errors import UnsupportedBackend
from ditto_jupyter.core.models import (
    AutoCheckpointCell,
    AutoCheckpointPruneResult,
    CheckpointSummary,
    ContextCapture,
    RuntimeCheckoutResult,
    RuntimeCheckpoint,
    RuntimeCheckpointResult,
    RuntimeCompareResult,
    RuntimeDiffResult,
    RuntimePauseResult,
    RuntimeRecord,
    RuntimeResumeResult,
    RuntimeUndoResult,
    UnrestorableValue,
)

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
    #: The checkpoint it was taken after (its runtime's head then), if any.
    parent_checkpoint_id: str | None


@dataclass(frozen=True)
class UndoPlan:
    """What `%undo` does: the head to undo (the last cell's automatic checkpoint) and the
    checkpoint to go back to, with the namespace manifests of both."""

    head_id: str
    head_manifest: str | None
    cell: AutoCheckpointCell
    target: ResolvedCheckpoint
    #: What a message calls the runtime: its notebook's name (`control.undo.notebook_label`).
    notebook: str = ""
    #: The head's name (`cell-12`), if it has one.
    head_name: str | None = None


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
        self,
        checkpoint_id: str,
        conversation_id: str | None,
        sender_id: str | None,
        count: int = 1,
    ) -> RuntimeCheckoutResult:
        """`count` children of the checkpoint (1 to 20), each listed in `children`."""
        ...

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

    def diff(
        self, from_ref: str | None, to_ref: str | None, capture: ContextCapture | None
    ) -> RuntimeDiffResult:
        """Compare two checkpoints of this runtime, or one and this kernel (`"live"`: its
        `capture`, taken by the magic and not recorded)."""
        ...

    def compare(self, sides: list[tuple[str, str | None]]) -> RuntimeCompareResult:
        """2 to 8 (runtime, `at`) side by side (`at`: a checkpoint reference in that runtime,
        `"live"`, or None: live when it is live, else its head)."""
        ...

    def undo_plan(self) -> UndoPlan:
        """What undoing the last cell would do (Conflict when there is nothing to undo)."""
        ...

    def record_undo(self, checkpoint_id: str, undone_checkpoint_id: str) -> RuntimeUndoResult:
        """This kernel restored `checkpoint_id`'s variables: its files come back, it is the
        head."""
        ...


class Resolved:
    """A resolved checkpoint as the magics need it."""

    def __init__(
        self,
        checkpoint_id: str,
        runtime_id: str,
        name: str | None,
        context_manifest_id: str | None,
        unrestorable: list[UnrestorableValue],
        pruned: bool,
        parent_checkpoint_id: str | None = None,
    ) -> None:
        self.checkpoint_id = checkpoint_id
        self.runtime_id = runtime_id
        self.name = name
        self.context_manifest_id = context_manifest_id
        self.unrestorable = unrestorable
        self.pruned = pruned
        self.parent_checkpoint_id = parent_checkpoint_id


def resolved_of(checkpoint: RuntimeCheckpoint) -> Resolved:
    """A stored checkpoint as the magics need it."""
    return Resolved(
        checkpoint.checkpoint_id,
        checkpoint.runtime_id,
        checkpoint.name,
        checkpoint.context_manifest_id,
        checkpoint.unrestorable,
        checkpoint.pruned,
        checkpoint.parent_checkpoint_id,
    )


def local_workspace(runtime_id: str, path: object) -> Path:
    """The local workspace a control reported (UnsupportedBackend for a remote one)."""
    if not isinstance(path, str) or not path:
        raise UnsupportedBackend(
            f"runtime {runtime_id} keeps its files in a remote sandbox, not in a local "
            "workspace; reach them with %%sandbox"
        )
    return Path(path)


def data_dir_from_environment() -> Path | None:
    """The data directory `DITTO_DATA_DIR` names, if it is set."""
    return Path(os.environ[DATA_DIR_ENV]) if os.environ.get(DATA_DIR_ENV) else None
