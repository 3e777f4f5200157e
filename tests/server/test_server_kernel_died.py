"""A kernel killed during a call ends the call with 502 "kernel ... died", under a real
Jupyter server, even when it is revived under the same id at once.

Jupyter's restarter revives a killed kernel under its id; a call that asked only "is the
kernel alive?" then waited the whole `kernel_call_timeout` (600 s by default) with the
runtime busy. Two cases: the server's capture of a runtime (REST checkpoint) and the
restore into a pooled kernel during a checkout. `kernel_call_timeout` is short here, so
that a call that missed the death fails in seconds, on "did not answer within".
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from ditto_jupyter.server.app import DittoJupyterApp
from tests.server.conftest import Api, OpenRuntime
from tests.server.notebook_sessions import run
from tests.support.kernel_deaths import (
    SLOW_TO_LOAD,
    SLOW_TO_PICKLE,
    kill_and_revive,
    manager_of,
    pid_written_to,
)

pytestmark = pytest.mark.slow

#: Seconds a kernel call may take here (the default is 600).
CALL_TIMEOUT_S = 20.0


@pytest.fixture
def ditto_load_magics() -> bool:
    return False  # REST only


@pytest.fixture
def jp_server_config(jp_server_config: Any) -> Any:
    jp_server_config.DittoJupyterApp.kernel_call_timeout = CALL_TIMEOUT_S
    return jp_server_config


async def not_busy(api: Api, runtime_id: str) -> None:
    """Wait until the runtime reports idle (a revived kernel may be busy starting up).

    A functional wait, generous, not a speed check: the dead process never reports idle,
    so a runtime that counts its state stays busy for good.
    """
    for _ in range(600):
        status, record = await api("GET", runtime_id)
        assert status == 200, record
        if record["status"] != "busy":
            assert record["status"] == "idle", record
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"runtime {runtime_id} stayed busy after its kernel died")


async def test_a_capture_ends_when_its_kernel_dies_even_if_it_is_revived(
    api: Api, open_runtime: OpenRuntime, ditto_app: DittoJupyterApp, tmp_path: Path
) -> None:
    assert ditto_app.serverapp is not None
    runtime = await open_runtime("notebooks/dies.ipynb")
    marker = tmp_path / "capturing.pid"
    await run(ditto_app, runtime.kernel_id, SLOW_TO_PICKLE.format(marker=str(marker)))
    checkpoint = asyncio.ensure_future(
        api("POST", "checkpoint", {"runtime_id": runtime.runtime_id})
    )
    pid = await pid_written_to(marker)
    kernel = ditto_app.serverapp.kernel_manager.get_kernel(runtime.kernel_id)
    await kill_and_revive(kernel, pid)
    status, body = await checkpoint
    assert (status, body["error"]) == (502, "BackendError"), body
    assert f"kernel {runtime.kernel_id} died" in body["message"]
    await not_busy(api, runtime.runtime_id)
    # The runtime takes operations again: no operation of the dead call holds it.
    status, body = await api("POST", "checkpoint", {"runtime_id": runtime.runtime_id})
    assert body.get("error") != "SessionBusy", body


@pytest.mark.parametrize("ditto_kernel_pool_size", [1])
async def test_a_checkout_ends_when_its_pooled_kernel_dies_even_if_it_is_revived(
    api: Api, open_runtime: OpenRuntime, ditto_app: DittoJupyterApp, tmp_path: Path
) -> None:
    assert ditto_app.serverapp is not None and ditto_app.kernel_pool is not None
    runtime = await open_runtime("notebooks/source.ipynb")
    marker = tmp_path / "restoring.pid"
    await run(ditto_app, runtime.kernel_id, SLOW_TO_LOAD.format(marker=str(marker)))
    status, taken = await api("POST", "checkpoint", {"runtime_id": runtime.runtime_id})
    assert status == 200, taken
    await ditto_app.kernel_pool.fill()  # the checkout takes a pooled kernel
    assert ditto_app.kernel_pool.kernel_ids()
    checkout = asyncio.ensure_future(
        api("POST", "checkout", {"checkpoint_id": taken["checkpoint_id"]})
    )
    pid = await pid_written_to(marker)
    await kill_and_revive(manager_of(ditto_app.serverapp.kernel_manager, pid), pid)
    status, body = await checkout
    assert (status, body["error"]) == (502, "BackendError"), body
    assert "died" in body["message"]
    await not_busy(api, runtime.runtime_id)
    status, listed = await api("GET", "")
    assert [r["runtime_id"] for r in listed["runtimes"]] == [runtime.runtime_id]
