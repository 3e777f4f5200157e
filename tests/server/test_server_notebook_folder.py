"""Every kernel of a runtime runs in its notebook's folder; its workspace is a separate place.

Real kernels under a real Jupyter server. A notebook in a sub-folder reads `data.csv` beside
it before and after pause and resume, and in a checkout child (whose notebook copy sits
beside the original). `ditto_jupyter.workspace()` and `DITTO_WORKSPACE` name the runtime's
current workspace, which changes with resume and checkout. Files a kernel writes straight
into its workspace survive pause, also when no cell ran since the last checkpoint (a
background thread) and when a checkout child's cell count matches its parent's.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from ditto_jupyter.server.app import DittoJupyterApp
from tests.server.notebook_sessions import open_notebook_session, run

pytestmark = pytest.mark.slow  # real kernels under a real Jupyter server

Api = Any  # the `api` fixture of conftest.py

#: Where the kernel runs, what it reads beside its notebook, where its workspace is.
WHERE = """
import json, os, ditto_jupyter
print(json.dumps({
    "cwd": os.getcwd(),
    "data": open("data.csv").read(),
    "workspace": str(ditto_jupyter.workspace()),
    "env": os.environ.get("DITTO_WORKSPACE"),
}))
"""


@pytest.fixture
def ditto_load_magics() -> bool:
    return False  # workspace() asks the server itself; the magics would only slow kernels


async def where(app: DittoJupyterApp, kernel_id: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(await run(app, kernel_id, WHERE))
    return found


async def write_in_workspace(app: DittoJupyterApp, kernel_id: str, name: str) -> None:
    await run(
        app,
        kernel_id,
        f"import ditto_jupyter\n(ditto_jupyter.workspace() / {name!r}).write_text({name!r})",
    )


async def test_every_kernel_runs_in_the_notebooks_folder(
    api: Api, ditto_app: DittoJupyterApp, jp_fetch: Any, jp_root_dir: Path, ditto_data_dir: Path
) -> None:
    folder = jp_root_dir / "project" / "sub"
    folder.mkdir(parents=True)
    (folder / "data.csv").write_text("a,b\n1,2\n")
    session = await open_notebook_session(jp_fetch, jp_root_dir, "project/sub/analysis.ipynb")
    runtime_id, kernel_id = session["id"], session["kernel"]["id"]
    workspaces = (ditto_data_dir / "workspaces").resolve()

    # a kernel JupyterLab started: not registered yet, so workspace() asks the server
    before = await where(ditto_app, kernel_id)
    assert before["cwd"] == str(folder.resolve()) and before["data"] == "a,b\n1,2\n"
    first_workspace = Path(before["workspace"])
    assert first_workspace.parent == workspaces and first_workspace.is_dir()
    status, answer = await api("GET", f"{runtime_id}/workspace")
    assert status == 200, answer
    expected = {"runtime_id": runtime_id, "backend_kind": "local", "path": before["workspace"]}
    assert answer == expected

    await write_in_workspace(ditto_app, kernel_id, "kept.txt")
    release = folder / "release-the-thread"
    await run(
        ditto_app,
        kernel_id,
        f"""
        import threading, time
        def late():
            while not os.path.exists({str(release)!r}):
                time.sleep(0.02)
            (ditto_jupyter.workspace() / "late.txt").write_text("after the last cell")
        threading.Thread(target=late).start()
        """,
    )
    status, first = await api("POST", "checkpoint", {"runtime_id": runtime_id})
    assert status == 200, first
    release.touch()
    while not (first_workspace / "late.txt").exists():  # the thread writes after the cell
        await asyncio.sleep(0.02)
    status, again = await api("POST", "checkpoint", {"runtime_id": runtime_id})
    assert status == 200, again  # no cell ran since: the snapshot may be reused
    status, paused = await api("POST", "pause", {"runtime_id": runtime_id})
    assert status == 200, paused
    assert not first_workspace.exists()

    status, resumed = await api("POST", "resume", {"runtime_id": runtime_id})
    assert status == 200, resumed
    after = await where(ditto_app, resumed["kernel_id"])
    assert after["cwd"] == str(folder.resolve()) and after["data"] == "a,b\n1,2\n"
    assert after["workspace"] == after["env"] != before["workspace"]
    resumed_workspace = Path(after["workspace"])
    assert (resumed_workspace / "kept.txt").read_text() == "kept.txt"
    assert (resumed_workspace / "late.txt").read_text() == "after the last cell"

    status, child = await api("POST", "checkout", {"checkpoint_id": paused["checkpoint_id"]})
    assert status == 200, child
    assert child["notebook_path"].startswith("project/sub/analysis-")
    branch = await where(ditto_app, child["kernel_id"])
    assert branch["cwd"] == str(folder.resolve()) and branch["data"] == "a,b\n1,2\n"
    assert branch["workspace"] == branch["env"] not in (after["workspace"], before["workspace"])
    assert (Path(branch["workspace"]) / "late.txt").is_file()
    status, answer = await api("GET", f"{child['runtime']['runtime_id']}/workspace")
    assert (status, answer["path"]) == (200, branch["workspace"])


async def test_a_checkout_child_keeps_its_files_whatever_its_cell_count(
    api: Api, ditto_app: DittoJupyterApp, jp_fetch: Any, jp_root_dir: Path
) -> None:
    session = await open_notebook_session(jp_fetch, jp_root_dir, "counts/parent.ipynb")
    parent_kernel = session["kernel"]["id"]
    await run(ditto_app, parent_kernel, "x = 1")
    await run(ditto_app, parent_kernel, "y = 2")  # the parent is at 2 cells
    status, base = await api("POST", "checkpoint", {"runtime_id": session["id"]})
    assert status == 200, base
    # registered by that checkpoint: the kernel JupyterLab started learns its workspace
    assert ditto_app.host is not None
    await ditto_app.host.wait_warm_up(parent_kernel)
    status, answer = await api("GET", f"{session['id']}/workspace")
    env = await run(ditto_app, parent_kernel, "print(__import__('os').environ['DITTO_WORKSPACE'])")
    assert env.strip() == answer["path"]

    for cells in (1, 2, 3, 4):
        status, child = await api("POST", "checkout", {"checkpoint_id": base["checkpoint_id"]})
        assert status == 200, child
        child_id, child_kernel = child["runtime"]["runtime_id"], child["kernel_id"]
        for _ in range(cells - 1):
            await run(ditto_app, child_kernel, "z = x + y")
        await write_in_workspace(ditto_app, child_kernel, f"child-{cells}.txt")  # cell `cells`
        status, answer = await api("POST", "checkpoint", {"runtime_id": child_id})
        assert status == 200, answer
        status, answer = await api("POST", "pause", {"runtime_id": child_id})
        assert status == 200, answer
        status, resumed = await api("POST", "resume", {"runtime_id": child_id})
        assert status == 200, resumed
        out = await run(
            ditto_app,
            resumed["kernel_id"],
            "import ditto_jupyter\n"
            f"print((ditto_jupyter.workspace() / 'child-{cells}.txt').read_text(), x + y)",
        )
        assert out.split() == [f"child-{cells}.txt", "3"], cells
