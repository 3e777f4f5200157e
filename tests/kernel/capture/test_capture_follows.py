"""A checkpoint costs what changed (issue 25), in a real kernel through the server's path.

`KernelContextDriver.capture` calls `kernel_capture` in an ipykernel kernel; the kernel's
change journal says what the cells since the last capture can have changed, and pyplot's
open figures are pods kept as stored while matplotlib marks them unchanged. What a capture
pickled is counted inside the kernel (`last_timing()["pickles"]`: pickler dumps), not timed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.core.models import ContextCapture, SessionRecord
from ditto_jupyter.hosts.jupyter_client_host import JupyterClientHost
from ditto_jupyter.hosts.kernel_context_driver import KernelContextDriver

pytestmark = pytest.mark.slow
T = TypeVar("T")
LAST_TIMING = "ditto_jupyter.kernel.capture:last_timing"
#: bench_notebooks' probe of the live state (benchmarks/state_fingerprint.py).
FINGERPRINT = "benchmarks.state_fingerprint:snapshot"

#: 200 values of the kinds notebooks hold, and 20 open figures (MPLBACKEND=Agg).
NOTEBOOK = """
import numpy as np
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

class Point:
    def __init__(self, x):
        self.x = x

for i in range(50):
    globals()[f"number_{i}"] = i * 1.5
    globals()[f"items_{i}"] = [i, str(i), {"k": i}]
    globals()[f"array_{i}"] = np.arange(i + 10)
    globals()[f"point_{i}"] = Point(i)
figures = []
for i in range(20):
    fig, ax = plt.subplots()
    ax.plot(np.arange(10) * i, label=f"line {i}")
    ax.set_title(f"figure {i}")
    figures.append(fig)
last_figure = fig
del i, fig, ax
"""


#: A cell that waits until the thread `waiter` is blocked: its run counts (Linux's
#: /proc/self/task/<id>/schedstat) are the same twice in a row.
SETTLE = """
import time
def _counts():
    with open(f"/proc/self/task/{waiter.native_id}/schedstat") as file:
        return file.read()
_last = _counts()
while True:
    time.sleep(0.02)
    _now = _counts()
    if _now == _last:
        break
    _last = _now
"""


class Kernel:
    """One kernel with its capture, on the module's own event loop."""

    def __init__(self, root: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.host = JupyterClientHost()
        self.blob_root = root / "blobs"
        self.context = KernelContextDriver(
            self.host, self.blob_root, notebook_folder=lambda _: root
        )
        session = SessionRecord(session_id="follows", conversation_id="nb.ipynb", sender_id="t")
        handle = self.run(self.context.start(session, root))
        self.session = session.model_copy(update={"handle_state": handle})
        self.kernel_id = str(handle["kernel_id"])

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coroutine)

    def cell(self, code: str) -> str:
        return self.run(self.host.execute(self.kernel_id, code))

    def capture(self) -> tuple[ContextCapture, int]:
        """A checkpoint's capture, and how many pickles it made in the kernel."""
        captured = self.run(self.context.capture(self.session))
        timing = self.run(self.host.call(self.kernel_id, LAST_TIMING, {}))
        assert isinstance(timing, dict)
        return captured, int(timing["pickles"])

    def close(self) -> None:
        self.run(self.host.shutdown_all())
        self.loop.close()


@pytest.fixture
def kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Kernel]:
    monkeypatch.setenv("MPLBACKEND", "Agg")
    started = Kernel(tmp_path)
    try:
        yield started
    finally:
        started.close()


def test_a_no_op_checkpoint_of_200_values_and_20_open_figures_pickles_none(
    kernel: Kernel,
) -> None:
    kernel.cell(NOTEBOOK)
    assert kernel.cell("print(len(plt.get_fignums()))").strip() == "20"
    first, pickled = kernel.capture()
    assert pickled >= 200 + 20  # the first capture is whole: every value, every figure
    again, pickled = kernel.capture()  # nothing ran since
    assert pickled == 0
    assert again.manifest_id == first.manifest_id and again.bytes_written == 0
    kernel.cell("last_figure")  # shows a figure: its repr changes nothing kept
    shown, pickled = kernel.capture()
    assert pickled == 0
    assert shown.manifest_id == first.manifest_id


