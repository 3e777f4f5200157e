"""Checkpoint time and no-op size on figure-heavy namespaces (issue 14, the speed target).

A checkpoint pickles each object once: a figure held by pyplot, by `fig`, `ax`, `line` and a
list of axes is pickled once per checkpoint (it was once per variable that reaches it, and
again for their component), and aliasing still survives a restore. Showing a colormap (what
IPython does to display one) fills its lookup table, a cache: the next checkpoint still
writes at most 4 KiB, and an edited table is kept.

Plain Python, like tests/kernel/capture/test_capture.py.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
import pytest
from matplotlib.figure import Figure

from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.kernel.capture import capture_namespace, restore_namespace

matplotlib.use("Agg")

KIB = 1024

FIGURES = """
import numpy as np
import matplotlib.pyplot as plt

fig, (ax, other) = plt.subplots(1, 2)
line, = ax.plot([1, 2, 3])
axes = [ax, other]
grid = np.array([ax, other], dtype=object)
holder = {"figure": fig}
plt.figure(5)
plt.hist(np.arange(20), bins=4)  # a figure only pyplot holds
plt.figure(1)
"""


class Shared:
    """An object several variables hold; counts its picklings."""

    picklings = 0

    def __init__(self) -> None:
        self.values = [1, 2, 3]

    def __getstate__(self) -> dict[str, Any]:
        Shared.picklings += 1
        return self.__dict__


class Holder:
    def __init__(self, held: object) -> None:
        self.held = held


@pytest.fixture
def blobs(tmp_path: Path) -> BlobStore:
    return BlobStore(tmp_path / "blobs", durable=False)


def run(namespace: dict[str, object], code: str) -> None:
    exec(textwrap.dedent(code), namespace)


def new_namespace() -> dict[str, object]:
    return {"__name__": "__main__"}


def test_a_figure_is_pickled_once_per_checkpoint_and_aliasing_survives(
    blobs: BlobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import matplotlib.pyplot as plt

    plt.close("all")
    ns = new_namespace()
    run(ns, FIGURES)
    picklings: dict[int, int] = {}
    original = Figure.__getstate__

    def counting(self: Figure) -> dict[str, Any]:
        picklings[id(self)] = picklings.get(id(self), 0) + 1
        return original(self)

    monkeypatch.setattr(Figure, "__getstate__", counting)
    captured = capture_namespace(ns, blobs)
    assert captured.unrestorable == []
    assert picklings == {id(ns["fig"]): 1, id(plt.figure(5)): 1}
    monkeypatch.undo()

    plt.close("all")
    fresh = new_namespace()
    assert restore_namespace(fresh, blobs, captured.manifest_id) == []
    fig, ax, other = fresh["fig"], fresh["ax"], fresh["other"]
    assert ax.figure is fig and fresh["line"].axes is ax  # type: ignore[attr-defined]
    assert fresh["axes"] == [ax, other] and list(fresh["grid"]) == [ax, other]  # type: ignore[call-overload]
    assert fresh["holder"]["figure"] is fig  # type: ignore[index]
    assert plt.get_fignums() == [1, 5] and plt.gcf() is fig
    assert len(plt.figure(5).axes[0].patches) == 4
    assert list(fresh["line"].get_ydata()) == [1, 2, 3]  # type: ignore[attr-defined]
    plt.close("all")


def test_an_object_shared_by_several_variables_is_pickled_once(blobs: BlobStore) -> None:
    ns = new_namespace()
    shared = Shared()
    ns.update(first=[shared], second={"key": shared}, same=shared, holder=Holder(shared))
    ns["apart"] = Shared()
    Shared.picklings = 0
    captured = capture_namespace(ns, blobs)
    assert captured.unrestorable == []
    assert Shared.picklings == 2  # `shared` once, `apart` once

    fresh = new_namespace()
    assert restore_namespace(fresh, blobs, captured.manifest_id) == []
    same = fresh["same"]
    assert isinstance(same, Shared) and same.values == [1, 2, 3]
    assert fresh["first"][0] is same and fresh["second"]["key"] is same  # type: ignore[index]
    assert fresh["holder"].held is same  # type: ignore[attr-defined]
    assert fresh["apart"] is not same


def test_showing_a_colormap_leaves_the_next_checkpoint_at_most_4_kib(
    blobs: BlobStore,
) -> None:
    import matplotlib.pyplot as plt

    plt.close("all")
    ns = new_namespace()
    run(
        ns,
        """
        import numpy as np
        import matplotlib as mpl
        import matplotlib.pyplot as plt
        cmap = mpl.colormaps["viridis"].resampled(8)
        fig, ax = plt.subplots()
        image = ax.imshow(np.arange(16).reshape(4, 4), cmap=cmap)
        """,
    )
    first = capture_namespace(ns, blobs)
    cmap: Any = ns["cmap"]
    assert not cmap._isinit  # nothing has asked for its table yet
    cmap._repr_png_()  # what IPython's display of the colormap does
    cmap._repr_html_()
    again = capture_namespace(ns, blobs, previous_manifest_id=first.manifest_id)
    assert again.bytes_written <= 4 * KIB, again.bytes_written

    plt.close("all")
    fresh = new_namespace()
    assert restore_namespace(fresh, blobs, again.manifest_id) == []
    restored: Any = fresh["cmap"]
    levels = np.linspace(0, 1, 8)
    assert np.array_equal(restored(levels), cmap(levels))
    assert fresh["image"].get_cmap() is restored  # type: ignore[attr-defined]
    plt.close("all")


def test_an_edited_colormap_table_is_kept(blobs: BlobStore) -> None:
    import matplotlib as mpl

    ns = new_namespace()
    cmap: Any = mpl.colormaps["viridis"].resampled(8)
    cmap._init()
    cmap._lut[0] = [1.0, 0.0, 0.0, 1.0]  # the old idiom for a custom first colour
    ns["cmap"] = cmap
    captured = capture_namespace(ns, blobs)
    fresh = new_namespace()
    assert restore_namespace(fresh, blobs, captured.manifest_id) == []
    restored: Any = fresh["cmap"]
    assert tuple(restored(0.0)) == (1.0, 0.0, 0.0, 1.0)
    assert np.array_equal(restored(np.linspace(0, 1, 8)), cmap(np.linspace(0, 1, 8)))


def test_a_group_that_fails_together_keeps_each_value_apart(
    blobs: BlobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ditto_jupyter.kernel.capture import storing

    def too_deep(*args: object) -> None:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(storing, "continue_pickling", too_deep)
    ns = new_namespace()
    shared = Shared()
    ns.update(first=[shared], same=shared, holder=Holder(shared))
    captured = capture_namespace(ns, blobs)
    assert captured.unrestorable == []
    fresh = new_namespace()
    assert restore_namespace(fresh, blobs, captured.manifest_id) == []
    assert fresh["first"][0].values == [1, 2, 3]  # type: ignore[index]
    assert fresh["same"].values == [1, 2, 3]  # type: ignore[attr-defined]
    assert fresh["holder"].held.values == [1, 2, 3]  # type: ignore[attr-defined]
