"""Fixtures for the server-extension and CLI tests: a real Jupyter server with ditto_jupyter.

pytest-jupyter's server plugin is imported here (its fixtures and its async-test hooks)
because only the top-level conftest may declare `pytest_plugins`.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pytest_jupyter.jupyter_server import *  # noqa: F403

from ditto_jupyter.server.app import DittoJupyterApp
from ditto_jupyter.server.events import RUNTIME_EVENT_SCHEMA_ID
from tests.server.notebook_sessions import open_notebook_session, run

Api = Callable[..., Awaitable[tuple[int, Any]]]


@dataclass(frozen=True)
class Runtime:
    """A live runtime of the test server: a Jupyter session and its real kernel."""

    runtime_id: str
    kernel_id: str


OpenRuntime = Callable[..., Awaitable[Runtime]]


@pytest.fixture
def ditto_load_magics() -> bool:
    """Whether kernels load the magics at start; modules that test only REST turn it off.

    Loading them costs each kernel start about a second; REST tests need none of them
    (captures and restores call `ditto_jupyter.kernel.capture` in the kernel either way).
    """
    return True


@pytest.fixture
def ditto_kernel_pool_size() -> int:
    """The warm kernel pool's size; 0 (off) here, the pool's own tests turn it on.

    A pool starts a kernel in the background after each checkout and resume; on a shared
    2-core machine the tests that do not test the pool should not pay for it.
    """
    return 0


@pytest.fixture
def ditto_data_dir(tmp_path: Path) -> Path:
    return tmp_path / "ditto-data"


@pytest.fixture
def jp_server_config(
    ditto_load_magics: bool, ditto_data_dir: Path, ditto_kernel_pool_size: int
) -> Any:
    from traitlets.config import Config

    return Config(
        {
            "ServerApp": {
                "jpserver_extensions": {"ditto_jupyter.server": True},
            },
            "DittoJupyterApp": {
                "data_dir": str(ditto_data_dir),
                "load_magics": ditto_load_magics,
                "kernel_pool_size": ditto_kernel_pool_size,
            },
        }
    )


@pytest.fixture
def ditto_app(jp_serverapp: Any) -> DittoJupyterApp:
    """The loaded extension app of the running test server."""
    point = jp_serverapp.extension_manager.extension_points["ditto_jupyter"]
    app = point.app
    assert isinstance(app, DittoJupyterApp)
    return app


@pytest.fixture
def api(jp_fetch: Any, ditto_app: DittoJupyterApp) -> Api:
    """`await api("POST", "checkpoint", {...})` -> (status, parsed JSON body); never raises."""

    async def call(
        method: str,
        path: str = "",
        body: Any = None,
        *,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
        query: dict[str, Any] | None = None,
    ) -> tuple[int, Any]:
        parts = ["api", "v1", "runtimes", *[p for p in path.split("/") if p]]
        kwargs: dict[str, Any] = {"method": method, "raise_error": False}
        if query is not None:
            kwargs["params"] = query
        if method == "POST":
            kwargs["body"] = raw if raw is not None else json.dumps(body)
        if headers is not None:
            kwargs["headers"] = headers
        response = await jp_fetch(*parts, **kwargs)
        text = response.body.decode() if response.body else ""
        return response.code, (json.loads(text) if text else None)

    return call


@pytest.fixture
def open_runtime(
    api: Api, ditto_app: DittoJupyterApp, jp_fetch: Any, jp_root_dir: Path
) -> OpenRuntime:
    """`await open_runtime("nb.ipynb", x=1)`: a notebook session whose kernel holds `x = 1`.

    The runtime is registered (the way the side panel's first GET does) before it returns.
    Give each runtime of a test its own notebook path: Jupyter has one session per path.
    """

    async def open_(path: str = "notebooks/work.ipynb", *cells: str, **values: Any) -> Runtime:
        session = await open_notebook_session(jp_fetch, jp_root_dir, path, *cells)
        runtime = Runtime(session["id"], session["kernel"]["id"])
        if values:
            assignments = "\n".join(f"{name} = {value!r}" for name, value in values.items())
            await run(ditto_app, runtime.kernel_id, assignments)
        status, record = await api("GET", runtime.runtime_id)
        assert (status, record["status"]) == (200, "idle"), record
        return runtime

    return open_


@pytest.fixture
def events(jp_serverapp: Any) -> list[dict[str, Any]]:
    """Every runtime event emitted from now on."""
    seen: list[dict[str, Any]] = []

    async def listener(logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        seen.append(data)

    jp_serverapp.event_logger.add_listener(schema_id=RUNTIME_EVENT_SCHEMA_ID, listener=listener)
    return seen
