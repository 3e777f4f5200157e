"""What `%budget` and `ditto_jupyter.runtime_budget()` do in a kernel.

The budget lives in the data directory's budget file (`control.budget_registry`), which
the kernel opens itself, with or without a server: it knows the data directory
(`DITTO_DATA_DIR`) and its runtime id (`DITTO_RUNTIME_ID` under a server, the magics' own
runtime without one). This module parses the magic's limit, words its one-line answers
and builds the records table; the magic in `magics.py` only wires them.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from ditto_jupyter.control.budget_registry import (
    LimitSet,
    RuntimeBudget,
    RuntimeBudgetNotSet,
    RuntimeBudgets,
)
from ditto_jupyter.core.environment import RUNTIME_ID_ENV, default_data_dir
from ditto_jupyter.core.errors import InvalidRequest
from ditto_jupyter.kernel import this_kernel
from ditto_jupyter.kernel.magic_results import TableResult
from ditto_jupyter.worker.budget.records import BudgetRecord
from ditto_jupyter.worker.shared_budget import SharedTokenBudget

HISTORY_HEADERS = ["record", "status", "reserved", "charged", "replayed", "scope", "detail"]
BRANCH_HEADERS = ["branch", "reserved", "charged", "refused"]


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


def set_each(runtime_id: str, text: str) -> RuntimeBudget:
    """`--each N`: cap each branch of the budget `runtime_id` counts against (0: no cap)."""
    each = parse_limit(text)
    return runtime_budgets().set_each(runtime_id, each or None)


def each_line(budget: RuntimeBudget) -> str:
    """The line `--each` prints: the cap, read at every reservation of every branch."""
    each = budget.authority.each_limit()
    cap = f"each branch at most {each:,} tokens" if each else "no cap per branch"
    limit = budget.authority.snapshot().limit
    return f"token budget of {owner_text(budget)}: {cap} (inside the limit of {limit:,})"


def branch_table(budget: RuntimeBudget) -> TableResult:
    """`%budget --branches`: each branch's reservations, charges and refusals, then the
    total."""
    figures = budget.figures()
    rows = [
        [b.branch or "(unrecorded)", f"{b.reserved:,}", f"{b.charged:,}", f"{b.refused:,}"]
        for b in figures.branches
    ]
    rows.append(["total", f"{figures.reserved:,}", f"{figures.charged:,}", f"{figures.refusals:,}"])
    return TableResult(BRANCH_HEADERS, rows, figures)


def budget_magic(
    args: argparse.Namespace, runtime_id: str, view: Callable[[RuntimeBudget], Any]
) -> Any:
    """What `%budget` does with its arguments (`view` makes the live view)."""
    if args.limit is not None:
        for flag in ("history", "branches"):
            if getattr(args, flag):
                raise InvalidRequest(f"%budget takes a LIMIT or --{flag}, not both")
        limit = parse_limit(args.limit)
        print(limit_line(runtime_budgets().set_limit(runtime_id, limit, own=args.own)))
        if args.each is not None:
            print(each_line(set_each(runtime_id, args.each)))
        return None
    if args.own:
        raise InvalidRequest("--own needs a LIMIT: %budget LIMIT --own")
    if args.each is not None:
        print(each_line(set_each(runtime_id, args.each)))
        return None
    budget = runtime_budgets().get(runtime_id)
    if args.history and args.branches:
        raise InvalidRequest("%budget takes --history or --branches, not both")
    if args.history:
        records = budget.authority.records
        return TableResult(HISTORY_HEADERS, history_rows(records), records)
    if args.branches:
        return branch_table(budget)
    return view(budget)
