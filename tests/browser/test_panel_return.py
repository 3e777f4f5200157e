"""The Runtimes panel opened after the work was done, as a new user meets it (issue 40, §9
and §10), in a real browser on a real JupyterLab.

- A notebook runs two cells and is checkpointed twice from the command palette; only then
  is the Runtimes panel opened: its tree lists both checkpoints (JupyterLab's GET requests
  carry a cache-buster the server once refused), and again after a page reload.
- A click, then a Ctrl+click, picks both checkpoints; Compare shows that the array edited
  in place changed (its digest), not two identical summaries.
- Restore's confirmation says the workspace files come back and newer ones are kept in
  before-restore.
- Undo with %autocheckpoint off is refused with the whole message, the hint included, and
  the notebook's name instead of the runtime's id.
- A row's name is not cut beside its badges.
- Another notebook takes focus while the panel is scrolled down: its runtime, pinned on
  top as "this notebook", is scrolled into view; a new notebook's tree says it has no
  checkpoints yet (no error).
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser.lab_page import PANEL, STEP_MS, Lab
from tests.browser.lab_server import LabServer

# chromium and the built lab extension (`make chromium labextension`)
pytestmark = pytest.mark.browser


def checkpoint_from_palette(lab: Lab, name: str) -> None:
    """Checkpoint Runtime… from the command palette, named `name`."""
    lab.cells().last.locator(".jp-InputPrompt").click()
    lab.page.keyboard.press("Escape")
    lab.page.keyboard.press("Control+Shift+c")
    palette = lab.page.locator(".lm-CommandPalette")
    palette.locator("input").fill("Checkpoint Runtime")
    palette.get_by_text("Checkpoint Runtime…", exact=True).click()
    lab.dialog_accept(name)
    expect(lab.notification(f"Checkpoint {name} taken.")).to_be_visible(timeout=STEP_MS)


def test_panel_opened_after_the_work(page: Page, lab_server: LabServer) -> None:
    lab_server.write_notebook("reopen.ipynb")
    lab = Lab(page, lab_server)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    listings: list[tuple[int, str]] = []
    page.on(
        "response",
        lambda response: (
            listings.append((response.status, response.url))
            if re.search(r"/api/v1/runtimes/[^/?]+/checkpoints\?", response.url)
            else None
        ),
    )

    # 1. Two cells, two checkpoints from the palette; then the panel, for the first time.
    lab.open("reopen.ipynb")
    assert lab.run_cell("import numpy as np; arr = np.arange(10)") == ""
    checkpoint_from_palette(lab, "first")
    assert lab.run_cell("arr[3] = 99") == ""
    checkpoint_from_palette(lab, "second")
    runtime_id = str(
        page.evaluate("window.jupyterapp.shell.currentWidget.sessionContext.session.id")
    )
    lab.open_panel()
    pinned = lab.pinned()
    expect(pinned.locator(".jp-DittoRuntime-name")).to_have_text("reopen.ipynb", timeout=STEP_MS)
    for name in ("first", "second"):
        expect(lab.checkpoint_row(pinned, name)).to_be_visible(timeout=STEP_MS)
    expect(pinned.locator(".jp-DittoTree-empty")).to_have_count(0)
    assert listings and all(status == 200 for status, _ in listings), listings

    # 2. A page reload: the earlier checkpoints are still listed.
    page.reload()
    lab.wait_notebook("reopen.ipynb")
    lab.open_panel()
    pinned = lab.pinned()
    for name in ("first", "second"):
        expect(lab.checkpoint_row(pinned, name)).to_be_visible(timeout=STEP_MS)
    assert all(status == 200 for status, _ in listings), listings

    # 3. Click "first", Ctrl+click "second": both picked; Compare says the array changed.
    lab.checkpoint_row(pinned, "first").click()
    lab.checkpoint_row(pinned, "second").click(modifiers=["Control"])
    picks = pinned.locator(".jp-DittoPicks")
    expect(picks).to_contain_text("first")
    expect(picks).to_contain_text("second")
    pinned.get_by_role("button", name="Compare first and second").click()
    lab.select_tab("Runtime compare")
    compare = page.locator(".jp-DittoCompare")
    expect(compare.locator(".jp-DittoCompare-title")).to_have_text(
        "first → second", timeout=STEP_MS
    )
    changes = compare.get_by_role("list", name=re.compile(r"^Changes from "))
    expect(
        changes.get_by_label(
            re.compile(r"^variable arr changed, .*contents changed \(digest \w{8} → \w{8}\)")
        )
    ).to_be_visible(timeout=STEP_MS)
    lab.select_tab("reopen.ipynb")
    lab.wait_idle()

    # 4. Restore's confirmation says what happens to the files; cancelled, nothing runs.
    pinned = lab.pinned()
    lab.checkpoint_row(pinned, "first").click()
    pinned.locator(".jp-DittoDetails").get_by_role("button", name="Restore first").click()
    dialog = page.locator(".jp-Dialog")
    expect(dialog).to_contain_text("the workspace files go back to those of first")
    expect(dialog).to_contain_text("kept in a checkpoint named before-restore")
    expect(dialog).not_to_contain_text("Workspace files and")
    dialog.locator(".jp-Dialog-footer button.jp-mod-reject").click()
    expect(dialog).to_have_count(0)
    # With the details drawn (the panel scrolls, its rows narrower), "second" beside its
    # head and B badges is not cut to "sec…".
    expect(pinned.locator(".jp-DittoDetails")).to_contain_text("Holds", timeout=STEP_MS)
    # (the row as narrow as a sidebar's when the age reads "2 min ago": the tree is set to
    # 210 px for the measure)
    second_name = lab.checkpoint_row(pinned, "second").locator(".jp-DittoCheckpoint-name")
    expect(second_name).to_have_text("second")
    cut = second_name.evaluate(
        """e => {
            const tree = e.closest('.jp-DittoTree');
            tree.style.width = '210px';
            const cut = e.scrollWidth > e.clientWidth || e.clientWidth === 0;
            tree.style.width = '';
            return cut;
        }"""
    )
    assert not cut, "the name is cut beside its badges"
    assert lab.run_cell("print(arr[3])") == "99"

    # 5. Undo with %autocheckpoint off: refused, the whole message readable, the hint kept.
    lab.dismiss_notifications()
    lab.notebook().get_by_role("button", name="Runtime undo").click()
    refusal = lab.notification(re.compile(r"^Conflict: "))
    expect(refusal).to_be_visible(timeout=STEP_MS)
    shown = refusal.inner_text()
    assert runtime_id not in shown, shown
    show_all = refusal.get_by_role("button", name="Show all")
    if show_all.count() > 0:
        show_all.click()
        expect(dialog).to_be_visible()
        whole = dialog.inner_text()
        dialog.locator(".jp-Dialog-footer button.jp-mod-accept").click()
        expect(dialog).to_have_count(0)
    else:
        whole = shown
    assert "%autocheckpoint on" in whole and runtime_id not in whole, whole
    assert "reopen.ipynb" in whole or "reopen.ipynb" in shown, whole

    # 6. A second notebook; the panel scrolled down; focus back and forth: the focused
    #    notebook's runtime ("this notebook", on top) is scrolled into view.
    # twelve more checkpoints make reopen's tree taller than the panel
    loop = 'for i in range(12): get_ipython().run_line_magic("checkpoint", f"more-{i}")'
    lab.run_cell(loop)
    expect(lab.checkpoint_row(lab.pinned(), "more-11")).to_be_attached(timeout=STEP_MS)
    lab_server.write_notebook("other.ipynb")
    page.set_viewport_size({"width": 1440, "height": 420})
    page.evaluate(
        "() => { window.jupyterapp.commands.execute('docmanager:open', {path: 'other.ipynb'}); }"
    )
    lab.wait_notebook("other.ipynb")
    assert lab.run_cell("y = 1") == ""
    other = lab.pinned()
    expect(other.locator(".jp-DittoRuntime-name")).to_have_text("other.ipynb", timeout=STEP_MS)
    expect(other.locator(".jp-DittoTree-empty")).to_have_text(
        "No checkpoints yet.", timeout=STEP_MS
    )
    # A third notebook in focus, the panel scrolled to its end (reopen's tall tree in
    # view); then other.ipynb takes focus and goes on top: it is scrolled into view.
    lab_server.write_notebook("third.ipynb")
    page.evaluate(
        "() => { window.jupyterapp.commands.execute('docmanager:open', {path: 'third.ipynb'}); }"
    )
    lab.wait_notebook("third.ipynb")
    assert lab.run_cell("z = 1") == ""
    expect(lab.pinned().locator(".jp-DittoRuntime-name")).to_have_text(
        "third.ipynb", timeout=STEP_MS
    )
    expect(lab.runtime("other.ipynb")).to_be_attached(timeout=STEP_MS)
    scroller = page.locator(PANEL)
    scrolls = scroller.evaluate(
        "e => { e.scrollTop = e.scrollHeight; return e.scrollHeight > e.clientHeight + 100 }"
    )
    assert scrolls, "the panel is not tall enough to scroll"
    badge = lab.pinned().locator(".jp-DittoBadge.jp-mod-pinned")
    expect(badge).not_to_be_in_viewport()
    lab.select_tab("other.ipynb")
    expect(lab.pinned().locator(".jp-DittoRuntime-name")).to_have_text("other.ipynb")
    expect(lab.pinned().locator(".jp-DittoBadge.jp-mod-pinned")).to_be_in_viewport(timeout=STEP_MS)

    assert errors == [], errors
