"""A real JupyterHub on loopback, for the end-to-end tests of many users on many nodes.

`RunningHub` starts `jupyterhub` (from PyPI, in the test venv) with its proxy
(`configurable-http-proxy` from npm, which `make` installs into `.make/hub-proxy`), the
dummy authenticator with the test users, and the simple local process spawner: every
user's server is `jupyterhub-singleuser` of this venv with the ditto_jupyter extension, as
the same OS user. Each server start reads its node from `nodes.json`: the ditto data
directory it gets (`DITTO_DATA_DIR`), so a test stands in for a server started on another
machine by pointing the user at another directory. What the nodes share is what the
deployment shares: the checkpoint store, the bucket, the signing secret (one Jupyter
config for every server).

The test drives the hub with a service token (create users, start and stop servers, make
each user a token) and reaches each user's server through the proxy with that user's own
token, as their browser would. Everything lives under one directory; `stop` ends the hub,
the proxy and every server it spawned.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from tests.support.kernel_cells import run_in_kernel
from tests.support.process_group import stop_process_group

REPO = Path(__file__).resolve().parents[2]
#: Where `make` installs the proxy (npm's `configurable-http-proxy`).
PROXY = REPO / ".make" / "hub-proxy" / "node_modules" / ".bin" / "configurable-http-proxy"
#: How long a server start or stop may take before the test gives up (a hang guard only).
SPAWN_TIMEOUT_S = 120.0

_CONFIG = """
import json
from pathlib import Path

base = Path({base!r})
c.JupyterHub.bind_url = "http://127.0.0.1:{port}"
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {hub_port}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy_api_port}"
c.ConfigurableHTTPProxy.command = [{proxy!r}]
c.JupyterHub.cookie_secret_file = str(base / "cookie_secret")
c.JupyterHub.db_url = "sqlite:///" + str(base / "hub.sqlite")
c.JupyterHub.pid_file = str(base / "hub.pid")
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = {password!r}
c.Authenticator.allowed_users = set({users!r})
c.JupyterHub.spawner_class = "simple"
c.SimpleLocalProcessSpawner.home_dir_template = str(base / "home" / "{{username}}")
c.Spawner.cmd = [{singleuser!r}]
c.Spawner.args = {args!r}
c.Spawner.start_timeout = {timeout}
c.Spawner.http_timeout = {timeout}
c.JupyterHub.services = [{{"name": "ditto-test", "api_token": {service_token!r}}}]
c.JupyterHub.load_roles = [{{
    "name": "ditto-test",
    "scopes": ["admin:users", "admin:servers", "access:servers", "tokens"],
    "services": ["ditto-test"],
}}]


def node_of(spawner):
    # The data directory of this start: the test says which node the user is on now.
    return json.loads((base / "nodes.json").read_text())[spawner.user.name]


