"""A kernel the server cannot reach gives an error; it never freezes the server.

Under load a kernel's ports are chosen by the kernel manager but bound by the kernel
seconds later; in between the OS may hand one to another process (another kernel's iopub
PUB socket, say). The kernel then dies at start (address in use), and the DEALER that
ditto connected to its shell port meets a socket type it cannot talk to: libzmq drops
the pipe. jupyter_client's `Session.send` sends through a blocking shadow of the asyncio
socket, so the next `kernel_info` request waited forever for a pipe, on the event loop
thread: the whole server froze and the dead kernel was never reaped (`<defunct>`).

The kernels are real ipykernels that start slowly (as under load), under the real
Jupyter server of pytest-jupyter; real PUB sockets hold their shell ports. Whether libzmq
drops the pipe is a race it wins about three times in four, so three kernels are tried
at once: before the fix, at least one froze the loop nearly every run.

Two ways in: a kernel someone else started (JupyterLab: the channel opens on the first
call) gives an error; a kernel ditto starts (`ServerKernelHost.start_kernel`) meets the
taken port during its start, and is started again on new ports
(`ditto_jupyter.hosts.kernel_start`): it answers.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
import zmq

from ditto_jupyter.core.errors import BackendError
from ditto_jupyter.hosts.kernel_calls import PREPARE_KERNEL
from ditto_jupyter.server.app import DittoJupyterApp
from ditto_jupyter.server.server_kernel_host import ServerKernelHost
from tests.fakes.taken_port import first_ports_taken

pytestmark = pytest.mark.slow  # real kernels under a real Jupyter server

#: Runs ipykernel after a pause, the way a kernel starts on a loaded machine.
SLOW_START = (
    "import runpy, sys, time; time.sleep(5); "
    "sys.argv = ['ipykernel_launcher', '-f', sys.argv[1]]; "
    "runpy.run_module('ipykernel_launcher', run_name='__main__')"
)


@pytest.fixture
def slow_kernel_name(jp_data_dir: Path) -> str:
    """A kernel spec whose real ipykernel binds its ports only after a few seconds."""
    folder = jp_data_dir / "kernels" / "slow-python3"
    folder.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-c", SLOW_START, "{connection_file}"],
        "display_name": "Python 3 (slow start)",
        "language": "python",
    }
    (folder / "kernel.json").write_text(json.dumps(spec))
    return "slow-python3"


@contextmanager
def port_taken(address: str) -> Iterator[None]:
    """A PUB socket bound at `address`, as another kernel's iopub would be."""
    context = zmq.Context()
    socket = context.socket(zmq.PUB)
    try:
        socket.bind(address)
        yield
    finally:
        socket.close(linger=0)
        context.term()


async def call_error(host: ServerKernelHost, kernel_id: str) -> str:
    """The BackendError of a call into the kernel (it must fail, not hang)."""
    with pytest.raises(BackendError) as error:
        await host.call(kernel_id, PREPARE_KERNEL, {"workspace": None})
    return str(error.value)


@pytest.mark.timeout(120)  # before the fix the loop froze here: fail instead of hanging
async def test_kernels_whose_shell_port_was_taken_give_errors_not_a_frozen_server(
    ditto_app: DittoJupyterApp, slow_kernel_name: str
) -> None:
    host = ditto_app.host
    assert host is not None
    # started as JupyterLab starts them: the channel opens on the first call
    kernel_ids = [
        await host.kernel_manager.start_kernel(kernel_name=slow_kernel_name) for _ in range(3)
    ]
    try:
        with ExitStack() as stack:
            for kernel_id in kernel_ids:
                kernel = host.kernel_manager.get_kernel(kernel_id)
                stack.enter_context(port_taken(f"tcp://{kernel.ip}:{kernel.shell_port}"))
                assert await kernel.is_alive()  # still starting: alive, not listening
            errors = await asyncio.gather(*(call_error(host, k) for k in kernel_ids))
        for kernel_id, error in zip(kernel_ids, errors, strict=True):
            assert error.startswith(f"kernel {kernel_id} "), error
            assert "unreachable" in error or "died" in error, error
            assert kernel_id not in host._channels  # no half-open channel is kept
    finally:
        for kernel_id in kernel_ids:
            await host.shutdown_kernel(kernel_id)


@pytest.mark.timeout(120)  # the loop must not freeze during the start either
async def test_kernels_started_on_a_shell_port_taken_start_again_and_answer(
    ditto_app: DittoJupyterApp, slow_kernel_name: str
) -> None:
    host = ditto_app.host
    assert host is not None
    with first_ports_taken(3, socket_type=zmq.PUB) as taken:
        # every start ends before the sockets go: a failed one must not leave the others
        results = await asyncio.gather(
            *(host.start_kernel(slow_kernel_name) for _ in range(3)), return_exceptions=True
        )
    kernel_ids = [result for result in results if isinstance(result, str)]
    try:
        assert [str(r) for r in results if not isinstance(r, str)] == []
        assert taken.handed_out == 3  # each first start was given a port a PUB holds
        for kernel_id in kernel_ids:
            ports = host.kernel_manager.get_kernel(kernel_id).ports
            assert not set(ports) & set(taken.ports)
            assert await host.call(kernel_id, PREPARE_KERNEL, {"workspace": None}) is True
    finally:
        for kernel_id in kernel_ids:
            await host.shutdown_kernel(kernel_id)
