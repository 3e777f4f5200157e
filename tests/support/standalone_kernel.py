"""A real ipykernel with no server behind it: the magics run the in-process control on a
SQLite store in DITTO_DATA_DIR (as in plain IPython or nbval)."""

from __future__ import annotations

import os
from pathlib import Path

from jupyter_client.manager import KernelManager

from tests.support.kernel_cells import CellOutput, run_cell

#: A cell that closes the in-process control the magics built (its store and kernels).
SHUT_CONTROL = (
    "_ditto = get_ipython().magics_manager.registry['DittoMagics'].kernel_control.built\n"
    "_ditto is not None and _ditto.shutdown()"
)


class StandaloneKernel:
    """One kernel started in `cwd` with DITTO_DATA_DIR and no server's variables."""

    def __init__(self, data_dir: Path, cwd: Path) -> None:
        env = {**os.environ, "DITTO_DATA_DIR": str(data_dir)}
        for name in ("DITTO_SERVER_URL", "DITTO_TOKEN", "DITTO_RUNTIME_ID", "DITTO_RUNTIME_TOKEN"):
            env.pop(name, None)
        self.manager = KernelManager(kernel_name="python3")
        self.manager.start_kernel(env=env, cwd=str(cwd))
        self.client = self.manager.blocking_client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=120)

    def run(self, code: str) -> CellOutput:
        return run_cell(self.client, code)

    def stop(self) -> None:
        """Close the in-process control (a kernel still alive: `%pause` stops its own),
        then the kernel."""
        if self.manager.is_alive():
            self.run(SHUT_CONTROL)
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)
