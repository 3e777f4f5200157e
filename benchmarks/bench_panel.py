"""The Runtimes side panel in a real browser, side by side with jupyterlab-git's panel.

Setup: 100 runtimes of 50 checkpoints each. 99 are grown before JupyterLab starts, through
the public RuntimeService on the server's data directory: each checkpoint captures a small
namespace with the product's own capture code (`capture_namespace`, run on one dict per
runtime in this process: real pickling, chunks, signed manifests, no kernel process; the
class is `InProcessNamespaces` below), every tenth follows a restore three checkpoints back
(so the trees fork), and each runtime ends paused. The 100th is the notebook the browser
has open: a live kernel whose 50 checkpoints come from the `%checkpoint` magic.

Measured in Debian's chromium (headless), in the page, with `performance.now()`/`Date.now()`:
- open -> drawn: from the click on the sidebar tab of a freshly loaded JupyterLab (a reset
  workspace, so the panel was never shown) until the list shows all 100 runtimes and the
  focused runtime's tree has its rows on screen (it loads the list, the newest page of
  checkpoints and the lineage after the click);
- %checkpoint -> node: a `%checkpoint NAME` cell, from Shift+Enter until the row NAME is
  on screen, and the parts: the runtime event's arrival -> the row (the panel's own
  latency), and the cell's end -> the row (negative: the row was there before the cell
  ended);
- outside change -> node: a checkpoint taken over REST by another process (like the CLI),
  from the request until its row is on screen.

Anchor, same run, same browser, same machine: jupyterlab-git 0.55 on a repository of 50
commits (`historyCount` 25): open -> drawn is from the click on the Git tab until its
history (under its changes) shows the 25 newest commits; outside change -> node is from
a `git commit` in a terminal until the commit shows in the history. jupyterlab-git is installed into
benchmarks/.work/anchor (pip --target; never into the environment, where its server
extension would load into every Jupyter server) and loaded only into the anchor's lab.

The Compare view (issue 23): a comparison of 1,000 variables, 10,000 files and 200 cells,
drawn by the panel (benchmarks/panel_compare.py says how), in a JupyterLab of its own.

Run from the repo root: `.venv/bin/python -m benchmarks.bench_panel` (both, about 12
minutes), `... bench_panel tree` (the tree and its anchor) or `... bench_panel compare`
(the Compare view, about 2 minutes); each writes its own section of RESULTS.md.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from playwright.sync_api import Page, sync_playwright  # noqa: E402

from benchmarks.panel_compare import compare_table, measure_compare  # noqa: E402
from benchmarks.results_table import markdown_table, write_section  # noqa: E402
from ditto_jupyter.core.blobs import BlobStore  # noqa: E402
from ditto_jupyter.core.models import (  # noqa: E402
    ContextCapture,
    SessionRecord,
    UnrestorableValue,
)
from ditto_jupyter.kernel.capture import capture_namespace, restore_namespace  # noqa: E402
from ditto_jupyter.wiring import open_runtime_service  # noqa: E402
from tests.browser.conftest import launch_chromium  # noqa: E402
from tests.browser.lab_page import Lab  # noqa: E402
from tests.browser.lab_server import LabServer  # noqa: E402

WORK = REPO / "benchmarks" / ".work"
ANCHOR_SITE = WORK / "anchor"
ANCHOR_PACKAGES = [
    "jupyterlab-git==0.55.0",
    "jupyterlab-git-core==0.55.0",
    "nbdime==4.0.4",
    "gitpython==3.2.1",
    "gitdb==4.0.12",
    "smmap==5.0.3",
    "colorama==0.4.6",
]
RUNTIMES = 100
CHECKPOINTS = 50
GIT_HISTORY = 25  # jupyterlab-git's default historyCount
REPEAT = 5
TARGETS_MS = {"open": 1000.0, "checkpoint": 500.0}
TAB_MS = 120_000


class InProcessNamespaces:
    """The product's namespace capture on one dict per runtime, in this process."""

    def __init__(self, blobs: BlobStore) -> None:
        self.blobs = blobs
        self.namespaces: dict[str, dict[str, object]] = {}

    def namespace(self, runtime_id: str) -> dict[str, object]:
        return self.namespaces.setdefault(runtime_id, {"__name__": "__main__"})

    async def start(self, session: SessionRecord, cwd: Path | None) -> dict[str, Any]:
        self.namespaces[session.session_id] = {"__name__": "__main__"}
        return {"context": "in-process"}

    async def stop(self, session: SessionRecord) -> None:
        self.namespaces.pop(session.session_id, None)

    async def is_busy(self, session: SessionRecord) -> bool:
        return False

    async def capture(self, session: SessionRecord) -> ContextCapture:
        return capture_namespace(self.namespace(session.session_id), self.blobs)

    async def restore(
        self, session: SessionRecord, manifest_id: str | None
    ) -> list[UnrestorableValue]:
        return restore_namespace(self.namespace(session.session_id), self.blobs, manifest_id)


