"""`%checkpoint` follows the capture before it, as the server's checkpoint does (issue 41
section 1: one entry and one base for every capture path).

Before, `%checkpoint` (and `%pause`, `%diff live`, the in-process control) captured the
whole namespace every time: the issue measured 3.3 s for a second `%checkpoint` of a
namespace nothing had changed, against 51 ms through the REST route. Now every path enters
`capture_following` and follows the one base of the namespace, whichever path took it.
What a capture pickled is counted inside the kernel (`last_timing()["pickles"]`), read by
a kernel call as hosts make it (no code the journal must follow), never timed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from jupyter_client.manager import KernelManager

from ditto_jupyter.hosts.kernel_channel import call_expression, call_result
from tests.support.kernel_cells import CellOutput, run_cell

pytestmark = pytest.mark.slow

#: 300 values of the kinds notebooks hold.
NOTEBOOK = """
import numpy as np
for i in range(100):
    globals()[f"number_{i}"] = i * 1.5
    globals()[f"items_{i}"] = [i, str(i), {"k": i}]
    globals()[f"array_{i}"] = np.arange(i + 10)
del i
"""
LAST_TIMING = "ditto_jupyter.kernel.capture:last_timing"


class Kernel:
    """A real ipykernel with the magics and no server (the in-process control)."""

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
        out = run_cell(self.client, code)
        assert out.error is None, out.error
        return out

    def pickles(self) -> int:
        """How many pickles the last capture made, asked as a host asks (a kernel call of
        ditto's own: no code the journal must follow runs)."""
        expression = call_expression(LAST_TIMING, {})
        reply = self.client.execute(
            "",
            silent=True,
            store_history=False,
            user_expressions={"result": expression},
            reply=True,
        )
        timing = call_result(reply, LAST_TIMING, "test")
        assert isinstance(timing, dict)
        return int(timing["pickles"])

    def stop(self) -> None:
        self.run(
            "_ditto = get_ipython().magics_manager.registry['DittoMagics'].kernel_control.built\n"
            "_ditto is not None and _ditto.shutdown()"
        )
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    started = Kernel(tmp_path / "data", tmp_path)
    started.run("%load_ext ditto_jupyter")
    try:
        yield started
    finally:
        started.stop()


def checkpoint(kernel: Kernel, name: str) -> str:
    """`%checkpoint NAME` in a cell of its own; the id it printed."""
    out = kernel.run(f"%checkpoint {name}")
    found = re.search(r"checkpoint ([0-9a-f]+) '", out.stdout)
    assert found, (out.stdout, out.stderr)
    return found.group(1)


def test_a_second_checkpoint_magic_pickles_only_what_changed(kernel: Kernel) -> None:
    kernel.run(NOTEBOOK)
    checkpoint(kernel, "first")
    assert kernel.pickles() >= 300  # the first capture is whole
    checkpoint(kernel, "again")  # nothing ran since
    assert kernel.pickles() == 0
    kernel.run("small = 2")
    checkpoint(kernel, "after-small")
    assert kernel.pickles() == 1  # `small` alone
    kernel.run("%restore first")
    restored = kernel.run("print(number_3, 'small' in globals())").stdout.split()
    assert restored == ["4.5", "False"]


def test_a_cell_that_ran_code_before_its_magic_is_captured_whole(kernel: Kernel) -> None:
    """The journal sees a cell once it ends: a `%checkpoint` inside a cell that changed a
    variable first cannot follow the capture before, or it would miss that change."""
    kernel.run(NOTEBOOK)
    checkpoint(kernel, "first")
    out = kernel.run("number_5 = 'changed'\n%checkpoint inside")
    assert "checkpoint" in out.stdout, out.stderr
    assert kernel.pickles() >= 300
    kernel.run("number_5 = 'later'")
    kernel.run("%restore inside")
    assert kernel.run("print(number_5)").stdout.strip() == "changed"


def test_the_magic_follows_what_autocheckpoint_took(kernel: Kernel) -> None:
    """One base: `%autocheckpoint`'s last capture is the one `%checkpoint` follows."""
    kernel.run(NOTEBOOK)
    kernel.run("%autocheckpoint on")
    kernel.run("x = 1")  # checkpointed after the cell
    checkpoint(kernel, "named")
    assert kernel.pickles() == 0
    kernel.run("%autocheckpoint off")
