"""The Runtimes side panel in a real browser (Debian's chromium) on a real JupyterLab.

One scenario, the way a user meets the panel, each step waiting for what the user would
see: a notebook runs `x = 1`; a named checkpoint from the panel shows up in the tree;
after `x = 2` a restore from the panel brings `x` back to 1; a checkout opens the child
notebook on a kernel that holds `x == 1` and draws the branch; pause shows the paused
state and Resume in the notebook toolbar reattaches the notebook to a new kernel that
still has `x == 1`; after a second pause, running a cell in the notebook resumes the
runtime first; a checkout while a cell sleeps shows the SessionBusy notification; a
`%checkpoint` typed in a cell appears in the panel without a reload; delete-snapshot and
close each confirm first. The panel is saved as screenshots in the light and the dark
theme: into the test's temporary folder, or into docs/images/ when
`DITTO_UPDATE_SCREENSHOTS=1` is set (`make screenshots`), so `make test` leaves the
checkout as it found it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.browser.lab_page import PANEL, STEP_MS, Lab
from tests.browser.lab_server import REPO, LabServer

# chromium and the built lab extension (`make chromium labextension`)
pytestmark = pytest.mark.browser

DOCS_IMAGES = REPO / "docs" / "images"


def screenshot_dir(tmp_path: Path) -> Path:
    """docs/images when asked to refresh the documentation's screenshots, else `tmp_path`."""
    return DOCS_IMAGES if os.environ.get("DITTO_UPDATE_SCREENSHOTS") == "1" else tmp_path


