"""Kernels start light: loading the magics imports no control plane (issue 41 section 2).

Every kernel a Jupyter server with the extension starts loads the magics
(`--ext=ditto_jupyter` on ipykernel's command line, the server's environment set), and
every notebook a user opens waits for it. Here real ipykernel kernels are started the way
the server starts them: loading the extension there imports neither SQLAlchemy nor the
store nor any module of `ditto_jupyter.control`, and the magics are there. A magic that
asks the server still imports none of it. Without a server (plain IPython, nbval) the
magics run the in-process RuntimeService, imported when a magic first needs it.

(`benchmarks/bench_kernel_start.py` times the start against a plain ipykernel.)
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from jupyter_client.manager import KernelManager

from tests.support.kernel_cells import run_cell, value

#: What a cell asks of the kernel: which of the heavy modules it has imported.
HEAVY = (
    "sorted(m for m in __import__('sys').modules if m == 'sqlalchemy' "
    "or m.startswith('ditto_jupyter.control'))"
)
#: The magics the extension registers, as IPython finds them.
MAGICS = "[get_ipython().find_magic(n) is not None for n in ('checkpoint', 'undo', 'budget')]"


class ExtensionKernel:
    """A real ipykernel started with the extension on its command line, as a server does."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.manager = KernelManager(kernel_name="python3")
        self.manager.start_kernel(env=env, cwd=str(cwd), extra_arguments=["--ext=ditto_jupyter"])
        self.client = self.manager.blocking_client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=120)

    def stop(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


def environment(tmp_path: Path, **ditto: str) -> dict[str, str]:
    """The test's environment without any DITTO_* it inherited, plus `ditto`."""
    env = {name: text for name, text in os.environ.items() if not name.startswith("DITTO_")}
    return {**env, "DITTO_DATA_DIR": str(tmp_path / "data"), **ditto}


@pytest.fixture
def server_kernel(tmp_path: Path) -> Iterator[ExtensionKernel]:
    """A kernel with a server's environment; the server it names does not answer."""
    env = environment(
        tmp_path,
        DITTO_SERVER_URL="http://127.0.0.1:9/",
        DITTO_TOKEN="token",
        DITTO_RUNTIME_ID="0f2e4a1c-runtime",
        DITTO_RUNTIME_TOKEN="runtime-token",
    )
    kernel = ExtensionKernel(env, tmp_path)
    yield kernel
    kernel.stop()


@pytest.fixture
def plain_kernel(tmp_path: Path) -> Iterator[ExtensionKernel]:
    """A kernel no server started (as under nbval)."""
    kernel = ExtensionKernel(environment(tmp_path), tmp_path)
    yield kernel
    run_cell(
        kernel.client,
        "_ditto = get_ipython().magics_manager.registry['DittoMagics'].kernel_control.built\n"
        "_ditto is not None and _ditto.shutdown()",
    )
    kernel.stop()


def test_a_servers_kernel_loads_the_magics_without_the_control_plane(
    server_kernel: ExtensionKernel,
) -> None:
    client = server_kernel.client
    assert value(client, MAGICS) == [True, True, True]
    assert value(client, HEAVY) == []
    # a magic that calls the server (which does not answer) says so in one line, and
    # choosing the server's control imported no control plane either
    out = run_cell(client, "%checkpoints")
    assert out.error is None
    assert out.stderr.startswith("ditto: "), out.stderr
    assert value(client, HEAVY) == []


def test_without_a_server_the_in_process_service_comes_when_first_needed(
    plain_kernel: ExtensionKernel,
) -> None:
    client = plain_kernel.client
    assert value(client, MAGICS) == [True, True, True]
    assert value(client, HEAVY) == []
    out = run_cell(client, "rows = %runtimes\nprint(len(rows.rows))")
    assert out.error is None, out.error
    assert out.stdout.strip() == "1"  # this kernel's own runtime, registered in-process
    loaded = value(client, HEAVY)
    assert "ditto_jupyter.control.service" in loaded
    assert "sqlalchemy" in loaded
