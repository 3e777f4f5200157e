"""A kernel restarted by Jupyter (issue 22 section 4), on a real jupyter-server.

Checkpoint at execution count 4; SIGKILL the kernel; Jupyter's restarter revives it under
the same kernel id; write a file to the workspace and run cells up to count 4 again; then
checkpoint and check that checkpoint out. The file must be there: a run mark (kernel id and
count) that a restart repeats must not reuse the old snapshot. The restart itself is
recorded: a `lost` event (reason `restarted`) offering a checkpoint with the head's
variables back, and the runtime stays live on the revived kernel.

A restart the user asks for (JupyterLab's Kernel menu: `POST /api/kernels/{id}/restart`)
empties the namespace on purpose: no `lost` event, but the next checkpoint still takes
the files as they are.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from ditto_jupyter.server.app import DittoJupyterApp
from tests.server.conftest import Api, OpenRuntime
from tests.server.notebook_sessions import run, user_variables

pytestmark = pytest.mark.slow  # a kernel killed and revived by Jupyter's restarter

#: How long the test waits for the restarter and the watcher (a hang guard only).
GIVE_UP_S = 120.0

WRITE_FILE = """
import ditto_jupyter
(ditto_jupyter.workspace() / "after-restart.txt").write_text("written by the revived kernel")
"""


@pytest.fixture
def ditto_load_magics() -> bool:
    return False


def kernel_pid(app: DittoJupyterApp, kernel_id: str) -> int:
    assert app.serverapp is not None
    return int(app.serverapp.kernel_manager.get_kernel(kernel_id).provisioner.pid)


async def cells_up_to_four(app: DittoJupyterApp, kernel_id: str, first: str) -> None:
    """Run `first` and three more cells: the kernel's execution count is 4 after."""
    await run(app, kernel_id, first)
    for number in (2, 3, 4):
        await run(app, kernel_id, f"v{number} = {number}")


async def revived(app: DittoJupyterApp, kernel_id: str, old_pid: int) -> None:
    """Until the restarter has revived the kernel under its id, in a new process."""
    assert app.serverapp is not None
    kernel = app.serverapp.kernel_manager.get_kernel(kernel_id)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + GIVE_UP_S
    while loop.time() < deadline:
        pid = getattr(kernel.provisioner, "pid", None)
        if pid not in (None, old_pid) and await kernel.is_alive():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"kernel {kernel_id} was not revived")


async def restart_recorded(app: Any, events: list[dict[str, Any]]) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + GIVE_UP_S
    while loop.time() < deadline:
        await app.event_logger.gather_listeners()
        found = [e for e in events if e["action"] == "lost" and e["reason"] == "restarted"]
        if found:
            return found[0]
        await asyncio.sleep(0.1)
    raise AssertionError("the restart was never recorded")


async def test_a_kernel_jupyter_restarted_keeps_its_files_and_is_recorded_lost(
    api: Api,
    open_runtime: OpenRuntime,
    ditto_app: DittoJupyterApp,
    jp_serverapp: Any,
    events: list[dict[str, Any]],
) -> None:
    runtime = await open_runtime("restarted.ipynb")
    rid, kernel_id = runtime.runtime_id, runtime.kernel_id
    await cells_up_to_four(ditto_app, kernel_id, "v1 = 1")
    code, head = await api("POST", "checkpoint", {"runtime_id": rid})
    assert code == 200, head

    pid = kernel_pid(ditto_app, kernel_id)
    os.kill(pid, signal.SIGKILL)
    await revived(ditto_app, kernel_id, pid)
    lost = await restart_recorded(jp_serverapp, events)
    assert (lost["runtime_id"], lost["ok"], lost["status"]) == (rid, True, "idle")

    await cells_up_to_four(ditto_app, kernel_id, WRITE_FILE)
    code, again = await api("POST", "checkpoint", {"runtime_id": rid})
    assert code == 200, again
    code, child = await api("POST", "checkout", {"checkpoint_id": again["checkpoint_id"]})
    assert code == 200, child
    code, where = await api("GET", f"{child['runtime']['runtime_id']}/workspace")
    assert code == 200, where
    assert Path(where["path"], "after-restart.txt").read_text() == "written by the revived kernel"

    # the restart offered the head's variables back; the runtime never left idle
    code, record = await api("GET", rid)
    assert (code, record["status"]) == (200, "idle")
    # no file changed between the head and the kill: the head itself holds what was lost
    assert lost["checkpoint_id"] == head["checkpoint_id"], lost
    code, restored = await api(
        "POST", "restore", {"runtime_id": rid, "checkpoint_id": lost["checkpoint_id"]}
    )
    assert code == 200, restored
    variables = await user_variables(ditto_app, kernel_id)
    assert {name: variables[name] for name in ("v1", "v2", "v3", "v4")} == {
        "v1": 1,
        "v2": 2,
        "v3": 3,
        "v4": 4,
    }


async def test_a_restart_the_user_asks_for_is_no_loss_but_files_are_not_reused(
    api: Api,
    open_runtime: OpenRuntime,
    ditto_app: DittoJupyterApp,
    jp_serverapp: Any,
    jp_fetch: Any,
    events: list[dict[str, Any]],
) -> None:
    runtime = await open_runtime("asked-restart.ipynb")
    rid, kernel_id = runtime.runtime_id, runtime.kernel_id
    await cells_up_to_four(ditto_app, kernel_id, "v1 = 1")
    code, head = await api("POST", "checkpoint", {"runtime_id": rid})
    assert code == 200, head

    await jp_fetch("api", "kernels", kernel_id, "restart", method="POST", body="")
    await cells_up_to_four(ditto_app, kernel_id, WRITE_FILE)
    code, again = await api("POST", "checkpoint", {"runtime_id": rid})
    assert code == 200, again
    code, child = await api("POST", "checkout", {"checkpoint_id": again["checkpoint_id"]})
    assert code == 200, child
    code, where = await api("GET", f"{child['runtime']['runtime_id']}/workspace")
    assert code == 200, where
    assert Path(where["path"], "after-restart.txt").exists()
    assert ditto_app.watcher is not None
    await ditto_app.watcher.check_once()
    await jp_serverapp.event_logger.gather_listeners()
    assert [e for e in events if e["action"] == "lost"] == []
