"""`%checkpoint` in a real kernel whose data directory is on a full disk: one `ditto:` line
(StorageFull, naming the data directory), no traceback, and nothing recorded or left behind.

The data directory is a real 40 MiB tmpfs (tests/support/small_disk.py, needs root); the
kernel runs the magics with no server behind them (an in-process RuntimeService on it).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ditto_jupyter.control.store import open_store
from tests.support.small_disk import small_disk
from tests.support.standalone_kernel import StandaloneKernel
from tests.support.stored_blobs import blob_store_state

__all__ = ["small_disk"]  # the fixture, used by name


Kernel = StandaloneKernel


@pytest.fixture
def kernel(small_disk: Path, tmp_path: Path) -> Iterator[Kernel]:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    started = Kernel(small_disk / "data", cwd)
    try:
        loaded = started.run("%load_ext ditto_jupyter")
        assert loaded.error is None, loaded.error
        yield started
    finally:
        started.stop()


def checkpoint_ids(data_dir: Path) -> list[str]:
    store = open_store(None, data_dir)
    try:
        return sorted(c.checkpoint_id for c in store.list_checkpoints())
    finally:
        store.close()


def test_checkpoint_on_a_full_disk_prints_one_line_and_records_nothing(
    kernel: Kernel, small_disk: Path
) -> None:
    data_dir = small_disk / "data"
    first = kernel.run("small = list(range(10))\n%checkpoint first")
    assert first.error is None and first.stderr == "", (first.error, first.stderr)
    recorded, blobs_before = checkpoint_ids(data_dir), blob_store_state(data_dir / "blobs")
    made = kernel.run("import numpy as np\nbig = np.random.default_rng(0).random(60 * 2**20 // 8)")
    assert made.error is None, made.error

    failed = kernel.run("%checkpoint too-big")

    assert failed.error is None, failed.error  # no traceback
    assert "Traceback" not in failed.stderr and failed.stdout == ""
    assert failed.stderr == (
        f"ditto: StorageFull: no space left on the disk holding the data directory {data_dir}: "
        "nothing was saved; free some space there and try again\n"
    )
    assert checkpoint_ids(data_dir) == recorded
    assert blob_store_state(data_dir / "blobs") == blobs_before
    again = kernel.run("del big\n%checkpoint after")
    assert again.error is None and again.stderr == "", (again.error, again.stderr)
    assert len(checkpoint_ids(data_dir)) == len(recorded) + 1
