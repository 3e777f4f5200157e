"""The notebook widgets in a real browser on a real JupyterLab: CheckpointTree (drawn by
the lab extension's view, with the side panel's tree code), TokenBudgetView and
BranchStoreView (ipywidgets' own controls), all three rendered with real content.

The notebook checkpoints `x = 1` as "first", then writes three checkpoints the way
%autocheckpoint does (the cell in the `automatic` field, names cell-N, one failed) and shows the
three widgets. The tree must show "first" and a timeline of three cells with the failed
one marked; a `%checkpoint` typed afterwards appears without a reload (polling); clicking
"first" and Restore asks first, then brings `x` back to 1 and shows the restore line under
the tree.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser.lab_page import STEP_MS, Lab
from tests.browser.lab_server import LabServer

# chromium and the built lab extension (`make chromium labextension`)
pytestmark = pytest.mark.browser

SETUP = """\
%load_ext ditto_jupyter
x = 1
%checkpoint first"""

AUTOMATIC = """\
import inspect
from ditto_jupyter.core.models import AutoCheckpointCell
from ditto_jupyter.kernel.capture import capture_namespace, open_blob_store
_magics = get_ipython().magics_manager.registry["DittoMagics"]
_control = _magics.control
_bound = "runtime_id" in inspect.signature(capture_namespace).parameters
_for = {"runtime_id": _control.runtime_id} if _bound else {}
for _n in (3, 4, 5):
    _capture = capture_namespace(get_ipython().user_ns, open_blob_store(_control.blob_root), **_for)
    _cell = AutoCheckpointCell(execution_count=_n, source=f"x = {_n}", failed=_n == 4)
    _control.checkpoint(_capture, f"cell-{_n}", None, _cell)
x = 5"""

TREE = """\
from ditto_jupyter.widgets import BranchStoreView, CheckpointTree, TokenBudgetView
tree = CheckpointTree(poll_interval=0.5)
tree"""

BUDGET = """\
from ditto_jupyter.worker import TokenBudget
budget = TokenBudget(1000)
budget.settle(budget.reserve(120, {"run_id": "demo"}), 120)
TokenBudgetView(budget, title="demo budget", poll_interval=None)"""

BRANCHES = """\
from ditto_jupyter.worker import BranchStore
store = BranchStore("agents")
fork = store.fork()
fork.set("memory", {"note": "from the fork"})
BranchStoreView(store, poll_interval=None)"""


def test_three_widgets_render_and_the_tree_acts(page: Page, lab_server: LabServer) -> None:
    lab_server.write_notebook("widgets.ipynb", SETUP, AUTOMATIC, TREE, BUDGET, BRANCHES)
    lab = Lab(page, lab_server)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    lab.open("widgets.ipynb")
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
    cells = lab.cells()
    for index in range(5):
        expect(cells.nth(index).locator(".jp-InputPrompt")).to_have_text(
            re.compile(r"\[\d+\]:"), timeout=STEP_MS
        )
    expect(cells.nth(0).locator(".jp-OutputArea")).to_contain_text("checkpoint ")

    # CheckpointTree: the extension's view, not the text/plain fallback.
    tree = cells.nth(2).locator(".jp-DittoTreeWidget")
    expect(tree).to_be_visible(timeout=STEP_MS)
    expect(tree.locator(".jp-DittoTreeWidget-header")).to_contain_text("4", timeout=STEP_MS)
    expect(tree.locator(".jp-DittoTreeWidget-name", has_text="first")).to_be_visible()
    ticks = tree.locator(".jp-DittoTreeWidget-tick")
    expect(ticks).to_have_count(3)
    expect(ticks).to_have_text(["3", "4", "5"])
    expect(tree.locator(".jp-DittoTreeWidget-tick.jp-mod-failed")).to_have_text("4")
    expect(tree.locator(".jp-DittoTreeWidget-tick.jp-mod-head")).to_have_text("5")
    expect(
        tree.locator(".jp-DittoTreeWidget-meta", has_text="cells 3-5 (1 failed)")
    ).to_be_visible()
    expect(tree.locator("svg.jp-DittoGraph")).to_have_count(2)  # one row each: first, timeline

    # TokenBudgetView and BranchStoreView, with their figures.
    budget = cells.nth(3).locator(".ditto-token-budget-view")
    expect(budget).to_contain_text("demo budget", timeout=STEP_MS)
    expect(budget).to_contain_text("120")
    branches = cells.nth(4).locator(".ditto-branch-store-view")
    expect(branches).to_contain_text("agents", timeout=STEP_MS)
    expect(branches.get_by_role("button", name=re.compile("commit", re.I)).first).to_be_visible()

    # Live: a checkpoint made in a later cell shows up through the widget's polling.
    assert lab.run_cell("%checkpoint second").startswith("checkpoint ")
    expect(tree.locator(".jp-DittoTreeWidget-name", has_text="second")).to_be_visible(
        timeout=STEP_MS
    )

    # Click "first", then Restore: it asks first (Cancel leaves x alone); confirmed, the
    # kernel rolls back and the tree says so.
    tree.locator(".jp-DittoTreeWidget-name", has_text="first").click()
    tree.get_by_role("button", name="Restore").click()
    dialog = page.locator(".jp-Dialog")
    expect(dialog).to_contain_text("Restore checkpoint?", timeout=STEP_MS)
    expect(dialog).to_contain_text("kept in a checkpoint named before-restore")
    dialog.locator(".jp-Dialog-footer button.jp-mod-reject").click()
    expect(dialog).to_have_count(0)
    message = tree.locator(".jp-DittoTreeWidget-message")
    expect(message).to_have_count(0)
    tree.get_by_role("button", name="Restore").click()
    lab.dialog_accept()
    expect(message).to_have_text(
        re.compile(r"^restored [0-9a-f]{12} 'first' in \d+ ms"), timeout=STEP_MS
    )
    expect(message).not_to_have_class(re.compile("jp-mod-error"))
    first_row = tree.locator(".jp-DittoTreeWidget-label", has_text="first")
    expect(first_row.locator(".jp-DittoBadge.jp-mod-head")).to_be_visible(timeout=STEP_MS)
    assert lab.run_cell("print(x)") == "1"
    assert errors == []
