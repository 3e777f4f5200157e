"""Token budgets of runtimes: one shared SQLite authority per runtime, in the data directory.

`%budget LIMIT` gives a runtime the budget `runtime:<id>` in `<data_dir>/budgets.sqlite`, a
`SharedTokenBudget`, so every kernel of the runtime (every process that opens the file)
draws on one limit. A checkout child has no budget of its own unless it is given one
(`%budget LIMIT --own`): it counts against its nearest ancestor's budget. Each runtime is a
branch of the budget it draws on (`BranchTokenBudget`): its reservations, charges and
refusals are shown beside the total, and a per-branch cap (`%budget --each N`, or
`%checkout ... --each N`) holds each branch inside the shared limit.

A runtime's ancestors come from its id: a checkout child's id is its source's id, `-`, and
12 hex digits (`child_runtime_id`), so stripping such suffixes walks back to the first
runtime. Only ids that own a budget in the file are taken, so an id that merely ends like a
child (a Jupyter session id is a UUID, whose last group is 12 hex digits) never picks up a
budget that is not its own or its source's. The lookup needs nothing but the file, so a
kernel, the server and a script find the same budget whatever store the control plane uses.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ditto_jupyter.core.errors import DittoError, InvalidRequest
from ditto_jupyter.core.models import BranchBudgetFigures, BudgetFigures
from ditto_jupyter.worker.branch_budget import BranchTokenBudget
from ditto_jupyter.worker.budget.records import BudgetSnapshot, check_count
from ditto_jupyter.worker.shared_budget import budget_names

BUDGET_FILE: Final = "budgets.sqlite"
_NAME_PREFIX: Final = "runtime:"
_CHILD_SUFFIX: Final = re.compile(r"^(?P<source>.+)-[0-9a-f]{12}$")


class RuntimeBudgetNotSet(DittoError, LookupError):
    """The runtime has no token budget, and neither has any runtime it was checked out from."""

    code = "RuntimeBudgetNotSet"
    http_status = 404


def budget_name(runtime_id: str) -> str:
    """The name of a runtime's own budget in the budget file."""
    return _NAME_PREFIX + runtime_id


def runtime_lineage(runtime_id: str) -> list[str]:
    """The runtime id, then the ids it may have been checked out from, nearest first."""
    lineage = [runtime_id]
    while match := _CHILD_SUFFIX.match(lineage[-1]):
        lineage.append(match["source"])
    return lineage


@dataclass(frozen=True)
class RuntimeBudget:
    """The budget a runtime counts against: its own, or an ancestor's (`inherited`)."""

    runtime_id: str
    owner_runtime_id: str
    authority: BranchTokenBudget  # its reservations made for `runtime_id`, the branch

    @property
    def inherited(self) -> bool:
        """True when the budget belongs to a runtime this one was checked out from."""
        return self.owner_runtime_id != self.runtime_id

    def status_counts(self) -> dict[str, int]:
        """How many records the budget holds of each status, by status name."""
        return dict(sorted(Counter(record.status for record in self.authority.records).items()))

    def figures(self) -> BudgetFigures:
        """The figures `%budget`, REST and `ditto budget` show, each branch beside the total."""
        snapshot = self.authority.snapshot()
        branches = self.authority.branch_figures()
        return BudgetFigures(
            owner_runtime_id=self.owner_runtime_id,
            inherited=self.inherited,
            limit=snapshot.limit,
            reserved=snapshot.reserved,
            charged=snapshot.charged,
            remaining=snapshot.remaining,
            replayed=snapshot.replayed,
            closed=snapshot.closed,
            closed_reason=snapshot.closed_reason,
            records=self.authority.record_count(),
            by_status=self.status_counts(),
            each=self.authority.each_limit(),
            refusals=sum(b.refused for b in branches),
            branches=[
                BranchBudgetFigures(
                    branch=b.branch, reserved=b.reserved, charged=b.charged, refused=b.refused
                )
                for b in branches
            ],
        )


@dataclass(frozen=True)
class LimitSet:
    """What `RuntimeBudgets.set_limit` did: which budget, and its figures before and after."""

    budget: RuntimeBudget
    before: BudgetSnapshot | None  # None: the budget was created
    after: BudgetSnapshot

    @property
    def closed_admission(self) -> bool:
        """True when this change closed admission (the new limit is below what is used)."""
        return self.after.closed and (self.before is None or not self.before.closed)

    @property
    def reopened_admission(self) -> bool:
        """True when this change reopened admission that an earlier lowering closed."""
        return self.before is not None and self.before.closed and not self.after.closed


def _check_runtime_id(runtime_id: object) -> str:
    if not isinstance(runtime_id, str) or not runtime_id:
        raise InvalidRequest(f"runtime id must be a non-empty string, not {runtime_id!r}")
    return runtime_id


class RuntimeBudgets:
    """The runtimes' budgets in one data directory's budget file."""

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.path = Path(data_dir) / BUDGET_FILE

    def _open(self, runtime_id: str, owner: str) -> RuntimeBudget:
        return RuntimeBudget(
            runtime_id,
            owner,
            BranchTokenBudget(self.path, name=budget_name(owner), branch=runtime_id),
        )

    def find(self, runtime_id: str) -> RuntimeBudget | None:
        """The budget `runtime_id` counts against, or None when it has none."""
        _check_runtime_id(runtime_id)
        names = set(budget_names(self.path))
        for candidate in runtime_lineage(runtime_id):
            if budget_name(candidate) in names:
                return self._open(runtime_id, candidate)
        return None

    def get(self, runtime_id: str) -> RuntimeBudget:
        """The budget `runtime_id` counts against; RuntimeBudgetNotSet when it has none."""
        found = self.find(runtime_id)
        if found is None:
            raise RuntimeBudgetNotSet(
                f"runtime {runtime_id} has no token budget; set one with %budget LIMIT"
            )
        return found

    def set_limit(self, runtime_id: str, limit: int, *, own: bool = False) -> LimitSet:
        """Set the limit of the budget `runtime_id` counts against, creating the runtime's
        own budget when it has none (or when `own` asks for one). No record is lost."""
        _check_runtime_id(runtime_id)
        try:
            limit = check_count(limit, "limit")
        except (TypeError, ValueError) as error:
            raise InvalidRequest(str(error)) from None
        found = self.find(runtime_id)
        if found is not None and not (own and found.inherited):
            change = found.authority.set_limit(limit)
            return LimitSet(found, change.before, change.after)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            authority = BranchTokenBudget(
                self.path, limit, name=budget_name(runtime_id), branch=runtime_id
            )
        except ValueError:  # another kernel of the runtime created it meanwhile: change it
            budget = self._open(runtime_id, runtime_id)
            change = budget.authority.set_limit(limit)
            return LimitSet(budget, change.before, change.after)
        return LimitSet(
            RuntimeBudget(runtime_id, runtime_id, authority), None, authority.snapshot()
        )

    def set_each(self, runtime_id: str, each: int | None) -> RuntimeBudget:
        """Cap each branch of the budget `runtime_id` counts against at `each` tokens (None:
        no cap), read at every reservation of every branch from now on;
        RuntimeBudgetNotSet when there is no budget."""
        if each is not None:
            try:
                each = check_count(each, "each", minimum=1)
            except (TypeError, ValueError) as error:
                raise InvalidRequest(str(error)) from None
        budget = self.get(runtime_id)
        budget.authority.set_each(each)
        return budget