def test_a_cell_that_changes_one_figure_pickles_that_figure_and_what_refers_to_it(
    kernel: Kernel,
) -> None:
    kernel.cell(NOTEBOOK)
    kernel.capture()
    kernel.cell("number_7 = -1.0")
    _, pickled = kernel.capture()
    assert pickled == 1  # `number_7` alone: no figure, no other value
    kernel.cell("plt.title('the current figure, drawn on without a name')")
    _, pickled = kernel.capture()
    # the current figure's pod, and what refers into it: pyplot's list and `figures`
    assert 1 <= pickled <= 4
    kernel.cell("last_figure.axes[0].lines[0].set_ydata(range(10, 0, -1))")
    _, pickled = kernel.capture()
    assert 1 <= pickled <= 4  # that figure's pod and what refers into it, no other figure


def test_what_no_cell_showed_makes_the_next_capture_whole(kernel: Kernel) -> None:
    kernel.cell(NOTEBOOK)
    kernel.capture()
    kernel.run(kernel.host.call(kernel.kernel_id, "json:dumps", {"obj": 1}))  # not ditto's
    _, pickled = kernel.capture()
    assert pickled >= 200 + 20
    kernel.cell("import threading, time")
    kernel.cell("ticks = [0]")
    kernel.cell("def tick():\n    while True:\n        ticks[0] += 1\n        time.sleep(0.01)\n")
    kernel.cell("worker = threading.Thread(target=tick, daemon=True)")
    kernel.cell("worker.start()")
    kernel.capture()  # whole: a thread started since the capture before, and ran
    kernel.cell("time.sleep(0.1)")  # changes nothing, while the thread ticks 10 times
    _, pickled = kernel.capture()
    assert pickled >= 200 + 20  # the thread ran since the capture before: anything


def test_a_thread_that_has_not_run_since_the_last_capture_changes_nothing(
    kernel: Kernel,
) -> None:
    """joblib's loky executor keeps threads alive after a cell with `n_jobs`, blocked until
    the next parallel call: once the capture after the cell that started them is taken,
    a thread the OS has not scheduled since ran no code, so a cell that changes nothing
    pickles nothing; the moment it runs again, the capture is whole again."""
    kernel.cell(NOTEBOOK)
    kernel.cell("import threading")
    kernel.cell("wake, woken = threading.Event(), []")
    kernel.cell(
        "def wait_then_change():\n"
        "    while True:\n"
        "        wake.wait()\n"
        "        wake.clear()\n"
        "        woken.append(1)\n"
    )
    kernel.cell("waiter = threading.Thread(target=wait_then_change, daemon=True)")
    kernel.cell("waiter.start()")
    kernel.cell(SETTLE)  # until the OS's counts of it stop moving: blocked on `wake`
    _, pickled = kernel.capture()
    assert pickled >= 200 + 20  # a thread started since: whole
    kernel.cell("number_1")
    _, pickled = kernel.capture()
    assert pickled == 0  # it sat blocked on its event: it changed nothing
    kernel.cell("number_2")
    _, pickled = kernel.capture()
    assert pickled == 0
    # the thread runs code no cell shows: it changes `woken` behind the cells' back
    kernel.cell("number_3; wake.set()")
    kernel.cell("import time; time.sleep(0.2); number_4")
    _, pickled = kernel.capture()
    assert pickled >= 200 + 20


def test_a_functions_parameters_and_locals_are_not_the_globals_of_the_same_name(
    kernel: Kernel,
) -> None:
    kernel.cell(NOTEBOOK)
    kernel.capture()  # the journal follows the cells from here
    # a function whose parameters and locals share the names of big globals; it uses one
    # global of its own, `number_0`: only that name can change whenever it runs
    kernel.cell(
        "def scaled(array_0, items_0):\n"
        "    point_0 = [v * 2 for v in array_0]\n"
        "    return point_0, items_0, number_0\n"
    )
    kernel.capture()
    kernel.cell("number_7 = -1.0")
    _, pickled = kernel.capture()
    assert pickled == 1  # `number_7`: the function did not run
    kernel.cell("result = scaled([1.0], [2.0])")
    _, pickled = kernel.capture()
    # `result`, `scaled` and `number_0` the function read: not `array_0`, `items_0` or
    # `point_0`, its parameters and locals
    assert pickled == 3


