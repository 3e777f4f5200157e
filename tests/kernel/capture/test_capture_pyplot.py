"""pyplot after restore, in real ipykernel kernels with MPLBACKEND=Agg (issue 14 sections 3-4).

A notebook that draws with the implicit pyplot API holds figures no variable does. After a
restore, pyplot holds exactly the checkpoint's figures under their numbers, with the same
current figure; figures opened since are closed; re-run cells draw into the same axes. A
checkpoint after a cell that changed nothing writes at most 4 KiB although the namespace
holds figures.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ditto_jupyter.core.models import SessionRecord
from ditto_jupyter.hosts.jupyter_client_host import JupyterClientHost
from ditto_jupyter.hosts.kernel_context_driver import KernelContextDriver

pytestmark = pytest.mark.slow
T = TypeVar("T")
KIB = 1024

DRAWING = [
    "import numpy as np\nimport matplotlib.pyplot as plt\nplt.plot([1, 2, 3])",
    "plt.figure(2)\nplt.hist(np.arange(10), bins=5)",
    "plt.figure(1)\nplt.title('first')",
]
#: pyplot's state as JSON: figure numbers, the current one, its title, lines and bar counts.
PYPLOT = (
    "{'nums': plt.get_fignums(), 'current': plt.gcf().number,"
    " 'title': plt.gca().get_title(),"
    " 'lines': {n: len(plt.figure(n).axes[0].lines) for n in plt.get_fignums()},"
    " 'bars': {n: len(plt.figure(n).axes[0].patches) for n in plt.get_fignums()},"
    " 'backend': __import__('matplotlib').get_backend().lower()}"
)


class Kernels:
    """An event loop, a host, the context capture and two kernels drawing with Agg."""

    def __init__(self, root: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.host = JupyterClientHost()
        self.context = KernelContextDriver(self.host, root / "blobs")
        self.workspace = root / "workspace"
        self.workspace.mkdir()
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("MPLBACKEND", "Agg")
            self.kernel = self.start("main")
            self.fresh = self.start("fresh")

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coroutine)

    def start(self, runtime_id: str) -> SessionRecord:
        session = SessionRecord(session_id=runtime_id, conversation_id="nb.ipynb", sender_id="t")
        handle = self.run(self.context.start(session, self.workspace))
        return session.model_copy(update={"handle_state": handle})

    def execute(self, session: SessionRecord, code: str) -> str:
        kernel_id = session.handle_state["kernel_id"]
        return self.run(self.host.execute(kernel_id, code))  # type: ignore[attr-defined]

    def pyplot(self, session: SessionRecord) -> dict[str, Any]:
        """pyplot's state in the kernel (the probe leaves the current figure as it was)."""
        probe = (
            f"_cur = plt.gcf().number\n_s = {PYPLOT}\nplt.figure(_cur)\n"
            "print(json.dumps(_s))\ndel _cur, _s"
        )
        state: dict[str, Any] = json.loads(self.execute(session, "import json\n" + probe))
        return state

    def close(self) -> None:
        self.run(self.host.shutdown_all())
        self.loop.close()


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernels]:
    kernels = Kernels(tmp_path_factory.mktemp("pyplot"))
    try:
        yield kernels
    finally:
        kernels.close()


def test_restore_brings_back_pyplot_figures_under_their_numbers(kernels: Kernels) -> None:
    k = kernels
    for cell in DRAWING:
        k.execute(k.kernel, cell)
    checkpointed = k.pyplot(k.kernel)
    assert checkpointed["backend"] == "agg"
    assert checkpointed["nums"] == [1, 2] and checkpointed["current"] == 1
    captured = k.run(k.context.capture(k.kernel))
    assert captured.unrestorable == []

    for _ in range(3):  # restores do not pile figures up
        k.execute(k.kernel, "plt.figure(3)\nplt.plot([0, 1])\nplt.figure(2)")
        assert k.run(k.context.restore(k.kernel, captured.manifest_id)) == []
        assert k.pyplot(k.kernel) == checkpointed

    # re-run cells draw into the checkpoint's axes
    k.execute(k.kernel, "plt.plot([4, 5, 6])")
    k.execute(k.kernel, DRAWING[1])
    after = k.pyplot(k.kernel)
    assert after["nums"] == [1, 2] and after["current"] == 2
    assert after["lines"] == {"1": 2, "2": 0} and after["bars"] == {"1": 0, "2": 10}

    # a new kernel (checkout, resume) gets the same figures, numbers and current figure
    assert k.run(k.context.restore(k.fresh, captured.manifest_id)) == []
    assert k.pyplot(k.fresh) == checkpointed


def test_a_checkpoint_after_a_cell_that_changed_nothing_writes_at_most_4_kib(
    kernels: Kernels,
) -> None:
    k = kernels
    k.execute(k.kernel, "import matplotlib.pyplot as plt\nplt.figure(4)")
    k.run(k.context.restore(k.kernel, None))  # the empty state has no figures open either
    probe = "print(__import__('matplotlib.pyplot', fromlist=['_']).get_fignums())"
    assert k.execute(k.kernel, probe).strip() == "[]"
    k.execute(
        k.kernel,
        "import numpy as np\nimport pandas as pd\nimport matplotlib.pyplot as plt\n"
        "arr = np.random.default_rng(0).random(300_000)\n"
        "frame = pd.DataFrame({'x': arr[:1000], 'y': np.arange(1000)})\n"
        "label = 'run'\nsizes = [1, 2, 3]\n"
        "fig, ax = plt.subplots()\nax.plot(arr[:50])\nplt.figure(7)\nplt.hist(arr, bins=20)",
    )
    first = k.run(k.context.capture(k.kernel))
    assert first.unrestorable == [] and first.bytes_written > 300_000
    for cell in ("frame.head()", "print(label)", "plt.get_fignums()"):
        k.execute(k.kernel, cell)
        again = k.run(k.context.capture(k.kernel))
        assert again.bytes_written <= 4 * KIB, (cell, again.bytes_written)
