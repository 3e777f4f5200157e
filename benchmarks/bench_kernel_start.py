"""Kernel start-up with the extension beside a plain ipykernel (issue 41 section 2).

Every kernel a Jupyter server with ditto_jupyter starts loads the magics
(`--ext=ditto_jupyter`); every notebook a user opens waits for that. The target: a kernel
with the extension answers its first `kernel_info` within 10% of a plain kernel's time.

Two measurements, each with its anchor in the same run, starts interleaved (plain, with,
plain, with, ...) so that the machine's load falls on both alike:

- **ipykernel alone**: jupyter_client starts `python -m ipykernel_launcher` of this venv,
  plain, and with `--ext=ditto_jupyter` and a server's environment (`DITTO_SERVER_URL`,
  `DITTO_TOKEN`, `DITTO_DATA_DIR`, `DITTO_RUNTIME_ID`, `DITTO_RUNTIME_TOKEN`: what a
  server's kernel gets); the time from `start_kernel` to the reply of one `kernel_info`
  request sent at once (ZMQ queues it until the kernel binds its shell socket).
- **the server's path**: two real `jupyter server` processes on the same machine, one with
  the extension (its kernels get the magics and the environment, `kernel_pool_size = 0`
  so no pooled kernel starts meanwhile) and one without it; the time from
  `POST /api/kernels` to the reply of a `kernel_info` request over the kernel's websocket.

Also: what loading the magics imports under a server's environment (modules of the package,
of control/, SQLAlchemy), in a fresh interpreter.

Run from the repository root: `.venv/bin/python -m benchmarks.bench_kernel_start [starts]`
(default 20 of each kind; a few minutes). Writes the `bench_kernel_start` section of
benchmarks/RESULTS.md.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from jupyter_client.manager import AsyncKernelManager  # noqa: E402
from tornado.httpclient import HTTPRequest  # noqa: E402
from tornado.websocket import websocket_connect  # noqa: E402

from benchmarks.results_table import markdown_table, write_section  # noqa: E402
from tests.server.live_server import LiveServer  # noqa: E402

#: How long one start may take before the benchmark gives up on it.
GIVE_UP_S = 120.0
#: What loading the magics imports under a server's environment, printed as JSON.
IMPORTS_PROBE = """
import json, sys, time
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
before = set(sys.modules)
started = time.perf_counter()
shell.extension_manager.load_extension("ditto_jupyter")
took = time.perf_counter() - started
new = set(sys.modules) - before
ours = [m for m in new if m.startswith("ditto_jupyter")]
print(json.dumps({
    "seconds": took,
    "modules": len(new),
    "package": len(ours),
    "control": len([m for m in ours if m.startswith("ditto_jupyter.control")]),
    "sqlalchemy": "sqlalchemy" in sys.modules,
    "store": "ditto_jupyter.control.store" in sys.modules,
}))
"""


def server_kernel_env(data_dir: Path) -> dict[str, str]:
    """What a server with the extension gives its kernels (a server that is not there)."""
    return {
        "DITTO_SERVER_URL": "http://127.0.0.1:9/",
        "DITTO_TOKEN": "bench",
        "DITTO_DATA_DIR": str(data_dir),
        "DITTO_RUNTIME_ID": uuid.uuid4().hex,
        "DITTO_RUNTIME_TOKEN": "bench",
    }


async def ipykernel_start(extension: bool, data_dir: Path) -> float:
    """Seconds from start to the first kernel_info reply of one ipykernel of this venv."""
    manager = AsyncKernelManager(kernel_name="python3")
    env = dict(os.environ)
    arguments: list[str] = []
    if extension:
        env.update(server_kernel_env(data_dir))
        arguments = ["--ext=ditto_jupyter"]
    started = time.perf_counter()
    await manager.start_kernel(
        env=env, extra_arguments=arguments, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    client = manager.client()
    client.start_channels()
    try:
        msg_id = client.kernel_info()
        while True:
            reply = await client.get_shell_msg(timeout=GIVE_UP_S)
            if reply["parent_header"].get("msg_id") == msg_id:
                return time.perf_counter() - started
    finally:
        client.stop_channels()
        await manager.shutdown_kernel(now=True)


async def server_start(server: LiveServer) -> float:
    """Seconds from `POST /api/kernels` to the reply of a kernel_info over its websocket."""
    started = time.perf_counter()
    response = await asyncio.to_thread(server.request, "POST", "api/kernels", {})
    response.raise_for_status()
    kernel = response.json()
    url = server.url.replace("http://", "ws://") + f"api/kernels/{kernel['id']}/channels"
    request = HTTPRequest(url, headers={"Authorization": f"token {server.token}"})
    socket = await websocket_connect(request)
    try:
        msg_id = uuid.uuid4().hex
        header = {"msg_id": msg_id, "msg_type": "kernel_info_request", "session": msg_id}
        header.update(username="bench", version="5.3", date="")
        message = {"header": header, "parent_header": {}, "metadata": {}, "content": {}}
        await socket.write_message(json.dumps({**message, "channel": "shell"}))
        deadline = time.monotonic() + GIVE_UP_S
        while time.monotonic() < deadline:
            text = await socket.read_message()
            if text is None:
                raise RuntimeError("the kernel's websocket closed before kernel_info answered")
            if isinstance(text, bytes):
                continue
            reply = json.loads(text)
            if reply.get("parent_header", {}).get("msg_id") == msg_id:
                return time.perf_counter() - started
        raise RuntimeError(f"no kernel_info reply in {GIVE_UP_S:.0f} s")
    finally:
        socket.close()
        await asyncio.to_thread(server.request, "DELETE", f"api/kernels/{kernel['id']}")


async def interleaved(
    starts: int, plain: Callable[[], Awaitable[float]], extended: Callable[[], Awaitable[float]]
) -> tuple[list[float], list[float]]:
    """`starts` of each, alternating (one warm-up of each first, not counted)."""
    await plain()
    await extended()
    plain_times: list[float] = []
    extended_times: list[float] = []
    for _ in range(starts):
        plain_times.append(await plain())
        extended_times.append(await extended())
    return plain_times, extended_times


def imports_of_loading() -> dict[str, object]:
    """What loading the extension imports under a server's environment (a fresh process)."""
    with tempfile.TemporaryDirectory() as data:
        env = {**os.environ, **server_kernel_env(Path(data))}
        out = subprocess.run(
            [sys.executable, "-c", IMPORTS_PROBE],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        ).stdout
    loaded: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return loaded


