"""A blob store on a full disk: StorageFull (507) in one sentence, and the store unchanged.

Two disks: a real 40 MiB tmpfs (tests/support/small_disk.py, needs root), and a test
double of a filling disk plugged in through the store's seam (tests/fakes/full_disk.py),
which runs everywhere. Either way the failed write leaves nothing behind: its chunks go at
once (not after the gc grace period), and the next write that fits succeeds.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from ditto_jupyter.core.blobs import BlobStorageFull, BlobStore, BlobStoreUnavailable, local_disk
from ditto_jupyter.core.errors import DittoError, StorageFull, StoreUnavailable
from tests.fakes.full_disk import FillingDiskChunks
from tests.support.small_disk import fill, free_bytes, small_disk
from tests.support.stored_blobs import blob_store_state

__all__ = ["small_disk"]  # the fixture, used by name
MiB = 1 << 20


@pytest.fixture(params=["tmpfs", "test-double"])
def full_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BlobStore]:
    """A store in `<data dir>/blobs` whose disk takes about 30 MiB more."""
    if request.param == "tmpfs":
        disk = request.getfixturevalue("small_disk")
        yield BlobStore(disk / "data" / "blobs")
    else:
        root = tmp_path / "data" / "blobs"
        yield BlobStore(root, storage=FillingDiskChunks(root, size=30 * MiB))


def test_a_write_that_finds_no_room_is_storage_full_and_changes_nothing(
    full_store: BlobStore, request: pytest.FixtureRequest
) -> None:
    first = full_store.put_bytes(os.urandom(2 * MiB))
    first_id, _ = full_store.put_manifest({"kind": "test", "chunks": first.chunks})
    before = blob_store_state(full_store.root)
    free_before = free_bytes(full_store.root)
    with pytest.raises(BlobStorageFull) as failed, full_store.bulk_write() as bulk:
        names = [bulk.put_chunk(os.urandom(MiB))[0] for _ in range(60)]
        bulk.put_manifest({"kind": "test", "chunks": names})
        bulk.commit()
    error = failed.value
    assert isinstance(error, StorageFull) and isinstance(error, DittoError)
    assert (error.code, error.http_status) == ("StorageFull", 507)
    data_dir = full_store.root.parent
    assert str(error) == (
        f"no space left on the disk holding the data directory {data_dir}: nothing was "
        "saved; free some space there and try again"
    )
    assert blob_store_state(full_store.root) == before
    if request.node.callspec.params["full_store"] == "tmpfs":  # a disk of its own: no one
        assert free_bytes(full_store.root) >= free_before - MiB  # else writes; chunks went
    again = full_store.put_bytes(os.urandom(4 * MiB))
    again_id, _ = full_store.put_manifest({"kind": "test", "chunks": again.chunks})
    assert full_store.has_manifest(again_id) and full_store.has_manifest(first_id)


def test_a_catalogue_that_finds_no_room_is_storage_full_and_changes_nothing(
    small_disk: Path,
) -> None:
    """The disk fills up to the last byte: even the small chunks and the manifest, which
    live in the catalogue (SQLite), find no room. Same answer, same unchanged store."""
    blobs = BlobStore(small_disk / "data" / "blobs")
    first_id, _ = blobs.put_manifest({"chunks": blobs.put_bytes(b"first").chunks})
    before = blob_store_state(blobs.root)
    filler = fill(small_disk)
    full = pytest.raises(BlobStorageFull, match="no space left on the disk holding the data")
    with full, blobs.bulk_write() as bulk:
        small = [bulk.put_chunk(os.urandom(40_000))[0] for _ in range(150)]
        bulk.put_manifest({"chunks": small})
        bulk.commit()
    assert blob_store_state(blobs.root) == before
    filler.unlink()
    manifest_id, _ = blobs.put_manifest({"chunks": blobs.put_bytes(b"later").chunks})
    assert blobs.has_manifest(manifest_id) and blobs.has_manifest(first_id)


def test_any_other_failing_write_is_store_unavailable_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blobs = BlobStore(tmp_path / "data" / "blobs")
    blobs.put_bytes(os.urandom(2 * MiB))
    before = blob_store_state(blobs.root)

    def failing(fd: int, parts: object) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(local_disk, "_write_all", failing)
    with pytest.raises(BlobStoreUnavailable) as failed:
        blobs.put_bytes(os.urandom(2 * MiB))
    assert isinstance(failed.value, StoreUnavailable)
    assert (failed.value.code, failed.value.http_status) == ("StoreUnavailable", 503)
    assert "Input/output error" in str(failed.value) and str(tmp_path / "data") in str(failed.value)
    assert blob_store_state(blobs.root) == before
