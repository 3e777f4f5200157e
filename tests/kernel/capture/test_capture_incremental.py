"""Incremental capture (issue 12, `%autocheckpoint`): after each cell, a capture that pickles
only what the cell can have reached says exactly what a whole capture says, and restores to
the same values; and it really leaves the rest alone.

Plain Python: namespaces are dicts run with `exec`, cells as the notebook would run them.
"""

from __future__ import annotations

import pickle
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest

from benchmarks.bench_autocheckpoint import MIXED_CELLS
from benchmarks.bench_kernel import CELLS as KISHU_CELLS
from ditto_jupyter.core.blobs import BlobError, BlobStore
from ditto_jupyter.kernel.capture import restore_namespace
from ditto_jupyter.kernel.capture.capturing import snapshot_namespace
from ditto_jupyter.kernel.capture.cell_effects import CellEffects
from ditto_jupyter.kernel.capture.chunks import LiveBufferChanged, forget_chunks
from ditto_jupyter.kernel.capture.incremental import CaptureBase
from ditto_jupyter.kernel.capture.journal import current_figure
from ditto_jupyter.kernel.capture.library_data import LIBRARY

ALIASING_CELLS = [
    "a = [1, 2]\nb = {'list': a}\nc = 'text'",
    "a.append(3)",  # b changes through its alias: b's group is recaptured with a
    "e = b['list']",  # a new name reaching a kept group's object
    "del b",
    "f = np.zeros(1000)\ng = f[10:20]",  # a view shares its base
    "g[0] = 7.0",
    "def bump():\n    f[1] += 1\n",
    "bump()",  # a notebook function changes a global the cell never names
    "class Box:\n    def __init__(self):\n        self.items = []\n    def add(self, v):\n"
    "        self.items.append(v)\n        c_box.append(v)\n",
    "c_box = []\nbox = Box()",
    "box.add(5)",
    "h = (a, 'x')",  # a tuple holding a list is identity-bearing through it
    "a.clear()",
    "c = c + '!'",
    "k = None",
]


@pytest.fixture
def blobs(tmp_path: Path) -> BlobStore:
    forget_chunks()  # the process's chunk memo knows other tests' stores
    return BlobStore(tmp_path / "blobs", durable=False)


#: Values holding an object a library module holds (numpy's global random generator): the
#: library changes it though no cell names the value (scipy's distributions hold it too).
LIBRARY_CELLS = [
    "from numpy.random import mtrand\nrs = mtrand._rand\nholder = {'rng': rs, 'n': 1}",
    "np.random.seed(3)",  # names numpy only: `rs` and `holder` changed all the same
    "draws = np.random.rand(4)",
    "total = 1 + 1",  # nothing drew since: both kept
    "np.random.rand()",
]

#: Notebook code a library runs on a cell's behalf (numpy's print formatter): the globals
#: that code names change though the cell names neither them nor the function; its
#: parameters and locals are no globals (`width`, `v` exist as variables too).
CALLBACK_CELLS = [
    "seen = []\nwidth = 'a global'\nv = [0]",
    "def shown(v):\n    width = len(seen)\n    seen.append(width)\n    return str(v)\n",
    "np.set_printoptions(formatter={'int': lambda v: shown(v)})",
    "text = str(np.arange(3))",
    "callbacks = [lambda: seen.append(k) for k in range(2)]",
    "callbacks[1]()",
    "np.set_printoptions(formatter=None)",
]

FIGURE_CELLS = [
    "import matplotlib.pyplot as plt\nfig, (ax, other) = plt.subplots(1, 2)",
    "line, = ax.plot([1, 2, 3])",
    "plt.figure(2)\nplt.hist(np.arange(20), bins=4)",  # a figure only pyplot holds
    "total = 1 + 1",  # touches no figure: every pod is kept
    "plt.title('drawn on the current figure')",  # pyplot's current figure, no name
    "fig",  # shown, not changed
    "line.set_ydata([3, 2, 1])",  # a setter: figure_watch sees it
    "ax.lines[0].get_ydata()[0] = 9",  # written in place: the journal names `ax`
    "plt.gcf().texts.append(plt.gcf().text(0.1, 0.1, 'hi'))",  # via pyplot's current figure
    "axs = np.array([ax, other], dtype=object)",
    "plt.figure(3)\nplt.plot([0, 1])\nplt.figure(1)",
    "texts = fig.texts",  # a list a pod holds: this capture gives up pods
    "del texts",
    "plt.close(2)",
    "other.set_xlim(0, 5)",
]


