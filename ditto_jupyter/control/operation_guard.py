"""The guard of RuntimeService: who may operate on a runtime now, and in what state.

- **Operation slots.** One control operation per runtime at a time: a second one while the
  first is in flight is refused with `SessionBusy`, never queued. A shell command in the
  runtime's backend (`exec`) shares its slot with other commands but not with an
  operation: a pause never deletes a workspace a command is writing.
- **Ownership.** An operation holds the runtime's lease while it runs (`ownership`): one
  on a runtime live on another server is refused with `SessionBusy` naming that server.
- **Holds.** While a checkpoint is being taken and recorded, the manifests it will name are
  held: garbage collection in this process counts them as referenced before the store does.
- **State checks.** A runtime must exist; a live one is neither paused nor closed; an idle
  one runs no cell (its context driver says so).
- **The public record.** A runtime reads `busy` while code or an operation runs.

Every operation enters here, so this is where a runtime's ownership is checked. Claiming
and giving up a lease are store writes: they run on the store's threads (`off_loop`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Iterable, Sequence

from ditto_jupyter.control.context_driver import ContextDriver
from ditto_jupyter.control.off_loop import off_loop
from ditto_jupyter.control.ownership import RuntimeOwnership
from ditto_jupyter.control.store import CheckpointStore
from ditto_jupyter.control.store.langgraph_rows import langgraph_manifests_named
from ditto_jupyter.core.errors import (
    DittoError,
    RuntimeClosed,
    RuntimeNotFound,
    RuntimePaused,
    SessionBusy,
)
from ditto_jupyter.core.models import RuntimeRecord, SessionLifecycleStatus, SessionRecord

_log = logging.getLogger(__name__)


class OperationGuard:
    """Operation slots, manifest holds, and the existence, live and idle checks."""

    def __init__(
        self, store: CheckpointStore, context: ContextDriver, ownership: RuntimeOwnership
    ) -> None:
        self._store = store
        self._context = context
        self.ownership = ownership
        self._in_flight: set[str] = set()
        self._commands: dict[str, int] = {}  # runtime id -> shell commands running in it
        self._held: dict[str, set[str]] = {}  # manifests of checkpoints being recorded
        self._held_lock = threading.Lock()
        #: runtime id -> the lease release of an operation that just ended on it
        self._releasing: dict[str, asyncio.Future[None]] = {}

    # ---- operation slots ---------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def operation(self, *runtime_ids: str, claim: bool = True) -> AsyncIterator[None]:
        """Hold the control-operation slot of each runtime, or refuse with SessionBusy.

        With `claim`, the operation also holds each runtime's lease (refused when another
        server runs it); the lease is given up afterwards unless the runtime is live.
        `claim=False` for a runtime the operation only reads (a checkout's source).
        """
        for runtime_id in runtime_ids:
            self.refuse_in_flight(runtime_id)
        self._in_flight.update(runtime_ids)  # before the first await: no second one starts
        claimed: list[str] = []
        try:
            await self._released(runtime_ids)
            for runtime_id in runtime_ids if claim else ():
                await off_loop(self.ownership.claim, runtime_id)
                claimed.append(runtime_id)
            yield
        finally:
            self._in_flight.difference_update(runtime_ids)
            await self._release(claimed)

    async def _release(self, runtime_ids: list[str]) -> None:
        """Give the leases up unless the runtimes are live, on a store thread; an operation
        that starts meanwhile waits for it (`_released`) before it claims."""
        if not runtime_ids:
            return

        def release() -> None:
            for runtime_id in runtime_ids:
                self.ownership.release_unless_live(runtime_id)  # logs what it cannot do

        releasing = asyncio.ensure_future(off_loop(release))
        for runtime_id in runtime_ids:
            self._releasing[runtime_id] = releasing
        try:
            await asyncio.shield(releasing)
        finally:
            for runtime_id in runtime_ids:
                if self._releasing.get(runtime_id) is releasing:
                    del self._releasing[runtime_id]

    async def _released(self, runtime_ids: Sequence[str]) -> None:
        """Wait until the lease releases of operations that just ended on these runtimes
        are done (a claim in between would find its lease taken from under it)."""
        for releasing in {self._releasing[r] for r in runtime_ids if r in self._releasing}:
            await asyncio.shield(releasing)

    @contextlib.asynccontextmanager
    async def command(self, runtime_id: str) -> AsyncIterator[None]:
        """Hold a share of the runtime's slot while a shell command runs in its backend:
        refused while an operation is in flight, and refusing operations until it ends."""
        if runtime_id in self._in_flight:
            raise SessionBusy(f"runtime {runtime_id} has a control operation in flight")
        self._commands[runtime_id] = self._commands.get(runtime_id, 0) + 1  # before awaiting
        try:
            await self._released([runtime_id])
            await off_loop(self.ownership.claim, runtime_id)
            yield
        finally:
            self._commands[runtime_id] -= 1
            if not self._commands[runtime_id]:
                del self._commands[runtime_id]

    def claim(self, runtime_id: str) -> None:
        """SessionBusy unless this service may operate on the runtime (see `ownership`)."""
        self.ownership.claim(runtime_id)

    def in_flight(self, runtime_id: str) -> bool:
        """Whether a control operation or a shell command on this runtime is running now."""
        return runtime_id in self._in_flight or runtime_id in self._commands

    def refuse_in_flight(self, runtime_id: str) -> None:
        """SessionBusy when a control operation or a shell command on this runtime is
        running now."""
        if runtime_id in self._in_flight:
            raise SessionBusy(f"runtime {runtime_id} has another control operation in flight")
        if runtime_id in self._commands:
            raise SessionBusy(
                f"runtime {runtime_id} is running a command in its backend; try again when it "
                "has finished"
            )

    async def settle(self, runtime_id: str) -> None:
        """Before an operation that captures or plans from a live runtime takes its slot:
        wait for the checkpoints its kernel still writes behind its cells (they are
        recorded through the slot, so inside it they would be refused). A runtime that is
        not live here, or runs a cell now (the operation refuses it, at once), has nothing
        to wait for; a failure is logged, and the operation goes on (it checks what it
        finds)."""
        session = await off_loop(self._store.get_session, runtime_id)
        if session is None or session.status in (
            SessionLifecycleStatus.PAUSED,
            SessionLifecycleStatus.CLOSED,
        ):
            return  # the operation itself says so
        try:
            await off_loop(self.ownership.claim, runtime_id)
            if await self._context.is_busy(session):
                return  # the call would wait behind the cell: the operation refuses instead
            await self._context.settle(session)
        except DittoError as error:
            _log.warning(
                "ditto: could not wait for the automatic checkpoints of runtime %s (%s)",
                runtime_id,
                error,
            )

    # ---- holds ---------------------------------------------------------------------------

    def hold(self, runtime_id: str, manifests: Iterable[str | None]) -> None:
        """Keep manifests from garbage collection in this process while `runtime_id`'s
        checkpoint is being taken and recorded (a write intent; `let_go` ends it)."""
        with self._held_lock:
            self._held.setdefault(runtime_id, set()).update(m for m in manifests if m)

    def let_go(self, runtime_id: str) -> None:
        """End the holds of `runtime_id`'s checkpoint (recorded, or abandoned)."""
        with self._held_lock:
            self._held.pop(runtime_id, None)

    def referenced(self, manifest_ids: Sequence[str]) -> set[str]:
        """Which of these manifests a checkpoint references, one being recorded holds, or a
        LangGraph value names."""
        with self._held_lock:
            held = set().union(*self._held.values()).intersection(manifest_ids)
        # LangGraph's values the kernel kept in the blob store (`langgraph_threads`) too.
        return (
            held
            | self._store.referenced_manifests(manifest_ids)
            | langgraph_manifests_named(self._store, manifest_ids)
        )

    # ---- state checks --------------------------------------------------------------------

    def session(self, runtime_id: str) -> SessionRecord:
        """The runtime's session record; RuntimeNotFound when there is none."""
        session = self._store.get_session(runtime_id)
        if session is None:
            raise RuntimeNotFound(f"no runtime with id {runtime_id!r}")
        return session

    def live_session(self, runtime_id: str) -> SessionRecord:
        """A session that can be operated on: not paused, not closed."""
        session = self.session(runtime_id)
        if session.status is SessionLifecycleStatus.CLOSED:
            raise RuntimeClosed(f"runtime {runtime_id} is closed")
        if session.status is SessionLifecycleStatus.PAUSED:
            raise RuntimePaused(f"runtime {runtime_id} is paused; resume it first")
        return session

    async def require_idle(self, session: SessionRecord) -> None:
        """SessionBusy while the runtime's context runs a cell."""
        if await self._context.is_busy(session):
            raise SessionBusy(
                f"runtime {session.session_id} is busy running code; try again when it is idle"
            )

    async def public(self, session: SessionRecord) -> RuntimeRecord:
        """The RuntimeRecord with a live status: busy while code or an operation runs."""
        record = session.to_runtime()
        if record.status is SessionLifecycleStatus.IDLE and (
            self.in_flight(session.session_id) or await self._context.is_busy(session)
        ):
            record = record.model_copy(update={"status": SessionLifecycleStatus.BUSY})
        return record
