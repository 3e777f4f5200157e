"""Fixtures for the server-extension and CLI tests: a real Jupyter server with ditto_jupyter.

pytest-jupyter's server plugin is imported here (its fixtures and its async-test hooks)
because only the top-level conftest may declare `pytest_plugins`.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from pytest_jupyter.jupyter_server import *  # noqa: F403

from ditto_jupyter.server.app import DittoJupyterApp

Api = Callable[..., Awaitable[tuple[int, Any]]]


@pytest.fixture
def ditto_context() -> str:
    """Which session context the server captures: real kernels unless a module overrides."""
    return "kernel"


@pytest.fixture
def ditto_data_dir(tmp_path: Path) -> Path:
    return tmp_path / "ditto-data"


@pytest.fixture
def jp_server_config(ditto_context: str, ditto_data_dir: Path) -> Any:
    from traitlets.config import Config

    return Config(
        {
            "ServerApp": {
                "jpserver_extensions": {"ditto_jupyter.server": True},
            },
            "DittoJupyterApp": {
                "data_dir": str(ditto_data_dir),
                "context_capture": ditto_context,
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
    ) -> tuple[int, Any]:
        parts = ["api", "v1", "runtimes", *[p for p in path.split("/") if p]]
        kwargs: dict[str, Any] = {"method": method, "raise_error": False}
        if method == "POST":
            kwargs["body"] = raw if raw is not None else json.dumps(body)
        if headers is not None:
            kwargs["headers"] = headers
        response = await jp_fetch(*parts, **kwargs)
        text = response.body.decode() if response.body else ""
        return response.code, (json.loads(text) if text else None)

    return call
