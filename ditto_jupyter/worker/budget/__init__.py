"""Token budgets that are never overspent: reserve before a provider call, settle after.

A budget admits a call only if its reservation (an upper bound of the whole request's
tokens) fits beside everything already reserved and charged; the check and the
reservation happen in one atomic step. A successful call settles to its actual usage; a
failure or cancellation without usage, and a response with invalid or missing usage,
charge the whole reservation. Usage above the reservation is charged as reported, raises
`BudgetExceededError` and closes admission for good. Nothing charged is ever undone.

`TokenBudget` is the in-process authority (one lock). `SharedTokenBudget`
(`ditto_jupyter.worker.shared_budget`) implements the same `BudgetAuthority` interface
on a SQLite file, so many processes (every kernel of a Jupyter server) draw on one limit.
`budgeted_provider` wraps a provider's `invoke` / `ainvoke` around either.

The reservation estimate must bound the entire request (input, maximum output, protocol
overhead, hidden reasoning). An estimator without that guarantee gives conservative
admission, not a physical hard limit.

Modules: `usage` (normalising a provider's usage report), `records` (statuses, scopes,
reservations, records), `authority` (the `BudgetAuthority` interface and `TokenBudget`),
`provider` (`budgeted_provider`), `errors`.
"""

from __future__ import annotations

from ditto_jupyter.worker.budget.authority import BudgetAuthority, TokenBudget
from ditto_jupyter.worker.budget.errors import (
    BudgetError,
    BudgetExceededError,
    CallAbortedError,
    InvalidUsageError,
)
from ditto_jupyter.worker.budget.provider import BudgetedProvider, budgeted_provider
from ditto_jupyter.worker.budget.records import (
    EXCEEDED,
    FAILED,
    INVALID_USAGE,
    RELEASED,
    REPLAYED,
    SETTLED,
    UNKNOWN,
    BudgetRecord,
    BudgetSnapshot,
    Reservation,
    Scope,
)
from ditto_jupyter.worker.budget.usage import response_usage, usage_snapshot, usage_tokens

__all__ = [
    "EXCEEDED",
    "FAILED",
    "INVALID_USAGE",
    "RELEASED",
    "REPLAYED",
    "SETTLED",
    "UNKNOWN",
    "BudgetAuthority",
    "BudgetError",
    "BudgetExceededError",
    "BudgetRecord",
    "BudgetSnapshot",
    "BudgetedProvider",
    "CallAbortedError",
    "InvalidUsageError",
    "Reservation",
    "Scope",
    "TokenBudget",
    "budgeted_provider",
    "response_usage",
    "usage_snapshot",
    "usage_tokens",
]
