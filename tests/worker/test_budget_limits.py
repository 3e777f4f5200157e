"""Changing a shared budget's limit (what `%budget LIMIT` does), on a real SQLite file.

Raising or lowering keeps every record; lowering below what is used closes admission;
raising again reopens it only when the lowering closed it; other processes see the change.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from ditto_jupyter.worker.budget import BudgetExceededError, TokenBudget
from ditto_jupyter.worker.shared_budget import SharedTokenBudget, budget_names


def charged_budget(path: Path) -> SharedTokenBudget:
    """A budget of 1,000 with 300 charged (two settled calls) and 100 held by an open call."""
    budget = SharedTokenBudget(path, 1000, name="runtime:a")
    for charge in (100, 200):
        budget.settle(budget.reserve(250, {"label": "draft"}), charge)
    budget.reserve(100, {"label": "in flight"})
    return budget


def test_raising_and_lowering_keep_every_record(tmp_path: Path) -> None:
    budget = charged_budget(tmp_path / "budgets.sqlite")
    records = budget.records
    change = budget.set_limit(5000)
    assert (change.before.limit, change.after.limit) == (1000, 5000)
    assert not change.closed_admission and not change.reopened_admission
    assert budget.records == records
    assert (budget.charged, budget.reserved, budget.remaining) == (300, 100, 4600)
    change = budget.set_limit(400)  # exactly what is used: still admitting, nothing free
    assert not budget.closed and budget.remaining == 0
    assert budget.records == records
    assert budget.ledger_totals() == (100, 300, 0)


def test_lowering_below_what_is_used_closes_admission_and_raising_reopens_it(
    tmp_path: Path,
) -> None:
    budget = charged_budget(tmp_path / "budgets.sqlite")
    change = budget.set_limit(350)
    assert change.closed_admission
    snapshot = budget.snapshot()
    assert snapshot.closed and snapshot.limit == 350
    assert snapshot.closed_reason == (
        "limit lowered to 350, below the 400 tokens reserved and charged"
    )
    with pytest.raises(BudgetExceededError, match="admission is closed"):
        budget.reserve(1)
    budget.set_limit(200)  # lower still: the reason follows the newest limit
    assert budget.snapshot().closed_reason is not None
    assert "lowered to 200" in str(budget.snapshot().closed_reason)
    change = budget.set_limit(399)  # raised, but still below what is used
    assert budget.closed and not change.reopened_admission
    change = budget.set_limit(2000)
    assert change.reopened_admission and not budget.closed
    assert budget.snapshot().closed_reason is None
    budget.settle(budget.reserve(50), 10)
    assert (budget.charged, budget.reserved) == (310, 100)


def test_a_budget_closed_for_good_stays_closed_when_raised(tmp_path: Path) -> None:
    exceeded = SharedTokenBudget(tmp_path / "budgets.sqlite", 100, name="exceeded")
    with pytest.raises(BudgetExceededError):
        exceeded.settle(exceeded.reserve(10), 50)
    exceeded.set_limit(10_000)
    assert exceeded.closed and exceeded.snapshot().closed_reason == "reservation 1 exceeded"

    lowered_then_exceeded = SharedTokenBudget(tmp_path / "budgets.sqlite", 100, name="both")
    held = lowered_then_exceeded.reserve(50)
    lowered_then_exceeded.set_limit(10)
    with pytest.raises(BudgetExceededError):
        lowered_then_exceeded.settle(held, 60)  # the call in flight overran: closed for good
    lowered_then_exceeded.set_limit(10_000)
    assert lowered_then_exceeded.closed

    by_user = SharedTokenBudget(tmp_path / "budgets.sqlite", 100, name="user")
    by_user.settle(by_user.reserve(50), 50)
    by_user.set_limit(10)
    by_user.close("stop spending")
    by_user.set_limit(10_000)
    assert by_user.closed and by_user.snapshot().closed_reason == "stop spending"


def test_another_process_sees_the_new_limit(tmp_path: Path) -> None:
    path = tmp_path / "budgets.sqlite"
    SharedTokenBudget(path, 100, name="runtime:a").set_limit(777)
    code = (
        "import sys\n"
        "from ditto_jupyter.worker.shared_budget import SharedTokenBudget\n"
        "print(SharedTokenBudget(sys.argv[1], name='runtime:a').limit)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "777"


@pytest.mark.parametrize(
    ("limit", "error"),
    [(-1, ValueError), ("1000", TypeError), (True, TypeError), (1.5, TypeError)],
)
def test_a_bad_limit_is_refused_and_changes_nothing(
    tmp_path: Path, limit: object, error: type[Exception]
) -> None:
    budget = charged_budget(tmp_path / "budgets.sqlite")
    before, records = budget.snapshot(), budget.records
    with pytest.raises(error, match="limit"):
        budget.set_limit(limit)  # type: ignore[arg-type]
    assert (budget.snapshot(), budget.records) == (before, records)


def test_a_file_made_before_limit_changes_is_upgraded_in_place(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as connection:  # the schema as it was, with one budget in it
        connection.executescript(
            "CREATE TABLE token_budget (name TEXT PRIMARY KEY, limit_tokens INTEGER NOT NULL,"
            " reserved INTEGER NOT NULL DEFAULT 0, charged INTEGER NOT NULL DEFAULT 0,"
            " replayed INTEGER NOT NULL DEFAULT 0, closed INTEGER NOT NULL DEFAULT 0,"
            " closed_reason TEXT, settlements INTEGER NOT NULL DEFAULT 0,"
            " created_at_ms INTEGER NOT NULL,"
            " CHECK (closed = 1 OR reserved + charged <= limit_tokens));"
            "INSERT INTO token_budget (name, limit_tokens, charged, settlements, created_at_ms)"
            " VALUES ('default', 100, 40, 0, 0);"
        )
    budget = SharedTokenBudget(path)
    assert budget.set_limit(30).closed_admission
    assert budget.set_limit(50).reopened_admission
    assert (budget.limit, budget.charged) == (50, 40)


def test_budget_names_lists_a_files_budgets_without_creating_anything(tmp_path: Path) -> None:
    path = tmp_path / "budgets.sqlite"
    assert budget_names(path) == []
    assert not path.exists()
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE unrelated (x)")
    assert budget_names(path) == []
    SharedTokenBudget(path, 10, name="runtime:b")
    SharedTokenBudget(path, 10, name="runtime:a")
    assert budget_names(path) == ["runtime:a", "runtime:b"]


def test_record_count_counts_every_record(tmp_path: Path) -> None:
    for budget in (TokenBudget(1000), SharedTokenBudget(tmp_path / "b.sqlite", 1000)):
        assert budget.record_count() == 0
        budget.settle(budget.reserve(10), 5)
        budget.release(budget.reserve(10))
        budget.record_replay(7)
        budget.reserve(10)  # open: not a record yet
        assert budget.record_count() == len(budget.records) == 3


def test_records_since_gives_only_the_newer_records(tmp_path: Path) -> None:
    for budget in (TokenBudget(1000), SharedTokenBudget(tmp_path / "b.sqlite", 1000)):
        for charge in (1, 2, 3):
            budget.settle(budget.reserve(10), charge)
        budget.record_replay(7)
        assert budget.records_since(0) == budget.records
        assert [r.charge for r in budget.records_since(2)] == [3, 0]
        assert budget.records_since(4) == budget.records_since(99) == []
        with pytest.raises(ValueError, match="count must be at least 0"):
            budget.records_since(-1)
