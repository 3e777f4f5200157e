"""A checkpoint holds the whole notebook (issue 23), in a real browser on a real JupyterLab.

One scenario, the way a user meets it, never saving the notebook (so every document the
server records is the one JupyterLab shows, unsaved edits included):

- cells 1 and 2 run; a checkpoint from the panel ("after-2"); cells 3 to 5 run (a list
  grows, a string and a workspace file appear); a checkpoint from the toolbar ("after-5");
  a `%checkpoint` magic's checkpoint gets its document from this JupyterLab (the panel
  answers its pending event);
- checking out after-2 opens a child notebook with exactly the cells as they were (source,
  execution count, outputs), on a kernel that holds the cell-2 state;
- Compare of after-2 and after-5 lists the changed and added variables and the new file
  (its screenshot goes to docs/images/compare-light.png under `make screenshots`);
- a restore of after-2 leaves the notebook alone and says how many cells differ; bringing
  them back (confirmed) puts after-2's cells in the notebook, and both recovery paths give
  the user's cells back: JupyterLab's notebook undo (Z) and File > Revert Notebook to
  Checkpoint (the file checkpoint taken first);
- with `%autocheckpoint on`, Runtime undo in the toolbar and Ctrl+Alt+Z each roll the last
  cell back and name it.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.browser.lab_page import STEP_MS, Lab
from tests.browser.lab_server import LabServer
from tests.browser.test_panel import screenshot_dir

# chromium and the built lab extension (`make chromium labextension`)
pytestmark = pytest.mark.browser


def checkpoint_summary(server: LabServer, runtime_id: str, name: str) -> dict[str, Any]:
    status, body = server.api("GET", f"{runtime_id}/checkpoints/{name}")
    assert status == 200, body
    checkpoint: dict[str, Any] = body["checkpoint"]
    return checkpoint


def wait_document_source(server: LabServer, runtime_id: str, name: str) -> dict[str, Any]:
    """The checkpoint's `document` once it is no longer pending (bounded: a hang guard)."""
    deadline = time.monotonic() + STEP_MS / 1000
    while True:
        document: dict[str, Any] = checkpoint_summary(server, runtime_id, name)["document"]
        if document["source"] != "pending" or time.monotonic() > deadline:
            return document
        time.sleep(0.2)


