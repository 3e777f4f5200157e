"""`JupyterClientHost`: the embedded kernel host, on jupyter_client's kernel manager.

Used where no Jupyter server owns the kernels: the magics without a server (the kernels
of the runtimes they check out or resume), the benchmarks and the tests. Each kernel gets
one `KernelChannel`, opened when it starts.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from jupyter_client.multikernelmanager import AsyncMultiKernelManager
from jupyter_core.paths import jupyter_runtime_dir

from ditto_jupyter.core.environment import without_workspace
from ditto_jupyter.core.errors import BackendError, InvalidRequest
from ditto_jupyter.hosts.kernel_channel import KernelChannel
from ditto_jupyter.hosts.kernel_start import start_answering


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
        It returns once the kernel answers; one that died first (a port it was given may
        have been taken) is started again on new ports (`kernel_start.start_answering`).
        """
        connection_dir = getattr(self.manager, "connection_dir", "")
        if connection_dir:  # jupyter-server makes it; on a machine that never ran one, we do
            Path(connection_dir).mkdir(mode=0o700, parents=True, exist_ok=True)
        inherited = without_workspace(os.environ)
        kwargs: dict[str, Any] = {"kernel_name": kernel_name, "env": {**inherited, **(env or {})}}
        if cwd is not None:
            if not Path(cwd).is_dir():
                raise InvalidRequest(f"kernel working directory {cwd} is not a directory")
            kwargs["cwd"] = str(cwd)
        kernel_id, channel = await start_answering(self.manager, kwargs)
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
            with contextlib.suppress(KeyError):  # removed meanwhile: gone, as asked
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
        """Run `module:function(**args)` in the kernel; its JSON result.

        KernelDied when the kernel's process dies before it answers.
        """
        return await self.channel(kernel_id).call(function, args, timeout=self.call_timeout)

    async def execute(self, kernel_id: str, code: str) -> str:
        """Run a cell in the kernel as a user would; its stdout (tests, benchmarks)."""
        return await self.channel(kernel_id).execute(code, timeout=self.call_timeout)
