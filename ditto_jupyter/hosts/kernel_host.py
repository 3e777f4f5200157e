"""`KernelHost`: what the context capture needs from whoever owns the kernels.

Two hosts implement it: `JupyterClientHost` (embedded, on jupyter_client, no server) and
`ditto_jupyter.server.server_kernel_host.ServerKernelHost` (the Jupyter server's own
kernel manager). Both send their calls through a `KernelChannel`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable


@runtime_checkable
class KernelHost(Protocol):
    """Start, stop, probe and call into kernels."""

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
        """Run `module:function(**args)` in the kernel; its JSON result.

        The call is bound to the kernel process it was sent to: when that process dies,
        it ends with `KernelDied` (a BackendError), even if Jupyter's restarter has
        started another process under the same kernel id.
        """
        ...
