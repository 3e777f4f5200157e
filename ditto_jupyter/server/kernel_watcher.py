"""The kernel watcher: the one owner of "this runtime's kernel died" (and "was restarted").

Nothing else marks a runtime lost; a read never does. A periodic task on the server's
loop looks at the runtimes this server holds the lease of (`RuntimeOwnership.held`, an
index lookup) and at the leases of holders that are gone (`lapsed`):

- a runtime of this server whose kernel is no longer in the kernel manager (shut down in
  JupyterLab, culled, or its restarter gave up) is marked lost: paused at a `lost`
  checkpoint that keeps its files (the head's variables), or closed when there is nothing
  to keep;
- a kernel Jupyter's restarter revived under the same id (its restart callback, the
  kernel manager's public `add_restart_callback`) lost its variables: a `lost`
  checkpoint keeps the files and offers the head's variables back, and the runtime stays
  live on the revived kernel (see `RuntimeService.mark_restarted`);
- a live runtime of this server's user whose lease holder is gone (the server that ran
  it died, or stopped) is taken over and marked lost, so it can be resumed here; another
  user's runtime is left to that user's next server (a store may be shared by many).

- a kernel this server still runs for a runtime whose lease it lost (it was frozen, and
  another server took the runtime over meanwhile) is fenced at once: interrupted, what it
  holds kept in a `lost` checkpoint if it still can be, and stopped; the notebook is told
  (`RuntimeSessions.fence`), and the runtime is resumed from that checkpoint.

A runtime with an operation in flight is never touched: a pause under way stops the kernel
itself, and the runtime is looked at again on the next round. `mark_lost` also leaves a
runtime alone whose kernel changed since it was looked at (it was resumed meanwhile).
The watcher also renews this server's leases (the heartbeat), every third of their time to
live. Its store calls run on the store's threads (`control.off_loop`), never on the loop: a
store whose write lock another server holds delays the heartbeat (bounded by the store's
lock timeout), never the server.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from jupyter_server.utils import ensure_async
from tornado.ioloop import PeriodicCallback

from ditto_jupyter.control.off_loop import off_loop
from ditto_jupyter.core.errors import DittoError, SessionBusy
from ditto_jupyter.core.models import RUNTIME_LEASE, SessionLifecycleStatus, SessionRecord

if TYPE_CHECKING:
    from collections.abc import Callable

    from ditto_jupyter.server.sessions import LostReason, RuntimeSessions

_LIVE = (SessionLifecycleStatus.IDLE, SessionLifecycleStatus.BUSY)

#: Seconds between two rounds of the watcher, at most.
WATCH_INTERVAL_S = 2.0


class KernelWatcher:
    """Marks runtimes lost whose kernel died, was restarted, or whose server is gone."""

    def __init__(
        self,
        sessions: RuntimeSessions,
        kernel_manager: Any,
        *,
        interval: float = WATCH_INTERVAL_S,
        heartbeat: float | None = None,
        log: logging.Logger | None = None,
    ) -> None:
        self.sessions = sessions
        self.kernel_manager: Any = kernel_manager  # jupyter_server is untyped
        self.interval = interval
        #: Seconds between two renewals of this server's leases (None: they never expire).
        self.heartbeat = heartbeat
        self.log = log or logging.getLogger(__name__)
        self._callback: PeriodicCallback | None = None
        self._lock = asyncio.Lock()
        self._renewed = 0.0
        #: kernel id -> (runtime id, the restart callback registered on it)
        self._watched: dict[str, tuple[str, Callable[[], None]]] = {}
        #: runtime id -> the kernel handle Jupyter restarted (to record, when it is free)
        self._restarted: dict[str, dict[str, Any]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def service(self) -> Any:
        return self.sessions.service

    # ---- running -----------------------------------------------------------------------

    def start(self) -> None:
        """Look every `interval` seconds on the server's IOLoop (a round never overlaps)."""
        if self._callback is None:
            self._callback = PeriodicCallback(self._check_logged, self.interval * 1000.0)
            self._callback.start()

    async def stop(self) -> None:
        """Stop looking, let a round in progress end, drop the restart callbacks."""
        if self._callback is not None:
            self._callback.stop()
            self._callback = None
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        async with self._lock:
            for kernel_id in list(self._watched):
                self._unwatch(kernel_id)

    async def _check_logged(self) -> None:
        try:
            await self.check_once()
        except Exception:  # one bad round must not end the timer
            self.log.exception("ditto_jupyter: the kernel watcher's round failed")

    async def check_once(self) -> list[str]:
        """One round: renew the leases when due, record restarted and dead kernels, take
        over the runtimes of servers that are gone; the runtimes it recorded."""
        async with self._lock:
            await self._renew_when_due()
            recorded = await self._record_restarts()
            recorded += await self._record_dead_kernels()
            recorded += await self._take_over()
            recorded += await self._fence_lost()
            return recorded

    async def _renew_when_due(self) -> None:
        if self.heartbeat is None or time.monotonic() - self._renewed < self.heartbeat:
            return
        try:
            await off_loop(self.service.ownership.renew)
        except DittoError as error:  # the store refused: the leases run out if it stays so
            self.log.warning("ditto_jupyter: could not renew this server's leases: %s", error)
            return
        self._renewed = time.monotonic()

    # ---- restarts ----------------------------------------------------------------------

    def watch(self, runtime_id: str, kernel_id: str) -> None:
        """Be told when Jupyter's restarter revives this runtime's kernel (once per kernel)."""
        if kernel_id in self._watched or kernel_id not in self.kernel_manager:
            return

        def restarted() -> None:
            self._restart_seen(runtime_id, kernel_id)

        self.kernel_manager.add_restart_callback(kernel_id, restarted, "restart")
        self._watched[kernel_id] = (runtime_id, restarted)

    def _unwatch(self, kernel_id: str) -> None:
        _, callback = self._watched.pop(kernel_id)
        if kernel_id in self.kernel_manager:
            try:
                self.kernel_manager.remove_restart_callback(kernel_id, callback, "restart")
            except (KeyError, ValueError) as error:
                self.log.info("ditto_jupyter: restart callback of %s: %s", kernel_id, error)

    def _restart_seen(self, runtime_id: str, kernel_id: str) -> None:
        """The restarter found the kernel dead and revives it: record it on the loop."""
        self.log.warning(
            "ditto_jupyter: the kernel %s of runtime %s died and is being restarted; its "
            "variables are gone",
            kernel_id,
            runtime_id,
        )
        self._restarted[runtime_id] = {"kernel_id": kernel_id}
        task = asyncio.get_running_loop().create_task(self._check_logged())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _record_restarts(self) -> list[str]:
        recorded: list[str] = []
        for runtime_id, handle in list(self._restarted.items()):
            if self.service.has_operation_in_flight(runtime_id):
                continue  # the call it was in fails (KernelDied): next round
            del self._restarted[runtime_id]
            try:
                await self.sessions.mark_restarted(runtime_id, handle)
            except SessionBusy:  # an operation began meanwhile: next round
                self._restarted[runtime_id] = handle
                continue
            except DittoError as error:
                self.log.warning(
                    "ditto_jupyter: could not record the restart of runtime %s: %s",
                    runtime_id,
                    error,
                )
                continue
            recorded.append(runtime_id)
        return recorded

    # ---- dead kernels --------------------------------------------------------------------

    def _kernel_alive(self, kernel_id: str) -> bool:
        if kernel_id not in self.kernel_manager:
            return False
        state = getattr(self.kernel_manager.get_kernel(kernel_id), "execution_state", None)
        return state != "dead"

    async def _record_dead_kernels(self) -> list[str]:
        recorded: list[str] = []
        for lease in await off_loop(self.service.ownership.held):
            runtime_id = lease.key
            if self.service.has_operation_in_flight(runtime_id):
                continue
            session = await self._session(runtime_id)
            if session is None or session.status not in _LIVE:
                # left by a failure
                await off_loop(self.service.ownership.release_unless_live, runtime_id)
                continue
            kernel_id = session.handle_state.get("kernel_id")
            if not isinstance(kernel_id, str) or not kernel_id:
                continue
            if self._kernel_alive(kernel_id):
                self.watch(runtime_id, kernel_id)
                continue
            if await self._mark_lost(session, "died"):
                recorded.append(runtime_id)
        for kernel_id in [k for k in self._watched if k not in self.kernel_manager]:
            self._watched.pop(kernel_id)
        return recorded

    # ---- runtimes of servers that are gone -----------------------------------------------

    async def _take_over(self) -> list[str]:
        recorded: list[str] = []
        for lease in await off_loop(self.service.ownership.lapsed):
            runtime_id = lease.key
            if self.service.has_operation_in_flight(runtime_id):
                continue
            session = await self._session(runtime_id)
            if session is not None and not session.belongs_to(self.sessions.scope.server_user):
                continue  # another user's runtime: theirs to take over, on their server
            if session is None or session.status not in _LIVE:  # a lease left behind
                try:
                    await off_loop(self.service.ownership.claim, runtime_id)
                except SessionBusy:  # another server was quicker
                    continue
                await off_loop(self.service.ownership.release_unless_live, runtime_id)
                continue
            self.log.warning(
                "ditto_jupyter: runtime %s was live on %s, which is gone: taking it over",
                runtime_id,
                lease.holder.describe(),
            )
            if await self._mark_lost(session, "owner-gone"):
                recorded.append(runtime_id)
        return recorded

    # ---- kernels of runtimes another server took over -------------------------------------

    async def _fence_lost(self) -> list[str]:
        held = {lease.key for lease in await off_loop(self.service.ownership.held)}
        fenced: list[str] = []
        for kernel_id, (runtime_id, _) in list(self._watched.items()):
            if runtime_id in held or self.service.has_operation_in_flight(runtime_id):
                continue
            host = self.sessions.host
            if host is not None and host.stopping(kernel_id):  # it paused itself: stopping
                continue
            if not self._kernel_alive(kernel_id) or not await self._taken(runtime_id, kernel_id):
                continue
            self.log.warning(
                "ditto_jupyter: runtime %s was taken over by another server while this one "
                "could not renew its lease: stopping its kernel %s here, keeping what it holds",
                runtime_id,
                kernel_id,
            )
            self._unwatch(kernel_id)
            try:  # the cell it runs stops now
                await ensure_async(self.kernel_manager.interrupt_kernel(kernel_id))
            except Exception as error:  # gone meanwhile: stopped below anyway
                self.log.info("ditto_jupyter: interrupting kernel %s: %s", kernel_id, error)
            try:
                await self.sessions.fence(runtime_id, kernel_id)
            except DittoError as error:
                self.log.warning("ditto_jupyter: fencing runtime %s: %s", runtime_id, error)
                continue
            fenced.append(runtime_id)
        return fenced

    async def _taken(self, runtime_id: str, kernel_id: str) -> bool:
        """Whether another server took over the runtime this kernel of ours runs: it is
        recorded paused, closed, or on another kernel, or another server holds its lease."""
        session = await self._session(runtime_id)
        if session is None:
            return False
        if session.status in _LIVE and session.handle_state.get("kernel_id") == kernel_id:
            lease = await off_loop(self.service.store.get_lease, RUNTIME_LEASE, runtime_id)
            return lease is not None and lease.holder.owner_id != self.service.ownership.owner_id
        return True

    # ---- shared --------------------------------------------------------------------------

    async def _session(self, runtime_id: str) -> SessionRecord | None:
        try:
            found: SessionRecord | None = await off_loop(self.service.find_session, runtime_id)
        except DittoError as error:  # a damaged row, an unavailable store: skipped, said
            self.log.warning("ditto_jupyter: runtime %s not watched: %s", runtime_id, error)
            return None
        return found

    async def _mark_lost(self, session: SessionRecord, reason: LostReason) -> bool:
        try:
            await self.sessions.mark_lost(session.session_id, session.handle_state, reason)
        except SessionBusy:  # an operation began, or another server took it: next round
            return False
        except DittoError as error:
            self.log.warning(
                "ditto_jupyter: could not record runtime %s lost: %s", session.session_id, error
            )
            return False
        return True
