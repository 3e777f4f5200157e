"""The widgets' comm messages in a real ipykernel: TokenBudgetView sends its new figures
while a cell is still charging the budget and when another process charges it, and a
click sent as a front end sends it (a comm message) commits or refuses a branch."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

from tests.support.kernel_cells import run_cell, value

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BlockingKernelClient]:
    cwd = tmp_path_factory.mktemp("widgets-kernel")
    env = {**os.environ, "DITTO_DATA_DIR": str(cwd / "data")}
    manager = KernelManager(kernel_name="python3")
    manager.start_kernel(env=env, cwd=str(cwd))
    client = manager.blocking_client()
    client.start_channels()
    client.wait_for_ready(timeout=120)
    yield client
    client.stop_channels()
    manager.shutdown_kernel(now=True)


def ok(client: BlockingKernelClient, code: str) -> str:
    out = run_cell(client, code)
    assert out.error is None, out.error
    return out.stdout


def drain(client: BlockingKernelClient) -> None:
    while client.iopub_channel.msg_ready():
        client.get_iopub_msg(timeout=1)


def state_updates(messages: list[dict[str, Any]], model_id: str) -> list[dict[str, Any]]:
    """The state a model's comm messages sent to the front end, in order."""
    return [
        m["content"]["data"]["state"]
        for m in messages
        if m["msg_type"] == "comm_msg"
        and m["content"]["comm_id"] == model_id
        and m["content"]["data"].get("method") == "update"
    ]


def run_collecting(client: BlockingKernelClient, code: str) -> list[dict[str, Any]]:
    """Run a cell; every iopub message up to its idle status, whatever its parent (the
    view's poll thread sends without one)."""
    msg_id = client.execute(code)
    messages: list[dict[str, Any]] = []
    while True:
        message = client.get_iopub_msg(timeout=120)
        messages.append(message)
        if message["msg_type"] == "error":
            raise AssertionError("\n".join(message["content"]["traceback"]))
        if (
            message["msg_type"] == "status"
            and message["content"]["execution_state"] == "idle"
            and message["parent_header"].get("msg_id") == msg_id
        ):
            return messages


def wait_for_update(client: BlockingKernelClient, model_id: str, text: str) -> list[dict[str, Any]]:
    """Read iopub until the model sends a value containing `text` (a functional wait)."""
    seen: list[dict[str, Any]] = []
    while True:
        message = client.get_iopub_msg(timeout=120)
        seen.append(message)
        if any(text in state.get("value", "") for state in state_updates([message], model_id)):
            return seen


def test_budget_view_sends_figures_while_a_cell_charges_and_when_others_do(
    kernel: BlockingKernelClient, tmp_path: Path
) -> None:
    path = tmp_path / "budgets.sqlite"
    ok(
        kernel,
        "import time\n"
        "from ditto_jupyter.worker import SharedTokenBudget\n"
        "from ditto_jupyter.widgets import TokenBudgetView\n"
        f"budget = SharedTokenBudget({str(path)!r}, 10_000, name='live')\n"
        "view = TokenBudgetView(budget, title='live budget', poll_interval=0.05)\n"
        "display(view)",
    )
    meter = value(kernel, "view._meter.model_id")
    drain(kernel)
    messages = run_collecting(
        kernel,
        "for step in range(1, 6):\n"
        "    budget.settle(budget.reserve(500, {'run_id': 'cell'}), 100)\n"
        "    time.sleep(0.3)\n",
    )
    during = [
        state["value"] for state in state_updates(messages, meter) if "value" in state
    ]  # sent before the cell's idle status: the view moved while the cell ran
    assert any("charged 200 " in text or "charged 300 " in text for text in during), during

    code = (
        "import sys\n"
        "from ditto_jupyter.worker.shared_budget import SharedTokenBudget\n"
        "budget = SharedTokenBudget(sys.argv[1], name='live')\n"
        "budget.settle(budget.reserve(1000, {'run_id': 'other process'}), 777)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(path)], check=True)
    wait_for_update(kernel, meter, "charged 1,277 ")
    summary = run_cell(kernel, "view").results[-1]["text/plain"]
    assert summary == (
        "TokenBudgetView: 1,277 of 10,000 tokens charged, 0 reserved, 8,723 remaining; "
        "6 records; admitting"
    )
    ok(kernel, "view.close()")


def click(client: BlockingKernelClient, model_id: str) -> None:
    """What a front end sends when a Button is clicked."""
    content = {"comm_id": model_id, "data": {"method": "custom", "content": {"event": "click"}}}
    client.shell_channel.send(client.session.msg("comm_msg", content))


def test_branch_store_view_buttons_answer_front_end_clicks(kernel: BlockingKernelClient) -> None:
    ok(
        kernel,
        "from ditto_jupyter.worker import BranchStore\n"
        "from ditto_jupyter.widgets import BranchStoreView\n"
        "store = BranchStore('agents')\n"
        "a, b = store.fork(), store.fork()\n"
        "a.set('memory', {'note': 'from a'})\n"
        "b.set('memory', {'note': 'from b'})\n"
        "store_view = BranchStoreView(store, poll_interval=None)\n"
        "display(store_view)",
    )
    commit_a = value(kernel, "store_view.buttons[(1, 'commit')].model_id")
    commit_b = value(kernel, "store_view.buttons[(2, 'commit')].model_id")
    status = value(kernel, "store_view._status.model_id")
    drain(kernel)
    click(kernel, commit_a)
    wait_for_update(kernel, status, "committed branch #1: revision 1")
    assert value(kernel, "[store.revision, store.get('memory')]") == [1, {"note": "from a"}]
    click(kernel, commit_b)
    wait_for_update(kernel, status, "it expected revision 0, the parent is at revision 1")
    conflict = (
        "[store_view.last_conflict.expected_revision, store_view.last_conflict.actual_revision]"
    )
    assert value(kernel, conflict) == [0, 1]
    assert value(kernel, "store.get('memory')") == {"note": "from a"}
    summary = run_cell(kernel, "store_view").results[-1]["text/plain"]
    assert (
        summary == "BranchStoreView: 'agents' at revision 1, 1 namespace, 1 open branch (1 stale)"
    )