async def grow(data_dir: Path, runtimes: int) -> None:
    """`runtimes` paused runtimes of CHECKPOINTS checkpoints each, forking every tenth."""
    service = open_runtime_service(data_dir, context_factory=InProcessNamespaces)
    context = service.context
    assert isinstance(context, InProcessNamespaces)
    try:
        for r in range(runtimes):
            rid = (await service.create_runtime(f"runs/nb-{r:03d}.ipynb", "bench")).runtime_id
            ids: list[str] = []
            for c in range(CHECKPOINTS - 1):
                if c % 10 == 9:
                    await service.restore(rid, ids[-3])
                context.namespace(rid).update(step=c, rows=list(range(c)))
                name = f"step-{c}" if c % 5 == 0 else None
                ids.append((await service.checkpoint(rid, name)).checkpoint_id)
            await service.pause(rid)  # the 50th checkpoint
    finally:
        service.close_store()


def ensure_anchor() -> None:
    """Install jupyterlab-git into benchmarks/.work/anchor (once)."""
    if (ANCHOR_SITE / "jupyterlab_git").is_dir():
        return
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            str(ANCHOR_SITE),
            *ANCHOR_PACKAGES,
        ],
        check=True,
    )


class AnchorLab(LabServer):
    """JupyterLab with jupyterlab-git (from benchmarks/.work/anchor) as well."""

    def env(self) -> dict[str, str]:
        env = super().env()
        env["PYTHONPATH"] += os.pathsep + str(ANCHOR_SITE)
        env["JUPYTER_PATH"] += os.pathsep + str(ANCHOR_SITE / "share" / "jupyter")
        return env


# ---- in-page measurements ----------------------------------------------------------------

OPEN_AND_WAIT = """async ({panelId, kind, runtimes, rows}) => {
  const started = performance.now();
  window.jupyterapp.shell.activateById(panelId);  // what a click on its sidebar tab does
  const drawn = () => {
    if (kind === 'ditto') {
      const panel = document.querySelector('#ditto-runtimes-panel');
      if (!panel) return false;
      const listed = panel.querySelectorAll('.jp-DittoRuntime').length;
      const pinned = panel.querySelector('.jp-DittoRuntime.jp-mod-pinned');
      const drawnRows = pinned ? pinned.querySelectorAll('.jp-DittoCheckpoint').length : 0;
      return listed >= runtimes && drawnRows >= rows;
    }
    // jupyterlab-git shows its history under the changes: the newest `rows` commits.
    const panel = document.querySelector('#jp-git-sessions');
    const text = panel ? panel.innerText : '';
    return text.includes('commit-49') && text.includes(`commit-${50 - rows}`);
  };
  return await new Promise(resolve => {
    const check = () =>
      drawn() ? resolve(performance.now() - started) : requestAnimationFrame(check);
    check();
  });
}"""

WATCH_FOR = """({panel, text, rowSelector}) => {
  const watch = window.benchWatch = {node: null, event: null, idle: null, busySeen: false};
  const found = () => {
    const root = document.querySelector(panel);
    if (!root) return false;
    if (rowSelector) {
      return [...root.querySelectorAll(rowSelector)].some(e => e.textContent === text);
    }
    return root.innerText.includes(text);
  };
  const observer = new MutationObserver(() => {
    if (watch.node === null && found()) { watch.node = Date.now(); observer.disconnect(); }
  });
  observer.observe(document.body, {subtree: true, childList: true, characterData: true});
  const app = window.jupyterapp;
  app.serviceManager.events.stream.connect((_, event) => {
    if (watch.event === null && event.action === 'checkpoint' && event.ok) watch.event = Date.now();
  });
  const context = app.shell.currentWidget?.sessionContext;
  context?.statusChanged.connect((_, status) => {
    if (status === 'busy') watch.busySeen = true;
    if (status === 'idle' && watch.busySeen && watch.idle === null) watch.idle = Date.now();
  });
}"""


def open_to_drawn(page: Page, panel_id: str, kind: str, rows: int) -> float:
    value = page.evaluate(
        OPEN_AND_WAIT, {"panelId": panel_id, "kind": kind, "runtimes": RUNTIMES, "rows": rows}
    )
    return float(value)