def walk(cells: list[str], blobs: BlobStore, setup: str = "") -> list[tuple[bytes, bytes, int]]:
    """Run the cells; after each, the incremental and the whole capture's signatures and
    how many components the incremental one pickled (the figures the journal would say
    pyplot made current around the cell are passed as reached, as the journal does)."""
    namespace: dict[str, object] = {"__name__": "__main__", "np": np}
    exec(setup, namespace)
    effects = CellEffects()
    base: CaptureBase | None = snapshot_namespace(namespace, blobs).base
    seen = []
    for cell in cells:
        code = textwrap.dedent(cell)
        reached = [current_figure()]
        exec(code, namespace)
        reached.append(current_figure())
        touched = effects.touched_by(code, namespace)
        incremental = snapshot_namespace(
            namespace,
            blobs,
            base=base,
            touched=touched,
            figures_reached=[f for f in reached if f is not None],
            defer=True,
        )
        whole = snapshot_namespace(namespace, blobs)
        assert incremental.base is not None and whole.base is not None
        # the same state is the same manifest id, however it was captured (a cell that
        # changed nothing is skipped by comparing ids)
        assert incremental.finish().manifest_id == whole.finish().manifest_id, cell
        seen.append((incremental.base.signature, whole.base.signature, len(incremental.written)))
        base = incremental.base
    return seen


@pytest.mark.parametrize(
    ("cells", "setup"),
    [
        (ALIASING_CELLS, ""),
        (KISHU_CELLS[:1] + [c.replace("50*2**20", "2**20") for c in KISHU_CELLS[1:]], ""),
        (MIXED_CELLS, "import pandas as pd"),
        (FIGURE_CELLS, "import matplotlib\nmatplotlib.use('Agg')"),
        (LIBRARY_CELLS, ""),
        (CALLBACK_CELLS, ""),
    ],
    ids=["aliasing", "kishu", "mixed", "figures", "library-state", "callbacks"],
)
def test_each_incremental_capture_says_what_a_whole_one_says(
    cells: list[str], setup: str, blobs: BlobStore
) -> None:
    cells = [c.replace("50*2**20//8", "2**17") for c in cells]
    for index, (incremental, whole, _) in enumerate(walk(cells, blobs, setup)):
        assert incremental == whole, f"cell {index + 1} {cells[index]!r}: stale component"


def test_a_cell_that_names_one_variable_pickles_only_its_group(blobs: BlobStore) -> None:
    first = "big = np.arange(100_000)\nother = [1, 2]\nview = {'of': big}"
    cells = [first, "x = 1", "other += [3]"]
    seen = walk(cells, blobs)
    assert seen[1][2] == 1  # `x` alone; `big` and `view` are neither pickled nor hashed
    assert seen[2][2] == 1  # `other`


def test_a_value_holding_a_library_object_is_kept_only_while_that_object_is_unchanged(
    blobs: BlobStore,
) -> None:
    seen = walk(LIBRARY_CELLS, blobs)
    assert seen[1][2] >= 1 and seen[2][2] >= 1  # the generator moved: pickled again
    assert seen[3][2] == 1  # `total` alone: the generator is as it was, `rs` is kept


