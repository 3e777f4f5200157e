"""RuntimeService with real ipykernel kernels: checkpoint, checkout, pause and resume."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psutil
import pytest

from ditto_jupyter.control.service import RuntimeService
from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.core.errors import SessionBusy
from ditto_jupyter.core.models import SessionLifecycleStatus
from ditto_jupyter.hosts.jupyter_client_host import JupyterClientHost
from ditto_jupyter.hosts.kernel_context_driver import KernelContextDriver
from ditto_jupyter.wiring import open_runtime_service


def kernel_service(
    data_dir: Path, host: JupyterClientHost, notebook_folder: Path | None = None
) -> RuntimeService:
    def factory(blobs: BlobStore) -> KernelContextDriver:
        folder = (lambda session: notebook_folder) if notebook_folder is not None else None
        return KernelContextDriver(host, blobs.root, notebook_folder=folder)

    return open_runtime_service(data_dir, context_factory=factory)


async def show(host: JupyterClientHost, kernel_id: str, expression: str) -> str:
    return (await host.execute(kernel_id, f"print(repr({expression}))")).strip()


def kernel_pid(host: JupyterClientHost, kernel_id: str) -> int:
    manager = host.manager.get_kernel(kernel_id)
    return int(manager.provisioner.process.pid)  # type: ignore[union-attr]


def process_ended(process: psutil.Process) -> bool:
    """Gone, or a zombie (exited, not yet reaped). One object throughout: a pid checked
    with pid_exists() can be reaped before Process(pid) reads it (NoSuchProcess), or be
    reused by another process, which is_running() tells apart."""
    try:
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:  # psutil.ZombieProcess is one too
        return True


@pytest.mark.slow  # a parent, a checked-out child and a resumed kernel, end to end
def test_kernel_runtime_life_cycle(tmp_path: Path) -> None:
    async def scenario() -> None:
        host = JupyterClientHost()
        folder = tmp_path / "notebooks"
        folder.mkdir()
        service = kernel_service(tmp_path / "data", host, folder)
        try:
            rid = (await service.create_runtime("analysis.ipynb", "ana")).runtime_id
            kernel = service.session(rid).handle_state["kernel_id"]
            workspace = service.workspace_path(rid)
            assert workspace is not None
            # the kernel runs in the notebook's folder and is told where its workspace is
            where = "(__import__('os').getcwd(), str(__import__('ditto_jupyter').workspace()))"
            assert await show(host, kernel, where) == repr((str(folder), str(workspace)))
            await host.execute(
                kernel,
                "import numpy as np, os\n"
                "arr = np.arange(300_000, dtype='float64')\n"
                "shared = [1, 2]\nalias = shared\n"
                "def double(v): return 2 * v\n"
                "data = os.path.join(os.environ['DITTO_WORKSPACE'], 'data.txt')\n"
                "open(data, 'w').write('from the parent')\n",
            )
            first = await service.checkpoint(rid, "base")

            # checkout: a new kernel with the variables and a copy of the workspace
            child = await service.checkout(first.checkpoint_id, conversation_id="branch.ipynb")
            assert child.kernel_id and child.kernel_id != kernel
            assert await show(host, child.kernel_id, "float(arr.sum())") == repr(
                float(sum(range(300_000)))
            )
            assert await show(host, child.kernel_id, "(alias is shared, double(21))") == (
                "(True, 42)"
            )
            child_data = "open(__import__('ditto_jupyter').workspace() / 'data.txt').read()"
            assert await show(host, child.kernel_id, child_data) == repr("from the parent")
            assert await show(host, child.kernel_id, "__import__('os').getcwd()") == repr(
                str(folder)
            )
            await host.execute(child.kernel_id, "shared.append(3)")
            assert await show(host, kernel, "shared") == "[1, 2]"

            # a busy kernel refuses a checkpoint
            running = asyncio.create_task(host.execute(kernel, "import time; time.sleep(3)"))
            for _ in range(200):
                if await host.is_busy(kernel):
                    break
                await asyncio.sleep(0.02)
            with pytest.raises(SessionBusy):
                await service.checkpoint(rid)
            await running

            # pause: the kernel process ends; resume: new kernel, same id, same variables
            await host.execute(kernel, "after_base = 'kept by pause'")
            process = psutil.Process(kernel_pid(host, kernel))
            paused = await service.pause(rid)
            assert paused.runtime.status is SessionLifecycleStatus.PAUSED
            for _ in range(100):
                if process_ended(process):
                    break
                await asyncio.sleep(0.05)
            assert process_ended(process)
            resumed = await service.resume(rid)
            assert resumed.runtime.runtime_id == rid and resumed.kernel_id
            assert resumed.kernel_id != kernel
            assert await show(host, resumed.kernel_id, "(after_base, shared, double(2))") == (
                "('kept by pause', [1, 2], 4)"
            )
            assert await show(host, resumed.kernel_id, child_data) == repr("from the parent")
            # close shuts the kernel down
            await service.close(child.runtime.runtime_id)
            assert child.kernel_id not in host.manager.list_kernel_ids()
        finally:
            await host.shutdown_all()
            service.close_store()

    asyncio.run(scenario())


def test_restore_in_place_through_the_service(tmp_path: Path) -> None:
    async def scenario() -> None:
        host = JupyterClientHost()
        service = kernel_service(tmp_path, host)
        try:
            rid = (await service.create_runtime("nb.ipynb")).runtime_id
            kernel = service.session(rid).handle_state["kernel_id"]
            await host.execute(kernel, "a = b = {'k': 1}")
            cp = (await service.checkpoint(rid)).checkpoint_id
            await host.execute(kernel, "a['k'] = 2\nlater = 1")
            _, lost = await service.restore(rid, cp)
            assert lost == []
            assert await show(host, kernel, "(a, a is b, 'later' in globals())") == (
                "({'k': 1}, True, False)"
            )
            assert service.store.get_head(rid) == cp
        finally:
            await host.shutdown_all()
            service.close_store()

    asyncio.run(scenario())