def test_a_function_called_back_by_a_library_still_recaptures_the_globals_it_changes(
    kernel: Kernel,
) -> None:
    kernel.cell(NOTEBOOK)
    kernel.capture()  # the journal follows the cells from here: it reads the definitions
    kernel.cell("seen = []\ndef shown(v):\n    width = len(seen)\n    seen.append(width)\n")
    kernel.cell("np.set_printoptions(formatter={'int': lambda v: shown(v) or str(v)})")
    first, _ = kernel.capture()
    kernel.cell("text = str(np.arange(3))")  # numpy calls `shown`, which no cell names here
    after, pickled = kernel.capture()
    assert pickled >= 2  # `text`, and `seen` the function appended to
    assert after.manifest_id != first.manifest_id
    assert kernel.cell("print(len(seen))").strip() == "3"


def test_showing_a_list_of_library_values_pickles_nothing(kernel: Kernel) -> None:
    kernel.cell(NOTEBOOK)
    kernel.cell("stats = [{'med': array_3, 'fliers': (number_3, 'x')}, items_4]")
    first, _ = kernel.capture()
    kernel.cell("stats")  # shows the list: numpy's and the builtins' display, nothing else
    shown, pickled = kernel.capture()
    assert pickled == 0
    assert shown.manifest_id == first.manifest_id


def test_showing_a_list_of_the_notebooks_own_objects_is_captured_again(
    kernel: Kernel,
) -> None:
    kernel.cell(NOTEBOOK)
    kernel.cell(
        "log = []\nclass Loud:\n    def __repr__(self):\n        log.append(1)\n"
        "        return 'loud'\nshown = [Loud()]\ndel Loud\n"
    )
    first, _ = kernel.capture()
    kernel.cell("shown")  # its element's display is the notebook's code: it changes `log`
    after, pickled = kernel.capture()
    assert pickled >= 1
    assert after.manifest_id != first.manifest_id


#: A list of 100 arrays (numpy shows each) and one element the notebook's code shows, which
#: appends to `log`: an element of the notebook's own class, or one array that a printer
#: of the notebook's, registered for that object (by id), shows.
_SHOWN_BY_THE_NOTEBOOK = {
    "own class": (
        "log = []\nclass Loud:\n    def __repr__(self):\n        log.append(1)\n"
        "        return 'loud'\nshown = [np.arange(i) for i in range(100)] + [Loud()]\n"
        "del Loud\n"
    ),
    "own printer": (
        "log = []\nshown = [np.arange(i) for i in range(100)]\n"
        "def loud(value, p, cycle):\n    log.append(1)\n    p.text('loud')\n"
        "get_ipython().display_formatter.formatters['text/plain']"
        ".singleton_printers[id(shown[50])] = loud\n"
    ),
}


@pytest.mark.parametrize("setup", _SHOWN_BY_THE_NOTEBOOK.values(), ids=_SHOWN_BY_THE_NOTEBOOK)
def test_one_element_shown_by_the_notebooks_code_among_many_alike_is_captured_again(
    kernel: Kernel, setup: str
) -> None:
    """The display of a container's elements is vouched for once per class, but an element
    the notebook's code shows still makes the next capture pickle what it changed."""
    kernel.cell(NOTEBOOK)
    kernel.cell(setup)
    first, _ = kernel.capture()
    kernel.cell("shown")
    after, pickled = kernel.capture()
    assert pickled >= 1
    assert after.manifest_id != first.manifest_id
    assert kernel.cell("print(len(log))").strip() == "1"


def test_the_benchmarks_fingerprint_does_not_make_the_next_checkpoint_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MPLBACKEND", "Agg")
    checkout = str(Path(__file__).resolve().parents[3])  # benchmarks/ is not installed
    monkeypatch.setenv("PYTHONPATH", checkout)
    kernel = Kernel(tmp_path)
    try:
        kernel.cell(NOTEBOOK)
        first, _ = kernel.capture()
        probe = kernel.run(kernel.host.call(kernel.kernel_id, FINGERPRINT, {}))
        assert isinstance(probe, dict) and "number_3" in probe["values"]
        again, pickled = kernel.capture()
        assert pickled == 0  # the probe only read: nothing to pickle again
        assert again.manifest_id == first.manifest_id
    finally:
        kernel.close()