c.Spawner.environment = {{**{environment!r}, "DITTO_DATA_DIR": node_of}}
"""


class RunningHub:
    """A JupyterHub process with its proxy; the test users' servers it spawns."""

    def __init__(
        self,
        base: Path,
        users: list[str],
        *,
        server_config: dict[str, Any],
        environment: dict[str, str] | None = None,
    ) -> None:
        """`server_config`: the Jupyter config every user's server reads (the shared
        store and bucket); `environment`: variables every server gets (credentials)."""
        from tests.server.live_server import free_port

        self.base = Path(base)
        self.users = users
        self.port, self.hub_port, self.proxy_api_port = free_port(), free_port(), free_port()
        self.service_token = secrets.token_hex(16)
        self.password = secrets.token_hex(8)
        self.server_config = server_config
        self.environment = dict(environment or {})
        self.process: subprocess.Popen[bytes] | None = None
        self.tokens: dict[str, str] = {}
        self.log_path = self.base / "hub.log"
        self.config_dir = self.base / "jupyter-config"
        self.runtime_dir = self.base / "jupyter-runtime"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # ---- the hub ------------------------------------------------------------------------

    def start(self) -> RunningHub:
        """Write the configs, start the hub, wait until its API answers, make the users."""
        self.base.mkdir(parents=True, exist_ok=True)
        self.config_dir.mkdir(exist_ok=True)
        self.runtime_dir.mkdir(exist_ok=True)
        server = {
            "ServerApp": {"jpserver_extensions": {"ditto_jupyter": True}},
            **self.server_config,
        }
        (self.config_dir / "jupyter_server_config.json").write_text(json.dumps(server))
        self.place({user: str(self.base / "nodes" / f"{user}-1") for user in self.users})
        environment = {
            **self.environment,
            "JUPYTER_CONFIG_DIR": str(self.config_dir),
            "JUPYTER_RUNTIME_DIR": str(self.runtime_dir),
            "JUPYTER_DATA_DIR": str(self.base / "jupyter-data"),
            "JUPYTER_PLATFORM_DIRS": "1",
        }
        singleuser = str(Path(sys.executable).parent / "jupyterhub-singleuser")
        config = _CONFIG.format(
            base=str(self.base),
            port=self.port,
            hub_port=self.hub_port,
            proxy_api_port=self.proxy_api_port,
            proxy=str(PROXY),
            password=self.password,
            users=self.users,
            singleuser=singleuser,
            args=["--allow-root"] if os.geteuid() == 0 else [],
            timeout=int(SPAWN_TIMEOUT_S),
            service_token=self.service_token,
            environment=environment,
        )
        config_file = self.base / "jupyterhub_config.py"
        config_file.write_text(config)
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "jupyterhub", "-f", str(config_file)],
            cwd=self.base,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + SPAWN_TIMEOUT_S
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"jupyterhub exited:\n{self.log_tail()}")
            try:
                if self.hub("GET", "").status_code == 200:
                    break
            except httpx.HTTPError:
                pass  # not listening yet
            if time.monotonic() > deadline:
                raise RuntimeError(f"jupyterhub did not answer:\n{self.log_tail()}")
            time.sleep(0.2)
        for user in self.users:
            made = self.hub("POST", f"users/{user}")
            assert made.status_code in (201, 409), made.text
            token = self.hub("POST", f"users/{user}/tokens", {"note": "ditto test"})
            assert token.status_code == 201, token.text
            self.tokens[user] = token.json()["token"]
        return self

    def stop(self) -> None:
        """Stop every server, then the hub and its proxy (SIGTERM, then SIGKILL)."""
        if self.process is None:
            return
        for user in self.users:
            try:
                self.stop_server(user)
            except (httpx.HTTPError, RuntimeError) as error:  # the hub's stop kills the rest
                print(f"could not stop {user}'s server: {error}", file=sys.stderr)
        stop_process_group(self.process)
        self.process = None

    def __enter__(self) -> RunningHub:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_tail(self, size: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-size:] if self.log_path.exists() else ""

    def hub(self, method: str, route: str, body: Any = None) -> httpx.Response:
        """The hub's REST API as the test's service."""
        return httpx.request(
            method,
            f"{self.url}/hub/api/{route}",
            headers={"Authorization": f"token {self.service_token}"},
            json=body,
            timeout=60,
        )

    # ---- the users' servers -------------------------------------------------------------

    def place(self, nodes: dict[str, str]) -> None:
        """Say which data directory ("node") each user's next server start gets."""
        path = self.base / "nodes.json"
        current = json.loads(path.read_text()) if path.exists() else {}
        path.write_text(json.dumps({**current, **nodes}))

    def start_server(self, user: str) -> None:
        """Spawn the user's server and wait until it answers through the proxy."""
        started = self.hub("POST", f"users/{user}/server")
        assert started.status_code in (201, 202), started.text
        deadline = time.monotonic() + SPAWN_TIMEOUT_S
        while True:
            try:
                if self.request(user, "GET", "api/status").status_code == 200:
                    return
            except httpx.HTTPError:
                pass  # the proxy has no route yet
            if time.monotonic() > deadline:
                raise RuntimeError(f"{user}'s server did not answer:\n{self.log_tail()}")
            time.sleep(0.3)

    def stop_server(self, user: str) -> None:
        """Stop the user's server and wait until the hub says it is gone."""
        stopped = self.hub("DELETE", f"users/{user}/server")
        if stopped.status_code == 400:  # not running
            return
        assert stopped.status_code in (202, 204), stopped.text
        deadline = time.monotonic() + SPAWN_TIMEOUT_S
        while self.hub("GET", f"users/{user}").json().get("servers"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{user}'s server did not stop:\n{self.log_tail()}")
            time.sleep(0.3)

    def request(
        self, user: str, method: str, path: str, body: Any = None, *, as_user: str | None = None
    ) -> httpx.Response:
        """A request to `user`'s server through the proxy, with the token of `as_user`
        (default: the user themself)."""
        token = self.tokens[as_user or user]
        return httpx.request(
            method,
            f"{self.url}/user/{user}/{path}",
            headers={"Authorization": f"token {token}"},
            json=body,
            timeout=600,
        )

    def api(self, user: str, method: str, route: str = "", body: Any = None) -> tuple[int, Any]:
        """The runtime API of `user`'s own server, as that user."""
        response = self.request(user, method, f"api/v1/runtimes/{route}".rstrip("/"), body)
        return response.status_code, response.json()

    def open_notebook(self, user: str, path: str) -> dict[str, Any]:
        """An empty notebook in the user's home and a python3 session on it."""
        notebook = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
        put = self.request(
            user, "PUT", f"api/contents/{path}", {"type": "notebook", "content": notebook}
        )
        put.raise_for_status()
        body = {"path": path, "name": Path(path).name, "type": "notebook"}
        made = self.request(user, "POST", "api/sessions", {**body, "kernel": {"name": "python3"}})
        made.raise_for_status()
        model: dict[str, Any] = made.json()
        return model

    def execute(self, kernel_id: str, code: str) -> str:
        """Run a cell in a kernel of one of the servers (every server of this hub writes
        its connection files into one runtime directory); its stdout."""
        return run_in_kernel(str(self.runtime_dir), kernel_id, code)
