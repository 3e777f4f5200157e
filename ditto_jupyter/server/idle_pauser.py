"""The idle pauser: runtimes whose kernel sat idle for `pause_idle_after` seconds pause.

Every `interval` seconds the pauser looks at each of the server's kernels as jupyter-server
tracks it (`list_kernel_ids`; `execution_state` and `last_activity`, which the kernel
manager updates on every tracked IOPub message: a cell, its output, our own captures) and
finds its runtime with one indexed store lookup (`live_session_with_kernel`). A kernel
that is idle and has had no activity for `pause_idle_after` seconds is paused through
`RuntimeSessions.pause` (a checkpoint, then the kernel stops), with reason `idle` in the
pause event. Never touched: a kernel that is busy or starting, a kernel of no runtime, and
a runtime with an operation in flight (a shell command included). A cell that arrives
while the pause runs gives it up (`kernel.pause_fence`): the pause answers SessionBusy and
is tried again once the kernel has been idle long enough. A pause that fails for another
reason is logged and not retried until the kernel shows activity again; the kernel keeps
running.

jupyter-server's own idle culling (`MappingKernelManager.cull_idle_timeout`) would shut a
runtime's kernel down and lose its variables. While the pauser is on, it registers a rule
with the one culling policy (`culling`): the culler leaves runtimes' kernels to the pauser.
Kernels that belong to no runtime, and dead kernels, are culled as before.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from tornado.ioloop import PeriodicCallback

from ditto_jupyter.control.off_loop import off_loop
from ditto_jupyter.core.errors import SessionBusy

if TYPE_CHECKING:
    from ditto_jupyter.server.culling import CullingPolicy
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
        paused: list[str] = []
        for kernel_id in list(self.kernel_manager.list_kernel_ids()):
            runtime = await off_loop(self.sessions.service.live_session_with_kernel, kernel_id)
            if runtime is None:  # a pooled kernel, or one of no runtime
                continue
            runtime_id = runtime.session_id
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
        except SessionBusy as busy:  # it started running code, or an operation began
            self.log.info(
                "ditto_jupyter: idle pause of runtime %s given up, tried again later: %s",
                runtime_id,
                busy,
            )
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
        """Whether the kernel is a live runtime's (one indexed store lookup)."""
        return self.sessions.service.live_session_with_kernel(kernel_id) is not None

    def defer_culling(self, policy: CullingPolicy) -> None:
        """Make jupyter-server's culler leave runtimes' kernels to this pauser."""
        policy.spare("a runtime's kernel: the idle pauser pauses it", self.owns_kernel)