def watch(page: Page, panel: str, text: str, row_selector: str | None) -> None:
    page.evaluate(WATCH_FOR, {"panel": panel, "text": text, "rowSelector": row_selector})


def wait_node(page: Page) -> dict[str, Any]:
    page.wait_for_function("window.benchWatch.node !== null", timeout=TAB_MS)
    result: dict[str, Any] = page.evaluate("window.benchWatch")
    return result


def fresh_page(lab: Lab, path: str, tab: str) -> None:
    """JupyterLab on `path` with a reset workspace (no panel open), kernel idle."""
    lab.page.goto(lab.server.lab_url(f"tree/{path}") + "&reset")
    lab.wait_notebook(path)
    lab.page.wait_for_selector(tab, state="attached", timeout=TAB_MS)


# ---- the two sides -------------------------------------------------------------------------


def prepare_ditto() -> LabServer:
    """A lab server (not started) whose data directory holds the 99 grown runtimes."""
    base = WORK / "panel"
    shutil.rmtree(base, ignore_errors=True)
    server = LabServer(base)
    started = time.perf_counter()
    asyncio.run(grow(server.data_dir, RUNTIMES - 1))
    print(f"grew {RUNTIMES - 1} runtimes in {time.perf_counter() - started:.0f} s", flush=True)
    server.root_dir.mkdir(parents=True, exist_ok=True)
    server.write_notebook("focus.ipynb")
    return server


def measure_ditto(browser: Any, server: LabServer) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {}
    tab = '.jp-SideBar.jp-mod-right [data-id="ditto-runtimes-panel"]'
    with server:
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        lab = Lab(page, server)
        lab.open("focus.ipynb")
        magic = 'get_ipython().run_line_magic("checkpoint", f"c{i:02d}")'
        lab.run_cell(f"for i in range({CHECKPOINTS}): {magic}")
        visible_rows = 14  # the tree's viewport; the rest is virtualised
        samples["open -> drawn"] = []
        for _ in range(REPEAT):
            fresh_page(lab, "focus.ipynb", tab)
            samples["open -> drawn"].append(
                open_to_drawn(page, "ditto-runtimes-panel", "ditto", visible_rows)
            )
        for key in ("%checkpoint -> node", "event -> node", "cell end -> node"):
            samples[key] = []
        for i in range(REPEAT):
            name = f"magic-{i}"
            watch(page, "#ditto-runtimes-panel", name, ".jp-DittoCheckpoint-name")
            pressed = time.time() * 1000
            lab.type_cell(f"%checkpoint {name}")
            seen = wait_node(page)
            lab.wait_idle()
            seen = page.evaluate("window.benchWatch")
            samples["%checkpoint -> node"].append(seen["node"] - pressed)
            samples["event -> node"].append(seen["node"] - seen["event"])
            samples["cell end -> node"].append(seen["node"] - seen["idle"])
        samples["outside change -> node"] = []
        runtime_id = page.evaluate(
            "window.jupyterapp.shell.currentWidget.sessionContext.session.id"
        )
        for i in range(REPEAT):
            name = f"rest-{i}"
            watch(page, "#ditto-runtimes-panel", name, ".jp-DittoCheckpoint-name")
            requested = time.time() * 1000
            status, body = server.api(
                "POST", "checkpoint", {"runtime_id": runtime_id, "name": name}
            )
            assert status == 200, body
            samples["outside change -> node"].append(wait_node(page)["node"] - requested)
        page.close()
    return samples


def git(repo: Path, *args: str) -> None:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "bench",
        "GIT_AUTHOR_EMAIL": "bench@example.com",
        "GIT_COMMITTER_NAME": "bench",
        "GIT_COMMITTER_EMAIL": "bench@example.com",
    }
    subprocess.run(["git", "-C", str(repo), *args], check=True, env=env, capture_output=True)


