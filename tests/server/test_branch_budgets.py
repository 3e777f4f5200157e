"""One budget, N branches (issue 44 §2), on real kernels of a real Jupyter server.

A source runtime with a token budget is checked out 8 times at once with a per-branch cap
(`%checkout start --count 8 --each N`); each child kernel then makes 20 concurrent calls
through a fake model (`tests/fakes/fake_model.py`, random latencies) metered by the
runtime budget. The two public failure modes: caps frozen at fork time that let the
children spend many times the limit, and a shared cap that starves the children without a
word. Here the total charged never passes the limit, no branch passes its cap, every
refusal names its branch in that branch's output, and the budget records every refusal;
the budget view (REST, `%budget --branches`) shows each branch beside the total.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ditto_jupyter.control.budget_registry import RuntimeBudgets
from tests.server.live_server import LiveServer

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
LIMIT = 20_000
EACH = 2_500
RESERVE = 500
CALLS = 20

FAN = """
import sys, threading
sys.path.insert(0, {repo!r})
from tests.fakes.fake_model import FakeModel
from ditto_jupyter import runtime_budget
from ditto_jupyter.worker import budgeted_provider
from ditto_jupyter.worker.budget.errors import BudgetExceededError
metered = budgeted_provider(FakeModel(seed={seed}), runtime_budget(), reserve_tokens={reserve})
refused = []
def call(i):
    try:
        metered.invoke({{'i': i}})
    except BudgetExceededError as error:
        refused.append(str(error))
threads = [threading.Thread(target=call, args=(i,)) for i in range({calls})]
for t in threads: t.start()
for t in threads: t.join()
for line in refused: print('refused:', line)
print('done', len(refused))
"""


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveServer]:
    with LiveServer(tmp_path / "branch-budgets") as server:
        yield server


def kernel_of(live: LiveServer, runtime_id: str) -> str:
    return str(live.request("GET", f"api/sessions/{runtime_id}").json()["kernel"]["id"])


def test_eight_branches_share_one_budget_never_overspent_never_silent(live: LiveServer) -> None:
    session = live.open_notebook("explore.ipynb")
    rid, kernel = session["id"], session["kernel"]["id"]
    assert live.execute(kernel, f"%budget {LIMIT}").startswith("token budget of runtime")
    live.execute(kernel, "x = 1\n%checkpoint start")
    out = live.execute(kernel, f"%checkout start --count 8 --each {EACH}")
    children = re.findall(rf"\[\d\] runtime ({re.escape(rid)}-[0-9a-f]{{12}})", out)
    assert len(set(children)) == 8, out
    assert f"each branch at most {EACH:,} tokens" in out, out

    def fan(item: tuple[int, str]) -> tuple[str, str]:
        seed, child = item
        code = FAN.format(repo=str(REPO), seed=seed, reserve=RESERVE, calls=CALLS)
        return child, live.execute(kernel_of(live, child), code)

    with ThreadPoolExecutor(8) as pool:  # the 8 kernels call at the same time
        outputs = dict(pool.map(fan, enumerate(children)))

    budget = RuntimeBudgets(live.data_dir).get(rid)
    authority = budget.authority
    snapshot = authority.snapshot()
    assert snapshot.reserved == 0
    assert snapshot.charged <= LIMIT  # never overspent
    branches = {b.branch: b for b in authority.branch_figures()}
    printed = 0
    for child, text in outputs.items():
        lines = [line for line in text.splitlines() if line.startswith("refused:")]
        assert text.strip().endswith(f"done {len(lines)}"), text
        printed += len(lines)
        for line in lines:  # never silent: each refusal names its own branch
            assert f"branch {child} " in line, line
        figures = branches[child]
        assert figures.charged <= EACH  # the cap, read at every reservation
        assert figures.refused == len(lines)
    assert printed > 0  # the limit and the caps did refuse calls
    assert sum(b.charged for b in branches.values()) == snapshot.charged
    refusals = authority.refusals()
    assert len(refusals) == printed  # the budget records every refusal
    assert {r.branch for r in refusals} <= set(children)

    code, body = live.api("GET", f"{children[0]}/budget")
    assert code == 200, body
    view = body["budget"]
    assert (view["owner_runtime_id"], view["each"], view["refusals"]) == (rid, EACH, printed)
    rest = {b["branch"]: b for b in view["branches"]}
    assert set(children) <= set(rest)
    assert sum(b["charged"] for b in rest.values()) == view["charged"] == snapshot.charged

    table = live.execute(kernel, "table = %budget --branches\nprint(table)")
    for child in children:
        assert child in table
    assert "total" in table

    # the cap is read at every reservation, never frozen at fork time: raised, it admits
    assert live.execute(kernel, f"%budget --each {LIMIT}").startswith("token budget of runtime")
    assert authority.each_limit() == LIMIT
