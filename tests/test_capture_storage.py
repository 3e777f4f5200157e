"""What checkpoints write (issue 14 sections 4-5): a cell that changed nothing writes next to
nothing, even with a matplotlib figure in the namespace, and a small change on a
notebook-sized namespace writes a small checkpoint.

Plain Python, like tests/test_capture.py; the same figures in a real kernel are in
tests/test_capture_pyplot.py.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib
import pytest

from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.kernel.capture import capture_namespace, restore_namespace

matplotlib.use("Agg")  # no display here; pyplot's figures stay in memory

KIB = 1024

NOTEBOOK = """
import numpy as np
import pandas as pd
import matplotlib.pyplot as plt

rng = np.random.default_rng(3)
values = rng.normal(size=200_000)  # 1.6 MB: out of band, two chunks
small = np.arange(12).reshape(3, 4)
frame = pd.DataFrame({"x": rng.random(500), "label": [f"r{i}" for i in range(500)]})
threshold = 0.5
name = "run 1"
counts = {"a": 1, "b": [1, 2]}
fig, ax = plt.subplots()
ax.plot(values[:100])
ax.set_title("values")
plt.figure(2)
plt.hist(values, bins=30)  # the implicit API: a figure only pyplot holds
"""


@pytest.fixture
def blobs(tmp_path: Path) -> BlobStore:
    return BlobStore(tmp_path / "blobs", durable=False)


def run(namespace: dict[str, object], code: str) -> None:
    exec(textwrap.dedent(code), namespace)


def test_a_checkpoint_after_a_cell_that_changed_nothing_writes_at_most_4_kib(
    blobs: BlobStore,
) -> None:
    ns: dict[str, object] = {"__name__": "__main__"}
    run(ns, NOTEBOOK)
    first = capture_namespace(ns, blobs)
    assert first.unrestorable == []
    previous = first.manifest_id
    for cell in ("frame.head()", "print(threshold)", "len(counts)", "plt.get_fignums()"):
        run(ns, cell)
        again = capture_namespace(ns, blobs, previous_manifest_id=previous)
        assert again.bytes_written <= 4 * KIB, (cell, again.bytes_written)
        previous = again.manifest_id

    fresh: dict[str, object] = {"__name__": "__main__"}
    assert restore_namespace(fresh, blobs, previous) == []
    restored_ax = fresh["ax"]
    assert restored_ax.get_title() == "values"  # type: ignore[attr-defined]
    assert fresh["counts"] == {"a": 1, "b": [1, 2]}
