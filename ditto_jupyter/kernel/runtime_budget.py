"""What `%budget` and `ditto_jupyter.runtime_budget()` do in a kernel.

The budget lives in the data directory's budget file (`control.budget_registry`), which
the kernel opens itself, with or without a server: it knows the data directory
(`DITTO_DATA_DIR`) and its runtime id (`DITTO_RUNTIME_ID` under a server, the magics' own
runtime without one). This module parses the magic's limit, words its one-line answers
and builds the records table; the magic in `magics.py` only wires them.
"""

from __future__ import annotations

import os

from ditto_jupyter.control.budget_registry import (
    LimitSet,
    RuntimeBudget,
    RuntimeBudgetNotSet,
    RuntimeBudgets,
)
from ditto_jupyter.core.environment import RUNTIME_ID_ENV, default_data_dir
from ditto_jupyter.core.errors import InvalidRequest
from ditto_jupyter.kernel import this_kernel
from ditto_jupyter.worker.budget.records import BudgetRecord
from ditto_jupyter.worker.shared_budget import SharedTokenBudget

HISTORY_HEADERS = ["record", "status", "reserved", "charged", "replayed", "scope", "detail"]


def parse_limit(text: str) -> int:
    """`200000`, `200_000` or `200,000` as a token count; InvalidRequest names a bad one."""
    cleaned = text.replace(",", "").replace("_", "")
    if not cleaned.isdigit():
        raise InvalidRequest(f"LIMIT must be a whole number of tokens (like 200000), not {text!r}")
    return int(cleaned)


def runtime_budgets() -> RuntimeBudgets:
    """The budgets of the data directory this kernel uses (`DITTO_DATA_DIR` or the default)."""
    return RuntimeBudgets(default_data_dir())


def owner_text(budget: RuntimeBudget) -> str:
    """`runtime R`, or `runtime P (shared with checkout C)` for an inherited budget."""
    text = f"runtime {budget.owner_runtime_id}"
    return text + (f" (shared with checkout {budget.runtime_id})" if budget.inherited else "")


def limit_line(change: LimitSet) -> str:
    """The one line `%budget LIMIT` prints: the limit, the figures, what admission did."""
    after = change.after
    limit = (
        f"limit {after.limit:,} tokens"
        if change.before is None
        else f"limit {change.before.limit:,} -> {after.limit:,} tokens"
    )
    line = (
        f"token budget of {owner_text(change.budget)}: {limit}; {after.charged:,} charged, "
        f"{after.reserved:,} reserved, {after.remaining:,} remaining"
    )
    if change.closed_admission:
        used = after.charged + after.reserved
        return line + (
            f"; admission closed: the limit is below the {used:,} tokens already charged and "
            "reserved (raise it to reopen)"
        )
    if change.reopened_admission:
        return line + "; admission reopened"
    if after.closed:
        return line + f"; admission stays closed ({after.closed_reason})"
    return line


def view_title(budget: RuntimeBudget) -> str:
    """The heading of a runtime's TokenBudgetView."""
    return f"token budget of {owner_text(budget)}"


def history_rows(records: list[BudgetRecord]) -> list[list[str]]:
    """The rows of `%budget --history`, oldest first."""
    return [
        [
            str(record.id),
            record.status,
            f"{record.reservation:,}",
            f"{record.charge:,}",
            f"{record.replayed_tokens:,}",
            ", ".join(f"{key}={value}" for key, value in record.scope.items()),
            record.detail or "",
        ]
        for record in records
    ]


def current_runtime_budget(runtime_id: str | None = None) -> SharedTokenBudget:
    """The shared budget `runtime_id` (default: this kernel's runtime) counts against.

    RuntimeBudgetNotSet when neither the runtime nor a runtime it was checked out from has
    one, or when no runtime is known (no id given, no magics loaded, no DITTO_RUNTIME_ID).
    """
    rid = runtime_id or this_kernel.runtime_id() or os.environ.get(RUNTIME_ID_ENV)
    if not rid:
        raise RuntimeBudgetNotSet(
            "this kernel has no runtime yet: load the magics (%load_ext ditto_jupyter) and "
            "set a budget with %budget LIMIT, or pass a runtime id"
        )
    return runtime_budgets().get(rid).authority
