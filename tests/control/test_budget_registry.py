"""Runtime budgets in a data directory: own, inherited by checkouts, `--own`, bad input.

Real SQLite files; the lineage is checked against the id the service gives checkouts.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from ditto_jupyter.control.budget_registry import (
    BUDGET_FILE,
    RuntimeBudgetNotSet,
    RuntimeBudgets,
    budget_name,
    runtime_lineage,
)
from ditto_jupyter.control.lifecycle import child_runtime_id
from ditto_jupyter.core.errors import InvalidRequest
from ditto_jupyter.worker.shared_budget import SharedTokenBudget, budget_names


def test_lineage_walks_back_through_the_ids_checkout_gives_children() -> None:
    root = uuid.uuid4().hex
    child = child_runtime_id(root)
    grandchild = child_runtime_id(child)
    assert runtime_lineage(grandchild) == [grandchild, child, root]
    assert runtime_lineage(root) == [root]


def test_a_runtime_without_a_budget_has_none(tmp_path: Path) -> None:
    budgets = RuntimeBudgets(tmp_path)
    assert budgets.find("r1") is None
    with pytest.raises(RuntimeBudgetNotSet, match="runtime r1 has no token budget"):
        budgets.get("r1")
    assert not (tmp_path / BUDGET_FILE).exists()  # looking creates nothing


def test_set_limit_creates_then_changes_the_runtimes_own_budget(tmp_path: Path) -> None:
    budgets = RuntimeBudgets(tmp_path)
    created = budgets.set_limit("r1", 1000)
    assert created.before is None and created.after.limit == 1000
    assert created.budget.owner_runtime_id == "r1" and not created.budget.inherited
    created.budget.authority.settle(created.budget.authority.reserve(100), 60)
    changed = budgets.set_limit("r1", 50)
    assert changed.before is not None and changed.before.limit == 1000
    assert changed.closed_admission and changed.after.charged == 60
    assert budgets.set_limit("r1", 70).reopened_admission
    assert budget_names(tmp_path / BUDGET_FILE) == [budget_name("r1")]
    assert budgets.get("r1").status_counts() == {"settled": 1}


def test_a_checkout_counts_against_its_sources_budget_unless_given_its_own(
    tmp_path: Path,
) -> None:
    budgets = RuntimeBudgets(tmp_path)
    source = uuid.uuid4().hex
    budgets.set_limit(source, 1000)
    child = child_runtime_id(source)
    grandchild = child_runtime_id(child)
    inherited = budgets.get(grandchild)
    assert (inherited.owner_runtime_id, inherited.inherited) == (source, True)
    inherited.authority.settle(inherited.authority.reserve(10), 10)
    assert budgets.get(source).authority.charged == 10  # one limit for the lineage

    shared = budgets.set_limit(child, 2000)  # without --own: the one limit changes
    assert shared.budget.owner_runtime_id == source
    assert budgets.get(source).authority.limit == 2000

    own = budgets.set_limit(child, 300, own=True)
    assert (own.budget.owner_runtime_id, own.before) == (child, None)
    assert budgets.get(grandchild).owner_runtime_id == child  # the nearest budget wins
    assert budgets.get(child).authority.charged == 0
    assert budgets.get(source).authority.limit == 2000
    again = budgets.set_limit(child, 400, own=True)  # --own on an own budget: changes it
    assert again.before is not None and again.before.limit == 300


def test_an_id_that_only_looks_like_a_child_takes_no_strangers_budget(tmp_path: Path) -> None:
    budgets = RuntimeBudgets(tmp_path)
    session_id = str(uuid.uuid4())  # a Jupyter session id: ends in 12 hex digits
    budgets.set_limit(session_id, 100)
    assert budgets.find(session_id.rsplit("-", 1)[0]) is None
    assert budgets.get(session_id).owner_runtime_id == session_id
    other = str(uuid.uuid4())
    assert budgets.find(other) is None


@pytest.mark.parametrize(
    ("runtime_id", "limit", "message"),
    [
        ("r1", -5, "limit must be at least 0"),
        ("r1", "100", "limit must be an integer"),
        ("r1", True, "limit must be an integer"),
        ("", 100, "runtime id must be a non-empty string"),
    ],
)
def test_bad_input_is_refused_and_leaves_the_budgets_as_they_were(
    tmp_path: Path, runtime_id: str, limit: object, message: str
) -> None:
    budgets = RuntimeBudgets(tmp_path)
    budgets.set_limit("r1", 1000)
    with pytest.raises(InvalidRequest, match=message):
        budgets.set_limit(runtime_id, limit)  # type: ignore[arg-type]
    assert budget_names(tmp_path / BUDGET_FILE) == ["runtime:r1"]
    assert budgets.get("r1").authority.limit == 1000


def test_a_budget_another_kernel_created_meanwhile_is_changed_not_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    budgets = RuntimeBudgets(tmp_path)

    def created_by_another_kernel_after_the_lookup(runtime_id: str) -> None:
        SharedTokenBudget(tmp_path / BUDGET_FILE, 500, name=budget_name(runtime_id))

    monkeypatch.setattr(budgets, "find", created_by_another_kernel_after_the_lookup)
    changed = budgets.set_limit("r1", 800)
    assert changed.before is not None and (changed.before.limit, changed.after.limit) == (500, 800)
    assert SharedTokenBudget(tmp_path / BUDGET_FILE, name=budget_name("r1")).limit == 800
