"""The worker API, pure Python with no Jupyter imports: portable state, BranchStore."""

from __future__ import annotations

from ditto_jupyter.worker.branch_store import SNAPSHOT_FORMAT, Branch, BranchStore
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
    "JSONValue",
    "StateDigestError",
    "StateError",
    "StateScopeError",
    "StateValidationError",
    "StateVersionError",
    "canonical_json",
    "checkpoint_state",
    "copy_state",
    "restore_state",
    "sha256_digest",
    "validate_state",
]
