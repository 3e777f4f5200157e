"""Errors of the worker's portable state and BranchStore.

Every state error derives from `StateError`, every branch error from `BranchError`, so a
caller can catch one family without knowing the details.
"""

from __future__ import annotations

from collections.abc import Iterable


class StateError(Exception):
    """Portable state could not be validated, saved or restored."""


class StateValidationError(StateError, ValueError):
    """A value is not JSON state; `path` names the offending value, e.g. `$.messages[3].fn`."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class StateScopeError(StateError):
    """Saved state (or a snapshot) belongs to another scope (or store id)."""


class StateVersionError(StateError):
    """Saved state was written for another version of the application's state."""


class StateDigestError(StateError):
    """The saved digest does not match the state: the saved form was altered or corrupted."""


class BranchError(Exception):
    """A BranchStore or Branch operation was refused."""


class BranchClosedError(BranchError):
    """The branch was already committed or discarded (or its parent branch was)."""


class BranchConflictError(BranchError):
    """The parent moved since the fork; nothing was applied (no implicit merge)."""

    def __init__(self, expected_revision: int, actual_revision: int, namespaces: Iterable[str]):
        self.expected_revision = expected_revision
        self.actual_revision = actual_revision
        self.namespaces: tuple[str, ...] = tuple(sorted(namespaces))
        names = ", ".join(self.namespaces) or "(no namespaces)"
        super().__init__(
            f"branch forked at revision {expected_revision} but the parent is at revision "
            f"{actual_revision}; not committed: {names}"
        )
