"""BranchTokenBudget: branches of one shared budget, a per-branch cap read at every
reservation (never frozen when a branch was opened), and every refusal recorded, naming
its branch."""

from __future__ import annotations

from pathlib import Path

import pytest

from ditto_jupyter.worker.branch_budget import BranchTokenBudget
from ditto_jupyter.worker.budget.errors import BudgetExceededError
from ditto_jupyter.worker.shared_budget import SharedTokenBudget


def test_the_cap_is_read_at_every_reservation_and_refusals_are_recorded(tmp_path: Path) -> None:
    path = tmp_path / "budgets.sqlite"
    source = BranchTokenBudget(path, 1_000, name="shared", branch="src")
    a = source.for_branch("src-a")
    b = BranchTokenBudget(path, name="shared", branch="src-b")  # opened before the cap
    held = a.reserve(300)
    source.set_each(400)  # set after both branches were opened: applies to them at once
    with pytest.raises(BudgetExceededError, match=r"^branch src-a refused: .*cap of 400"):
        a.reserve(200)
    b.settle(b.reserve(400), 350)
    a.settle(held, 250)
    a.settle(a.reserve(150), 100)  # 250 charged + 150 fits 400
    source.set_each(None)
    with pytest.raises(BudgetExceededError, match=r"^branch src-b refused: .*does not fit"):
        b.reserve(900)  # the shared limit: 1,000 - 700 charged
    assert source.snapshot().charged == 700
    figures = {f.branch: (f.reserved, f.charged, f.refused) for f in source.branch_figures()}
    assert figures == {"src-a": (0, 350, 1), "src-b": (0, 350, 1)}
    assert [(r.branch, r.tokens) for r in source.refusals()] == [("src-a", 200), ("src-b", 900)]
    assert source.refusal_count() == 2


def test_a_budget_file_made_before_branches_opens_and_counts(tmp_path: Path) -> None:
    path = tmp_path / "budgets.sqlite"
    old = SharedTokenBudget(path, 500, name="old")
    old.settle(old.reserve(100), 80)
    branch = BranchTokenBudget(path, name="old", branch="child")
    branch.settle(branch.reserve(100), 20)
    figures = {f.branch: f.charged for f in branch.branch_figures()}
    assert figures == {"child": 20, None: 80}
    assert branch.snapshot().charged == 100
