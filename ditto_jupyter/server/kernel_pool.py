"""A warm kernel pool: started, idle kernels per kernelspec, handed to checkouts and resumes.

Checkout and resume are mostly kernel start-up (about a second). The pool keeps
`size` kernels of each kernelspec started (the server's default kernelspec from the
start, others once a runtime has asked for one), with their message channel open and the
capture code imported. A pooled kernel belongs to no runtime: it is started in the
server's root folder with the server's variables only, never a runtime id, token or
workspace. Taking it tells it who it is (`ditto_jupyter.kernel.adoption:adopt_runtime`,
`ADOPT_RUNTIME`, sent through its kernel client) before the checkpoint is restored into it.
A kernel is taken once and never comes back to the pool.

- Refill runs in the background, scheduled after the operation that took a kernel has
  returned (`refill_soon`), never on the request path.
- A pooled kernel that died is shut down and replaced, never handed out.
- Pooled kernels have no Jupyter session, so they are never runtimes; the extension's
  hooks keep them out of `GET /api/kernels` (`kernel_ids`), and a rule of the one culling
  policy keeps them away from jupyter-server's idle culler (`spare_from_culling`).
- `close` (server stop) waits for a start in progress and shuts every pooled kernel down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from pathlib import Path
from typing import Any

from ditto_jupyter.core.errors import BackendError
from ditto_jupyter.core.models import SessionRecord
from ditto_jupyter.hosts.kernel_calls import ADOPT_RUNTIME, WARM_UP
from ditto_jupyter.server.culling import CullingPolicy
from ditto_jupyter.server.runtime_tokens import RuntimeTokens
from ditto_jupyter.server.server_kernel_host import ServerKernelHost, starting_runtime

#: Seconds between an operation's return and the refill it asked for (its answer goes out
#: first: the refill starts a kernel process, which competes for the CPU).
REFILL_DELAY_S = 0.05

log = logging.getLogger(__name__)


class KernelPool:
    """Started kernels waiting for a runtime, `size` per kernelspec (0: no pool)."""

    def __init__(
        self,
        host: ServerKernelHost,
        tokens: RuntimeTokens,
        *,
        size: int,
        data_dir: Path,
        kernel_names: tuple[str, ...] = (),
    ) -> None:
        self.host = host
        self.tokens = tokens
        self.size = max(0, size)
        #: The blob store the kernels warm up for (set once the service has opened it).
        self.blob_root: Path | None = None
        self.data_dir = Path(data_dir).resolve()
        self._wanted: list[str] = list(kernel_names)
        self._ready: dict[str, list[str]] = {}
        self._starting: set[str] = set()
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def enabled(self) -> bool:
        return self.size > 0 and not self._closed

    def kernel_ids(self) -> set[str]:
        """Every kernel the pool holds or is starting (no runtime's)."""
        ready = {kernel_id for ids in self._ready.values() for kernel_id in ids}
        return ready | self._starting

    def spare_from_culling(self, policy: CullingPolicy) -> None:
        """A pooled kernel is idle by design: culling it would only make the pool start
        another."""
        policy.spare("a pooled kernel: idle until a runtime takes it", self.holds)

    def holds(self, kernel_id: str) -> bool:
        """Whether the pool holds (or is starting) this kernel."""
        return kernel_id in self.kernel_ids()

    # ---- taking --------------------------------------------------------------------------

    async def take_for(self, session: SessionRecord, workspace: Path | None) -> str | None:
        """A live pooled kernel made `session`'s (identity, folder), or None (pool empty).

        A kernel that fails to take its identity is shut down and the next one tried.
        """
        if not self.enabled:
            return None
        self._want(session.kernel_name)
        while True:
            kernel_id = await self._take_alive(session.kernel_name)
            if kernel_id is None:
                return None
            try:
                await self._adopt(kernel_id, session, workspace)
            except asyncio.CancelledError:
                await self.host.shutdown_kernel(kernel_id)
                raise
            except Exception as error:
                log.warning("ditto_jupyter: pooled kernel %s not adopted: %s", kernel_id, error)
                await self.host.shutdown_kernel(kernel_id)
                continue
            return kernel_id

    async def _take_alive(self, kernel_name: str) -> str | None:
        ready = self._ready.get(kernel_name, [])
        while ready:
            kernel_id = ready.pop(0)
            if await self._alive(kernel_id):
                return kernel_id
            log.warning("ditto_jupyter: pooled kernel %s died; replacing it", kernel_id)
            with contextlib.suppress(Exception):
                await self.host.shutdown_kernel(kernel_id)
        return None

    async def _alive(self, kernel_id: str) -> bool:
        if not self.host.is_alive(kernel_id):
            return False
        kernel: Any = self.host.kernel_manager.get_kernel(kernel_id)
        try:
            return bool(await kernel.is_alive())
        except Exception:
            return False

    async def _adopt(self, kernel_id: str, session: SessionRecord, workspace: Path | None) -> None:
        runtime_id = session.session_id
        args: dict[str, object] = {
            "runtime_id": runtime_id,
            "runtime_token": self.tokens.token(runtime_id),
            "data_dir": str(self.data_dir),
            "cwd": str(self.host.notebook_folder(session)),
            "workspace": str(workspace) if workspace is not None else None,
        }
        answer = await self.host.call(kernel_id, ADOPT_RUNTIME, args)
        if not isinstance(answer, dict) or answer.get("runtime_id") != runtime_id:
            raise BackendError(f"kernel {kernel_id} did not take runtime {runtime_id}'s identity")

    # ---- filling -------------------------------------------------------------------------

    def _want(self, kernel_name: str) -> None:
        if kernel_name not in self._wanted:
            self._wanted.append(kernel_name)

    def refill_soon(self) -> None:
        """Top the pool up in the background, once the caller's answer has gone out."""
        if not self.enabled:
            return
        loop = asyncio.get_running_loop()
        loop.call_later(REFILL_DELAY_S, self._spawn_fill)

    def _spawn_fill(self) -> None:
        if not self.enabled:
            return
        task = asyncio.get_running_loop().create_task(self.fill())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def fill(self) -> None:
        """Start kernels until every wanted kernelspec has `size` live ones waiting."""
        for kernel_name in list(self._wanted):
            lock = self._locks.setdefault(kernel_name, asyncio.Lock())
            async with lock:
                await self._fill_one_spec(kernel_name)

    async def _fill_one_spec(self, kernel_name: str) -> None:
        ready = self._ready.setdefault(kernel_name, [])
        for kernel_id in list(ready):  # a kernel that died waiting is replaced
            if not await self._alive(kernel_id):
                ready.remove(kernel_id)
                with contextlib.suppress(Exception):
                    await self.host.shutdown_kernel(kernel_id)
        while self.enabled and len(ready) < self.size:
            started = await self._start(kernel_name)
            if started is None:
                return
            if self._closed:  # the server stopped while it started
                await self.host.shutdown_kernel(started)
                return
            ready.append(started)

    async def _start(self, kernel_name: str) -> str | None:
        """Start one kernel of no runtime and warm it up; None when that failed (logged)."""
        root = Path(os.path.realpath(self.host.kernel_manager.root_dir))
        kernel_id = str(uuid.uuid4())
        self._starting.add(kernel_id)  # hidden from /api/kernels from its first moment
        no_runtime = starting_runtime.set(None)
        try:
            await self.host.start_kernel(kernel_name, cwd=root, kernel_id=kernel_id)
        except Exception as error:
            log.warning("ditto_jupyter: could not start a pooled %s kernel: %s", kernel_name, error)
            self._starting.discard(kernel_id)
            if kernel_name in self._wanted:  # asked for again by the next take
                self._wanted.remove(kernel_name)
            return None
        finally:
            starting_runtime.reset(no_runtime)
        try:
            if self.blob_root is not None:
                await self.host.call(kernel_id, WARM_UP, {"blob_root": str(self.blob_root)})
            else:  # open the channel at least: the take path then only sends messages
                await self.host.channel(kernel_id)
        except Exception as error:
            log.warning("ditto_jupyter: pooled kernel %s did not warm up: %s", kernel_id, error)
            await self.host.shutdown_kernel(kernel_id)
            return None
        finally:
            self._starting.discard(kernel_id)
        return kernel_id

    # ---- stopping ------------------------------------------------------------------------

    async def close(self) -> None:
        """Stop refilling, let a start in progress end, shut every pooled kernel down."""
        self._closed = True
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        for kernel_name in list(self._ready):
            for kernel_id in self._ready.pop(kernel_name):
                with contextlib.suppress(Exception):
                    await self.host.shutdown_kernel(kernel_id)
