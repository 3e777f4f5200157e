"""The warm kernel pool (issue 13 section 2): real kernels, a real jupyter-server.

Checkout and resume take a started kernel from the pool; it learns its runtime identity
when taken. Nothing of one runtime reaches the next through the pool (variables,
environment, working directory, notebook-local modules); pooled kernels are no runtimes,
not in `GET /api/kernels`, replaced when they die, and shut down with the server.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from ditto_jupyter.server.app import DittoJupyterApp
from ditto_jupyter.server.kernel_pool import KernelPool
from tests.server.conftest import Api, OpenRuntime
from tests.server.live_server import LiveServer
from tests.server.notebook_sessions import kill_kernel, run, user_variables

# pools of kernels, and a server process of its own
pytestmark = pytest.mark.slow

#: What a kernel says about itself: identity, folder, environment, local modules.
SELF_REPORT = """
import json as _json, os as _os, sys as _sys
_magics = get_ipython().magics_manager.registry["DittoMagics"]
print(_json.dumps({
    "runtime_id": _os.environ.get("DITTO_RUNTIME_ID"),
    "runtime_token": _os.environ.get("DITTO_RUNTIME_TOKEN"),
    "workspace": _os.environ.get("DITTO_WORKSPACE"),
    "data_dir": _os.environ.get("DITTO_DATA_DIR"),
    "api_workspace": str(__import__("ditto_jupyter").workspace()),
    "magics_runtime_id": _magics.control.runtime_id,
    "magics_folder": str(_magics.notebook_folder),
    "cwd": _os.getcwd(),
    "env_leak": sorted(k for k in _os.environ if k.startswith("LEAK_")),
    "local_modules": sorted(m for m in _sys.modules if m.startswith("nb_local_")),
}))
del _json, _os, _sys, _magics
"""


@pytest.fixture
def ditto_kernel_pool_size() -> int:
    return 1


def pool_of(app: DittoJupyterApp) -> KernelPool:
    assert app.kernel_pool is not None
    return app.kernel_pool


async def report(app: DittoJupyterApp, kernel_id: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(await run(app, kernel_id, SELF_REPORT))
    return found


def expected_identity(app: DittoJupyterApp, runtime_id: str, folder: Path) -> dict[str, Any]:
    assert app.runtime_sessions is not None and app.service is not None
    workspace = str(app.service.workspace_path(runtime_id))
    return {
        "runtime_id": runtime_id,
        "runtime_token": app.runtime_sessions.tokens.token(runtime_id),
        "workspace": workspace,
        "data_dir": str(Path(app.data_dir).resolve()),
        "api_workspace": workspace,
        "magics_runtime_id": runtime_id,
        "magics_folder": str(folder),
        "cwd": str(folder),
        "env_leak": [],
        "local_modules": [],
    }


async def test_nothing_of_one_runtime_reaches_the_next_through_the_pool(
    api: Api, open_runtime: OpenRuntime, ditto_app: DittoJupyterApp, jp_root_dir: Path
) -> None:
    pool = pool_of(ditto_app)
    root = jp_root_dir.resolve()
    (root / "alpha").mkdir()
    (root / "alpha" / "nb_local_alpha.py").write_text("VALUE = 'alpha'\n")
    (root / "beta").mkdir()
    (root / "beta" / "nb_local_beta.py").write_text("VALUE = 'beta'\n")

    source_a = await open_runtime("alpha/a.ipynb", x=1)
    status, first = await api("POST", "checkpoint", {"runtime_id": source_a.runtime_id})
    assert status == 200, first
    await pool.fill()
    (pooled,) = pool.kernel_ids()

    # a pooled kernel belongs to no runtime: nothing of a runtime in its environment
    bare = json.loads(
        await run(
            ditto_app,
            pooled,
            "import json, os; print(json.dumps([os.environ.get(k) for k in "
            '("DITTO_RUNTIME_ID", "DITTO_RUNTIME_TOKEN", "DITTO_WORKSPACE")]))',
        )
    )
    assert bare == [None, None, None]

    # the first checkout takes it; it knows who it is and sits in its notebook's folder
    status, child = await api("POST", "checkout", {"checkpoint_id": first["checkpoint_id"]})
    assert status == 200, child
    child_id = child["runtime"]["runtime_id"]
    assert child["kernel_id"] == pooled
    assert await report(ditto_app, pooled) == expected_identity(ditto_app, child_id, root / "alpha")
    assert (await user_variables(ditto_app, pooled)) == {"x": 1}
    # it dirties everything a kernel can carry: variables, environment, folder, modules
    await run(
        ditto_app,
        pooled,
        "import os, nb_local_alpha\nsecret = 'child'\nos.environ['LEAK_CHILD'] = '1'\n"
        "os.chdir('/')\n",
    )
    status, paused = await api("POST", "pause", {"runtime_id": child_id})
    assert status == 200, paused

    await pool.fill()  # the refill the checkout scheduled, done
    (second,) = pool.kernel_ids()
    assert second != pooled

    source_b = await open_runtime("beta/b.ipynb", y=2)
    status, other = await api("POST", "checkpoint", {"runtime_id": source_b.runtime_id})
    assert status == 200, other
    status, child_b = await api("POST", "checkout", {"checkpoint_id": other["checkpoint_id"]})
    assert status == 200, child_b
    assert child_b["kernel_id"] == second
    child_b_id = child_b["runtime"]["runtime_id"]
    assert await report(ditto_app, second) == expected_identity(
        ditto_app, child_b_id, root / "beta"
    )
    assert (await user_variables(ditto_app, second)) == {"y": 2}
    # '' on sys.path follows the new folder: the notebook's own modules import
    imported = await run(ditto_app, second, "import nb_local_beta; print(nb_local_beta.VALUE)")
    assert imported == "beta\n"

    # resume takes a pooled kernel too, and gets its own identity back
    await pool.fill()
    (third,) = pool.kernel_ids()
    status, resumed = await api("POST", "resume", {"runtime_id": child_id})
    assert status == 200, resumed
    assert resumed["kernel_id"] == third
    # its own checkpoint holds `nb_local_alpha`: the restore imported it from its folder
    assert await report(ditto_app, third) == {
        **expected_identity(ditto_app, child_id, root / "alpha"),
        "local_modules": ["nb_local_alpha"],
    }
    restored = await user_variables(ditto_app, third)
    assert sorted(restored) == ["nb_local_alpha", "os", "secret", "x"]
    assert (restored["x"], restored["secret"]) == (1, "child")


async def test_pooled_kernels_are_not_runtimes_sessions_or_listed_kernels(
    api: Api, open_runtime: OpenRuntime, ditto_app: DittoJupyterApp, jp_fetch: Any
) -> None:
    runtime = await open_runtime("listed.ipynb", x=1)
    pool = pool_of(ditto_app)
    await pool.fill()
    (pooled,) = pool.kernel_ids()
    assert ditto_app.serverapp is not None
    assert pooled in ditto_app.serverapp.kernel_manager  # started, only hidden

    kernels = json.loads((await jp_fetch("api", "kernels")).body)
    assert [k["id"] for k in kernels] == [runtime.kernel_id]
    sessions = json.loads((await jp_fetch("api", "sessions")).body)
    assert [s["kernel"]["id"] for s in sessions] == [runtime.kernel_id]
    status, listing = await api("GET")
    assert status == 200, listing
    assert [r["runtime_id"] for r in listing["runtimes"]] == [runtime.runtime_id]


async def test_the_server_answers_its_status_and_kernels_while_a_pooled_kernel_starts(
    ditto_app: DittoJupyterApp, jp_fetch: Any
) -> None:
    """jupyter-server puts a started kernel in its table one loop turn before it gives it
    `last_activity`; a kernel listing in that turn failed (`GET /api/status` and
    `/api/kernels` answered 500), and a server starts its pool's kernel as it starts."""
    assert ditto_app.serverapp is not None
    kernel_manager = ditto_app.serverapp.kernel_manager
    add_when_ready = kernel_manager._add_kernel_when_ready
    answers: dict[str, int] = {}

    async def add_then_ask(kernel_id: str, manager: Any, starter: Any) -> None:
        await add_when_ready(kernel_id, manager, starter)
        assert kernel_id in kernel_manager and not manager.trait_has_value("last_activity")
        for route in ("status", "kernels"):  # the kernel is listed, not yet marked
            answers[route] = (await jp_fetch("api", route, raise_error=False)).code

    kernel_manager._add_kernel_when_ready = add_then_ask
    try:
        await pool_of(ditto_app).fill()
    finally:
        del kernel_manager._add_kernel_when_ready
    assert answers == {"status": 200, "kernels": 200}
    (pooled,) = pool_of(ditto_app).kernel_ids()
    kernels = json.loads((await jp_fetch("api", "kernels")).body)
    assert pooled not in [k["id"] for k in kernels]