def test_figures_that_share_a_colormap_keep_their_pods(kernel: Kernel) -> None:
    """Every colormap of one name shares matplotlib's colour table (a module's list of
    lists, or the segment data of the registry's colormap it was copied from): that library
    data, held by two figures, does not cost the figures their pods,
    so a cell that changes nothing pickles nothing, and a cell that changes one figure
    pickles that figure's pod and what refers into it, not the other figure."""
    kernel.cell(NOTEBOOK)
    kernel.cell(
        "colored = []\n"
        "for i in range(2):\n"
        "    fig, ax = plt.subplots()\n"
        "    ax.scatter(np.arange(10), np.arange(10), c=np.arange(10) * (i + 1))\n"
        "    ax.imshow(np.arange(16).reshape(4, 4), cmap='viridis')\n"
        "    ax.pcolormesh(np.arange(16).reshape(4, 4), cmap='seismic_r')\n"
        "    colored.append(fig)\n"
    )
    kernel.capture()
    kernel.cell("number_3")
    _, pickled = kernel.capture()
    assert pickled == 0
    kernel.cell("fig.axes[0].set_title('changed')")  # the second figure
    _, pickled = kernel.capture()
    # its pod and the streams referring into it: pyplot's list, `colored`, `fig`, `ax`
    assert 1 <= pickled <= 5


def test_a_histograms_bar_container_is_referred_to_in_its_figures_pod(kernel: Kernel) -> None:
    """`n, bins, patches = ax.hist(...)` keeps matplotlib's `BarContainer` (a tuple with
    attributes of its own) in `patches` and in its axes: it is one object of the figure's
    pod that `patches` refers to, so the figures keep their pods (a cell that changes
    nothing pickles nothing) and a restore gives back one container, not two."""
    kernel.cell(NOTEBOOK)
    kernel.cell(
        "fig, ax = plt.subplots()\nn, bins, patches = ax.hist(np.arange(100) % 7, bins=5)\n"
    )
    first, _ = kernel.capture()
    kernel.cell("number_3")
    _, pickled = kernel.capture()
    assert pickled == 0
    kernel.cell("patches = None; ax = None")
    kernel.run(kernel.context.restore(kernel.session, first.manifest_id))
    assert kernel.cell("print(patches is ax.containers[0], len(patches))").split() == ["True", "5"]


def test_figures_sharing_a_notebook_list_are_plain_values_and_the_others_stay_pods(
    kernel: Kernel,
) -> None:
    """Two colormaps made from one notebook list, drawn in two figures: that list is the
    notebook's, shared across the figures' edges, so those two figures are pickled as plain
    values grouped with it, and only them: every other figure stays a pod. A cell that
    changes nothing pickles nothing; a cell that draws on another figure pickles that
    figure's pod, not the shared ones; a restore gives back one list for both colormaps."""
    kernel.cell(NOTEBOOK)
    kernel.cell(
        "from matplotlib.colors import ListedColormap\n"
        "colors = ['#ffffcc', '#a1dab4', '#41b6c4']\n"
        "grid = np.arange(9).reshape(3, 3)\n"
        "fig_a, ax_a = plt.subplots()\n"
        "ax_a.imshow(grid, cmap=ListedColormap(colors))\n"
        "fig_b, ax_b = plt.subplots()\n"
        "ax_b.imshow(grid, cmap=ListedColormap(colors))\n"
        "plt.figure(1)\n"  # the current figure: a cell may draw on it unnamed
    )
    first, _ = kernel.capture()
    kernel.cell("number_3")
    _, pickled = kernel.capture()
    assert pickled == 0
    kernel.cell("last_figure.axes[0].set_title('changed')")
    _, pickled = kernel.capture()
    # that figure's pod and the current one's, and what refers into them (pyplot's list,
    # with the two figures of the shared list inside it, `figures`, `last_figure`), and
    # one look at what those two figures refer to: none of the other 18 figures
    assert 1 <= pickled <= 7
    kernel.cell("colors = None; ax_a = ax_b = None")
    kernel.run(kernel.context.restore(kernel.session, first.manifest_id))
    same = "ax_a.images[0].cmap.colors is colors is ax_b.images[0].cmap.colors"
    assert kernel.cell(f"print({same}, len(plt.get_fignums()))").split() == ["True", "22"]


