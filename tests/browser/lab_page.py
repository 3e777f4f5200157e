"""Driving JupyterLab and the Runtimes panel through the browser, the way a user does.

Cells are typed one line at a time (multi-line typing breaks on auto-indent); every wait
names what it waits for, so a failure says which step of the scenario broke.
"""

from __future__ import annotations

import re
import time

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Locator, Page, expect

from tests.browser.lab_server import LabServer

#: How long a step may take on a loaded 2-core machine before it counts as failed.
STEP_MS = 120_000

PANEL = "#ditto-runtimes-panel"
CURRENT_NOTEBOOK = "#jp-main-dock-panel .jp-NotebookPanel:not(.lm-mod-hidden)"


class Lab:
    """One JupyterLab page."""

    def __init__(self, page: Page, server: LabServer) -> None:
        self.page = page
        self.server = server

    # ---- notebooks ---------------------------------------------------------------------

    def open(self, path: str) -> None:
        """Open JupyterLab on a notebook and wait until its kernel is idle."""
        self.page.goto(self.server.lab_url(f"tree/{path}"))
        self.wait_notebook(path)

    def wait_notebook(self, path: str) -> None:
        """Wait until the notebook `path` is the current tab and its kernel is idle."""
        name = path.rsplit("/", 1)[-1]
        tab = self.page.locator("#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current")
        expect(tab).to_contain_text(name, timeout=STEP_MS)
        self.wait_idle()

    def wait_idle(self) -> None:
        """Wait until the current notebook's kernel is connected and idle.

        The toolbar's indicator reads idle before the kernel's connection is up (a cell run
        then is dropped), so this asks the notebook's session itself (`jupyterapp` is
        exposed by the fixture's `--LabApp.expose_app_in_browser`).
        """
        self.page.wait_for_function(
            """() => {
                const widget = window.jupyterapp?.shell.currentWidget;
                const kernel = widget?.sessionContext?.session?.kernel;
                return kernel?.connectionStatus === 'connected' && kernel?.status === 'idle';
            }""",
            timeout=STEP_MS,
        )

    def notebook(self) -> Locator:
        return self.page.locator(CURRENT_NOTEBOOK)

    def cells(self) -> Locator:
        return self.notebook().locator(".jp-Notebook .jp-Cell")

    def cell_contents(self) -> list[dict[str, object]]:
        """The current notebook's cells as its model holds them (unsaved edits included):
        type, source, execution count and outputs of each, in order."""
        cells: list[dict[str, object]] = self.page.evaluate(
            """() => window.jupyterapp.shell.currentWidget.context.model.toJSON().cells.map(
                c => ({cell_type: c.cell_type, source: c.source,
                       execution_count: c.execution_count ?? null, outputs: c.outputs ?? []}))"""
        )
        return cells

    def cell_sources(self) -> list[str]:
        """The sources of the current notebook's cells, in order."""
        return [str(cell["source"]) for cell in self.cell_contents()]

    def select_tab(self, name: str) -> None:
        self.page.locator("#jp-main-dock-panel .lm-TabBar-tab", has_text=name).first.click()
        expect(
            self.page.locator("#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current")
        ).to_contain_text(name, timeout=STEP_MS)

    def type_cell(self, source: str) -> int:
        """Put a one-line cell at the end of the notebook and run it; its index.

        The notebook's last cell is used when it is empty, else a cell is added below.
        """
        cells = self.cells()
        count = cells.count()
        last = cells.nth(count - 1)
        editor = last.locator(".cm-content")
        if editor.inner_text().strip():
            last.locator(".jp-InputPrompt").click()
            self.page.keyboard.press("Escape")
            self.page.keyboard.press("b")
            expect(cells).to_have_count(count + 1)
            index = count
            self.page.keyboard.press("Enter")
        else:
            index = count - 1
            editor.click()
        self.page.keyboard.type(source)
        self.page.keyboard.press("Shift+Enter")
        return index

    def run_cell(self, source: str) -> str:
        """Run a one-line cell, wait for it to finish, and return its output text."""
        index = self.type_cell(source)
        cell = self.cells().nth(index)
        expect(cell.locator(".jp-InputPrompt")).to_have_text(
            re.compile(r"\[\d+\]:"), timeout=STEP_MS
        )
        return cell.locator(".jp-OutputArea").inner_text().strip()

    # ---- the panel ---------------------------------------------------------------------

    def open_panel(self) -> Locator:
        panel = self.page.locator(PANEL)
        if not panel.is_visible():
            self.page.locator(f'.jp-SideBar.jp-mod-right [data-id="{PANEL[1:]}"]').click()
        expect(panel).to_be_visible()
        return panel

    def pinned(self) -> Locator:
        """The runtime pinned on top: the one of the notebook in focus."""
        return self.page.locator(f"{PANEL} .jp-DittoRuntime.jp-mod-pinned")

    def runtime(self, notebook: str) -> Locator:
        return self.page.locator(
            f"{PANEL} .jp-DittoRuntime",
            has=self.page.locator(
                ".jp-DittoRuntime-name", has_text=re.compile(rf"^{re.escape(notebook)}$")
            ),
        )

    def status(self, runtime: Locator) -> Locator:
        """A runtime's status (idle, busy, paused, closed) in its panel entry."""
        return runtime.locator(".jp-DittoRuntime-sub .jp-DittoStatusText")

    def checkpoint_row(self, runtime: Locator, name: str) -> Locator:
        return runtime.locator(
            ".jp-DittoCheckpoint",
            has=self.page.locator(
                ".jp-DittoCheckpoint-name", has_text=re.compile(rf"^{re.escape(name)}$")
            ),
        )

    def dialog_accept(self, text: str | None = None) -> None:
        """Accept the open dialog (typing `text` into its input first)."""
        dialog = self.page.locator(".jp-Dialog")
        expect(dialog).to_be_visible(timeout=STEP_MS)
        if text is not None:
            field = dialog.locator("input")
            field.fill(text)
        dialog.locator(".jp-Dialog-footer button.jp-mod-accept").click()
        expect(dialog).to_have_count(0)

    def menu(self, *labels: str) -> None:
        """Open a menu of the menu bar and click through its items, e.g. ("File", "Save")."""
        self.page.locator(".lm-MenuBar-itemLabel", has_text=labels[0]).click()
        for label in labels[1:]:
            self.page.locator(
                ".lm-Menu:visible .lm-Menu-itemLabel", has_text=re.compile(rf"^{re.escape(label)}$")
            ).click()

    def notification(self, text: str | re.Pattern[str]) -> Locator:
        return self.page.locator(".Toastify__toast", has_text=text)

    def dismiss_notifications(self) -> None:
        """Close every notification on screen and wait until they are gone.

        One at a time, the oldest first, each click forced: a toast sliding in or out is
        never "stable", and one may close by itself (auto-close) between two clicks.
        """
        toasts = self.page.locator(".Toastify__toast")
        deadline = time.monotonic() + STEP_MS / 1000
        while toasts.count() > 0 and time.monotonic() < deadline:
            try:
                toasts.first.locator(".jp-Notification-Toast-Close").click(
                    force=True, timeout=2_000
                )
            except PlaywrightError:
                continue  # it went away by itself meanwhile: look again
        expect(toasts).to_have_count(0, timeout=STEP_MS)

    def toolbar_state(self) -> Locator:
        return self.notebook().locator(".jp-DittoToolbarState")

    def set_theme(self, theme: str) -> None:
        """Switch the theme through the Settings menu, and wait until it applies."""
        self.page.locator(".lm-MenuBar-itemLabel", has_text="Settings").click()
        self.page.locator(".lm-Menu-itemLabel", has_text="Theme").first.hover()
        self.page.locator(
            ".lm-Menu-itemLabel", has_text=re.compile(rf"^{re.escape(theme)}$")
        ).click()
        light = "true" if "Light" in theme else "false"
        expect(self.page.locator("body")).to_have_attribute(
            "data-jp-theme-light", light, timeout=STEP_MS
        )
