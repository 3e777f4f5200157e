"""`start_answering`: start a kernel, wait for its first answer, start it again when it
died first (a port it was given may have been taken).

jupyter_client chooses a local kernel's five TCP ports by binding port 0 and letting it go
(`LocalPortCache`); the kernel binds them once it has started. Another process can take
one in between: another Jupyter server or its kernel, a kernel of a test running beside,
any outgoing connection. The kernel then exits on `ZMQError: Address already in use`
before it answers `kernel_info`. Both kernel hosts start their kernels here.

From outside, a port clash looks like any other early death: the kernel's stderr goes to
the server's console (not ours to take), its exit status is 1 as for any failed start,
and looking at its ports by binding them would hold them for a moment, which is the race
being fixed. So every death before the first answer counts: the dead kernel is shut down
(removed from its manager, its connection file deleted, its ports given back to the cache)
and started again under the same id, on ports chosen afresh, `START_ATTEMPTS` starts in
all. A kernel whose shell port answers as another kind of socket (`KernelUnreachable`:
another kernel's iopub, say) is in the same case before it has even tried to bind: it is
shut down and started again too. A kernel that dies for its own reasons (a bad kernel
spec, an import error) dies each time and gets its last start's error, which says how many
starts it had. A kernel that lives but does not answer in time is shut down and not
started again.

Jupyter's restarter is held off until the kernel has answered: it would revive a kernel
that died starting on the same ports (`restart_kernel(newports=True)` keeps the ports the
cache gave), racing this module's shutdown, and it would tell its restart callbacks that
a kernel was restarted when none had ever run.
"""

from __future__ import annotations

import logging
from typing import Any

from ditto_jupyter.core.errors import BackendError
from ditto_jupyter.hosts.kernel_channel import (
    KernelChannel,
    KernelUnreachable,
    own_client,
    running_process,
)

log = logging.getLogger(__name__)

#: Starts of one kernel, in all, before its death before answering is taken as its own.
START_ATTEMPTS = 3


def channel_to(manager: Any, kernel_id: str) -> KernelChannel:
    """A channel (not open yet) to a kernel of a jupyter_client multi-kernel manager.

    Its requests are bound to the process the kernel runs; a kernel removed from the
    manager runs none.
    """
    kernel: Any = manager.get_kernel(kernel_id)

    async def process() -> object | None:
        if kernel_id not in manager:
            return None
        return await running_process(kernel)

    return KernelChannel(own_client(kernel), kernel_id, process=process)


async def start_answering(
    manager: Any,
    kwargs: dict[str, Any],
    *,
    kernel_id: str | None = None,
    attempts: int = START_ATTEMPTS,
) -> tuple[str, KernelChannel]:
    """Start a kernel with `manager.start_kernel(**kwargs)`; its id and its open channel.

    `manager` is a jupyter_client `AsyncMultiKernelManager` (jupyter-server's
    `MappingKernelManager` is one); `kernel_id` chooses the id (None: the first start's).
    BackendError when the kernel could not be launched, did not answer, or died before
    answering in each of `attempts` starts; nothing of a failed start is left behind.
    """
    kernel_name = kwargs.get("kernel_name", "python3")
    attempt = 1
    while True:
        kernel_id = await _launch(manager, kernel_name, kwargs, kernel_id)
        kernel: Any = manager.get_kernel(kernel_id)
        kernel.stop_restarter()
        channel = channel_to(manager, kernel_id)
        try:
            await channel.start()
        except BackendError as error:
            # Its shell port held by another kind of socket: it dies once it tries to bind.
            unreachable = isinstance(error, KernelUnreachable)
            lost = unreachable or await running_process(kernel) is None
            ports = list(kernel.ports)
            await _discard(manager, kernel_id)
            if not lost or kernel_id in manager:  # alive and silent, or not removed
                raise
            if attempt >= attempts:
                starts = f"{attempts} starts" if attempts > 1 else "1 start"
                # One sentence whichever way it was seen to die (its process gone before
                # the first request, or jupyter_client's "Kernel died before replying").
                why = (
                    str(error)
                    if unreachable
                    else f"kernel {kernel_id} did not start: it died before it answered"
                )
                raise BackendError(f"{why} (in each of its {starts})") from error
            log.warning(
                "kernel %s %s (start %d of %d; one of its ports %s may have been taken by "
                "another process): starting it again on new ports",
                kernel_id,
                "could not be reached" if unreachable else "died before it answered",
                attempt,
                attempts,
                ports,
            )
            attempt += 1
            continue
        except BaseException:
            await _discard(manager, kernel_id)
            raise
        kernel.start_restarter()
        return kernel_id, channel


async def _launch(
    manager: Any, kernel_name: str, kwargs: dict[str, Any], kernel_id: str | None
) -> str:
    """Launch one kernel process; its id (BackendError when it could not be launched)."""
    chosen = {**kwargs, "kernel_id": kernel_id} if kernel_id is not None else kwargs
    try:
        return str(await manager.start_kernel(**chosen))
    except Exception as error:
        raise BackendError(f"could not start a {kernel_name} kernel: {error}") from error


async def _discard(manager: Any, kernel_id: str) -> None:
    """Shut down a kernel that failed to start: out of its manager, no process, no
    connection file, its ports given back (a failure to do so is logged)."""
    try:
        await manager.shutdown_kernel(kernel_id, now=True)
    except Exception as error:
        log.warning("kernel %s that failed to start did not shut down: %s", kernel_id, error)