def test_panel_scenario(page: Page, lab_server: LabServer, tmp_path: Path) -> None:
    images = screenshot_dir(tmp_path)
    lab_server.write_notebook("work.ipynb")
    lab = Lab(page, lab_server)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))

    # 1. A notebook runs `x = 1`; its runtime is pinned on top of the panel.
    lab.open("work.ipynb")
    assert lab.run_cell("x = 1") == ""
    panel = lab.open_panel()
    pinned = lab.pinned()
    expect(pinned.locator(".jp-DittoRuntime-name")).to_have_text("work.ipynb", timeout=STEP_MS)
    expect(lab.status(pinned)).to_have_text("idle", timeout=STEP_MS)

    # 2. Checkpoint from the panel, named; it shows in the tree as the head.
    pinned.get_by_role("button", name="Checkpoint work.ipynb").click()
    lab.dialog_accept("first")
    first = lab.checkpoint_row(pinned, "first")
    expect(first).to_be_visible(timeout=STEP_MS)
    expect(first.locator(".jp-DittoBadge.jp-mod-head")).to_be_visible()
    expect(lab.toolbar_state()).to_have_text("at first", timeout=STEP_MS)

    # 3. x = 2 (checkpointed from the notebook toolbar's button as "x-is-2"), restore
    #    "first" from the panel (confirming), and x prints 1.
    assert lab.run_cell("x = 2") == ""
    lab.notebook().locator(".jp-DittoToolbarCheckpoint").click()
    lab.dialog_accept("x-is-2")
    expect(lab.checkpoint_row(pinned, "x-is-2")).to_be_visible(timeout=STEP_MS)
    first.click()
    details = pinned.locator(".jp-DittoDetails")
    expect(details).to_contain_text("first")
    details.get_by_role("button", name="Restore first").click()
    lab.dialog_accept()
    expect(lab.notification("Restored first.")).to_be_visible(timeout=STEP_MS)
    assert lab.run_cell("print(x)") == "1"

    # Keyboard and menus: Ctrl+Alt+C in the notebook asks for a checkpoint's name; the
    # tree moves its selection with the arrow keys; a row's context menu and the command
    # palette hold the actions.
    lab.cells().first.locator(".jp-InputPrompt").click()
    page.keyboard.press("Control+Alt+c")
    dialog = page.locator(".jp-Dialog")
    expect(dialog).to_contain_text("Name (optional)")
    page.keyboard.press("Escape")
    expect(dialog).to_have_count(0)
    tree = pinned.get_by_role("tree", name="Checkpoints of work.ipynb")
    tree.focus()
    page.keyboard.press("Home")
    expect(lab.checkpoint_row(pinned, "x-is-2")).to_have_attribute("aria-selected", "true")
    page.keyboard.press("ArrowDown")
    expect(first).to_have_attribute("aria-selected", "true")
    expect(tree).to_have_attribute("aria-activedescendant", first.get_attribute("id") or "")
    first.click(button="right")
    menu = page.locator(".lm-Menu")
    for label in (
        "Restore Runtime Checkpoint…",
        "Check Out Runtime Checkpoint",
        "Pick Runtime Checkpoint for Compare",
        "Delete Runtime Checkpoint Snapshot…",
    ):
        expect(menu.get_by_text(label, exact=True)).to_be_visible()
    page.keyboard.press("Escape")
    expect(menu).to_have_count(0)
    page.keyboard.press("Control+Shift+c")
    palette = page.locator(".lm-CommandPalette")
    palette.locator("input").fill("runtime")
    for label in (
        "Checkpoint Runtime…",
        "Undo Last Cell in Runtime",
        "Compare Runtime Checkpoints",
        "Pause Runtime",
        "Close Runtime…",
    ):
        expect(palette.get_by_text(label, exact=True)).to_be_visible()
    page.keyboard.press("Escape")

    # 4. Check out "first": the child notebook opens on its kernel, which holds x == 1,
    #    and the tree draws the branch.
    first.click()
    details.get_by_role("button", name="Check out first").click()
    child_tab = page.locator(
        "#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current", has_text=re.compile(r"work-\w+")
    )
    expect(child_tab).to_be_visible(timeout=STEP_MS)
    child_name = child_tab.inner_text().strip().splitlines()[0]
    lab.wait_notebook(child_name)
    assert lab.run_cell("print(x == 1)") == "True"
    source = lab.runtime("work.ipynb")
    expect(
        lab.checkpoint_row(source, "first").locator(".jp-DittoBadge.jp-mod-branch")
    ).to_have_text("⎇ 1", timeout=STEP_MS)
    expect(lab.pinned().locator(".jp-DittoRuntime-name")).to_have_text(child_name)
    expect(lab.pinned().locator(".jp-DittoTree-origin")).to_contain_text("work.ipynb")

    # 5. Back in work.ipynb, pause from the panel: the toolbar says paused and offers
    #    Resume; Resume there reattaches the notebook to the new kernel; x is still 1.
    lab.select_tab("work.ipynb")
    lab.wait_idle()
    pinned = lab.pinned()
    expect(pinned.locator(".jp-DittoRuntime-name")).to_have_text("work.ipynb")
    pinned.get_by_role("button", name="Pause work.ipynb").click()
    state = lab.toolbar_state()
    expect(state).to_contain_text("paused", timeout=STEP_MS)
    expect(lab.status(pinned)).to_have_text("paused", timeout=STEP_MS)
    state.get_by_role("button", name="Resume this runtime").click()
    expect(lab.notification(re.compile(r"Resumed"))).to_be_visible(timeout=STEP_MS)
    expect(state).not_to_contain_text("paused", timeout=STEP_MS)
    lab.wait_idle()
    assert lab.run_cell("print(x)") == "1"
    expect(lab.status(pinned)).to_have_text("idle", timeout=STEP_MS)

    # 5b. Pause again, then simply run a cell in the paused notebook: the runtime resumes
    #     (no new runtime, no kernel dialog), the notebook is reattached, the cell runs on
    #     the resumed kernel with x still 1.
    runtimes_before = lab.page.locator(f"{PANEL} .jp-DittoRuntime").count()
    pinned.get_by_role("button", name="Pause work.ipynb").click()
    expect(state).to_contain_text("paused", timeout=STEP_MS)
    expect(lab.notebook().locator(".jp-KernelName")).to_have_text("No Kernel", timeout=STEP_MS)
    assert lab.run_cell("print(x + 1)") == "2"
    # the newest "Resumed" (the first resume's may still be sliding away)
    expect(lab.notification(re.compile(r"Resumed")).last).to_be_visible(timeout=STEP_MS)
    expect(state).not_to_contain_text("paused", timeout=STEP_MS)
    expect(lab.status(lab.pinned())).to_have_text("idle", timeout=STEP_MS)
    assert lab.page.locator(f"{PANEL} .jp-DittoRuntime").count() == runtimes_before
    assert page.locator(".jp-Dialog").count() == 0

    # 6. Check out while a cell sleeps: the SessionBusy notification, with its code. The
    #    cell sleeps far longer than the steps take on a loaded machine (it must still run
    #    when the checkout arrives), and is interrupted once the notification shows.
    lab.type_cell("import time; time.sleep(600)")
    expect(lab.notebook().locator(".jp-Notebook-ExecutionIndicator")).to_have_attribute(
        "data-status", "busy", timeout=STEP_MS
    )
    first = lab.checkpoint_row(lab.pinned(), "first")
    first.click()
    lab.pinned().locator(".jp-DittoDetails").get_by_role("button", name="Check out first").click()
    expect(lab.notification(re.compile(r"^SessionBusy: .*busy"))).to_be_visible(timeout=STEP_MS)
    page.evaluate("window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.interrupt()")
    lab.wait_idle()

    # 7. A %checkpoint magic's checkpoint appears in the panel without a reload: the page
    #    is the same page, and the panel asked only for that checkpoint (no listing).
    page.evaluate("window.dittoSamePage = true")
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    lab.type_cell("%checkpoint from-magic")
    magic_row = lab.checkpoint_row(lab.pinned(), "from-magic")
    expect(magic_row).to_be_visible(timeout=STEP_MS)
    expect(magic_row.locator(".jp-DittoBadge.jp-mod-head")).to_be_visible()
    assert page.evaluate("window.dittoSamePage") is True
    api = [  # paths below the API prefix, without the query (GETs carry a cache-buster)
        url.split("/api/v1/runtimes", 1)[1].split("?", 1)[0]
        for url in requests
        if "/api/v1/runtimes" in url
    ]
    assert any(re.match(r"^/[^/]+/checkpoints/[0-9a-f]{32}$", path) for path in api), api
    assert not any(re.match(r"^(/[^/]+/checkpoints/?)?$", path) for path in api), api

    # Screenshots of the panel: the tree forked by the restore, the branch to the child.
    lab.checkpoint_row(lab.pinned(), "first").click()
    _widen_panel(lab, 140)
    images.mkdir(parents=True, exist_ok=True)
    _screenshot(lab, images / "panel-light.png")
    lab.set_theme("JupyterLab Dark")
    _screenshot(lab, images / "panel-dark.png")
    lab.set_theme("JupyterLab Light")

    # Delete snapshot and close, each after its confirmation.
    x_is_2 = lab.checkpoint_row(lab.pinned(), "x-is-2")
    x_is_2.click()
    details = lab.pinned().locator(".jp-DittoDetails")
    details.get_by_role("button", name="Delete snapshot x-is-2").click()
    lab.dialog_accept()
    expect(x_is_2.locator(".jp-DittoBadge.jp-mod-muted")).to_have_text("no snapshot")
    expect(details).to_contain_text("deleted (variables only)")
    child = lab.runtime(child_name)
    child.get_by_role("button", name=f"Close {child_name}").click()
    lab.dialog_accept()
    expect(lab.status(child)).to_have_text("closed", timeout=STEP_MS)

    assert panel.is_visible()
    assert errors == [], errors


def _screenshot(lab: Lab, path: Path) -> None:
    """The panel alone, without notifications over it or a hover highlight."""
    lab.dismiss_notifications()
    lab.page.mouse.move(0, 0)
    lab.page.locator("#ditto-runtimes-panel .jp-DittoPanel-body").screenshot(path=str(path))


def _widen_panel(lab: Lab, pixels: int) -> None:
    """Drag the splitter on the panel's left edge (the sidebar opens narrow)."""
    panel = lab.page.locator("#ditto-runtimes-panel").bounding_box()
    assert panel is not None
    for handle in lab.page.locator(".lm-SplitPanel-handle").all():
        box = handle.bounding_box()
        if box and abs(box["x"] + box["width"] - panel["x"]) < 8 and box["height"] > 100:
            x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
            lab.page.mouse.move(x, y)
            lab.page.mouse.down()
            lab.page.mouse.move(x - pixels, y, steps=5)
            lab.page.mouse.up()
            return
    raise AssertionError("no splitter beside the Runtimes panel")