def test_notebook_in_checkpoints(page: Page, lab_server: LabServer, tmp_path: Path) -> None:
    images = screenshot_dir(tmp_path)
    lab_server.write_notebook("cells.ipynb")
    lab = Lab(page, lab_server)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))

    # 1. Cells 1 and 2, then a checkpoint from the panel: it holds the notebook as shown.
    lab.open("cells.ipynb")
    assert lab.run_cell("a = 1") == ""
    assert lab.run_cell("b = [1, 2]; print(len(b))") == "2"
    lab.open_panel()
    pinned = lab.pinned()
    expect(pinned.locator(".jp-DittoRuntime-name")).to_have_text("cells.ipynb", timeout=STEP_MS)
    runtime_id = str(
        page.evaluate("window.jupyterapp.shell.currentWidget.sessionContext.session.id")
    )
    after_2_cells = lab.cell_contents()
    pinned.get_by_role("button", name="Checkpoint cells.ipynb").click()
    lab.dialog_accept("after-2")
    after_2 = lab.checkpoint_row(pinned, "after-2")
    expect(after_2).to_be_visible(timeout=STEP_MS)
    assert checkpoint_summary(lab_server, runtime_id, "after-2")["document"] == {
        "source": "request",
        "cells": len(after_2_cells),
    }

    # Cells 3 to 5, a checkpoint from the toolbar, and one from the %checkpoint magic,
    # whose document this JupyterLab sends when the server asks (its event says pending).
    assert lab.run_cell("b.append(3)") == ""
    assert lab.run_cell("c = 'new'") == ""
    assert (
        lab.run_cell(
            "import ditto_jupyter; n = (ditto_jupyter.workspace() / 'out.txt').write_text('hi')"
        )
        == ""
    )
    lab.notebook().locator(".jp-DittoToolbarCheckpoint").click()
    lab.dialog_accept("after-5")
    expect(lab.checkpoint_row(pinned, "after-5")).to_be_visible(timeout=STEP_MS)
    lab.type_cell("%checkpoint from-magic")
    expect(lab.checkpoint_row(pinned, "from-magic")).to_be_visible(timeout=STEP_MS)
    lab.wait_idle()
    magic_document = wait_document_source(lab_server, runtime_id, "from-magic")
    assert magic_document["source"] == "front_end", magic_document
    assert magic_document["cells"] == len(lab.cell_contents())

    # 2. Check out after-2: the child notebook shows exactly the cells as they were, and
    #    its kernel holds the cell-2 state.
    after_2.click()
    details = pinned.locator(".jp-DittoDetails")
    expect(details).to_contain_text("Notebook")
    details.get_by_role("button", name="Check out after-2").click()
    child_tab = page.locator(
        "#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current", has_text=re.compile(r"cells-\w+")
    )
    expect(child_tab).to_be_visible(timeout=STEP_MS)
    child_name = child_tab.inner_text().strip().splitlines()[0]
    lab.wait_notebook(child_name)
    assert lab.cell_contents() == after_2_cells
    assert lab.run_cell("print(b, 'c' in dir(), 'n' in dir())") == "[1, 2] False False"

    # 3. Compare after-2 with after-5 (Ctrl+click picks both): the changed and added
    #    variables and the new file.
    lab.select_tab("cells.ipynb")
    lab.wait_idle()
    pinned = lab.pinned()
    expect(pinned.locator(".jp-DittoRuntime-name")).to_have_text("cells.ipynb", timeout=STEP_MS)
    lab.checkpoint_row(pinned, "after-2").click(modifiers=["Control"])
    lab.checkpoint_row(pinned, "after-5").click(modifiers=["Control"])
    pinned.get_by_role("button", name="Compare after-2 and after-5").click()
    compare = page.locator(".jp-DittoCompare")
    expect(compare.locator(".jp-DittoCompare-title")).to_have_text(
        "after-2 → after-5", timeout=STEP_MS
    )
    changes = compare.get_by_role("list", name=re.compile(r"^Changes from "))
    for label in (
        r"^variable b changed, was .+, now .+",
        r"^variable c added",
        r"^variable n added",
    ):
        expect(changes.get_by_label(re.compile(label))).to_be_visible(timeout=STEP_MS)
    expect(changes.get_by_label(re.compile(r"^file out\.txt, added$"))).to_be_visible()
    expect(compare.locator(".jp-DittoCompare-section.jp-mod-cells")).to_contain_text("added")
    images.mkdir(parents=True, exist_ok=True)
    _screenshot_compare(lab, images / "compare-light.png")
    lab.select_tab("cells.ipynb")

    # 4. Restore after-2: the notebook stays as it is, and the panel says how many cells
    #    differ. Bring them back (confirmed): after-2's cells; JupyterLab's undo (Z) and
    #    File > Revert Notebook to Checkpoint each give the user's cells back.
    lab.wait_idle()
    user_sources = lab.cell_sources()
    pinned = lab.pinned()
    lab.checkpoint_row(pinned, "after-2").click()
    pinned.locator(".jp-DittoDetails").get_by_role("button", name="Restore after-2").click()
    lab.dialog_accept()
    notice = pinned.locator(".jp-DittoNotice")
    expect(notice).to_contain_text(
        re.compile(r"\d+ cells? changed since checkpoint after-2"), timeout=STEP_MS
    )
    assert lab.cell_sources() == user_sources
    assert lab.run_cell("print(b)") == "[1, 2]"
    user_sources = lab.cell_sources()
    notice.get_by_role("button", name="Bring the cells of after-2 back").click()
    dialog = page.locator(".jp-Dialog")
    expect(dialog).to_contain_text("Revert Notebook to Checkpoint")
    lab.dialog_accept()
    expect(notice).to_have_count(0, timeout=STEP_MS)
    assert lab.cell_sources() == [str(cell["source"]) for cell in after_2_cells]
    lab.cells().first.locator(".jp-InputPrompt").click()
    page.keyboard.press("Escape")
    page.keyboard.press("z")  # Edit > Undo Cell Operation
    expect(lab.cells()).to_have_count(len(user_sources), timeout=STEP_MS)
    assert lab.cell_sources() == user_sources
    page.keyboard.press("Shift+z")  # redo: after-2's cells again
    expect(lab.cells()).to_have_count(len(after_2_cells), timeout=STEP_MS)
    lab.menu("File", "Revert Notebook to Checkpoint…")
    lab.dialog_accept()
    expect(lab.cells()).to_have_count(len(user_sources), timeout=STEP_MS)
    assert lab.cell_sources() == user_sources

    # 5. Undo the last cell, with %autocheckpoint on: from the toolbar, then Ctrl+Alt+Z.
    lab.wait_idle()
    lab.run_cell("%autocheckpoint on")
    assert lab.run_cell("d = 4") == ""
    lab.dismiss_notifications()
    lab.notebook().get_by_role("button", name="Runtime undo").click()
    expect(lab.notification(re.compile(r"^Undid cell \[\d+\]: d = 4$"))).to_be_visible(
        timeout=STEP_MS
    )
    assert lab.run_cell("print('d' in dir())") == "False"
    assert lab.run_cell("e = 5") == ""
    lab.dismiss_notifications()
    lab.cells().last.locator(".jp-InputPrompt").click()
    page.keyboard.press("Escape")
    page.keyboard.press("Control+Alt+z")
    expect(lab.notification(re.compile(r"^Undid cell \[\d+\]: e = 5$"))).to_be_visible(
        timeout=STEP_MS
    )
    assert lab.run_cell("print('e' in dir(), b)") == "False [1, 2]"

    assert errors == [], errors


def _screenshot_compare(lab: Lab, path: Path) -> None:
    """The Compare view down to its last row (not the empty space below), nothing over it."""
    lab.dismiss_notifications()
    lab.page.mouse.move(0, 0)
    view = lab.page.locator(".jp-DittoCompare")
    box = view.bounding_box()
    last = view.locator(".jp-DittoCompare-row").last.bounding_box()
    assert box is not None and last is not None
    height = min(box["height"], last["y"] + last["height"] - box["y"] + 8)
    clip = {"x": box["x"], "y": box["y"], "width": box["width"], "height": height}
    lab.page.screenshot(path=str(path), clip=clip)  # type: ignore[arg-type]