def row(what: str, plain: list[float], extended: list[float]) -> list[object]:
    """One table row: medians in ms, the ratio, and the spread."""
    plain_ms, extended_ms = statistics.median(plain) * 1000, statistics.median(extended) * 1000
    spread = (
        f"{min(plain) * 1000:.0f}-{max(plain) * 1000:.0f} / "
        f"{min(extended) * 1000:.0f}-{max(extended) * 1000:.0f}"
    )
    return [
        what,
        len(plain),
        f"{plain_ms:.0f}",
        f"{extended_ms:.0f}",
        f"{extended_ms / plain_ms:.3f}",
        spread,
    ]


async def main(starts: int) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        data = Path(scratch) / "data"
        direct = await interleaved(
            starts,
            lambda: ipykernel_start(False, data),
            lambda: ipykernel_start(True, data),
        )
        print("ipykernel alone:", row("", *direct))
        without = {"ServerApp": {"jpserver_extensions": {"ditto_jupyter": False}}}
        with_it = {"DittoJupyterApp": {"kernel_pool_size": 0}}
        with (
            LiveServer(Path(scratch) / "plain", config=without) as plain_server,
            LiveServer(Path(scratch) / "ditto", config=with_it) as ditto_server,
        ):
            served = await interleaved(
                starts, lambda: server_start(plain_server), lambda: server_start(ditto_server)
            )
        print("server:", row("", *served))
    loaded = imports_of_loading()
    headers = [
        "kernel started by",
        "starts of each",
        "plain, median ms",
        "with the extension, median ms",
        "ratio",
        "range ms (plain / with)",
    ]
    body = markdown_table(
        headers,
        [
            row("jupyter_client, `python -m ipykernel_launcher`", *direct),
            row("jupyter-server, `POST /api/kernels`", *served),
        ],
    )
    body += (
        f"\n\nTarget: a ratio of at most 1.10. Loading the extension under a server's "
        f"environment, in a fresh interpreter: {float(str(loaded['seconds'])) * 1000:.0f} ms, "
        f"{loaded['modules']} modules imported, {loaded['package']} of the package, "
        f"{loaded['control']} of `control/`; SQLAlchemy imported: {loaded['sqlalchemy']}, "
        f"the store: {loaded['store']}."
    )
    write_section(
        "bench_kernel_start", "Kernel start-up: the extension beside a plain ipykernel", body
    )
    print(body)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 20))