def test_only_the_figures_pyplot_hands_to_a_cell_count_as_reached(kernel: Kernel) -> None:
    """A cell that computes on arrays does not reach pyplot's current figure: its capture
    pickles what the cell named, not that figure's pod. A cell that writes into the current
    figure in place through pyplot (no setter, no name of a variable) is captured: pyplot
    handed it the figure."""
    kernel.cell(NOTEBOOK)  # `last_figure` is pyplot's current figure
    kernel.capture()
    kernel.cell("total = float(array_3.sum())")
    _, pickled = kernel.capture()
    assert pickled == 2  # `total` and `array_3`, the cell's names: no figure
    before, _ = kernel.capture()
    kernel.cell("plt.gca().lines[0].get_ydata()[0] = 99")
    after, pickled = kernel.capture()
    assert pickled >= 1 and after.manifest_id != before.manifest_id
    kernel.run(kernel.context.restore(kernel.session, before.manifest_id))
    assert kernel.cell("print(last_figure.axes[0].lines[0].get_ydata()[0])").strip() == "0"
    kernel.run(kernel.context.restore(kernel.session, after.manifest_id))
    assert kernel.cell("print(last_figure.axes[0].lines[0].get_ydata()[0])").strip() == "99"


def test_names_bound_anew_before_any_read_do_not_reach_their_old_figures(
    kernel: Kernel,
) -> None:
    """`fig, ax = plt.subplots()` in a cell that never read the old `fig` and `ax`: nothing
    reached the figure they held through them, so its pod is kept. A cell that wrote into
    the old figure through `ax` first, then bound `ax` anew, is captured with that write."""
    kernel.cell(NOTEBOOK)
    kernel.cell("fig, ax = plt.subplots()\nax.plot(np.arange(10))")
    kernel.capture()
    kernel.cell("fig, ax = plt.subplots()\nax.plot([3, 2, 1])")
    _, pickled = kernel.capture()
    # the new figure's pod, pyplot's list, `fig`, `ax`: not the figure they held before
    assert pickled <= 4
    kernel.cell("old_figure = fig")
    before, _ = kernel.capture()
    kernel.cell("ax.lines[0].get_ydata()[0] = 7\nfig, ax = plt.subplots()")
    after, pickled = kernel.capture()
    kernel.run(kernel.context.restore(kernel.session, before.manifest_id))
    assert kernel.cell("print(old_figure.axes[0].lines[0].get_ydata()[0])").strip() == "3"
    kernel.run(kernel.context.restore(kernel.session, after.manifest_id))
    assert kernel.cell("print(old_figure.axes[0].lines[0].get_ydata()[0])").strip() == "7"


def test_a_capture_of_an_unchanged_state_whose_manifest_was_collected_stores_it_again(
    kernel: Kernel,
) -> None:
    """A capture that says what the last one said writes nothing (its manifest is there);
    when that manifest was collected meanwhile, it is stored again, never named unstored."""
    kernel.cell(NOTEBOOK)
    first, _ = kernel.capture()
    again, _ = kernel.capture()
    assert again.manifest_id == first.manifest_id and again.bytes_written == 0
    blobs = BlobStore(kernel.blob_root)
    assert blobs.delete_manifest(first.manifest_id)
    assert not blobs.has_manifest(first.manifest_id)
    stored, _ = kernel.capture()
    assert stored.manifest_id == first.manifest_id and stored.bytes_written > 0
    assert blobs.has_manifest(first.manifest_id)


def test_an_object_two_figures_share_is_followed_when_the_library_writes_into_it(
    kernel: Kernel,
) -> None:
    """matplotlib hands every square marker and every bar the same cached unit rectangle
    (`Path.unit_rectangle()`), and `bar` writes into it: a cell that draws bars on a new
    figure changes the older figures' markers without touching those figures. The first
    time a figure shares an object of another's pod, that pod is pickled again; from then
    on the shared object is digested at each capture, and a digest that moved has its pod
    pickled again. A restore gives back what was live."""
    kernel.cell("import matplotlib.pyplot as plt")
    kernel.capture()
    kernel.cell("fig_1 = plt.figure()\nplt.plot([1, 2, 3], [1, 4, 9], 'bs')")
    kernel.capture()
    kernel.cell("fig_2 = plt.figure()\nplt.plot([3, 2, 1], 'gs')")  # shares it from now on
    kernel.capture()
    kernel.cell("fig_3 = plt.figure()\nplt.bar(['a', 'b'], [1, 2])")  # writes into it
    after, _ = kernel.capture()
    steps = "[f.axes[0].lines[0]._marker._path._interpolation_steps for f in (fig_1, fig_2)]"
    live = kernel.cell(f"print({steps})").strip()
    assert live == "[100, 100]"  # what bar wrote into the shared path
    kernel.cell("fig_1 = fig_2 = fig_3 = None\nplt.close('all')")
    kernel.run(kernel.context.restore(kernel.session, after.manifest_id))
    assert kernel.cell(f"print({steps})").strip() == live


