"""A real `jupyter server` subprocess with the ditto_jupyter extension, for the tests that
need a separate process (the CLI, a server restart, schemathesis) and the HTTP benchmark.

Everything lives under one base directory: Jupyter config/data/runtime dirs (so
`list_running_servers()` finds exactly this server), the notebook root, and the ditto data
dir (SQLite store, blobs, workspaces), which survives a stop/start of the server.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx

from tests.support.process_group import stop_process_group

#: How long `start` waits for the API to answer before it stops the server and says so:
#: a guard against a hang (under load 10 a start takes up to ~30 s), not a speed limit.
START_DEADLINE_S = 300


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LiveServer:
    """Start/stop a Jupyter server process; a small HTTP client and kernel runner for it."""

    def __init__(
        self,
        base: Path,
        *,
        token: str | None = None,
        config: dict[str, Any] | None = None,
        data_dir: Path | None = None,
        environment: dict[str, str] | None = None,
    ) -> None:
        """`data_dir`: the ditto data directory (default: its own, under `base`); two
        servers given the same one share it, as two JupyterLabs on the default one do.
        `environment`: variables the server gets besides the test's (`JUPYTERHUB_USER`
        says whose server it is)."""
        self.environment = dict(environment or {})
        self.base = Path(base)
        self.token = token or secrets.token_hex(16)
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.root_dir = self.base / "root"
        self.data_dir = data_dir or self.base / "ditto-data"
        self.runtime_dir = self.base / "jupyter-runtime"
        self.config = config or {}
        self.log_path = self.base / "server.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "JUPYTER_CONFIG_DIR": str(self.base / "jupyter-config"),
                "JUPYTER_DATA_DIR": str(self.base / "jupyter-data"),
                "JUPYTER_RUNTIME_DIR": str(self.runtime_dir),
                "JUPYTER_PLATFORM_DIRS": "1",
            }
        )
        for name in (
            "DITTO_SERVER_URL",
            "DITTO_TOKEN",
            "DITTO_RUNTIME_ID",
            "DITTO_RUNTIME_TOKEN",
            "DITTO_DATA_DIR",
        ):
            env.pop(name, None)
        env.update(self.environment)
        return env

    def start(self) -> LiveServer:
        """Start the server and wait until its API answers."""
        for directory in (self.root_dir, self.data_dir, self.runtime_dir):
            directory.mkdir(parents=True, exist_ok=True)
        config_dir = self.base / "jupyter-config"
        config_dir.mkdir(parents=True, exist_ok=True)
        config = {
            "ServerApp": {
                "jpserver_extensions": {"ditto_jupyter": True},
                "open_browser": False,
                "root_dir": str(self.root_dir),
                "ip": "127.0.0.1",
                "port_retries": 0,
                "allow_root": True,
            },
            "IdentityProvider": {"token": self.token},
            "DittoJupyterApp": {"data_dir": str(self.data_dir)},
        }
        for section, values in self.config.items():
            config.setdefault(section, {}).update(values)
        (config_dir / "jupyter_server_config.json").write_text(json.dumps(config))
        # Port 0: the server binds a free port itself and writes it into its info file. A
        # port picked here would stay free only until another test's kernel or server took
        # it, in the seconds before the server starts listening.
        self.port = 0
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            self.command(),
            env=self.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        info_file = self.runtime_dir / f"jpserver-{self.process.pid}.json"
        deadline = time.monotonic() + START_DEADLINE_S
        while True:
            if time.monotonic() > deadline:  # a hang guard, not a speed limit
                self.stop()
                tail = self.log_path.read_text(errors="replace")[-3000:]
                waited = f"jupyter server did not answer in {START_DEADLINE_S} s"
                raise RuntimeError(f"{waited}:\n{tail}")
            if self.process.poll() is not None:
                raise RuntimeError(f"jupyter server exited:\n{self.log_path.read_text()[-3000:]}")
            try:
                self.port = int(json.loads(info_file.read_text())["port"])
                if httpx.get(self.url + "api/status", headers=self.headers()).status_code == 200:
                    return self
            except (OSError, ValueError, KeyError, httpx.HTTPError):
                self.port = 0  # no info file yet, a half-written one, or not listening yet
            time.sleep(0.1)

    def command(self) -> list[str]:
        """The command line that starts the server (JupyterLab's fixture starts `jupyter lab`)."""
        return [sys.executable, "-m", "jupyter_server", "--port=0"]

    def stop(self) -> None:
        """Stop the server as a process manager does (SIGTERM: its kernels are shut down
        with it), then SIGKILL whatever of its process group is left."""
        if self.process is None:
            return
        stop_process_group(self.process)
        self.process = None

    def kill(self) -> None:
        """SIGKILL the server, as the OOM killer would (its kernels find their parent gone
        and exit); reaped, so no zombie is left to look alive."""
        if self.process is None:
            return
        pid = self.process.pid
        os.kill(pid, signal.SIGKILL)
        self.process.wait()
        self.process = None

    def __enter__(self) -> LiveServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def headers(self, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token or self.token}"}

    def request(
        self, method: str, path: str, body: Any = None, *, token: str | None = None
    ) -> httpx.Response:
        """A request with the server's token (or `token`: another user's)."""
        return httpx.request(
            method, self.url + path, headers=self.headers(token), json=body, timeout=600
        )

    def api(
        self, method: str, route: str = "", body: Any = None, *, token: str | None = None
    ) -> tuple[int, Any]:
        response = self.request(method, f"api/v1/runtimes/{route}".rstrip("/"), body, token=token)
        return response.status_code, response.json()

    def open_notebook(self, path: str) -> dict[str, Any]:
        """Create an empty notebook and a Jupyter session with a python3 kernel on it."""
        notebook = {"type": "notebook", "content": _EMPTY_NOTEBOOK}
        self.request("PUT", f"api/contents/{path}", notebook).raise_for_status()
        body = {"path": path, "name": Path(path).name, "type": "notebook"}
        response = self.request("POST", "api/sessions", {**body, "kernel": {"name": "python3"}})
        response.raise_for_status()
        model: dict[str, Any] = response.json()
        return model

    def connect(self, kernel_id: str) -> Any:
        """A client of a server kernel, as a notebook front end holds one (no heartbeat),
        from its connection file; the caller stops its channels."""
        from jupyter_client import BlockingKernelClient, find_connection_file

        client = BlockingKernelClient()
        client.load_connection_file(find_connection_file(kernel_id, path=[str(self.runtime_dir)]))
        client.start_channels(hb=False)
        client.wait_for_ready(timeout=60)
        return client

    def _ready_client(self, kernel_id: str) -> Any:
        """A client of a server kernel that answered `kernel_info`, from its connection
        file. A start the server made again on new ports (a port of the first taken
        meanwhile: `hosts/kernel_start`) rewrites the file: a client of the old ports never
        gets an answer, and its send would wait forever for a pipe libzmq dropped (no
        timeout covers a send), so sends are bounded and the file read again."""
        import zmq
        from jupyter_client import BlockingKernelClient, find_connection_file

        attempts = 3
        for attempt in range(1, attempts + 1):
            client = BlockingKernelClient()
            client.load_connection_file(
                find_connection_file(kernel_id, path=[str(self.runtime_dir)])
            )
            client.start_channels(hb=False)  # a slow first heartbeat reads as a dead kernel
            client.shell_channel.socket.setsockopt(zmq.SNDTIMEO, 10_000)
            try:
                client.wait_for_ready(timeout=60)
                return client
            except (RuntimeError, zmq.Again):
                client.stop_channels()
                if attempt == attempts:
                    raise
                time.sleep(1)
        raise AssertionError("unreachable")

    def execute(self, kernel_id: str, code: str) -> str:
        """Run a cell in a server kernel (through its connection file); its stdout."""
        client = self._ready_client(kernel_id)
        try:
            out: list[str] = []
            errors: list[str] = []

            def output(msg: dict[str, Any]) -> None:
                if msg["msg_type"] == "stream" and msg["content"]["name"] == "stdout":
                    out.append(msg["content"]["text"])
                elif msg["msg_type"] == "error":
                    errors.append(f"{msg['content']['ename']}: {msg['content']['evalue']}")

            reply = client.execute_interactive(textwrap.dedent(code), output_hook=output)
            if reply["content"]["status"] != "ok":
                raise RuntimeError(f"cell failed: {errors}")
            return "".join(out)
        finally:
            client.stop_channels()


_EMPTY_NOTEBOOK = {
    "cells": [],
    "metadata": {},
    "nbformat": 4,
    "nbformat_minor": 5,
}
