"""The session context of the server's runtimes: the kernel context driver, plus the pool.

`ServerContextCapture` wraps `KernelContextDriver` so that a kernel it starts knows its
runtime id: `start` takes a warm kernel from the pool when there is one (it learns its
identity when taken), else publishes the session id in `starting_runtime`, which
`ServerKernelHost` turns into the new kernel's `DITTO_RUNTIME_ID` (checkout children and
resumed runtimes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ditto_jupyter.control.context_driver import ContextDriver
from ditto_jupyter.core.models import ContextCapture, SessionRecord, UnrestorableValue
from ditto_jupyter.server.kernel_pool import KernelPool
from ditto_jupyter.server.server_kernel_host import starting_runtime


class ServerContextCapture:
    """Wraps the kernel context capture so a kernel it starts knows its runtime id.

    `start` takes a warm kernel from the pool when there is one (it learns its identity
    when taken), else publishes the session id in `starting_runtime`, which
    `ServerKernelHost` turns into the new kernel's `DITTO_RUNTIME_ID` (checkout children
    and resumed runtimes).
    """

    def __init__(self, inner: ContextDriver, pool: KernelPool | None = None) -> None:
        self.inner = inner
        self.pool = pool

    async def start(self, session: SessionRecord, workspace: Path | None) -> dict[str, Any]:
        if self.pool is not None:
            kernel_id = await self.pool.take_for(session, workspace)
            if kernel_id is not None:
                return {"kernel_id": kernel_id}
        token = starting_runtime.set(session.session_id)
        try:
            return await self.inner.start(session, workspace)
        finally:
            starting_runtime.reset(token)

    async def stop(self, session: SessionRecord) -> None:
        await self.inner.stop(session)

    async def is_busy(self, session: SessionRecord) -> bool:
        return await self.inner.is_busy(session)

    async def capture(self, session: SessionRecord) -> ContextCapture:
        return await self.inner.capture(session)

    async def settle(self, session: SessionRecord) -> None:
        await self.inner.settle(session)

    async def fence(self, session: SessionRecord) -> None:
        await self.inner.fence(session)

    async def seal(self, session: SessionRecord) -> bool:
        return await self.inner.seal(session)

    async def unseal(self, session: SessionRecord) -> None:
        await self.inner.unseal(session)

    async def restore(
        self, session: SessionRecord, manifest_id: str | None, *, arrivals: str | None = None
    ) -> list[UnrestorableValue]:
        return await self.inner.restore(session, manifest_id, arrivals=arrivals)
