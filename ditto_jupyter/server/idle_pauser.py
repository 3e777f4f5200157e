"""The idle pauser: runtimes whose kernel sat idle for `pause_idle_after` seconds pause.

A runtime is a Jupyter session with a kernel. Every `interval` seconds the pauser looks at
each one's kernel as jupyter-server tracks it (`execution_state`, `last_activity`, which
the kernel manager updates on every tracked IOPub message: a cell, its output, our own
captures). A kernel that is idle and has had no activity for `pause_idle_after` seconds is
paused through `RuntimeSessions.pause` (a checkpoint, then the kernel stops), with reason
`idle` in the pause event. Never touched: a kernel that is busy or starting, and a runtime
with a control operation in flight. A pause that fails for another reason is logged and
not retried until the kernel shows activity again; the kernel keeps running.

jupyter-server's own idle culling (`MappingKernelManager.cull_idle_timeout`) would shut a
runtime's kernel down and lose its variables. While the pauser is on, `defer_culling`
wraps the kernel manager's `cull_kernel_if_idle` (on the instance) so that the culler
skips kernels of runtimes: their fate is the pauser's. Kernels that belong to no runtime,
and dead kernels, are culled as before.
"""

from __future__ import annotations

import functools
import logging
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from jupyter_server.utils import ensure_async
from tornado.ioloop import PeriodicCallback

from ditto_jupyter.core.errors import SessionBusy

if TYPE_CHECKING:
    from ditto_jupyter.server.sessions import RuntimeSessions

#: The checkpoint name of an idle pause (a pause asked for over REST is named `pause`).
IDLE_PAUSE_NAME = "idle-pause"


def check_interval(pause_idle_after: float) -> float:
    """How often to look: a quarter of the idle time, between half a second and a minute."""
    return min(max(pause_idle_after / 4.0, 0.5), 60.0)


class IdlePauser:
    """Pauses runtimes whose kernels have been idle too long; keeps the culler off them."""

    def __init__(
        self,
        sessions: RuntimeSessions,
        kernel_manager: Any,
        pause_idle_after: float,
        *,
        sender: str,
        interval: float | None = None,
        log: logging.Logger | None = None,
    ) -> None:
        self.sessions = sessions
        self.kernel_manager: Any = kernel_manager  # jupyter_server is untyped
        self.pause_idle_after = pause_idle_after
        self.sender = sender
        self.interval = interval if interval is not None else check_interval(pause_idle_after)
        self.log = log or logging.getLogger(__name__)
        self._callback: PeriodicCallback | None = None
        #: kernel id -> its last_activity when a pause of it failed (retried after new activity)
        self._failed: dict[str, datetime] = {}

    # ---- the periodic check ----------------------------------------------------------------

    def start(self) -> None:
        """Check every `interval` seconds on the server's IOLoop (a check never overlaps)."""
        if self._callback is None:
            self._callback = PeriodicCallback(self._check_logged, self.interval * 1000.0)
            self._callback.start()

    def stop(self) -> None:
        if self._callback is not None:
            self._callback.stop()
            self._callback = None

    async def _check_logged(self) -> None:
        try:
            await self.check_once()
        except Exception:  # one bad check must not end the timer
            self.log.exception("ditto_jupyter: idle pause check failed")

    async def check_once(self) -> list[str]:
        """Pause every runtime idle for `pause_idle_after` seconds; the ids it paused."""
        models = await ensure_async(self.sessions.session_manager.list_sessions())
        paused: list[str] = []
        for model in models:
            runtime_id = str(model.get("id") or "")
            kernel_id = str((model.get("kernel") or {}).get("id") or "")
            if not runtime_id or not kernel_id:
                continue
            idle_seconds = self.idle_seconds(runtime_id, kernel_id)
            if idle_seconds is None or idle_seconds < self.pause_idle_after:
                continue
            if await self._pause(runtime_id, kernel_id, idle_seconds):
                paused.append(runtime_id)
        return paused

    def idle_seconds(self, runtime_id: str, kernel_id: str) -> float | None:
        """Seconds the runtime's kernel has been idle, or None when it must not be touched.

        None for a kernel that is gone, busy, starting or without tracked activity, for a
        runtime with an operation in flight, and for a kernel whose pause failed with no
        activity since.
        """
        if kernel_id not in self.kernel_manager:
            return None
        kernel = self.kernel_manager.get_kernel(kernel_id)
        if getattr(kernel, "execution_state", None) != "idle":
            return None
        last_activity = getattr(kernel, "last_activity", None)
        if not isinstance(last_activity, datetime):
            return None
        if self.sessions.service.has_operation_in_flight(runtime_id):
            return None
        if self._failed.get(kernel_id) == last_activity:
            return None
        return (datetime.now(timezone.utc) - last_activity).total_seconds()

    async def _pause(self, runtime_id: str, kernel_id: str, idle_seconds: float) -> bool:
        try:
            await self.sessions.pause(
                runtime_id,
                IDLE_PAUSE_NAME,
                {"idle_pause": {"idle_seconds": round(idle_seconds, 1)}},
                self.sender,
                reason="idle",
            )
        except SessionBusy:  # it started running code, or an operation began: next time
            return False
        except Exception as error:  # DittoError or worse: leave the kernel be, say why
            if kernel_id in self.kernel_manager:
                kernel = self.kernel_manager.get_kernel(kernel_id)
                self._failed[kernel_id] = kernel.last_activity
            self.log.warning(
                "ditto_jupyter: could not pause idle runtime %s (%s); its kernel keeps running",
                runtime_id,
                error,
            )
            return False
        self._failed.pop(kernel_id, None)
        self.log.info(
            "ditto_jupyter: paused runtime %s after %.0f s idle", runtime_id, idle_seconds
        )
        return True

    # ---- jupyter-server's culler -------------------------------------------------------------

    def owns_kernel(self, kernel_id: str) -> bool:
        """Whether the kernel is a runtime's: a Jupyter session's, or a live runtime's handle."""
        cursor = self.sessions.session_manager.cursor
        row = cursor.execute("SELECT 1 FROM session WHERE kernel_id=?", (kernel_id,)).fetchone()
        if row is not None:
            return True
        return any(
            session.handle_state.get("kernel_id") == kernel_id
            and session.status.value not in ("paused", "closed")
            for session in self.sessions.service.sessions()
        )

    def defer_culling(self) -> None:
        """Make jupyter-server's culler leave runtimes' kernels to this pauser (once)."""
        manager = self.kernel_manager
        if getattr(manager, "_ditto_culling_deferred", False):
            return
        original = manager.cull_kernel_if_idle

        @functools.wraps(original)
        async def cull_kernel_if_idle(kernel_id: str) -> None:
            kernel = manager.get_kernel(kernel_id) if kernel_id in manager else None
            dead = getattr(kernel, "execution_state", None) == "dead"
            if kernel is not None and not dead and self.owns_kernel(kernel_id):
                return  # a runtime's kernel: paused by the idle pauser, never culled
            await ensure_async(original(kernel_id))

        manager.cull_kernel_if_idle = cull_kernel_if_idle
        manager._ditto_culling_deferred = True
