"""TokenBudgetView of a budget many branches draw on: each branch beside the total, its
cap and its refusals; nothing more for a budget of one branch."""

from __future__ import annotations

from pathlib import Path

import pytest

from ditto_jupyter.widgets import TokenBudgetView
from ditto_jupyter.worker.branch_budget import BranchTokenBudget
from ditto_jupyter.worker.budget.errors import BudgetExceededError


def test_the_view_shows_each_branch_and_its_refusals(tmp_path: Path) -> None:
    source = BranchTokenBudget(tmp_path / "b.sqlite", 1_000, name="shared", branch="src")
    view = TokenBudgetView(source, poll_interval=None)
    try:
        assert view._branches.value == ""  # one branch, no cap: the total says it all
        source.settle(source.reserve(100), 60)
        child = source.for_branch("src-1")
        child.settle(child.reserve(200), 150)
        source.set_each(250)
        with pytest.raises(BudgetExceededError):
            child.reserve(200)
        assert view.refresh()  # a refusal alone redraws the view
        shown = view._branches.value
        assert "each at most 250 tokens" in shown
        for text in ("src-1", "150", "src", "60"):
            assert text in shown
        assert shown.count("<tr>") == 3  # the header and the two branches
    finally:
        view.close()
