"""The worker API: portable state, BranchStore, token budgets, graphs and loops.

Pure Python with no Jupyter imports, and it imports nothing else from `ditto_jupyter`:
`from ditto_jupyter.worker import Runtime, Graph, TokenBudget, BranchStore,
checkpoint_state`. Every name below is its public API (the package root re-exported the
main ones before; those root imports still work for one release, with a
DeprecationWarning).

- portable state (`state`): `checkpoint_state`, `restore_state`, the `State*Error`s;
- `BranchStore` and its `Branch`es (`branch_store`);
- token budgets (`budget`): `TokenBudget`, `budgeted_provider`, `BudgetExceededError`, and
  `SharedTokenBudget`, one limit many processes draw on (`shared_budget`);
- graphs and loops: `Graph`, run by `Runtime().run` with `GraphCheckpointOptions`, and
  `Runtime().loop` with `LoopCheckpointOptions` (`graph`, `loop`, `runtime`).
"""

from __future__ import annotations

from ditto_jupyter.worker.branch_store import SNAPSHOT_FORMAT, Branch, BranchStore
from ditto_jupyter.worker.budget import BudgetExceededError, TokenBudget, budgeted_provider
from ditto_jupyter.worker.canonical import JSONValue, canonical_json, sha256_digest
from ditto_jupyter.worker.errors import (
    BranchClosedError,
    BranchConflictError,
    BranchError,
    StateDigestError,
    StateError,
    StateScopeError,
    StateValidationError,
    StateVersionError,
)
from ditto_jupyter.worker.graph import Graph, GraphCheckpointOptions, UncertainCheckpointError
from ditto_jupyter.worker.loop import LoopCheckpointOptions
from ditto_jupyter.worker.runtime import Runtime
from ditto_jupyter.worker.shared_budget import SharedTokenBudget
from ditto_jupyter.worker.state import (
    STATE_FORMAT,
    checkpoint_state,
    copy_state,
    restore_state,
    validate_state,
)

__all__ = [
    "SNAPSHOT_FORMAT",
    "STATE_FORMAT",
    "Branch",
    "BranchClosedError",
    "BranchConflictError",
    "BranchError",
    "BranchStore",
    "BudgetExceededError",
    "Graph",
    "GraphCheckpointOptions",
    "JSONValue",
    "LoopCheckpointOptions",
    "Runtime",
    "SharedTokenBudget",
    "StateDigestError",
    "StateError",
    "StateScopeError",
    "StateValidationError",
    "StateVersionError",
    "TokenBudget",
    "UncertainCheckpointError",
    "budgeted_provider",
    "canonical_json",
    "checkpoint_state",
    "copy_state",
    "restore_state",
    "sha256_digest",
    "validate_state",
]
