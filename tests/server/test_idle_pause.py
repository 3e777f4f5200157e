"""Idle runtimes pause instead of dying (`pause_idle_after`, server/idle_pauser.py).

On a real jupyter-server with real notebook kernels. The idle time is real in the
end-to-end tests (a few seconds); the tests of what is never touched age a kernel's
`last_activity` instead and run one check, so they do not depend on timing.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from ditto_jupyter.server.app import DittoJupyterApp
from ditto_jupyter.server.idle_pauser import IDLE_PAUSE_NAME, IdlePauser
from tests.server.conftest import Api, OpenRuntime
from tests.server.notebook_sessions import sleeping, user_variables

# real idle time and jupyter-server's culler: seconds per test
pytestmark = pytest.mark.slow

#: How long a test waits for the pauser before it gives up (a hang guard, not a timing test).
GIVE_UP_S = 120.0


@pytest.fixture
def ditto_load_magics() -> bool:
    return False


@pytest.fixture
def pause_idle_after() -> float:
    """Long enough that the timer never fires during a test; the tests call check_once."""
    return 3600.0


@pytest.fixture
def jp_server_config(jp_server_config: Any, pause_idle_after: float) -> Any:
    jp_server_config.DittoJupyterApp.pause_idle_after = pause_idle_after
    return jp_server_config


def pauser(app: DittoJupyterApp) -> IdlePauser:
    assert app.idle_pauser is not None
    return app.idle_pauser


def age_kernel(app: DittoJupyterApp, kernel_id: str, seconds: float) -> None:
    """Move the kernel's tracked last activity `seconds` into the past."""
    assert app.serverapp is not None
    kernel = app.serverapp.kernel_manager.get_kernel(kernel_id)
    kernel.last_activity = kernel.last_activity - timedelta(seconds=seconds)


async def wait_until_tracked_idle(app: DittoJupyterApp, kernel_id: str) -> None:
    """Until the kernel's warm-up call has run and jupyter-server tracks it idle."""
    assert app.host is not None and app.serverapp is not None
    warm_up = app.host._warm_ups.get(kernel_id)
    if warm_up is not None:
        await warm_up
    kernel = app.serverapp.kernel_manager.get_kernel(kernel_id)
    while kernel.execution_state != "idle":
        await asyncio.sleep(0.05)


