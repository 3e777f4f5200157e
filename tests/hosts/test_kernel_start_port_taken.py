"""A kernel start lost to a port taken meanwhile is started again on new ports (embedded
host); a kernel that dies for its own reasons still gets its clear error.

jupyter_client chooses a kernel's ports, lets them go, and the kernel binds them later:
another process can take one in between, and the kernel dies before it answers
(`ZMQError: Address already in use`). Here the first port of the first kernel is held on
purpose (`tests.fakes.taken_port`); the kernel is real and dies for real. Nothing of a
failed start may stay: no kernel in the manager, no connection file, no process.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import psutil
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.multikernelmanager import AsyncMultiKernelManager

from ditto_jupyter.core.errors import BackendError
from ditto_jupyter.hosts.jupyter_client_host import JupyterClientHost
from ditto_jupyter.hosts.kernel_start import START_ATTEMPTS
from tests.fakes.taken_port import first_port_taken
from tests.support.dying_kernel import write_dying_kernel_spec

pytestmark = pytest.mark.slow  # real kernels, three starts in the second test

AGAIN = "starting it again on new ports"


def host_in(folder: Path, kernels: Path | None = None) -> JupyterClientHost:
    """A host whose connection files go to `folder` (and kernel specs come from `kernels`)."""
    options: dict[str, object] = {"connection_dir": str(folder)}
    if kernels is not None:
        options["kernel_spec_manager"] = KernelSpecManager(kernel_dirs=[str(kernels)])
    return JupyterClientHost(AsyncMultiKernelManager(**options))


def child_pids() -> set[int]:
    """Every process this one started and has not reaped, zombies included."""
    return {child.pid for child in psutil.Process().children(recursive=True)}


def restarts_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if AGAIN in r.getMessage()]


def test_a_kernel_whose_port_was_taken_starts_again_on_new_ports_and_answers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="ditto_jupyter.hosts.kernel_start")
    connections = tmp_path / "connections"
    connections.mkdir()

    async def scenario() -> None:
        host = host_in(connections)
        before = child_pids()
        try:
            with first_port_taken() as taken:
                kernel_id = await host.start_kernel(cwd=tmp_path)
            assert taken.handed_out == 1  # the first start was given the held port
            assert await host.execute(kernel_id, "print(6 * 7)") == "42\n"
            assert host.manager.list_kernel_ids() == [kernel_id]
            (connection,) = connections.iterdir()  # the dead start's file is gone
            assert taken.port not in json.loads(connection.read_text()).values()
            kernel = host.manager.get_kernel(kernel_id)
            assert child_pids() - before == {kernel.provisioner.pid}  # the dead one reaped
            (logged,) = restarts_logged(caplog)
            assert kernel_id in logged and str(taken.port) in logged
        finally:
            await host.shutdown_all()

    asyncio.run(scenario())


def test_a_kernel_that_always_dies_gets_the_clear_error_after_its_starts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An import error at start: each start dies, the error says so, nothing is left."""
    caplog.set_level(logging.WARNING, logger="ditto_jupyter.hosts.kernel_start")
    dying = write_dying_kernel_spec(tmp_path / "kernels")
    connections = tmp_path / "connections"
    connections.mkdir()

    async def scenario() -> None:
        host = host_in(connections, tmp_path / "kernels")
        before = child_pids()
        try:
            with pytest.raises(BackendError) as failed:
                await host.start_kernel(dying, cwd=tmp_path)
            message = str(failed.value)
            assert "did not start: it died before it answered" in message
            assert f"in each of its {START_ATTEMPTS} starts" in message
            assert len(restarts_logged(caplog)) == START_ATTEMPTS - 1
            assert host.manager.list_kernel_ids() == []
            assert list(connections.iterdir()) == []
            assert child_pids() - before == set()
        finally:
            await host.shutdown_all()

    asyncio.run(scenario())
