"""Pydantic models of the control plane, one module per concern:

- `fields`: field types within the request limits, and the strict base of every model;
- `records`: what the store keeps (runtimes, sessions, checkpoints, bindings, leftovers);
- `runtime_operations`: requests and answers of checkpoint, checkout, restore, pause,
  resume, close, delete-snapshot, pruning and the listings;
- `kernel_routes`: requests of the `self/...` routes, a kernel reporting on itself;
- `workspaces`: a runtime's files and the shell commands run there;
- `budgets`: a runtime's token budget;
- `lineage`: where a runtime comes from and what was checked out of it;
- `leases`: which process holds a live runtime, and until when.

Requests refuse unknown fields and wrong types (strict), so a front end that validates a
body with them answers 400 `InvalidRequest` naming the field. Every name is importable from
this package.
"""

from __future__ import annotations

from ditto_jupyter.core.models.budgets import (
    BudgetFigures,
    RuntimeBudgetResult,
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
    SelfPauseRequest,
    SelfPruneRequest,
    SelfRestoreRequest,
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
)
from ditto_jupyter.core.models.workspaces import (
    ExecRequest,
    ExecResponse,
    RuntimeWorkspace,
)

__all__ = [
    "MAX_CELL_SOURCE_LENGTH",
    "MAX_PAGE",
    "RUNTIME_LEASE",
    "AutoCheckpointCell",
    "AutoCheckpointPruneResult",
    "BackendBinding",
    "BackendCheckpointRef",
    "BudgetFigures",
    "CheckoutBranch",
    "CheckoutOrigin",
    "CheckpointDetail",
    "CheckpointListQuery",
    "CheckpointListResult",
    "CheckpointName",
    "CheckpointSummary",
    "ContextCapture",
    "ErrorBody",
    "ExecRequest",
    "ExecResponse",
    "Lease",
    "LeaseHolder",
    "Leftover",
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
    "RuntimeLineage",
    "RuntimeListResult",
    "RuntimePauseRequest",
    "RuntimePauseResult",
    "RuntimeRecord",
    "RuntimeRestoreRequest",
    "RuntimeRestoreResult",
    "RuntimeResumeRequest",
    "RuntimeResumeResult",
    "RuntimeWorkspace",
    "SelfCheckoutRequest",
    "SelfCheckpointRequest",
    "SelfPauseRequest",
    "SelfPruneRequest",
    "SelfRestoreRequest",
    "SessionLifecycleStatus",
    "SessionRecord",
    "ShellCommand",
    "StrictModel",
    "UnrestorableValue",
    "now_ms",
]