def test_a_helper_function_counts_only_in_the_cells_that_call_it(kernel: Kernel) -> None:
    """A plotting helper uses a global colormap that its figures hold: a cell that does not
    call the helper cannot reach the colormap through it, so the figure is not pickled
    again; a cell that calls it counts what it uses."""
    kernel.cell(NOTEBOOK)
    kernel.capture()  # the journal follows the cells from here: it sees the def
    kernel.cell(
        "from matplotlib.colors import ListedColormap\n"
        "cmap_cv = ListedColormap(['red', 'blue'])\n"
        "def draw(axes):\n"
        "    axes.imshow(np.arange(4).reshape(2, 2), cmap=cmap_cv)\n"
    )
    kernel.cell("fig, ax = plt.subplots()\ndraw(ax)")
    kernel.capture()
    kernel.cell("total = float(array_3.sum())")
    _, pickled = kernel.capture()
    assert pickled == 2  # `total` and `array_3`: neither `cmap_cv` nor the figure
    kernel.cell("draw(ax)")
    _, pickled = kernel.capture()
    assert pickled >= 3  # the figure drawn on, `cmap_cv` the helper used, what refers in


#: Figures as the inline backend leaves them: drawn, closed in pyplot, held by variables.
#: Each draws circle markers and ticks, whose paths matplotlib caches on its classes and
#: every figure shares.
INLINE_FIGURE = """
fig_{n}, ax_{n} = plt.subplots()
ax_{n}.plot(np.arange(10) * {n}, "o-")
fig_{n}.canvas.draw()
plt.close("all")
"""


def test_closed_figures_sharing_matplotlib_cached_paths_are_captured_apart(
    kernel: Kernel,
) -> None:
    """Two figures that refer to the same cached unit path are not one alias group: a cell
    that makes a new figure pickles that figure, not every figure a variable still holds;
    each comes back whole and draws."""
    kernel.cell("import numpy as np\nimport matplotlib.pyplot as plt")
    for n in range(3):
        kernel.cell(INLINE_FIGURE.format(n=n))
    before, _ = kernel.capture()
    kernel.cell(INLINE_FIGURE.format(n=3))
    _, pickled = kernel.capture()
    assert pickled <= 2  # `fig_3` and `ax_3` (one group): none of the three before
    kernel.cell("ax_1.lines[0].get_ydata()[0] = 42")
    changed, pickled = kernel.capture()
    assert pickled <= 2  # `fig_1` and `ax_1`
    kernel.run(kernel.context.restore(kernel.session, before.manifest_id))
    shown = kernel.cell(
        "print('fig_3' in globals(), ax_1.lines[0].get_ydata()[0], ax_2.lines[0].get_ydata()[1])"
    )
    assert shown.strip() == "False 0 2"
    kernel.run(kernel.context.restore(kernel.session, changed.manifest_id))
    shown = kernel.cell(
        "for f in (fig_0, fig_1, fig_2, fig_3): f.canvas.draw()\n"
        "print(ax_1.lines[0].get_ydata()[0], ax_3.lines[0].get_ydata()[1], ax_0.figure is fig_0)"
    )
    assert shown.strip() == "42 3 True"


def test_a_closed_figure_no_variable_holds_is_freed(kernel: Kernel) -> None:
    """The change journal remembers which figures pyplot handed to each cell, but does not
    keep them alive: a figure closed and let go is freed as in a kernel without ditto (not
    kept, with its 100,000s of objects, for the journal's 4,096 cells)."""
    kernel.cell("import gc, weakref\nimport numpy as np\nimport matplotlib.pyplot as plt")
    kernel.capture()
    kernel.cell("fig, ax = plt.subplots()\nax.plot(np.arange(10))\nplt.gca().set_title('t')\nNone")
    kernel.capture()  # the journal's entry for that cell names the figure
    kernel.cell("gone = weakref.ref(fig)\nplt.close(fig)\ndel fig, ax")
    kernel.capture()
    assert kernel.cell("gc.collect()\nprint(gone() is None)").strip() == "True"
    kernel.cell("fig, ax = plt.subplots()\nax.plot([1, 2])\nkept = weakref.ref(fig)\nNone")
    kernel.capture()
    assert kernel.cell("gc.collect()\nprint(kept() is fig)").strip() == "True"
