"""Real notebook runtimes under the in-process test server (pytest-jupyter), for the tests.

A runtime IS a Jupyter session: `open_notebook_session` opens one the way JupyterLab does
(a notebook file, `POST /api/sessions` with a python3 kernel). The other helpers act on its
real kernel: run a cell, read the user's variables, keep it busy in `time.sleep`, kill its
process.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import textwrap
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import nbformat

from ditto_jupyter.server.app import DittoJupyterApp

#: Prints the user's variables as JSON (what `%who` lists), leaving none of its own behind.
USER_VARIABLES = """
print(__import__("json").dumps(
    {n: v for n, v in get_ipython().user_ns.items()
     if not n.startswith("_") and n not in get_ipython().user_ns_hidden},
    default=repr,
))
"""


async def open_notebook_session(
    jp_fetch: Any, root: Path, path: str, *cells: str
) -> dict[str, Any]:
    """Write `path` as a notebook (with these code cells) and open a python3 session on it."""
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nbformat.write(notebook, str(target))
    body = {
        "path": path,
        "name": Path(path).name,
        "type": "notebook",
        "kernel": {"name": "python3"},
    }
    response = await jp_fetch("api", "sessions", method="POST", body=json.dumps(body))
    model: dict[str, Any] = json.loads(response.body)
    return model


async def run(app: DittoJupyterApp, kernel_id: str, code: str) -> str:
    """Run a cell in the kernel as a user would; its stdout."""
    assert app.host is not None
    return await app.host.execute(kernel_id, textwrap.dedent(code))


async def user_variables(app: DittoJupyterApp, kernel_id: str) -> dict[str, Any]:
    """The variables the user's cells (or a restore) left in the kernel's namespace."""
    found: dict[str, Any] = json.loads(await run(app, kernel_id, USER_VARIABLES))
    return found


async def wait_until_busy(app: DittoJupyterApp, kernel_id: str) -> None:
    assert app.host is not None
    while not await app.host.is_busy(kernel_id):
        await asyncio.sleep(0.02)


async def wait_until_idle(app: DittoJupyterApp, kernel_id: str, deadline_s: float = 120) -> None:
    """Until the server sees the kernel idle, as a user sees the status indicator: a
    client's request answers before the kernel's `idle` status reaches the server."""
    assert app.host is not None
    deadline = asyncio.get_running_loop().time() + deadline_s
    while await app.host.is_busy(kernel_id):
        assert asyncio.get_running_loop().time() < deadline, f"kernel {kernel_id} stayed busy"
        await asyncio.sleep(0.02)


@asynccontextmanager
async def sleeping(app: DittoJupyterApp, kernel_id: str, scratch: Path) -> AsyncIterator[None]:
    """Inside the block the kernel is busy running a cell in `time.sleep`; after, idle again."""
    flag = scratch / f"release-{uuid.uuid4().hex}"
    code = f"""
    while not __import__("os").path.exists({str(flag)!r}):
        __import__("time").sleep(0.02)
    """
    cell = asyncio.ensure_future(run(app, kernel_id, code))
    try:
        await wait_until_busy(app, kernel_id)
        yield
    finally:
        flag.touch()
        await cell


async def kill_kernel(app: DittoJupyterApp, kernel_id: str) -> None:
    """SIGKILL the kernel's process (as the OOM killer would) and wait until it is dead."""
    assert app.serverapp is not None
    pid = int(await run(app, kernel_id, 'print(__import__("os").getpid())'))
    os.kill(pid, signal.SIGKILL)
    kernel = app.serverapp.kernel_manager.get_kernel(kernel_id)
    while await kernel.is_alive():
        await asyncio.sleep(0.02)
