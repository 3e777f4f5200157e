"""Pydantic models of the control plane, one module per concern:

- `fields`: field types within the request limits, and the strict base of every model;
- `records`: what the store keeps (runtimes, sessions, checkpoints, bindings, leftovers);
- `runtime_operations`: requests and answers of checkpoint, checkout, restore, pause,
  resume, close, delete-snapshot, pruning and the listings;
- `kernel_routes`: requests of the `self/...` routes, a kernel reporting on itself;
- `workspaces`: a runtime's files and the shell commands run there;
- `budgets`: a runtime's token budget;
- `lineage`: where a runtime comes from and what was checked out of it;
- `leases`: which process holds a live runtime, and until when;
- `documents`: the notebook document a checkpoint holds, and where it came from;
- `comparisons`: what a checkpoint holds, and what changed between two points in time.

Requests refuse unknown fields and wrong types (strict), so a front end that validates a
body with them answers 400 `InvalidRequest` naming the field. Every name is importable from
this package.
"""

from __future__ import annotations

from ditto_jupyter.core.models.budgets import (
    BudgetFigures,
    RuntimeBudgetResult,
)
from ditto_jupyter.core.models.comparisons import (
    LIVE,
    AlignedBy,
    CellChange,
    CellEntry,
    CellsCounted,
    CellsDiff,
    CheckpointContents,
    DiffSide,
    DocumentHeld,
    FileChange,
    FileEntry,
    FilesDiff,
    FilesHeld,
    RuntimeDiffRequest,
    RuntimeDiffResult,
    Variable,
    VariableChange,
    VariablesDiff,
)
from ditto_jupyter.core.models.documents import (
    NO_DOCUMENT,
    CheckpointDocument,
    CheckpointDocumentRequest,
    CheckpointDocumentResult,
    DocumentInfo,
    DocumentOrigin,
    DocumentSource,
    NotebookDocument,
)
from ditto_jupyter.core.models.fields import (
    MAX_CELL_SOURCE_LENGTH,
    MAX_PAGE,
    CheckpointName,
    ErrorBody,
    RequestId,
    RequestMetadata,
    RequestText,
    ShellCommand,
    StrictModel,
    now_ms,
)
from ditto_jupyter.core.models.kernel_routes import (
    SelfCheckoutRequest,
    SelfCheckpointRequest,
    SelfDiffRequest,
    SelfPauseRequest,
    SelfPruneRequest,
    SelfRestoreRequest,
    SelfUndoRequest,
)
from ditto_jupyter.core.models.leases import RUNTIME_LEASE, Lease, LeaseHolder
from ditto_jupyter.core.models.lineage import (
    CheckoutBranch,
    CheckoutOrigin,
    RuntimeLineage,
)
from ditto_jupyter.core.models.records import (
    AutoCheckpointCell,
    BackendBinding,
    BackendCheckpointRef,
    CheckpointSummary,
    ContextCapture,
    Leftover,
    RuntimeCheckpoint,
    RuntimeRecord,
    SessionLifecycleStatus,
    SessionRecord,
    UnrestorableValue,
)
from ditto_jupyter.core.models.runtime_operations import (
    AutoCheckpointPruneResult,
    CheckpointDetail,
    CheckpointListQuery,
    CheckpointListResult,
    RuntimeCheckoutRequest,
    RuntimeCheckoutResult,
    RuntimeCheckpointRequest,
    RuntimeCheckpointResult,
    RuntimeCheckpointSnapshotDeleteRequest,
    RuntimeCheckpointSnapshotDeleteResult,
    RuntimeCloseRequest,
    RuntimeCloseResult,
    RuntimeListResult,
    RuntimePauseRequest,
    RuntimePauseResult,
    RuntimeRestoreRequest,
    RuntimeRestoreResult,
    RuntimeResumeRequest,
    RuntimeResumeResult,
    RuntimeUndoRequest,
    RuntimeUndoResult,
)
from ditto_jupyter.core.models.workspaces import (
    ExecRequest,
    ExecResponse,
    RuntimeWorkspace,
)

__all__ = [
    "LIVE",
    "MAX_CELL_SOURCE_LENGTH",
    "MAX_PAGE",
    "NO_DOCUMENT",
    "RUNTIME_LEASE",
    "AlignedBy",
    "AutoCheckpointCell",
    "AutoCheckpointPruneResult",
    "BackendBinding",
    "BackendCheckpointRef",
    "BudgetFigures",
    "CellChange",
    "CellEntry",
    "CellsCounted",
    "CellsDiff",
    "CheckoutBranch",
    "CheckoutOrigin",
    "CheckpointContents",
    "CheckpointDetail",
    "CheckpointDocument",
    "CheckpointDocumentRequest",
    "CheckpointDocumentResult",
    "CheckpointListQuery",
    "CheckpointListResult",
    "CheckpointName",
    "CheckpointSummary",
    "ContextCapture",
    "DiffSide",
    "DocumentHeld",
    "DocumentInfo",
    "DocumentOrigin",
    "DocumentSource",
    "ErrorBody",
    "ExecRequest",
    "ExecResponse",
    "FileChange",
    "FileEntry",
    "FilesDiff",
    "FilesHeld",
    "Lease",
    "LeaseHolder",
    "Leftover",
    "NotebookDocument",
    "RequestId",
    "RequestMetadata",
    "RequestText",
    "RuntimeBudgetResult",
    "RuntimeCheckoutRequest",
    "RuntimeCheckoutResult",
    "RuntimeCheckpoint",
    "RuntimeCheckpointRequest",
    "RuntimeCheckpointResult",
    "RuntimeCheckpointSnapshotDeleteRequest",
    "RuntimeCheckpointSnapshotDeleteResult",
    "RuntimeCloseRequest",
    "RuntimeCloseResult",
    "RuntimeDiffRequest",
    "RuntimeDiffResult",
    "RuntimeLineage",
    "RuntimeListResult",
    "RuntimePauseRequest",
    "RuntimePauseResult",
    "RuntimeRecord",
    "RuntimeRestoreRequest",
    "RuntimeRestoreResult",
    "RuntimeResumeRequest",
    "RuntimeResumeResult",
    "RuntimeUndoRequest",
    "RuntimeUndoResult",
    "RuntimeWorkspace",
    "SelfCheckoutRequest",
    "SelfCheckpointRequest",
    "SelfDiffRequest",
    "SelfPauseRequest",
    "SelfPruneRequest",
    "SelfRestoreRequest",
    "SelfUndoRequest",
    "SessionLifecycleStatus",
    "SessionRecord",
    "ShellCommand",
    "StrictModel",
    "UnrestorableValue",
    "Variable",
    "VariableChange",
    "VariablesDiff",
    "now_ms",
]
