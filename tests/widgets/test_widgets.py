"""TokenBudgetView and BranchStoreView driven in Python: what they show, their one-line
summaries, their buttons, and their polling (another process charging a shared budget, a
thread committing a branch). The comm messages in a real kernel: test_widgets_kernel.py."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ditto_jupyter.widgets import BranchStoreView, TokenBudgetView
from ditto_jupyter.widgets.token_budget_view import group_records, scope_group
from ditto_jupyter.worker.branch_store import BranchStore
from ditto_jupyter.worker.budget import BudgetExceededError, TokenBudget, budgeted_provider
from ditto_jupyter.worker.shared_budget import SharedTokenBudget

WIDGET_TEXT_LIMIT = 110  # ipywidgets cuts text/plain longer than this


def eventually(condition: Callable[[], bool], what: str) -> None:
    """Wait for a poller to catch up (a functional wait: generous, not a speed check)."""
    for _ in range(600):
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


@pytest.fixture
def views() -> Iterator[list[Any]]:
    made: list[Any] = []
    yield made
    for view in made:
        view.close()


def text_plain(view: Any) -> str:
    text: str = view._repr_mimebundle_()["text/plain"]
    return text


# ---- TokenBudgetView --------------------------------------------------------------------


def spend(budget: TokenBudget | SharedTokenBudget) -> None:
    """Settled, failed-without-usage, released, replayed and exceeded calls, in 3 scopes."""
    model = budgeted_provider(
        lambda request: {"usage": {"total_tokens": request["used"]}},
        budget,
        reserve_tokens=100,
        scope={"run_id": "nightly", "label": "draft"},
    )
    model.invoke({"used": 30})
    model.invoke({"used": 20})
    budget.settle(budget.reserve(50, {"run_id": "nightly", "branch_id": "b2"}), status="unknown")
    budget.release(budget.reserve(10))
    budget.record_replay(40, {"run_id": "nightly", "label": "draft"})
    with pytest.raises(BudgetExceededError):
        budget.settle(budget.reserve(10, {"label": "<b>loud</b>"}), 25)


def test_token_budget_view_shows_figures_records_by_scope_and_a_one_line_summary(
    views: list[Any],
) -> None:
    budget = TokenBudget(1000)
    view = TokenBudgetView(budget, title="demo budget", poll_interval=None)
    views.append(view)
    assert text_plain(view) == (
        "TokenBudgetView: 0 of 1,000 tokens charged, 0 reserved, 1,000 remaining; "
        "0 records; admitting"
    )
    assert "no records yet" in view._scopes.value
    budget.reserve(200)  # a call in flight
    spend(budget)
    assert view.refresh()
    summary = text_plain(view)
    assert summary == (
        "TokenBudgetView: 125 of 1,000 tokens charged, 200 reserved, 675 remaining; "
        "6 records; admission closed"
    )
    assert len(summary) <= WIDGET_TEXT_LIMIT and "\n" not in summary
    meter = view._meter.value
    assert "demo budget" in meter and "admission closed: reservation 7 exceeded" in meter
    assert "limit 1,000 &middot; charged 125 &middot; reserved 200 &middot; remaining 675" in meter
    assert [(g.scope, g.records, g.charged, g.replayed, g.status_text()) for g in view.groups] == [
        ("run nightly / label draft", 3, 50, 40, "settled 2, replayed 1"),
        ("run nightly / branch b2", 1, 50, 0, "unknown 1"),
        ("(no scope)", 1, 0, 0, "released 1"),
        ("label <b>loud</b>", 1, 25, 0, "exceeded 1"),
    ]
    assert "label &lt;b&gt;loud&lt;/b&gt;" in view._scopes.value  # scope text is escaped
    assert "<b>loud</b>" not in view._scopes.value + view._latest.value
    latest = view._latest.value
    newest_first = [
        latest.index(f"<td>{status}</td>") for status in ("exceeded", "replayed", "released")
    ]
    assert newest_first == sorted(newest_first)


def test_token_budget_view_redraws_only_when_the_budget_changed(views: list[Any]) -> None:
    budget = TokenBudget(100)
    view = TokenBudgetView(budget, poll_interval=None)
    views.append(view)
    redraws: list[str] = []
    view._meter.observe(lambda change: redraws.append(change["new"]), names="value")
    assert not view.refresh()
    budget.settle(budget.reserve(10), 0)  # reserved and settled at no charge: figures equal
    assert view.refresh() and len(redraws) == 0  # same meter, but a new record to show
    assert "1 record;" in text_plain(view)
    budget.settle(budget.reserve(10), 5)
    assert view.refresh() and len(redraws) == 1


def test_token_budget_view_follows_calls_of_another_process(
    tmp_path: Path, views: list[Any]
) -> None:
    path = tmp_path / "budgets.sqlite"
    budget = SharedTokenBudget(path, 5000, name="shared")
    view = TokenBudgetView(budget, poll_interval=0.05)
    views.append(view)
    assert view.polling
    code = (
        "import sys\n"
        "from ditto_jupyter.worker.shared_budget import SharedTokenBudget\n"
        "budget = SharedTokenBudget(sys.argv[1], name='shared')\n"
        "budget.settle(budget.reserve(300, {'run_id': 'elsewhere'}), 123)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(path)], check=True)
    eventually(lambda: "123 of 5,000 tokens charged" in repr(view), "the view saw the charge")
    assert [g.scope for g in view.groups] == ["run elsewhere"]
    view.close()
    assert not view.polling


def test_token_budget_view_says_when_the_budget_cannot_be_read(
    tmp_path: Path, views: list[Any]
) -> None:
    path = tmp_path / "budgets.sqlite"
    budget = SharedTokenBudget(path, 100, name="doomed")
    view = TokenBudgetView(budget, poll_interval=None)
    views.append(view)
    with sqlite3.connect(path) as connection:
        connection.execute("DELETE FROM token_budget WHERE name = 'doomed'")
    assert view.refresh()
    assert "cannot read the budget: LookupError: budget &#x27;doomed&#x27; vanished" in (
        view._meter.value
    )
    assert text_plain(view).startswith("TokenBudgetView: cannot read the budget (LookupError")


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"budget": object()}, TypeError, "needs a token budget, not object"),
        ({"poll_interval": 0}, ValueError, "poll_interval must be a positive number"),
        ({"poll_interval": True}, ValueError, "poll_interval must be a positive number"),
        ({"recent": -1}, ValueError, "recent must be a number of records"),
    ],
)
def test_token_budget_view_refuses_bad_arguments(
    arguments: dict[str, Any], error: type[Exception], message: str
) -> None:
    kwargs = {"budget": TokenBudget(10), **arguments}
    with pytest.raises(error, match=message):
        TokenBudgetView(kwargs.pop("budget"), **kwargs)


def test_scope_groups_use_run_branch_and_label() -> None:
    assert scope_group({"run_id": "r", "branch_id": "b", "label": "l", "other": 1}) == (
        "run r / branch b / label l"
    )
    assert scope_group({"other": 1}) == "(no scope)"
    assert group_records([]) == []


# ---- BranchStoreView --------------------------------------------------------------------


def branch_lines(view: BranchStoreView) -> list[str]:
    return [row.children[0].value for row in view._branches.children]


def test_branch_store_view_shows_namespaces_and_open_branches(views: list[Any]) -> None:
    store = BranchStore("agents")
    setup = store.fork()
    setup.set("context", {"topic": "tides", "notes": ["x" * 100]})
    setup.set("<tag>", 1)
    setup.commit()
    a, b = store.fork(), store.fork()
    a.set("memory", {"note": "from a"})
    nested = b.fork()
    nested.delete("context")
    view = BranchStoreView(store, poll_interval=None)
    views.append(view)
    assert text_plain(view) == (
        "BranchStoreView: 'agents' at revision 1, 2 namespaces, 3 open branches"
    )
    assert "at revision 1: 2 namespaces, 3 open branches" in view._header.value
    namespaces = view._namespaces.value
    assert "&lt;tag&gt;" in namespaces and "<tag>" not in namespaces
    assert "{&quot;topic&quot;:&quot;tides&quot;,&quot;notes&quot;:[&quot;xxx" in namespaces
    assert "…" in namespaces  # long values are cut
    assert branch_lines(view) == [
        "branch #2 of the store at revision 1; writes: memory",
        "branch #3 of the store at revision 1; writes: nothing yet",
        "branch #4 of branch #3 at revision 0; writes: context",
    ]
    assert sorted(view.buttons) == [(2, "commit"), (2, "discard"), (3, "commit"), (3, "discard"),
                                    (4, "commit"), (4, "discard")]  # fmt: skip
    assert view.buttons[(2, "commit")].tooltip == "Commit branch #2"


def test_branch_store_view_buttons_commit_discard_and_show_a_conflict(views: list[Any]) -> None:
    store = BranchStore("agents")
    first, second, third = store.fork(), store.fork(), store.fork()
    first.set("memory", {"note": "first"})
    second.set("memory", {"note": "second"})
    view = BranchStoreView(store, poll_interval=None)
    views.append(view)
    second_commit = view.buttons[(2, "commit")]
    view.buttons[(1, "commit")].click()
    assert view.message == "committed branch #1: revision 1"
    assert view.buttons[(2, "commit")] is second_commit  # a redraw keeps open branches' rows
    assert (1, "commit") not in view.buttons
    assert store.get("memory") == {"note": "first"}
    assert branch_lines(view) == [
        "branch #2 of the store at revision 0; writes: memory; stale: its parent is at "
        "revision 1, so a commit would be refused",
        "branch #3 of the store at revision 0; writes: nothing yet; stale: its parent is at "
        "revision 1, so a commit would be refused",
    ]
    assert text_plain(view).endswith("2 open branches (2 stale)")
    view.buttons[(2, "commit")].click()
    assert view.message == (
        "commit of branch #2 refused: it expected revision 0, the parent is at revision 1; "
        "not committed: memory"
    )
    assert view.last_conflict is not None
    assert (view.last_conflict.expected_revision, view.last_conflict.actual_revision) == (0, 1)
    assert "color:#b00" in view._status.value
    assert store.get("memory") == {"note": "first"} and store.revision == 1
    view.buttons[(3, "discard")].click()
    assert view.message == "discarded branch #3"
    assert [b.serial for b in store.open_branches()] == [2]  # the refused one stays open
    assert view.commit(third) is None and "already discarded" in view.message


def test_branch_store_view_follows_commits_made_while_it_polls(views: list[Any]) -> None:
    store = BranchStore("agents")
    view = BranchStoreView(store, poll_interval=0.05)
    views.append(view)

    def agent() -> None:
        branch = store.fork()
        branch.set("result", 42)
        branch.commit()

    worker = threading.Thread(target=agent)
    worker.start()
    worker.join()
    eventually(lambda: "at revision 1, 1 namespace, 0 open branches" in repr(view), "redrawn")
    assert "result" in view._namespaces.value


def test_branch_store_view_refuses_what_is_not_a_branch_store() -> None:
    with pytest.raises(TypeError, match="needs a BranchStore, not dict"):
        BranchStoreView({})  # type: ignore[arg-type]


def test_token_budget_view_reads_only_records_it_has_not_seen(
    tmp_path: Path, views: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    budget = SharedTokenBudget(tmp_path / "budgets.sqlite", 10_000, name="big")
    for label in ("a", "b", "a"):
        budget.settle(budget.reserve(10, {"label": label}), 4)
    view = TokenBudgetView(budget, poll_interval=None)
    views.append(view)
    asked: list[int] = []
    read = budget.records_since
    monkeypatch.setattr(budget, "records_since", lambda n: asked.append(n) or read(n))
    budget.settle(budget.reserve(10, {"label": "b"}), 6)
    assert view.refresh()
    assert asked == [3]
    assert [(g.scope, g.records, g.charged) for g in view.groups] == [
        ("label a", 2, 8),
        ("label b", 2, 10),
    ]
    assert [r.charge for r in view.records] == [4, 4, 4, 6]
