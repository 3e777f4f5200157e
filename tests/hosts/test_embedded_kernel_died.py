"""A call into a kernel is bound to the kernel process it was sent to (embedded host).

SIGKILL the kernel mid-capture and let it be revived under the same id, as Jupyter's
restarter does: the capture ends with BackendError "kernel ... died", not after the call
timeout, and the runtime is not left busy. Real kernels, a real RuntimeService on SQLite.
The call timeout is short, so that without the binding the test fails in seconds, on
"did not answer within" instead of "died".
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.core.errors import BackendError
from ditto_jupyter.core.models import SessionLifecycleStatus
from ditto_jupyter.hosts.jupyter_client_host import JupyterClientHost
from ditto_jupyter.hosts.kernel_calls import PREPARE_KERNEL
from ditto_jupyter.hosts.kernel_channel import KernelDied
from ditto_jupyter.hosts.kernel_context_driver import KernelContextDriver
from ditto_jupyter.wiring import open_runtime_service
from tests.support.kernel_deaths import SLOW_TO_PICKLE, kill_and_revive, pid_written_to

pytestmark = pytest.mark.slow

#: Seconds a call may take here: short, so that a call that missed the death fails fast.
CALL_TIMEOUT_S = 20.0


def test_a_capture_ends_when_its_kernel_dies_even_if_it_is_revived(tmp_path: Path) -> None:
    async def scenario() -> None:
        host = JupyterClientHost(call_timeout=CALL_TIMEOUT_S)

        def kernels(blobs: BlobStore) -> KernelContextDriver:
            return KernelContextDriver(host, blobs.root, notebook_folder=lambda _: tmp_path)

        service = open_runtime_service(tmp_path / "data", context_factory=kernels)
        try:
            rid = (await service.create_runtime("slow.ipynb", "ana")).runtime_id
            kernel_id = service.session(rid).handle_state["kernel_id"]
            marker = tmp_path / "capturing.pid"
            await host.execute(kernel_id, SLOW_TO_PICKLE.format(marker=str(marker)))
            checkpoint = asyncio.ensure_future(service.checkpoint(rid, "doomed", None))
            pid = await pid_written_to(marker)
            await kill_and_revive(host.manager.get_kernel(kernel_id), pid)
            with pytest.raises(BackendError, match=rf"kernel {kernel_id} died") as died:
                await checkpoint
            assert isinstance(died.value, KernelDied)
            assert not service.has_operation_in_flight(rid)
            assert (await service.get_runtime(rid)).status is SessionLifecycleStatus.IDLE
            assert service.head_checkpoint(rid) is None  # nothing was recorded
            # The revived kernel (a new process, the same id) answers calls again.
            assert await host.call(kernel_id, PREPARE_KERNEL, {}) is True
        finally:
            service.close_store()
            await host.shutdown_all()

    asyncio.run(scenario())
