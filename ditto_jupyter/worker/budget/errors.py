"""The token budget's errors: refused or exceeded budgets, bad usage, aborted calls."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ditto_jupyter.worker.budget.records import BudgetRecord


class BudgetError(Exception):
    """Base class of the token budget errors."""


class BudgetExceededError(BudgetError):
    """A reservation did not fit (nothing reserved, provider not called), admission is
    closed, or a call used more than its reservation (charged as reported; admission now
    closed). `record` and `response` are set in the last case."""

    def __init__(
        self,
        message: str,
        *,
        requested: int = 0,
        available: int = 0,
        record: BudgetRecord | None = None,
    ) -> None:
        super().__init__(message)
        self.requested = requested
        self.available = available
        self.record = record
        self.response: Any = None


class InvalidUsageError(BudgetError, ValueError):
    """Usage is missing or malformed. Raised by `usage_tokens`, and by a metered call with
    `require_usage=True` after the whole reservation has been charged (`record`,
    `response` set)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.record: BudgetRecord | None = None
        self.response: Any = None


class CallAbortedError(BudgetError):
    """The abort signal was set: before admission (nothing reserved or charged), or during
    an async call (the whole reservation charged, status `unknown`)."""


def describe_error(exc: BaseException) -> str:
    """`Type: message` of an exception, the message cut to 200 characters."""
    text = str(exc)
    name = type(exc).__name__
    return f"{name}: {text[:200]}" if text else name