def measure_anchor(browser: Any) -> dict[str, list[float]]:
    ensure_anchor()
    base = WORK / "panel-anchor"
    shutil.rmtree(base, ignore_errors=True)
    server = AnchorLab(
        base,
        config={
            "ServerApp": {"jpserver_extensions": {"ditto_jupyter": True, "jupyterlab_git": True}}
        },
    )
    repo = server.root_dir / "repo"
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    for i in range(CHECKPOINTS):
        git(repo, "commit", "-q", "--allow-empty", "-m", f"commit-{i}")
    server.write_notebook("repo/focus.ipynb")
    samples: dict[str, list[float]] = {"open -> drawn": [], "outside change -> node": []}
    tab = '.jp-SideBar.jp-mod-left [data-id="jp-git-sessions"]'
    with server:
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        lab = Lab(page, server)
        for _ in range(REPEAT):
            fresh_page(lab, "repo/focus.ipynb", tab)
            samples["open -> drawn"].append(
                open_to_drawn(page, "jp-git-sessions", "git", GIT_HISTORY)
            )
        for i in range(REPEAT):
            message = f"anchor-{i}"
            watch(page, "#jp-git-sessions", message, None)
            committed = time.time() * 1000
            git(repo, "commit", "-q", "--allow-empty", "-m", message)
            samples["outside change -> node"].append(wait_node(page)["node"] - committed)
        page.close()
    return samples


def median(values: list[float]) -> float:
    return statistics.median(values)


def run_compare() -> None:
    """The Compare view's section: a JupyterLab with one notebook, the large comparison."""
    base = WORK / "panel-compare"
    shutil.rmtree(base, ignore_errors=True)
    server = LabServer(base)
    server.root_dir.mkdir(parents=True, exist_ok=True)
    server.write_notebook("focus.ipynb")
    with server, sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            lab = Lab(page, server)
            lab.open("focus.ipynb")
            runtime_id = page.evaluate(
                "window.jupyterapp.shell.currentWidget.sessionContext.session.id"
            )
            measure_compare(page, str(runtime_id), 1)  # warm up: code and styles loaded
            samples = measure_compare(page, str(runtime_id), REPEAT)
            page.close()
        finally:
            browser.close()
    body = compare_table(samples, markdown_table)
    write_section("bench_panel_compare", "The Compare view in the browser (bench_panel.py)", body)
    print(body)


def main() -> None:
    modes = sys.argv[1:] or ["tree", "compare"]
    unknown = set(modes) - {"tree", "compare"}
    if unknown:
        raise SystemExit(f"bench_panel: unknown part {sorted(unknown)}; the parts: tree, compare")
    if "tree" in modes:
        run_tree()
    if "compare" in modes:
        run_compare()


def run_tree() -> None:
    """The tree's section: 100 runtimes of 50 checkpoints, beside jupyterlab-git."""
    server = prepare_ditto()  # before Playwright: its sync API runs an event loop
    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            ours = measure_ditto(browser, server)
            print(json.dumps({"ditto": ours}), flush=True)
            anchor = measure_anchor(browser)
        finally:
            browser.close()
    print(json.dumps({"ditto": ours, "jupyterlab-git": anchor}, indent=1))

    def row(label: str, key: str, target: float | None, anchor_key: str | None) -> list[object]:
        value = median(ours[key])
        cells: list[object] = [
            label,
            f"{value:.0f}",
            f"{min(ours[key]):.0f} to {max(ours[key]):.0f}",
        ]
        if anchor_key:
            theirs = median(anchor[anchor_key])
            cells += [f"{theirs:.0f}", f"{value / theirs:.2f}x"]
        else:
            cells += ["", ""]
        met: Callable[[], str] = lambda: "yes" if value < (target or 0) else "NO"  # noqa: E731
        cells += [f"< {target:.0f}" if target else "", met() if target else ""]
        return cells

    rows = [
        row("open panel -> tree drawn", "open -> drawn", TARGETS_MS["open"], "open -> drawn"),
        row(
            "checkpoint made elsewhere (REST / git commit) -> node",
            "outside change -> node",
            TARGETS_MS["checkpoint"],
            "outside change -> node",
        ),
        row("%checkpoint: runtime event -> node", "event -> node", TARGETS_MS["checkpoint"], None),
        row("%checkpoint: cell end -> node", "cell end -> node", TARGETS_MS["checkpoint"], None),
        row(
            "%checkpoint: Shift+Enter -> node (incl. the capture)",
            "%checkpoint -> node",
            None,
            None,
        ),
    ]
    body = (
        f"{RUNTIMES} runtimes x {CHECKPOINTS} checkpoints; medians of {REPEAT} (ms), range "
        "min to max; anchor: jupyterlab-git 0.55, 50 commits, history of 25, its default 3 s "
        "refresh. A negative `cell end -> node` means the row was drawn before the cell "
        "ended (the event goes out before the magic's answer).\n\n"
        + markdown_table(
            ["measure", "ditto (ms)", "range", "jupyterlab-git (ms)", "ratio", "target", "met"],
            rows,
        )
    )
    write_section("bench_panel", "Runtimes side panel in the browser (bench_panel.py)", body)
    print(body)


if __name__ == "__main__":
    main()
