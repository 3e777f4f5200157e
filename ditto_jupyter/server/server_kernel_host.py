"""ServerKernelHost: the KernelHost protocol over jupyter-server's own kernel manager.

Kernels started here are ordinary server kernels (they show up in /api/kernels, JupyterLab
can connect to them), started with the extension's environment (`DITTO_SERVER_URL`,
`DITTO_TOKEN`, `DITTO_DATA_DIR`, and `DITTO_RUNTIME_ID` and `DITTO_RUNTIME_TOKEN` of the
runtime being started) so
the magics can call back. They run in their notebook's folder (`notebook_folder`), as the
kernels of JupyterLab's sessions do. `is_busy` reads the server's tracked `execution_state`;
calls into a kernel reuse `ditto_jupyter.hosts.kernel_channel.KernelChannel` (the message
logic of the embedded host) over a client of the server's kernel manager, each bound to the
kernel process it was sent to: a kernel killed mid-call ends the call with `KernelDied`
(502), even when Jupyter's restarter has already revived it under the same id. A start
returns once the kernel answers, and a kernel that died before it did (a port it was given
taken by another process) is started again on new ports
(`ditto_jupyter.hosts.kernel_start`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import posixpath
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ditto_jupyter.core.environment import runtime_identity_env, without_runtime_identity
from ditto_jupyter.core.errors import BackendError, InvalidRequest
from ditto_jupyter.core.models import SessionRecord
from ditto_jupyter.hosts.kernel_calls import PREPARE_KERNEL
from ditto_jupyter.hosts.kernel_channel import KernelChannel
from ditto_jupyter.hosts.kernel_start import channel_to, start_answering
from ditto_jupyter.server.runtime_tokens import RuntimeTokens

if TYPE_CHECKING:
    from jupyter_server.services.kernels.kernelmanager import MappingKernelManager

log = logging.getLogger(__name__)

#: The runtime whose kernel is being started; read by `ServerKernelHost.start_kernel`.
starting_runtime: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "ditto_starting_runtime", default=None
)


class ServerKernelHost:
    """Start, stop, probe and call kernels owned by the Jupyter server's kernel manager."""

    def __init__(
        self,
        kernel_manager: MappingKernelManager | Any,
        *,
        env_provider: Callable[[], Mapping[str, str]] | None = None,
        call_timeout: float | None = None,
        runtime_tokens: RuntimeTokens | None = None,
    ) -> None:
        self.kernel_manager: Any = kernel_manager  # jupyter_server is untyped
        self.env_provider = env_provider
        self.runtime_tokens = runtime_tokens
        self.call_timeout = call_timeout
        self._channels: dict[str, KernelChannel] = {}
        self._opening: dict[str, asyncio.Lock] = {}
        self._deferred: set[str] = set()
        self._stopping: set[str] = set()  # deferred shutdowns under way
        self._deferred_tasks: set[asyncio.Task[None]] = set()
        self._own_calls: dict[str, int] = {}
        self._warm_ups: dict[str, asyncio.Task[None]] = {}

    def kernel_env(self, runtime_id: str | None = None) -> dict[str, str]:
        """The extension's variables for a kernel (without the rest of the environment)."""
        env = dict(self.env_provider() if self.env_provider is not None else {})
        if runtime_id:
            env.update(runtime_identity_env(runtime_id))
            if self.runtime_tokens is not None:
                env.update(self.runtime_tokens.kernel_env(runtime_id))
        return env

    async def start_kernel(
        self,
        kernel_name: str = "python3",
        *,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
        kernel_id: str | None = None,
    ) -> str:
        """Start a server kernel in `cwd` with the extension's environment; its id.

        `kernel_id` chooses the id (the warm pool knows its kernels before they start).
        It returns once the kernel answers, its channel open; a kernel that died first (a
        port it was given may have been taken) is started again under the same id on new
        ports (`ditto_jupyter.hosts.kernel_start.start_answering`).
        """
        inherited = without_runtime_identity(os.environ)  # the server's, if any
        full_env = {**inherited, **self.kernel_env(starting_runtime.get()), **(env or {})}
        kwargs: dict[str, Any] = {"kernel_name": kernel_name, "env": full_env}
        if cwd is not None:
            if not Path(cwd).is_dir():
                raise InvalidRequest(f"kernel working directory {cwd} is not a directory")
            kwargs["cwd"] = str(cwd)
        started, channel = await start_answering(self.kernel_manager, kwargs, kernel_id=kernel_id)
        self._channels[started] = channel
        return started

    def notebook_folder(self, session: SessionRecord) -> Path:
        """Where a runtime's kernels run: its notebook's folder, as a Jupyter session's do.

        The notebook path (the runtime's conversation id) is relative to the server's root,
        like a Jupyter session's path. A folder that does not exist is walked up towards
        the root (the kernel manager's own rule); a path leading outside the root gives
        the root.
        """
        root = Path(os.path.realpath(self.kernel_manager.root_dir))
        api_folder = posixpath.dirname(session.conversation_id.strip("/"))
        folder = Path(os.path.realpath(self.kernel_manager.cwd_for_path(api_folder)))
        return folder if folder == root or root in folder.parents else root

    async def shutdown_kernel(self, kernel_id: str) -> None:
        """Shut a kernel down (a kernel already gone is fine).

        A kernel marked by `defer_shutdown` (it asked to pause itself from a magic) is shut
        down only once the cell that asked has finished, so the magic gets its answer.
        """
        if kernel_id in self._deferred:
            self._deferred.discard(kernel_id)
            self._stopping.add(kernel_id)
            task = asyncio.get_running_loop().create_task(self._shutdown_when_idle(kernel_id))
            self._deferred_tasks.add(task)
            task.add_done_callback(self._deferred_tasks.discard)
            return
        await self._close_channel(kernel_id)
        if kernel_id in self.kernel_manager:
            with contextlib.suppress(KeyError):
                await self.kernel_manager.shutdown_kernel(kernel_id)

    def stopping(self, kernel_id: str) -> bool:
        """Whether this host is to shut the kernel down once it is idle (a kernel that
        paused itself from a magic: its runtime is paused, its kernel not yet stopped)."""
        return kernel_id in self._deferred or kernel_id in self._stopping

    def defer_shutdown(self, kernel_id: str) -> None:
        """Make the next `shutdown_kernel` of this kernel wait until it is idle."""
        self._deferred.add(kernel_id)

    def cancel_deferred_shutdown(self, kernel_id: str) -> None:
        """Forget a `defer_shutdown` that was not used (the operation failed first)."""
        self._deferred.discard(kernel_id)

    async def _shutdown_when_idle(self, kernel_id: str, limit_s: float = 60.0) -> None:
        try:
            await self._shutdown_once_idle(kernel_id, limit_s)
        finally:
            self._stopping.discard(kernel_id)

    async def _shutdown_once_idle(self, kernel_id: str, limit_s: float) -> None:
        deadline = time.monotonic() + limit_s
        await asyncio.sleep(0.05)
        while time.monotonic() < deadline and await self.is_busy(kernel_id):
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)  # let the cell's last messages reach its clients
        await self._close_channel(kernel_id)
        if kernel_id in self.kernel_manager:
            try:
                await self.kernel_manager.shutdown_kernel(kernel_id)
            except Exception as error:
                log.warning("ditto_jupyter: kernel %s did not shut down: %s", kernel_id, error)

    async def wait_deferred(self) -> None:
        """Wait for deferred shutdowns in progress (tests, server stop)."""
        if self._deferred_tasks:
            await asyncio.gather(*list(self._deferred_tasks), return_exceptions=True)

    def is_alive(self, kernel_id: str) -> bool:
        """Whether the server still has this kernel."""
        return kernel_id in self.kernel_manager

    async def is_busy(self, kernel_id: str) -> bool:
        """Whether the kernel is running code.

        With a channel open (after a first capture or restore), its iopub reader has seen
        every status message up to the end of our own last call; the server's tracked
        `execution_state` may still lag on the `idle` closing that call. Without a
        channel, the server's tracked state is the one there is.
        """
        if kernel_id not in self.kernel_manager:
            return False
        if self._own_calls.get(kernel_id):  # busy with our own call; user code queues after it
            return False
        channel = self._channels.get(kernel_id)
        if channel is not None:
            return channel.busy
        kernel = self.kernel_manager.get_kernel(kernel_id)
        return getattr(kernel, "execution_state", "idle") == "busy"

    async def channel(self, kernel_id: str) -> KernelChannel:
        """The (lazily opened) message channel to a server kernel."""
        channel = self._channels.get(kernel_id)
        if channel is not None:
            return channel
        lock = self._opening.setdefault(kernel_id, asyncio.Lock())
        async with lock:
            channel = self._channels.get(kernel_id)
            if channel is not None:
                return channel
            if kernel_id not in self.kernel_manager:
                raise BackendError(f"kernel {kernel_id} is not running")
            channel = channel_to(self.kernel_manager, kernel_id)
            await channel.start()
            self._channels[kernel_id] = channel
            return channel

    async def _close_channel(self, kernel_id: str) -> None:
        warm_up = self._warm_ups.pop(kernel_id, None)
        if warm_up is not None and not warm_up.done():
            warm_up.cancel()
        channel = self._channels.pop(kernel_id, None)
        self._opening.pop(kernel_id, None)
        if channel is not None:
            await channel.stop()

    async def call(self, kernel_id: str, function: str, args: dict[str, object]) -> object:
        """Run `module:function(**args)` in the kernel and return its JSON result.

        KernelDied when the kernel's process dies before it answers. The channel stays
        open: a kernel the restarter revives keeps its ports, and the channel counts it
        idle until the new process reports a state. (The server's own `execution_state`
        would stay `busy`: the dead process never reported idle, and the new one's
        `starting` status can go out before the server's iopub stream has reconnected.)
        """
        self._own_calls[kernel_id] = self._own_calls.get(kernel_id, 0) + 1
        try:
            channel = await self.channel(kernel_id)
            return await channel.call(function, args, timeout=self.call_timeout)
        finally:
            self._own_calls[kernel_id] -= 1
            if not self._own_calls[kernel_id]:
                del self._own_calls[kernel_id]

    def warm_up(self, kernel_id: str, workspace: Path | None = None) -> None:
        """Prepare an idle kernel for fast captures, in the background (once per kernel).

        Opening the message channel and importing the capture module in the kernel cost
        about half a second the first time; a runtime's first checkpoint should not pay it.
        A kernel JupyterLab started also learns its runtime's `workspace` here (kernels the
        extension starts get `DITTO_WORKSPACE` at start); `ditto_jupyter.workspace()` asks
        the server if it runs before this.
        """
        if kernel_id in self._warm_ups or kernel_id not in self.kernel_manager:
            return
        task = asyncio.get_running_loop().create_task(self._warm_up(kernel_id, workspace))
        self._warm_ups[kernel_id] = task

    async def _warm_up(self, kernel_id: str, workspace: Path | None) -> None:
        args: dict[str, object] = {"workspace": str(workspace) if workspace else None}
        try:
            await self.call(kernel_id, PREPARE_KERNEL, args)
        except Exception as error:  # best effort: the first real call retries
            log.info("ditto_jupyter: warm-up of kernel %s failed: %s", kernel_id, error)

    async def wait_warm_up(self, kernel_id: str) -> None:
        """Wait until a kernel's warm-up has run (tests)."""
        task = self._warm_ups.get(kernel_id)
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)

    async def execute(self, kernel_id: str, code: str) -> str:
        """Run a cell as a user would; its stdout (tests, benchmarks)."""
        channel = await self.channel(kernel_id)
        return await channel.execute(code, timeout=self.call_timeout)

    async def close(self) -> None:
        """Close every channel this host opened (the kernels keep running)."""
        for kernel_id in list(self._warm_ups):
            task = self._warm_ups.pop(kernel_id)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                try:
                    await task
                except Exception as error:
                    log.info("ditto_jupyter: warm-up of kernel %s failed: %s", kernel_id, error)
        for kernel_id in list(self._channels):
            await self._close_channel(kernel_id)
