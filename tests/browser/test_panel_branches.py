"""A fan-out in the Runtimes panel (issue 44 §3), in a real browser on a real JupyterLab
with real kernels, in the order a user meets it: a fan-out of 3 is made from a checkpoint
first (REST), each child then sets `plan` to its own value; the panel shows the 3 children
as one group under the checkpoint and "branch i of 3" in the list; Compare of the group
shows `plan` marked as differing across the 3 columns; Keep on the first child asks in a
dialog naming the 2 others, Cancel closes nothing, and confirming closes the 2 others,
whose checkpoints are still listed; three checkpoints picked in one runtime compare side
by side.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.browser.lab_page import STEP_MS, Lab
from tests.browser.lab_server import LabServer

# chromium and the built lab extension (`make chromium labextension`)
pytestmark = pytest.mark.browser


def _runtime_of(server: LabServer, path: str) -> dict[str, Any]:
    """The runtime record of a notebook, once the server lists it."""
    deadline = time.monotonic() + STEP_MS / 1000
    while True:
        status, listing = server.api("GET")
        assert status == 200, listing
        found = [r for r in listing["runtimes"] if r["conversation_id"] == path]
        if found or time.monotonic() > deadline:
            (record,) = found
            return dict(record)
        time.sleep(0.5)


def _checkpoint(server: LabServer, runtime_id: str, name: str) -> dict[str, Any]:
    """A named checkpoint through REST; asked again while the server answers SessionBusy
    (JupyterLab's own requests to the kernel after a cell count as busy for a moment)."""
    deadline = time.monotonic() + STEP_MS / 1000
    while True:
        status, answer = server.api("POST", "checkpoint", {"runtime_id": runtime_id, "name": name})
        busy = status == 409 and answer.get("error") == "SessionBusy"
        if not busy or time.monotonic() > deadline:
            assert status == 200, answer
            return dict(answer)
        time.sleep(0.5)


def test_fanout_group_compare_and_keep(page: Page, lab_server: LabServer) -> None:
    lab_server.write_notebook("explore.ipynb")
    lab = Lab(page, lab_server)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))

    # 1. A notebook sets plan = 0 and is checkpointed as "base"; a fan-out of 3 is made
    #    from that checkpoint (REST) before the panel is opened; each child sets its plan.
    lab.open("explore.ipynb")
    assert lab.run_cell("plan = 0") == ""
    source = _runtime_of(lab_server, "explore.ipynb")
    cp = _checkpoint(lab_server, source["runtime_id"], "base")
    status, fanout = lab_server.api(
        "POST", "checkout", {"checkpoint_id": cp["checkpoint_id"], "count": 3}
    )
    assert status == 200, fanout
    children = [child["checkout"] for child in fanout["children"]]
    assert len(children) == 3 and all(children), fanout
    names = [child["notebook_path"].rsplit("/", 1)[-1] for child in children]
    for index, child in enumerate(children):
        lab_server.execute(child["kernel_id"], f"plan = {index + 1}")

    # 2. The panel: one group "3 branches" under "base", opening to the 3 children, each
    #    with its status; in the runtime list each child says which branch it is.
    lab.open_panel()
    pinned = lab.pinned()
    expect(pinned.locator(".jp-DittoRuntime-name")).to_have_text("explore.ipynb", timeout=STEP_MS)
    expect(lab.checkpoint_row(pinned, "base")).to_be_visible(timeout=STEP_MS)
    group = pinned.locator(".jp-DittoFanout")
    expect(group).to_have_count(1, timeout=STEP_MS)
    expect(group.locator(".jp-DittoFanout-text")).to_have_text("3 branches")
    branches = pinned.locator(".jp-DittoBranch")
    expect(branches).to_have_count(0)
    group.get_by_role("button", name="Show the 3 branches").click()
    expect(branches).to_have_count(3, timeout=STEP_MS)
    for index, name in enumerate(names):
        row = branches.nth(index)
        expect(row.locator(".jp-DittoBranch-name")).to_have_text(name)
        expect(row).to_contain_text(f"branch {index + 1} of 3")
        expect(row.locator(".jp-DittoStatusText")).to_have_text("idle", timeout=STEP_MS)
        expect(lab.runtime(name).locator(".jp-DittoRuntime-fanout")).to_have_text(
            f"branch {index + 1} of 3", timeout=STEP_MS
        )

    # 3. Compare the 3 branches: a column per branch, `plan` marked as differing.
    group.get_by_role("button", name="Compare the 3 branches").click()
    grid = page.locator(".jp-DittoGrid")
    expect(grid).to_be_visible(timeout=STEP_MS)
    expect(grid.locator(".jp-DittoGrid-side")).to_have_count(3, timeout=STEP_MS)
    plan = grid.locator('.jp-DittoGrid-row[data-key="v:plan"]')
    expect(plan).to_be_visible(timeout=STEP_MS)
    expect(plan).to_have_class(re.compile(r"\bjp-mod-differs\b"))
    expect(plan.locator(".jp-DittoGrid-value")).to_have_text(["1", "2", "3"])

    # 4. Keep the first branch: the dialog names the 2 others and says their checkpoints
    #    stay; Cancel closes nothing.
    keep = branches.nth(0).get_by_role("button", name=f"Keep {names[0]}")
    keep.click()
    dialog = page.locator(".jp-Dialog")
    expect(dialog).to_be_visible(timeout=STEP_MS)
    expect(dialog.locator(".jp-DittoKeepDialog-sibling")).to_have_text(names[1:])
    expect(dialog).to_contain_text("Their checkpoints stay")
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_have_count(0)
    for name, child in zip(names, children, strict=True):
        assert _runtime_of(lab_server, child["notebook_path"])["status"] != "closed"
        expect(lab.status(lab.runtime(name))).not_to_have_text("closed")

    # 5. Keep again and confirm: the 2 others close, the kept one stays; the closed ones'
    #    checkpoints are still listed (in the panel, and by the server).
    keep.click()
    expect(dialog).to_be_visible(timeout=STEP_MS)
    dialog.locator(".jp-Dialog-footer button.jp-mod-accept").click()
    expect(dialog).to_have_count(0)
    expect(lab.notification("closed 2 other branches")).to_be_visible(timeout=STEP_MS)
    for name in names[1:]:
        expect(lab.status(lab.runtime(name))).to_have_text("closed", timeout=STEP_MS)
        expect(
            branches.filter(has=page.locator(".jp-DittoBranch-name", has_text=name)).locator(
                ".jp-DittoStatusText"
            )
        ).to_have_text("closed", timeout=STEP_MS)
    expect(lab.status(lab.runtime(names[0]))).not_to_have_text("closed")
    for child in children[1:]:
        child_id = child["runtime"]["runtime_id"]
        assert _runtime_of(lab_server, child["notebook_path"])["status"] == "closed"
        status, listing = lab_server.api("GET", f"{child_id}/checkpoints")
        assert status == 200 and listing["checkpoints"], listing
    closed = lab.runtime(names[1])
    closed.locator(".jp-DittoRuntime-toggle").click()
    expect(closed.locator(".jp-DittoCheckpoint[data-checkpoint-id]").first).to_be_visible(
        timeout=STEP_MS
    )

    # 6. Three checkpoints of one runtime picked (click, Ctrl+click, Ctrl+click) compare
    #    side by side: a column each, `plan` marked as differing.
    lab.select_tab("explore.ipynb")
    lab.wait_idle()
    for value, name in ((5, "five"), (6, "six")):
        assert lab.run_cell(f"plan = {value}") == ""
        _checkpoint(lab_server, source["runtime_id"], name)
    pinned = lab.pinned()
    rows = [lab.checkpoint_row(pinned, name) for name in ("base", "five", "six")]
    for row in rows:
        expect(row).to_be_visible(timeout=STEP_MS)
    rows[0].click()
    rows[1].click(modifiers=["Control"])
    rows[2].click(modifiers=["Control"])
    expect(rows[2].locator(".jp-DittoBadge.jp-mod-pick")).to_have_text("C")
    pinned.get_by_role("button", name="Compare base, five, six side by side").click()
    expect(grid.locator(".jp-DittoGrid-side")).to_have_count(3, timeout=STEP_MS)
    plan = grid.locator('.jp-DittoGrid-row[data-key="v:plan"]')
    expect(plan.locator(".jp-DittoGrid-value")).to_have_text(["0", "5", "6"], timeout=STEP_MS)
    expect(plan).to_have_class(re.compile(r"\bjp-mod-differs\b"))
    assert errors == [], errors