def test_the_notebooks_own_values_are_not_library_objects(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`__mp_main__` (multiprocessing's name for `__main__`, set once joblib is imported)
    and any module whose namespace is the notebook's hold the notebook's own values, which
    the journal follows: they are not taken for a library's."""
    notebook_module = types.ModuleType("notebook_as_module")
    notebook_module.values = np.zeros(3)  # type: ignore[attr-defined]
    alias = types.ModuleType("__mp_main__")
    alias.other = np.ones(3)  # type: ignore[attr-defined]
    library = types.ModuleType("some_library")
    library.state = np.full(3, 2.0)  # type: ignore[attr-defined]
    for module in (notebook_module, alias, library):
        monkeypatch.setitem(sys.modules, module.__name__, module)
    found = LIBRARY.objects(notebook_module.__dict__)
    assert id(library.state) in found  # type: ignore[attr-defined]
    assert id(notebook_module.values) not in found  # type: ignore[attr-defined]
    assert id(alias.other) not in found  # type: ignore[attr-defined]


def test_modules_imported_after_a_walk_are_walked_and_a_replaced_one_is_walked_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The walk of the modules is kept: after imports, the new modules' globals are found
    beside the ones found before, as a walk from scratch finds them; a module replaced
    under its name (a reload) is walked again, its old objects gone."""
    # a walk an earlier test left could belong to a dict at this one's address (ids are
    # reused), and globals rebound since (pytest rebinds `warnings.filters`) would differ
    LIBRARY.forget()
    notebook: dict[str, object] = {"__name__": "__main__"}
    first = types.ModuleType("walked_library_first")
    first.state = np.zeros(3)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, first.__name__, first)
    assert id(first.state) in LIBRARY.objects(notebook)  # type: ignore[attr-defined]
    later = types.ModuleType("walked_library_later")
    later.state = {"n": 1}  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, later.__name__, later)
    after = LIBRARY.objects(notebook)
    assert id(later.state) in after and id(first.state) in after  # type: ignore[attr-defined]
    LIBRARY.forget()
    assert LIBRARY.objects(notebook).keys() == after.keys()  # from scratch: the same
    reloaded = types.ModuleType(first.__name__)
    reloaded.state = np.ones(3)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, first.__name__, reloaded)
    third = types.ModuleType("walked_library_third")
    monkeypatch.setitem(sys.modules, third.__name__, third)  # the set of modules changed
    again = LIBRARY.objects(notebook)
    assert id(reloaded.state) in again and id(later.state) in again  # type: ignore[attr-defined]
    assert id(first.state) not in again  # type: ignore[attr-defined]


def test_state_a_library_leaves_out_of_its_pickle_comes_back(
    blobs: BlobStore, tmp_path: Path
) -> None:
    """joblib's Memory and MemorizedFunc drop their timestamp (and a function's code id)
    from their own pickle; a restore gives them back as they were (scikit-learn's
    `Pipeline(memory=...)` and its examples hold them)."""
    joblib = pytest.importorskip("joblib")
    namespace: dict[str, object] = {"__name__": "__main__"}
    memory = joblib.Memory(location=str(tmp_path / "cache"), verbose=0)
    cached = memory.cache(np.sum)
    cached(np.arange(3))
    namespace.update(memory=memory, cached=cached)
    manifest_id = snapshot_namespace(namespace, blobs).finish().manifest_id
    restored: dict[str, object] = {"__name__": "__main__"}
    restore_namespace(restored, blobs, manifest_id)
    back_memory, back_cached = restored["memory"], restored["cached"]
    assert isinstance(back_memory, joblib.Memory) and back_memory is not memory
    assert back_memory.timestamp == memory.timestamp is not None
    assert isinstance(back_cached, joblib.memory.MemorizedFunc)
    assert back_cached.timestamp == cached.timestamp is not None
    assert back_cached._func_code_id == cached._func_code_id


def test_a_restore_in_between_makes_the_next_capture_whole(blobs: BlobStore) -> None:
    namespace: dict[str, object] = {"__name__": "__main__", "arr": np.zeros(10)}
    first = snapshot_namespace(namespace, blobs)
    manifest_id = first.finish().manifest_id
    base = first.base
    assert base is not None and base.usable()
    arr = namespace["arr"]
    assert isinstance(arr, np.ndarray)
    arr[0] = 5.0  # changed behind the base's back, then restored in place
    restore_namespace(namespace, blobs, manifest_id)
    assert not base.usable()


def test_restoring_an_incremental_capture_gives_the_values_back(blobs: BlobStore) -> None:
    namespace: dict[str, object] = {"__name__": "__main__", "np": np}
    effects = CellEffects()
    base = snapshot_namespace(namespace, blobs).base
    manifests = []
    expected = []
    for cell in ALIASING_CELLS:
        exec(cell, namespace)
        snapshot = snapshot_namespace(
            namespace, blobs, base=base, touched=effects.touched_by(cell, namespace), defer=True
        )
        base = snapshot.base
        manifests.append(snapshot.finish().manifest_id)
        expected.append(
            {
                name: pickle.dumps(value)
                for name, value in namespace.items()
                if name in {"a", "c", "e", "f", "g", "h", "k"}
            }
        )
    for manifest_id, values in zip(manifests, expected, strict=True):
        restored: dict[str, object] = {"__name__": "__main__"}
        restore_namespace(restored, blobs, manifest_id)
        assert {n: pickle.dumps(restored[n]) for n in values} == values


def test_a_deferred_snapshot_copies_live_memory_late_and_refuses_a_changed_buffer(
    blobs: BlobStore,
) -> None:
    namespace: dict[str, object] = {"__name__": "__main__", "arr": np.zeros(300_000)}
    kept = snapshot_namespace(namespace, blobs, defer=True)
    kept.detach()  # copied before anything changed: what the cell left
    arr = namespace["arr"]
    assert isinstance(arr, np.ndarray)
    arr[:] = 1.0
    restored: dict[str, object] = {"__name__": "__main__"}
    restore_namespace(restored, blobs, kept.finish().manifest_id)
    assert float(np.asarray(restored["arr"]).sum()) == 0.0

    torn = snapshot_namespace(namespace, blobs, defer=True)
    arr[5] = 7.0  # written before the copy (a thread, a widget's callback)
    with pytest.raises(LiveBufferChanged):
        torn.detach()
    assert arr.flags.writeable and arr.base is None  # no view of it is left behind
    arr.resize(10, refcheck=False)  # a resize needs the buffer unexported


def test_a_chunk_still_being_written_is_not_copied_or_written_again(blobs: BlobStore) -> None:
    """Run All: `d3 = {"ref": arr}` straight after `arr = ...` takes arr again before the
    write-behind has stored it; the second capture names the first one's chunks instead of
    copying and writing them a second time, and both restore."""
    namespace: dict[str, object] = {"__name__": "__main__", "arr": np.arange(300_000.0) + 1}
    first = snapshot_namespace(namespace, blobs, defer=True)
    namespace["d3"] = {"ref": namespace["arr"]}
    second = snapshot_namespace(namespace, blobs, defer=True)
    assert second.writer._live == []  # nothing to copy (its own pickle streams are bytes)
    assert len(second.writer._awaited) == len(first.writer._live) == 3  # arr's chunks
    first.detach()
    second.detach()
    first_id, second_id = first.finish().manifest_id, second.finish()
    assert second_id.bytes_written < 10_000  # its manifest only
    for manifest_id in (first_id, second_id.manifest_id):
        restored: dict[str, object] = {"__name__": "__main__"}
        assert restore_namespace(restored, blobs, manifest_id) == []
        assert np.array_equal(np.asarray(restored["arr"]), np.arange(300_000.0) + 1)


def test_when_the_write_a_capture_waited_for_fails_it_fails_too(blobs: BlobStore) -> None:
    namespace: dict[str, object] = {"__name__": "__main__", "arr": np.arange(300_000.0) + 2}
    first = snapshot_namespace(namespace, blobs, defer=True)
    second = snapshot_namespace(namespace, blobs, defer=True)
    arr = namespace["arr"]
    assert isinstance(arr, np.ndarray)
    arr[0] = -1.0  # changed before the first copy: the first checkpoint is refused
    with pytest.raises(LiveBufferChanged):
        first.finish()
    with pytest.raises(BlobError, match="was not written"):
        second.finish()
    third = snapshot_namespace(namespace, blobs, defer=True)  # no longer waits for anyone
    restored: dict[str, object] = {"__name__": "__main__"}
    assert restore_namespace(restored, blobs, third.finish().manifest_id) == []
    assert float(np.asarray(restored["arr"])[0]) == -1.0


def test_a_dropped_snapshot_leaves_no_chunk_in_flight(blobs: BlobStore) -> None:
    namespace: dict[str, object] = {"__name__": "__main__", "arr": np.arange(300_000.0) + 3}
    dropped = snapshot_namespace(namespace, blobs, defer=True)
    dropped.writer.release()  # the hook skips an unchanged cell so
    kept = snapshot_namespace(namespace, blobs, defer=True)
    assert kept.writer._awaited == [] and len(kept.writer._live) == 3
    restored: dict[str, object] = {"__name__": "__main__"}
    assert restore_namespace(restored, blobs, kept.finish().manifest_id) == []


#: Cells that bind a name of an alias group anew, before reading it: the group's other
#: members keep their stream (the old value rides along, unbound on restore).
REBINDING_CELLS = [
    "a = [1, 2]\nb = {'list': a}\nc = 'text'",
    "b = 'new'",  # `a` keeps the stream of [a, b]; `b` alone
    "a.append(3)",  # `a` touched: its stream is pickled again, without the old `b`
    "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nline, = ax.plot([1, 2, 3])\n"
    "plt.close('all')",
    "fig = plt.figure()\nplt.close(fig)",  # the old figure stays reachable through `ax`
    "line.set_ydata([3, 2, 1])",
    "x = fig\nfig = 5",
]


def test_a_name_bound_anew_leaves_the_rest_of_its_group_unpickled(blobs: BlobStore) -> None:
    namespace: dict[str, object] = {"__name__": "__main__", "np": np}
    exec("import matplotlib\nmatplotlib.use('Agg')", namespace)
    effects = CellEffects()
    base = snapshot_namespace(namespace, blobs).base
    written: list[list[list[str]]] = []
    manifests: list[str] = []
    expected: list[dict[str, object]] = []
    for cell in REBINDING_CELLS:
        exec(cell, namespace)
        touched = effects.touched_by(cell, namespace)
        snapshot = snapshot_namespace(
            namespace, blobs, base=base, touched=touched, fresh=effects.fresh, defer=True
        )
        base = snapshot.base
        written.append([c["names"] for c in snapshot.written])
        manifests.append(snapshot.finish().manifest_id)
        expected.append(_described(namespace))
    assert written[1] == [["b"]]  # not `a` again
    assert written[2] == [["a"]]
    assert written[4] == [["fig"]]  # neither `ax` nor `line`, nor the old figure again
    for manifest_id, values in zip(manifests, expected, strict=True):
        restored: dict[str, object] = {"__name__": "__main__"}
        restore_namespace(restored, blobs, manifest_id)
        assert _described(restored) == values
    restored = {"__name__": "__main__"}
    restore_namespace(restored, blobs, manifests[4])
    ax, line, fig = restored["ax"], restored["line"], restored["fig"]
    assert line.axes is ax and ax.figure is not fig  # type: ignore[attr-defined]
    assert list(line.get_ydata()) == [1, 2, 3]  # type: ignore[attr-defined]


def _described(namespace: dict[str, object]) -> dict[str, object]:
    """What a user sees of the test's variables (figures by what they draw)."""
    seen: dict[str, object] = {}
    for name, value in namespace.items():
        if name in {"a", "b", "c"}:
            seen[name] = repr(value)
        elif name == "line":
            seen[name] = list(value.get_ydata())  # type: ignore[attr-defined]
        elif name in {"fig", "x"}:
            seen[name] = value if isinstance(value, int) else len(value.axes)  # type: ignore[attr-defined]
        elif name == "ax":
            seen[name] = (len(value.lines), value.figure is namespace.get("x"))  # type: ignore[attr-defined]
    return seen
