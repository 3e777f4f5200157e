"""Every hook the kernel side puts in is taken out by `%unload_ext ditto_jupyter` (issue 41
section 1: the patches sat in four modules and were never removed).

On a real ipykernel: the hooks go in as a user meets them (load the extension, automatic
checkpoints on, a figure captured, a pause's fence), and after `%unload_ext` IPython's
events, its input transformers, the shell's `user_expressions`, the kernel's `comm_msg`
handler, matplotlib's `Gcf` accessors and the figure's `stale_callback` are the objects they
were before the extension was loaded. Loading it again works as the first time.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ditto_jupyter.hosts.kernel_calls import FENCE
from ditto_jupyter.hosts.kernel_channel import call_expression, call_result
from tests.support.kernel_cells import CellOutput
from tests.support.standalone_kernel import StandaloneKernel

pytestmark = pytest.mark.slow

#: What the kernel looks like before the extension: each hookable object, by identity.
BEFORE = """
import matplotlib
matplotlib.use("agg")
import matplotlib.pyplot as plt
from matplotlib._pylab_helpers import Gcf
_ip = get_ipython()

def _looks():
    return {
        "get_active": id(Gcf.__dict__["get_active"]),
        "get_fig_manager": id(Gcf.__dict__["get_fig_manager"]),
        "marked": hasattr(Gcf, "_ditto_noted"),
        "user_expressions": id(_ip.user_expressions.__func__)
        if hasattr(_ip.user_expressions, "__func__") else id(_ip.user_expressions),
        "comm_msg": id(_ip.kernel.shell_handlers["comm_msg"]),
        "cleanup": [id(t) for t in _ip.input_transformers_cleanup],
        "events": {k: [id(c) for c in v] for k, v in _ip.events.callbacks.items()},
    }
"""

#: A figure made before the extension (pyplot hooks IPython's events at its first figure).
FIGURE = """
fig = plt.figure()
plt.plot([1, 2, 3])
_stale_before = id(fig.stale_callback)
_before = _looks()
"""


class Kernel(StandaloneKernel):
    def cell(self, code: str) -> CellOutput:
        """Run a cell that must succeed."""
        out = self.run(code)
        assert out.error is None, out.error
        return out

    def changed(self) -> list[str]:
        """Which hookable objects differ from before the extension was loaded."""
        out = self.cell(
            "_now = _looks()\n"
            "print(sorted(k for k in _now if _now[k] != _before[k])"
            " + (['stale_callback'] if id(fig.stale_callback) != _stale_before else []))"
        )
        found: list[str] = eval(out.stdout.strip())  # a printed list of names
        return found


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    started = Kernel(tmp_path / "data", tmp_path)
    try:
        yield started
    finally:
        started.stop()


def fence(kernel: Kernel) -> None:
    """A pause's fence, as the server sets it (a kernel call)."""
    reply = kernel.client.execute(
        "",
        silent=True,
        store_history=False,
        user_expressions={"result": call_expression(FENCE, {})},
        reply=True,
    )
    assert call_result(reply, FENCE, "test") is True


def test_unload_takes_every_hook_out_and_load_puts_them_back(kernel: Kernel) -> None:
    kernel.cell(BEFORE)
    kernel.cell(FIGURE)
    kernel.cell("%load_ext ditto_jupyter")
    kernel.cell("%autocheckpoint on")
    kernel.cell("fig.axes[0].set_title('one')")
    out = kernel.cell("%checkpoint first")
    assert "checkpoint" in out.stdout, out.stderr
    fence(kernel)
    hooked = kernel.changed()
    for hook in ("get_active", "user_expressions", "comm_msg", "cleanup", "events"):
        assert hook in hooked, hooked
    assert "stale_callback" in hooked, hooked

    kernel.cell("%unload_ext ditto_jupyter")
    assert kernel.changed() == []
    missing = kernel.client.execute_interactive("%checkpoint", timeout=120)
    assert missing["content"]["status"] == "error"  # the magics went with it
    kernel.cell("fig.axes[0].set_title('two')")  # pyplot's own callback still runs

    kernel.cell("%load_ext ditto_jupyter")
    out = kernel.cell("%checkpoint second")
    assert "checkpoint" in out.stdout, out.stderr
    assert "get_active" in kernel.changed()  # hooked again on the capture
    kernel.cell("x = 41")
    kernel.cell("fig.axes[0].set_title('three')")
    kernel.cell("%restore second")
    assert kernel.cell("print('x' in globals(), fig.axes[0].get_title())").stdout.split() == [
        "False",
        "two",
    ]
