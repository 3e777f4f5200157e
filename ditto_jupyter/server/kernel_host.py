"""ServerKernelHost: the KernelHost protocol over jupyter-server's own kernel manager.

Kernels started here are ordinary server kernels (they show up in /api/kernels, JupyterLab
can connect to them), started with the extension's environment (`DITTO_SERVER_URL`,
`DITTO_TOKEN`, `DITTO_DATA_DIR`, and `DITTO_RUNTIME_ID` of the runtime being started) so
the magics can call back. `is_busy` reads the server's tracked `execution_state`.

`call` runs `module:function(**args)` in an idle kernel without touching its history or
namespace: an empty, silent execute request whose one user expression calls
`kernel_call(<JSON text>)` below; the arguments reach the kernel as a JSON string literal
(never user text pasted into code), and the result comes back as the expression's
`application/json` representation.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import importlib
import json
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from queue import Empty
from typing import TYPE_CHECKING, Any

from ditto_jupyter.control.errors import BackendError

if TYPE_CHECKING:  # the kernel side imports this module too: keep it light at run time
    from jupyter_client.asynchronous import AsyncKernelClient
    from jupyter_server.services.kernels.kernelmanager import MappingKernelManager

    from ditto_jupyter.control.models import SessionRecord

#: The runtime whose kernel is being started; read by `ServerKernelHost.start_kernel`.
starting_runtime: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "ditto_starting_runtime", default=None
)


class JsonResult:
    """A call result whose display representation is its JSON text (kernel side)."""

    def __init__(self, value: Any) -> None:
        self.text = json.dumps(value)

    def _repr_json_(self) -> Any:
        return json.loads(self.text)

    def __repr__(self) -> str:
        return self.text


def kernel_call(request_json: str) -> JsonResult:
    """Kernel side of `ServerKernelHost.call`: run `module:function(**args)`, JSON in and out."""
    request = json.loads(request_json)
    module_name, _, function_name = str(request["function"]).partition(":")
    function = getattr(importlib.import_module(module_name), function_name)
    return JsonResult(function(**request["args"]))


def _call_expression(function: str, args: Mapping[str, object]) -> str:
    """The user expression that makes the call; arguments travel as one JSON string literal."""
    request = json.dumps({"function": function, "args": dict(args)})
    module = "__import__('ditto_jupyter.server.kernel_host', fromlist=['kernel_call'])"
    return f"{module}.kernel_call({request!r})"


class ServerKernelHost:
    """Start, stop, probe and call kernels owned by the Jupyter server's kernel manager."""

    def __init__(
        self,
        kernel_manager: MappingKernelManager,
        *,
        env_provider: Callable[[], Mapping[str, str]] | None = None,
        call_timeout: float = 600.0,
    ) -> None:
        self.kernel_manager = kernel_manager
        self.env_provider = env_provider
        self.call_timeout = call_timeout
        self._clients: dict[str, AsyncKernelClient] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._deferred: set[str] = set()
        self._deferred_tasks: set[asyncio.Task[None]] = set()

    def kernel_env(self, runtime_id: str | None = None) -> dict[str, str]:
        """The extension's variables for a kernel (without the rest of the environment)."""
        env = dict(self.env_provider() if self.env_provider is not None else {})
        if runtime_id:
            env["DITTO_RUNTIME_ID"] = runtime_id
        return env

    async def start_kernel(
        self,
        kernel_name: str = "python3",
        *,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> str:
        """Start a server kernel in `cwd` with the extension's environment; its id."""
        full_env = {**os.environ, **self.kernel_env(starting_runtime.get()), **(env or {})}
        kwargs: dict[str, Any] = {"kernel_name": kernel_name, "env": full_env}
        if cwd is not None:
            kwargs["cwd"] = str(cwd)
        try:
            kernel_id = await self.kernel_manager.start_kernel(**kwargs)
        except Exception as error:
            raise BackendError(f"could not start a {kernel_name} kernel: {error}") from error
        return str(kernel_id)

    async def shutdown_kernel(self, kernel_id: str) -> None:
        """Shut a kernel down (a kernel already gone is fine).

        A kernel marked by `defer_shutdown` (it asked to pause itself from a magic) is shut
        down only once the cell that asked has finished, so the magic gets its answer.
        """
        self._drop_client(kernel_id)
        if kernel_id in self._deferred:
            self._deferred.discard(kernel_id)
            task = asyncio.get_running_loop().create_task(self._shutdown_when_idle(kernel_id))
            self._deferred_tasks.add(task)
            task.add_done_callback(self._deferred_tasks.discard)
            return
        if kernel_id not in self.kernel_manager:
            return
        with contextlib.suppress(KeyError):
            await self.kernel_manager.shutdown_kernel(kernel_id)

    def defer_shutdown(self, kernel_id: str) -> None:
        """Make the next `shutdown_kernel` of this kernel wait until it is idle."""
        self._deferred.add(kernel_id)

    def cancel_deferred_shutdown(self, kernel_id: str) -> None:
        """Forget a `defer_shutdown` that was not used (the operation failed first)."""
        self._deferred.discard(kernel_id)

    async def _shutdown_when_idle(self, kernel_id: str, limit_s: float = 60.0) -> None:
        deadline = time.monotonic() + limit_s
        await asyncio.sleep(0.05)
        while time.monotonic() < deadline and await self.is_busy(kernel_id):
            await asyncio.sleep(0.05)
        if kernel_id in self.kernel_manager:
            with contextlib.suppress(Exception):
                await self.kernel_manager.shutdown_kernel(kernel_id)

    async def wait_deferred(self) -> None:
        """Wait for deferred shutdowns in progress (tests, server stop)."""
        if self._deferred_tasks:
            await asyncio.gather(*list(self._deferred_tasks), return_exceptions=True)

    async def is_busy(self, kernel_id: str) -> bool:
        """Whether the kernel is running code, as the server tracks it from iopub status."""
        if kernel_id not in self.kernel_manager:
            return False
        kernel = self.kernel_manager.get_kernel(kernel_id)
        return getattr(kernel, "execution_state", "idle") == "busy"

    def _client(self, kernel_id: str) -> AsyncKernelClient:
        if kernel_id not in self.kernel_manager:
            raise BackendError(f"kernel {kernel_id} is not running")
        client = self._clients.get(kernel_id)
        if client is None:
            client = self.kernel_manager.get_kernel(kernel_id).client()
            client.start_channels(shell=True, iopub=False, stdin=False, hb=False, control=False)
            self._clients[kernel_id] = client
        return client

    def _drop_client(self, kernel_id: str) -> None:
        client = self._clients.pop(kernel_id, None)
        self._locks.pop(kernel_id, None)
        if client is not None:
            client.stop_channels()

    async def call(self, kernel_id: str, function: str, args: dict[str, object]) -> object:
        """Run `module:function(**args)` in the kernel and return its JSON result."""
        lock = self._locks.setdefault(kernel_id, asyncio.Lock())
        async with lock:
            client = self._client(kernel_id)
            msg_id = client.execute(
                "",
                silent=True,
                store_history=False,
                user_expressions={"result": _call_expression(function, args)},
                allow_stdin=False,
            )
            reply = await self._reply(client, msg_id, kernel_id)
        content = reply["content"]
        if content.get("status") != "ok":
            reason = f"{content.get('ename')}: {content.get('evalue')}"
            raise BackendError(f"kernel {kernel_id} refused the call: {reason}")
        result = content.get("user_expressions", {}).get("result", {})
        if result.get("status") != "ok":
            reason = f"{result.get('ename', 'Error')}: {result.get('evalue', '')}".rstrip(": ")
            raise BackendError(f"{function} failed in kernel {kernel_id}: {reason}")
        data = result.get("data", {})
        if "application/json" in data:
            return data["application/json"]
        raise BackendError(f"{function} in kernel {kernel_id} returned no JSON result")

    async def _reply(self, client: AsyncKernelClient, msg_id: str, kernel_id: str) -> Any:
        deadline = time.monotonic() + self.call_timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BackendError(f"kernel {kernel_id} did not answer in {self.call_timeout} s")
            if kernel_id not in self.kernel_manager:
                raise BackendError(f"kernel {kernel_id} stopped during the call")
            try:
                msg = await client.get_shell_msg(timeout=min(remaining, 1.0))
            except Empty:  # nothing within the poll interval: check the kernel is alive
                continue
            if msg.get("parent_header", {}).get("msg_id") == msg_id:
                return msg

    async def close(self) -> None:
        """Stop every client channel this host opened."""
        for kernel_id in list(self._clients):
            self._drop_client(kernel_id)


def runtime_starting(session: SessionRecord) -> contextvars.Token[str | None]:
    """Mark `session` as the runtime whose kernel the next start belongs to."""
    return starting_runtime.set(session.session_id)