async def test_a_pooled_kernel_that_died_is_replaced_not_handed_out(
    api: Api, open_runtime: OpenRuntime, ditto_app: DittoJupyterApp
) -> None:
    source = await open_runtime("dies.ipynb", x=1)
    status, first = await api("POST", "checkpoint", {"runtime_id": source.runtime_id})
    assert status == 200, first
    pool = pool_of(ditto_app)
    await pool.fill()
    (dead,) = pool.kernel_ids()
    await kill_kernel(ditto_app, dead)

    status, child = await api("POST", "checkout", {"checkpoint_id": first["checkpoint_id"]})
    assert status == 200, child
    assert child["kernel_id"] != dead
    assert (await user_variables(ditto_app, child["kernel_id"])) == {"x": 1}
    assert ditto_app.host is not None and not ditto_app.host.is_alive(dead)

    await pool.fill()
    (fresh,) = pool.kernel_ids()
    assert fresh not in (dead, child["kernel_id"])
    assert await run(ditto_app, fresh, "print(6 * 7)") == "42\n"


async def test_a_dead_kernel_waiting_in_the_pool_is_replaced_on_refill(
    ditto_app: DittoJupyterApp,
) -> None:
    pool = pool_of(ditto_app)
    await pool.fill()
    (dead,) = pool.kernel_ids()
    await kill_kernel(ditto_app, dead)
    await pool.fill()
    (fresh,) = pool.kernel_ids()
    assert fresh != dead
    assert ditto_app.host is not None and not ditto_app.host.is_alive(dead)


