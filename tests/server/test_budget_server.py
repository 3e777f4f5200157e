"""%budget under a real Jupyter server: the REST route and `ditto budget` show the figures
the kernels charge, and a checkout counts against its source's budget until given its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from ditto_jupyter.control.budget_registry import RuntimeBudgets
from tests.server.live_server import LiveServer

pytestmark = pytest.mark.slow

CHARGE_THREE_CALLS = """
from ditto_jupyter import runtime_budget
from ditto_jupyter.worker import budgeted_provider
def model(request):
    return {'usage': {'input_tokens': request['words'], 'output_tokens': 5}}
metered = budgeted_provider(model, runtime_budget(), reserve_tokens=100,
                            scope={'run_id': 'server-test'})
for words in (10, 20, 30):
    metered.invoke({'words': words})
"""


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with LiveServer(tmp_path_factory.mktemp("budget-server")) as server:
        yield server


def ditto(live: LiveServer, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DITTO_SERVER_URL": live.url, "DITTO_TOKEN": live.token}
    return subprocess.run(
        [sys.executable, "-m", "ditto_jupyter.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def rest_budget(live: LiveServer, runtime_id: str) -> dict[str, Any]:
    code, body = live.api("GET", f"{runtime_id}/budget")
    assert code == 200, body
    return body  # type: ignore[no-any-return]


def test_rest_and_cli_show_what_the_kernels_charged_and_checkouts_share_it(
    live: LiveServer,
) -> None:
    session = live.open_notebook("budgeted.ipynb")
    rid, kernel = session["id"], session["kernel"]["id"]
    assert live.execute(kernel, "%budget 10000").startswith(f"token budget of runtime {rid}: ")
    live.execute(kernel, CHARGE_THREE_CALLS)

    authority = RuntimeBudgets(live.data_dir).get(rid).authority  # the file itself
    snapshot = authority.snapshot()
    assert (snapshot.charged, snapshot.remaining) == (75, 9925)
    rest = rest_budget(live, rid)
    assert rest == {
        "runtime_id": rid,
        "budget": {
            "owner_runtime_id": rid,
            "inherited": False,
            "limit": snapshot.limit,
            "reserved": snapshot.reserved,
            "charged": snapshot.charged,
            "remaining": snapshot.remaining,
            "replayed": snapshot.replayed,
            "closed": False,
            "closed_reason": None,
            "records": 3,
            "by_status": {"settled": 3},
            "each": None,
            "refusals": 0,
            "branches": [{"branch": rid, "reserved": 0, "charged": 75, "refused": 0}],
        },
    }
    cli_json = ditto(live, "budget", rid, "--json")
    assert cli_json.returncode == 0, cli_json.stderr
    assert json.loads(cli_json.stdout) == rest
    cli = ditto(live, "budget", rid)
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout.splitlines() == [
        f"token budget of runtime {rid}",
        "  limit 10,000, charged 75, reserved 0, remaining 9,925, replayed 0 (not charged)",
        "  admission open",
        "  records 3 (settled 3)",
    ]

    code, checkpoint = live.api("POST", "checkpoint", {"runtime_id": rid})
    assert code == 200, checkpoint
    code, checkout = live.api("POST", "checkout", {"checkpoint_id": checkpoint["checkpoint_id"]})
    assert code == 200, checkout
    child, child_kernel = checkout["runtime"]["runtime_id"], checkout["kernel_id"]
    live.execute(child_kernel, CHARGE_THREE_CALLS)  # the child's calls count against one limit
    inherited = rest_budget(live, child)["budget"]
    assert (inherited["owner_runtime_id"], inherited["inherited"]) == (rid, True)
    assert (inherited["charged"], inherited["records"]) == (150, 6)
    assert rest_budget(live, rid)["budget"]["charged"] == 150
    cli = ditto(live, "budget", child)
    assert (
        cli.stdout.splitlines()[0]
        == f"token budget of runtime {rid} (shared with checkout {child})"
    )

    line = live.execute(child_kernel, "%budget 500 --own")
    assert line.startswith(f"token budget of runtime {child}: limit 500 tokens; 0 charged")
    live.execute(child_kernel, CHARGE_THREE_CALLS)
    own = rest_budget(live, child)["budget"]
    assert (own["owner_runtime_id"], own["inherited"], own["charged"]) == (child, False, 75)
    assert rest_budget(live, rid)["budget"]["charged"] == 150  # the source's is untouched


def test_a_runtime_without_a_budget_and_an_unknown_runtime(live: LiveServer) -> None:
    session = live.open_notebook("unbudgeted.ipynb")
    rid = session["id"]
    assert rest_budget(live, rid) == {"runtime_id": rid, "budget": None}
    cli = ditto(live, "budget", rid)
    assert (cli.returncode, cli.stdout) == (
        0,
        f"runtime {rid} has no token budget (set one with %budget LIMIT)\n",
    )
    code, body = live.api("GET", "no-such-runtime/budget")
    assert (code, body["error"]) == (404, "RuntimeNotFound")
    cli = ditto(live, "budget", "no-such-runtime")
    assert cli.returncode == 3
    assert cli.stderr.startswith("ditto: RuntimeNotFound: ")
