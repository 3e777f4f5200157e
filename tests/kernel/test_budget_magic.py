"""%budget and ditto_jupyter.runtime_budget() in a real ipykernel with no server.

The budget lives in DITTO_DATA_DIR's budget file, so this test process reads the same
figures the kernel charges. Bad input prints one line and leaves the budget as it was.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

from ditto_jupyter.control.budget_registry import BUDGET_FILE, RuntimeBudgets
from ditto_jupyter.worker.shared_budget import budget_names
from tests.support.kernel_cells import CellOutput, run_cell, value
from tests.support.magic_display import printed_once

pytestmark = pytest.mark.slow

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ditto-data")


@pytest.fixture(scope="module")
def kernel(
    data_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BlockingKernelClient]:
    env = {**os.environ, "DITTO_DATA_DIR": str(data_dir)}
    for name in ("DITTO_SERVER_URL", "DITTO_TOKEN", "DITTO_RUNTIME_ID"):
        env.pop(name, None)
    manager = KernelManager(kernel_name="python3")
    manager.start_kernel(env=env, cwd=str(tmp_path_factory.mktemp("cwd")))
    client = manager.blocking_client()
    client.start_channels()
    client.wait_for_ready(timeout=120)
    assert run_cell(client, "%load_ext ditto_jupyter").error is None
    yield client
    run_cell(
        client,
        "_ditto = get_ipython().magics_manager.registry['DittoMagics'].kernel_control.built\n"
        "_ditto is not None and _ditto.shutdown()",
    )
    client.stop_channels()
    manager.shutdown_kernel(now=True)


def refused(out: CellOutput) -> str:
    """The one line an expected error prints to stderr, with nothing else shown."""
    assert out.error is None, out.error
    assert (out.stdout, out.results) == ("", []), (out.stdout, out.results)
    lines = out.stderr.splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def shown_view(out: CellOutput) -> dict[str, object]:
    """The one widget a cell displayed: its text/plain and its widget view."""
    assert out.error is None, out.error
    assert (out.stdout, out.stderr) == ("", ""), (out.stdout, out.stderr)
    [result] = out.results
    assert WIDGET_VIEW in result, result.keys()
    return result


def test_budget_set_shown_charged_and_listed(kernel: BlockingKernelClient, data_dir: Path) -> None:
    rid = value(kernel, "get_ipython().magics_manager.registry['DittoMagics'].control.runtime_id")
    assert refused(run_cell(kernel, "%budget")) == (
        f"ditto: RuntimeBudgetNotSet: runtime {rid} has no token budget; set one with %budget LIMIT"
    )
    assert budget_names(data_dir / BUDGET_FILE) == []

    assert printed_once(run_cell(kernel, "%budget 1_000")) == (
        f"token budget of runtime {rid}: limit 1,000 tokens; 0 charged, 0 reserved, 1,000 remaining"
    )
    out = run_cell(
        kernel,
        "from ditto_jupyter import runtime_budget\n"
        "from ditto_jupyter.worker import budgeted_provider\n"
        "def model(request):\n"
        "    return {'text': 'ok', 'usage': {'prompt_tokens': 100, 'completion_tokens': 20}}\n"
        "metered = budgeted_provider(model, runtime_budget(), reserve_tokens=200,\n"
        "                            scope={'run_id': 'demo', 'label': 'summary'})\n"
        "[metered.invoke({})['text'] for _ in range(3)]",
    )
    assert out.error is None, out.error
    budget = RuntimeBudgets(data_dir).get(rid).authority  # this process, the same file
    assert (budget.charged, budget.remaining, budget.record_count()) == (360, 640, 3)

    view = shown_view(run_cell(kernel, "%budget"))
    assert view["text/plain"] == (
        "TokenBudgetView: 360 of 1,000 tokens charged, 0 reserved, 640 remaining; 3 records; "
        "admitting"
    )
    budget.settle(budget.reserve(100, {"run_id": "other process"}), 40)
    again = shown_view(run_cell(kernel, "%budget"))  # the same live view, shown again
    assert again[WIDGET_VIEW] == view[WIDGET_VIEW]
    assert again["text/plain"] == (  # with the figures as of now, not of its last poll
        "TokenBudgetView: 400 of 1,000 tokens charged, 0 reserved, 600 remaining; 4 records; "
        "admitting"
    )
    title = value(kernel, "_.children[0].value")
    assert f"token budget of runtime {rid}" in title

    history = run_cell(kernel, "%budget --history")
    assert history.error is None and history.stdout == ""
    [table] = history.results
    assert table["text/plain"].splitlines() == [
        "record  status   reserved  charged  replayed  scope" + " " * 23 + "detail",
        "1       settled  200       120      0         run_id=demo, label=summary",
        "2       settled  200       120      0         run_id=demo, label=summary",
        "3       settled  200       120      0         run_id=demo, label=summary",
        "4       settled  100       40       0         run_id=other process",
    ]


def test_lowering_below_the_charge_closes_admission_and_raising_reopens_it(
    kernel: BlockingKernelClient, data_dir: Path
) -> None:
    rid = value(kernel, "get_ipython().magics_manager.registry['DittoMagics'].control.runtime_id")
    run_cell(kernel, "%budget 1000")
    charged = RuntimeBudgets(data_dir).get(rid).authority.charged
    records = RuntimeBudgets(data_dir).get(rid).authority.records
    line = printed_once(run_cell(kernel, "%budget 100"))
    assert line == (
        f"token budget of runtime {rid}: limit 1,000 -> 100 tokens; {charged:,} charged, "
        f"0 reserved, 0 remaining; admission closed: the limit is below the {charged:,} "
        "tokens already charged and reserved (raise it to reopen)"
    )
    out = run_cell(kernel, "metered.invoke({})")
    assert out.error is not None and "BudgetExceededError" in out.error
    assert "budget admission is closed (limit lowered to 100" in out.error
    line = printed_once(run_cell(kernel, "%budget 5000"))
    assert line.endswith(f"{5000 - charged:,} remaining; admission reopened")
    assert RuntimeBudgets(data_dir).get(rid).authority.records == records  # none lost


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("%budget abc", "InvalidRequest: LIMIT must be a whole number of tokens (like 200000), "
         "not 'abc'"),
        ("%budget -5", "InvalidRequest: LIMIT must be a whole number of tokens (like 200000), "
         "not '-5'"),
        ("%budget 10 20", "InvalidRequest: unrecognized arguments: 20"),
        ("%budget 10 --history", "InvalidRequest: %budget takes a LIMIT or --history, not both"),
        ("%budget --own", "InvalidRequest: --own needs a LIMIT: %budget LIMIT --own"),
        ("%budget --limit 5", "InvalidRequest: unrecognized arguments: --limit"),
    ],
)  # fmt: skip
def test_bad_input_prints_one_line_and_changes_nothing(
    kernel: BlockingKernelClient, data_dir: Path, line: str, message: str
) -> None:
    rid = value(kernel, "get_ipython().magics_manager.registry['DittoMagics'].control.runtime_id")
    run_cell(kernel, "%budget 4321")
    budget = RuntimeBudgets(data_dir).get(rid).authority
    before = (budget.snapshot(), budget.records)
    text = refused(run_cell(kernel, line))
    assert re.sub(r"^ditto: ", "", text).startswith(message), text
    assert (budget.snapshot(), budget.records) == before
    assert budget_names(data_dir / BUDGET_FILE) == [f"runtime:{rid}"]


def test_runtime_budget_of_a_runtime_without_one_is_a_lookup_error(
    kernel: BlockingKernelClient,
) -> None:
    out = run_cell(
        kernel,
        "from ditto_jupyter import runtime_budget\n"
        "try:\n"
        "    runtime_budget('no-such-runtime')\n"
        "except LookupError as error:\n"
        "    print(type(error).__name__, error)",
    )
    assert out.stdout == (
        "RuntimeBudgetNotSet runtime no-such-runtime has no token budget; "
        "set one with %budget LIMIT\n"
    )