async def wait_until_stopped(api: Api, runtime_id: str) -> dict[str, Any]:
    """Until the runtime is paused or closed (a culled kernel's runtime is closed)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + GIVE_UP_S
    while True:
        code, record = await api("GET", runtime_id)
        assert code == 200, record
        if record["status"] in ("paused", "closed") or loop.time() > deadline:
            return dict(record)
        await asyncio.sleep(0.2)


async def test_an_idle_runtime_is_checkpointed_then_stopped(
    api: Api,
    open_runtime: OpenRuntime,
    ditto_app: DittoJupyterApp,
    jp_serverapp: Any,
    jp_root_dir: Path,
    events: list[dict[str, Any]],
) -> None:
    runtime = await open_runtime("idle.ipynb", x=1, name="kept")
    await wait_until_tracked_idle(ditto_app, runtime.kernel_id)
    age_kernel(ditto_app, runtime.kernel_id, 3600.0)

    assert await pauser(ditto_app).check_once() == [runtime.runtime_id]

    code, record = await api("GET", runtime.runtime_id)
    assert (code, record["status"]) == (200, "paused")
    assert runtime.kernel_id not in jp_serverapp.kernel_manager
    assert (jp_root_dir / "idle.ipynb").is_file()  # the notebook stays
    _, listing = await api("GET", f"{runtime.runtime_id}/checkpoints")
    head = listing["checkpoints"][0]
    assert head["name"] == IDLE_PAUSE_NAME
    assert head["metadata"]["idle_pause"]["idle_seconds"] >= 3600
    await jp_serverapp.event_logger.gather_listeners()
    pauses = [e for e in events if e["action"] == "pause"]
    assert [(e["runtime_id"], e["reason"], e["ok"], e["status"]) for e in pauses] == [
        (runtime.runtime_id, "idle", True, "paused")
    ]

    code, resumed = await api("POST", "resume", {"runtime_id": runtime.runtime_id})
    assert code == 200, resumed
    assert await user_variables(ditto_app, resumed["kernel_id"]) == {"x": 1, "name": "kept"}


async def test_a_pause_asked_for_says_so(
    api: Api, open_runtime: OpenRuntime, jp_serverapp: Any, events: list[dict[str, Any]]
) -> None:
    runtime = await open_runtime("asked.ipynb", x=1)
    code, _ = await api("POST", "pause", {"runtime_id": runtime.runtime_id})
    assert code == 200
    await jp_serverapp.event_logger.gather_listeners()
    assert [e["reason"] for e in events if e["action"] == "pause"] == ["asked"]
    assert all(e["reason"] is None for e in events if e["action"] != "pause")


async def test_a_recently_active_runtime_is_left_alone(
    api: Api, open_runtime: OpenRuntime, ditto_app: DittoJupyterApp
) -> None:
    runtime = await open_runtime("fresh.ipynb", x=1)
    assert await pauser(ditto_app).check_once() == []
    _, record = await api("GET", runtime.runtime_id)
    assert record["status"] == "idle"


async def test_a_busy_runtime_is_never_touched(
    api: Api,
    open_runtime: OpenRuntime,
    ditto_app: DittoJupyterApp,
    jp_serverapp: Any,
    tmp_path: Path,
    events: list[dict[str, Any]],
) -> None:
    busy = await open_runtime("busy.ipynb", x=1)
    idle = await open_runtime("other.ipynb", y=2)
    await wait_until_tracked_idle(ditto_app, idle.kernel_id)  # its warm-up call is done
    async with sleeping(ditto_app, busy.kernel_id, tmp_path):
        age_kernel(ditto_app, busy.kernel_id, 3600.0)
        age_kernel(ditto_app, idle.kernel_id, 3600.0)
        assert await pauser(ditto_app).check_once() == [idle.runtime_id]
        assert busy.kernel_id in jp_serverapp.kernel_manager
    await jp_serverapp.event_logger.gather_listeners()
    assert [e["runtime_id"] for e in events if e["action"] == "pause"] == [idle.runtime_id]
    _, record = await api("GET", busy.runtime_id)
    assert record["status"] == "idle"
    assert await user_variables(ditto_app, busy.kernel_id) == {"x": 1}


async def test_a_runtime_with_an_operation_in_flight_is_never_touched(
    api: Api,
    open_runtime: OpenRuntime,
    ditto_app: DittoJupyterApp,
    jp_serverapp: Any,
    events: list[dict[str, Any]],
) -> None:
    runtime = await open_runtime("inflight.ipynb", x=1)
    await wait_until_tracked_idle(ditto_app, runtime.kernel_id)
    age_kernel(ditto_app, runtime.kernel_id, 3600.0)
    assert ditto_app.service is not None
    async with ditto_app.service.guard.operation(runtime.runtime_id):
        assert await pauser(ditto_app).check_once() == []
        assert runtime.kernel_id in jp_serverapp.kernel_manager
    await jp_serverapp.event_logger.gather_listeners()
    assert [e for e in events if e["action"] == "pause"] == []  # not even a refused try
    assert await pauser(ditto_app).check_once() == [runtime.runtime_id]


class TestCullingDefersToPausing:
    """cull_idle_timeout shorter than pause_idle_after: the culler never kills a runtime."""

    @pytest.fixture
    def pause_idle_after(self) -> float:
        return 4.0

    @pytest.fixture
    def jp_server_config(self, jp_server_config: Any) -> Any:
        jp_server_config.MappingKernelManager.cull_idle_timeout = 2
        jp_server_config.MappingKernelManager.cull_interval = 1
        return jp_server_config

    async def test_the_runtime_pauses_and_keeps_its_variables(
        self,
        api: Api,
        open_runtime: OpenRuntime,
        ditto_app: DittoJupyterApp,
        jp_serverapp: Any,
        jp_fetch: Any,
        events: list[dict[str, Any]],
    ) -> None:
        manager = jp_serverapp.kernel_manager
        runtime = await open_runtime("culled.ipynb", x=1)
        # A kernel of no runtime, started the same moment: the culler still takes it.
        response = await jp_fetch(
            "api", "kernels", method="POST", body=json.dumps({"name": "python3"})
        )
        plain_kernel = json.loads(response.body)["id"]

        record = await wait_until_stopped(api, runtime.runtime_id)
        deadline = asyncio.get_running_loop().time() + GIVE_UP_S
        while plain_kernel in manager and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.2)

        assert record["status"] == "paused"
        assert plain_kernel not in manager  # culled: the culler was on
        await jp_serverapp.event_logger.gather_listeners()
        actions = [(e["action"], e.get("reason")) for e in events]
        assert ("pause", "idle") in actions
        assert "lost" not in [action for action, _ in actions]
        code, resumed = await api("POST", "resume", {"runtime_id": runtime.runtime_id})
        assert code == 200, resumed
        assert await user_variables(ditto_app, resumed["kernel_id"]) == {"x": 1}


class TestOffByDefault:
    @pytest.fixture
    def pause_idle_after(self) -> float:
        return 0.0

    async def test_no_pauser_and_the_culler_untouched(
        self, ditto_app: DittoJupyterApp, jp_serverapp: Any
    ) -> None:
        assert DittoJupyterApp.pause_idle_after.default_value == 0.0
        assert ditto_app.idle_pauser is None
        manager = jp_serverapp.kernel_manager
        assert "cull_kernel_if_idle" not in vars(manager)  # the class's own method
