"""A capture on a full disk: StorageFull, and the blob store exactly as before, at once.

The chunks a failed capture wrote are taken back when it fails (not at the end of the gc
grace period), and never one that another manifest lists or another capture waits for:
chunks are deduplicated, so a failed capture shares chunks with others. Run on a real
40 MiB tmpfs (needs root) and on a test double of a filling disk under the blob store.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ditto_jupyter.core.blobs import BlobError, BlobStorageFull, BlobStore
from ditto_jupyter.kernel.capture import capture_namespace, chunks, restore_namespace
from ditto_jupyter.kernel.capture.capturing import snapshot_namespace
from tests.fakes.full_disk import FillingDiskChunks
from tests.support.small_disk import small_disk
from tests.support.stored_blobs import blob_store_state

__all__ = ["small_disk"]  # the fixture, used by name
MiB = 1 << 20


@pytest.fixture(params=["tmpfs", "test-double"])
def blobs(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BlobStore]:
    """A durable store in `<data dir>/blobs` on a disk of about 40 MiB."""
    chunks.forget_chunks()
    if request.param == "tmpfs":
        yield BlobStore(request.getfixturevalue("small_disk") / "data" / "blobs")
    else:
        root = tmp_path / "data" / "blobs"
        yield BlobStore(root, storage=FillingDiskChunks(root, size=40 * MiB))
    chunks.forget_chunks()


def random_array(mib: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random(mib * MiB // 8)


def test_a_capture_that_finds_no_room_is_storage_full_and_changes_nothing(
    blobs: BlobStore,
) -> None:
    kept = random_array(4, seed=1)
    namespace: dict[str, object] = {"__name__": "__main__", "kept": kept}
    first = capture_namespace(namespace, blobs)
    before = blob_store_state(blobs.root)
    namespace["big"] = random_array(60, seed=2)  # shares kept's chunks, and does not fit
    with pytest.raises(BlobStorageFull, match="no space left on the disk holding the data"):
        capture_namespace(namespace, blobs, previous_manifest_id=first.manifest_id)
    assert blob_store_state(blobs.root) == before
    assert chunks._in_flight == set()
    restored: dict[str, object] = {"__name__": "__main__"}
    assert restore_namespace(restored, blobs, first.manifest_id) == []
    assert np.array_equal(np.asarray(restored["kept"]), kept)
    namespace["big"] = random_array(8, seed=3)  # room again: everything it needs is written
    again = capture_namespace(namespace, blobs, previous_manifest_id=first.manifest_id)
    assert again.bytes_written > 6 * MiB  # (shuffled and compressed a little)
    restored = {"__name__": "__main__"}
    assert restore_namespace(restored, blobs, again.manifest_id) == []
    assert np.array_equal(np.asarray(restored["big"]), namespace["big"])


def test_a_capture_waiting_for_a_failed_one_fails_without_naming_its_chunks(
    blobs: BlobStore,
) -> None:
    """`%autocheckpoint`'s write-behind: the second capture waits for chunks the first is
    writing. The first finds no room and takes its chunks back; the second is refused
    instead of recording a manifest that names them, and nothing stays in flight."""
    namespace: dict[str, object] = {"__name__": "__main__", "big": random_array(50, seed=4)}
    before = blob_store_state(blobs.root)
    first = snapshot_namespace(namespace, blobs, defer=True)
    namespace["alias"] = {"ref": namespace["big"]}
    second = snapshot_namespace(namespace, blobs, defer=True)
    assert second.writer._awaited  # it names the first one's chunks once they are written
    first.detach()
    with pytest.raises(BlobStorageFull):
        first.finish()
    with pytest.raises(BlobError, match="was not written"):
        second.finish()
    assert blob_store_state(blobs.root) == before
    assert chunks._in_flight == set()
