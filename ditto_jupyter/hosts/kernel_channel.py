"""Kernel hosts: start, stop, probe and call into Jupyter kernels.

`KernelHost` is what the kernel context capture needs. `JupyterClientHost` is the
embedded host on jupyter_client's `AsyncMultiKernelManager` (no server). The message logic
lives in `KernelChannel`, which wraps any `AsyncKernelClient`, so a host on another kernel
manager (jupyter-server's) can reuse it as is.

A call runs `module:function(**args)` as the single user expression of an empty, silent
execute request: nothing lands in the user's history or namespace, and the arguments reach
the kernel as one JSON string literal (never user text pasted into code). The result comes
back as the expression's `application/json` representation.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty
from typing import Any, Protocol, runtime_checkable

import zmq
from jupyter_client.asynchronous.client import AsyncKernelClient
from jupyter_client.multikernelmanager import AsyncMultiKernelManager
from jupyter_core.paths import jupyter_runtime_dir

from ditto_jupyter.core.errors import BackendError, InvalidRequest
from ditto_jupyter.kernel.workspace import without_workspace

_FUNCTION = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
_POLL_S = 0.5


@runtime_checkable
class KernelHost(Protocol):
    """What the kernel context capture needs from whoever owns the kernels."""

    async def start_kernel(
        self,
        kernel_name: str = "python3",
        *,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> str:
        """Start a kernel; its id."""
        ...

    async def shutdown_kernel(self, kernel_id: str) -> None:
        """Shut a kernel down (one already gone is fine)."""
        ...

    async def is_busy(self, kernel_id: str) -> bool:
        """Whether the kernel is running code right now."""
        ...

    async def call(self, kernel_id: str, function: str, args: dict[str, object]) -> object:
        """Run `module:function(**args)` in the kernel; its JSON result."""
        ...


def call_expression(function: str, args: dict[str, object]) -> str:
    """The user expression of a call: the request travels as one JSON string literal."""
    if not isinstance(function, str) or not _FUNCTION.fullmatch(function):
        raise InvalidRequest(f"kernel call target {function!r} is not 'module:function'")
    if not isinstance(args, dict):
        raise InvalidRequest("kernel call arguments must be a dict")
    try:
        request = json.dumps({"function": function, "args": args})
    except (TypeError, ValueError) as error:
        raise InvalidRequest(f"kernel call arguments are not JSON: {error}") from None
    module = "__import__('ditto_jupyter.kernel', fromlist=['dispatch_call'])"
    return f"{module}.dispatch_call({request!r})"


def call_result(reply: dict[str, Any], function: str, kernel_id: str) -> object:
    """The JSON result of a call from its execute_reply, or BackendError with the reason."""
    content = reply.get("content", {})
    if content.get("status") != "ok":
        reason = f"{content.get('ename', 'Error')}: {content.get('evalue', '')}"
        raise BackendError(f"kernel {kernel_id} refused the call to {function}: {reason}")
    result = content.get("user_expressions", {}).get("result", {})
    if result.get("status") != "ok":
        reason = f"{result.get('ename', 'Error')}: {result.get('evalue', '')}".rstrip(": ")
        raise BackendError(f"{function} failed in kernel {kernel_id}: {reason}")
    data = result.get("data", {}).get("application/json")
    if not isinstance(data, dict) or "result" not in data:
        raise BackendError(f"{function} in kernel {kernel_id} returned no JSON result")
    return data["result"]


@dataclass
class _Pending:
    """Output of one request, gathered from iopub until the kernel goes idle for it."""

    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)
    error: dict[str, Any] | None = None
    idle: asyncio.Event = field(default_factory=asyncio.Event)


class KernelChannel:
    """Request/reply over one kernel client: calls, cell execution, the busy state.

    One reader task follows iopub (the kernel's `execution_state`, and the output of our own
    requests); shell requests are sent one at a time.
    """

    def __init__(
        self,
        client: AsyncKernelClient,
        kernel_id: str,
        *,
        alive: Callable[[], Awaitable[bool]] | None = None,
    ) -> None:
        self.client = client
        self.kernel_id = kernel_id
        self.alive = alive
        self.execution_state = "starting"
        self._pending: dict[str, _Pending] = {}
        self._lock = asyncio.Lock()
        self._reader: asyncio.Task[None] | None = None

    async def start(self, timeout: float = 60.0) -> None:
        """Open the channels and wait until the kernel answers.

        No send may wait: jupyter_client's `Session.send` sends through a blocking shadow
        of the asyncio socket, on the event loop's thread. A shell socket whose peer is
        gone for good (the dead kernel's port now held by a socket of another type) has
        no pipe, and that send waited forever, freezing the server. SNDTIMEO=0 makes it
        fail at once (zmq.Again) instead. The heartbeat channel is not started: liveness
        comes from the kernel manager (`alive`), and the heartbeat's lingering socket held
        `stop_channels` on the loop for a second with a dead kernel.
        """
        if self.alive is not None and not await self.alive():
            raise BackendError(f"kernel {self.kernel_id} died before it answered")
        self.client.start_channels(hb=False)
        for channel in (self.client.shell_channel, self.client.stdin_channel):
            channel.socket.setsockopt(zmq.SNDTIMEO, 0)
        try:
            await self.client.wait_for_ready(timeout=timeout)
        except (RuntimeError, zmq.ZMQError) as error:
            self.client.stop_channels()
            raise self._start_error(error) from error
        self.execution_state = "idle"
        self._reader = asyncio.get_running_loop().create_task(self._read_iopub())

    def _start_error(self, error: Exception) -> BackendError:
        if isinstance(error, zmq.ZMQError):
            return self._unreachable(error)
        return BackendError(f"kernel {self.kernel_id} did not start: {error}")

    def _unreachable(self, error: zmq.ZMQError) -> BackendError:
        return BackendError(
            f"kernel {self.kernel_id} is unreachable: its shell channel takes no messages ({error})"
        )

    async def stop(self) -> None:
        """Stop following the kernel and close the channels."""
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
            self._reader = None
        self.client.stop_channels()

    @property
    def busy(self) -> bool:
        """Whether the kernel last reported itself busy."""
        return self.execution_state == "busy"

    async def _read_iopub(self) -> None:
        while True:
            try:
                message = await self.client.get_iopub_msg(timeout=None)
            except Empty:
                continue
            except asyncio.CancelledError:
                raise
            except Exception:  # a malformed message must not stop the busy tracking
                await asyncio.sleep(0.05)
                continue
            kind = message.get("header", {}).get("msg_type")
            content = message.get("content", {})
            parent = message.get("parent_header", {}).get("msg_id")
            if kind == "status":
                self.execution_state = content.get("execution_state", self.execution_state)
            pending = self._pending.get(parent) if parent else None
            if pending is None:
                continue
            if kind == "stream":
                target = pending.stdout if content.get("name") == "stdout" else pending.stderr
                target.append(content.get("text", ""))
            elif kind == "error":
                pending.error = content
            elif kind == "status" and content.get("execution_state") == "idle":
                pending.idle.set()

    async def _reply(self, msg_id: str, timeout: float | None) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            try:
                reply: dict[str, Any] = await self.client.get_shell_msg(timeout=_POLL_S)
            except Empty:
                if self.alive is not None and not await self.alive():
                    raise BackendError(f"kernel {self.kernel_id} died") from None
                if deadline is not None and loop.time() > deadline:
                    raise BackendError(
                        f"kernel {self.kernel_id} did not answer within {timeout:g} s"
                    ) from None
                continue
            if reply.get("parent_header", {}).get("msg_id") == msg_id:
                return reply

    async def _request(
        self,
        code: str,
        *,
        silent: bool,
        user_expressions: dict[str, str] | None = None,
        timeout: float | None,
    ) -> tuple[dict[str, Any], _Pending]:
        async with self._lock:
            pending = _Pending()
            try:
                msg_id = self.client.execute(
                    code,
                    silent=silent,
                    store_history=not silent,
                    user_expressions=user_expressions or {},
                    allow_stdin=False,
                )
            except zmq.ZMQError as error:
                raise self._unreachable(error) from error
            self._pending[msg_id] = pending
            try:
                reply = await self._reply(msg_id, timeout)
                if self._reader is not None:  # all output is in once the kernel is idle
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(pending.idle.wait(), 10.0)
            finally:
                self._pending.pop(msg_id, None)
        return reply, pending

    async def call(
        self, function: str, args: dict[str, object], *, timeout: float | None = None
    ) -> object:
        """Run `module:function(**args)` in the kernel; its JSON result."""
        expression = call_expression(function, args)
        reply, _ = await self._request(
            "", silent=True, user_expressions={"result": expression}, timeout=timeout
        )
        return call_result(reply, function, self.kernel_id)

    async def execute(self, code: str, *, timeout: float | None = None) -> str:
        """Run a cell as a user would (it counts in the history); its stdout.

        Raises BackendError with the exception's one-line reason when the cell fails.
        """
        reply, pending = await self._request(code, silent=False, timeout=timeout)
        content = reply.get("content", {})
        if content.get("status") != "ok":
            error = pending.error or content
            raise BackendError(
                f"cell failed in kernel {self.kernel_id}: "
                f"{error.get('ename', 'Error')}: {error.get('evalue', '')}"
            )
        return "".join(pending.stdout)


class JupyterClientHost:
    """The embedded kernel host: kernels of jupyter_client's AsyncMultiKernelManager."""

    def __init__(
        self, manager: AsyncMultiKernelManager | None = None, *, call_timeout: float | None = None
    ) -> None:
        # Connection files go to Jupyter's runtime dir (the manager's default is the cwd).
        # `is None`, not `or`: a manager with no kernels yet is falsy (it has a length).
        self.manager = (
            manager
            if manager is not None
            else AsyncMultiKernelManager(connection_dir=jupyter_runtime_dir())
        )
        self.call_timeout = call_timeout
        self._channels: dict[str, KernelChannel] = {}

    async def start_kernel(
        self,
        kernel_name: str = "python3",
        *,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> str:
        """Start a kernel in `cwd` with `env` added to this process's environment.

        The kernel never inherits this process's `DITTO_WORKSPACE` (its own comes in `env`).
        """
        inherited = without_workspace(dict(os.environ))
        kwargs: dict[str, Any] = {"kernel_name": kernel_name, "env": {**inherited, **(env or {})}}
        if cwd is not None:
            if not Path(cwd).is_dir():
                raise InvalidRequest(f"kernel working directory {cwd} is not a directory")
            kwargs["cwd"] = str(cwd)
        try:
            kernel_id = str(await self.manager.start_kernel(**kwargs))
        except Exception as error:
            raise BackendError(f"could not start a {kernel_name} kernel: {error}") from error
        kernel: Any = self.manager.get_kernel(kernel_id)  # an AsyncKernelManager

        async def alive() -> bool:
            return bool(await kernel.is_alive())

        channel = KernelChannel(kernel.client(), kernel_id, alive=alive)
        try:
            await channel.start()
        except BaseException:
            with contextlib.suppress(Exception):
                await self.manager.shutdown_kernel(kernel_id, now=True)
            raise
        self._channels[kernel_id] = channel
        return kernel_id

    def channel(self, kernel_id: str) -> KernelChannel:
        """The channel of a running kernel (BackendError for an unknown id)."""
        try:
            return self._channels[kernel_id]
        except KeyError:
            raise BackendError(f"kernel {kernel_id} is not running") from None

    async def shutdown_kernel(self, kernel_id: str) -> None:
        """Shut the kernel down; a kernel already gone is fine."""
        channel = self._channels.pop(kernel_id, None)
        if channel is not None:
            await channel.stop()
        if kernel_id in self.manager.list_kernel_ids():
            with contextlib.suppress(KeyError):
                await self.manager.shutdown_kernel(kernel_id)

    async def shutdown_all(self) -> None:
        """Shut every kernel of this host down."""
        for kernel_id in list(self._channels):
            await self.shutdown_kernel(kernel_id)
        await self.manager.shutdown_all()

    async def is_busy(self, kernel_id: str) -> bool:
        """Whether the kernel last reported itself busy."""
        return self.channel(kernel_id).busy

    async def is_alive(self, kernel_id: str) -> bool:
        """Whether the kernel process is still running."""
        if kernel_id not in self.manager.list_kernel_ids():
            return False
        kernel: Any = self.manager.get_kernel(kernel_id)
        return bool(await kernel.is_alive())

    async def call(self, kernel_id: str, function: str, args: dict[str, object]) -> object:
        """Run `module:function(**args)` in the kernel; its JSON result."""
        return await self.channel(kernel_id).call(function, args, timeout=self.call_timeout)

    async def execute(self, kernel_id: str, code: str) -> str:
        """Run a cell in the kernel as a user would; its stdout (tests, benchmarks)."""
        return await self.channel(kernel_id).execute(code, timeout=self.call_timeout)