async def test_stopping_the_extension_shuts_pooled_kernels_down(
    ditto_app: DittoJupyterApp,
) -> None:
    pool = pool_of(ditto_app)
    await pool.fill()
    (pooled,) = pool.kernel_ids()
    await ditto_app.stop_extension()
    assert ditto_app.host is not None and not ditto_app.host.is_alive(pooled)
    assert pool.kernel_ids() == set()
    pool.refill_soon()  # a closed pool starts nothing
    assert pool.kernel_ids() == set()


def is_dead(process: psutil.Process) -> bool:
    """Gone, or a zombie: a zombie has exited and only waits to be reaped (an orphaned
    kernel waits on whoever adopted it, which in a container may never reap it)."""
    try:
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:  # psutil.ZombieProcess is one too
        return True


def kernel_processes(server_pid: int) -> list[psutil.Process]:
    """The live ipykernel processes below the server."""
    kernels = []
    for process in psutil.Process(server_pid).children(recursive=True):
        try:
            if "ipykernel" in " ".join(process.cmdline()):
                kernels.append(process)
        except psutil.NoSuchProcess:  # exited meanwhile, or a zombie (ZombieProcess): dead
            continue
    return kernels


def test_pool_kernels_leave_with_the_server_process(tmp_path: Path) -> None:
    config = {"DittoJupyterApp": {"kernel_pool_size": 1, "load_magics": False}}
    server = LiveServer(tmp_path, config=config).start()
    try:
        assert server.process is not None
        pid = server.process.pid
        kernels: list[psutil.Process] = []
        deadline = time.monotonic() + 120  # how long a loaded machine may need to start one
        while not kernels and time.monotonic() < deadline:
            kernels = kernel_processes(pid)
            time.sleep(0.1)
        assert len(kernels) == 1, "the server started no pooled kernel"
        status, listed = server.api("GET", "")
        assert (status, listed["runtimes"]) == (200, [])
    finally:
        server.stop()
    deadline = time.monotonic() + 30  # how long a loaded machine may need to stop one
    while not all(is_dead(kernel) for kernel in kernels) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [kernel for kernel in kernels if not is_dead(kernel)] == []
