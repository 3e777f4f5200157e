"""A local workspace on a full disk: snapshot and checkout answer StorageFull (507) in one
sentence naming the data directory, and leave the blob store and the workspaces as they were.

The data directory (its blob store and its workspaces) lives on a real 40 MiB tmpfs
(tests/support/small_disk.py, needs root), or, for the snapshot, on a test double of a
filling disk under the blob store (tests/fakes/full_disk.py).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ditto_jupyter.backends.local import LocalBackend, LocalProvider
from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.core.errors import StorageFull
from tests.fakes.full_disk import FillingDiskChunks
from tests.support.small_disk import fill, free_bytes, small_disk
from tests.support.stored_blobs import blob_store_state

__all__ = ["small_disk"]  # the fixture, used by name
T = TypeVar("T")
MiB = 1 << 20


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@pytest.fixture(params=["tmpfs", "test-double"])
def data_dir(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, BlobStore]:
    """A data directory whose disk takes about 40 MiB in all, and its blob store."""
    if request.param == "tmpfs":
        root = request.getfixturevalue("small_disk") / "data"
        return root, BlobStore(root / "blobs")
    root = tmp_path / "data"
    return root, BlobStore(root / "blobs", storage=FillingDiskChunks(root / "blobs", size=15 * MiB))


def test_a_snapshot_that_finds_no_room_is_storage_full_and_leaves_the_store_as_it_was(
    data_dir: tuple[Path, BlobStore], request: pytest.FixtureRequest
) -> None:
    root, blobs = data_dir
    provider = LocalProvider(root / "workspaces", blobs)
    backend = run(provider.create("rt-1"))
    run(backend.write_bytes("notes.txt", b"first version\n"))
    first = run(backend.checkpoint())
    run(backend.write_bytes("data/big.bin", os.urandom(22 * MiB)))  # and a copy will not fit
    before = blob_store_state(blobs.root)
    free_before = free_bytes(root)
    with pytest.raises(StorageFull) as failed:
        run(backend.checkpoint())
    assert failed.value.http_status == 507
    assert str(failed.value) == (
        f"no space left on the disk holding the data directory {root}: nothing was saved; "
        "free some space there and try again"
    )
    assert blob_store_state(blobs.root) == before  # the chunks it wrote went at once
    if request.node.callspec.params["data_dir"] == "tmpfs":  # a disk of its own: no one
        assert free_bytes(root) >= free_before - MiB  # else writes there, the room came back
    assert backend.last_manifest_id == first.provider_snapshot_id
    run(backend.write_bytes("data/big.bin", os.urandom(2 * MiB)))
    second = run(backend.checkpoint())
    assert second.provider_snapshot_id != first.provider_snapshot_id
    child = run(provider.checkout(second, "rt-2"))
    assert (child.local_path / "data" / "big.bin").stat().st_size == 2 * MiB


def test_a_checkout_that_finds_no_room_is_storage_full_and_leaves_nothing(
    small_disk: Path,
) -> None:
    root = small_disk / "data"
    provider = LocalProvider(root / "workspaces", BlobStore(root / "blobs"))
    backend: LocalBackend = run(provider.create("rt-1"))
    run(backend.write_bytes("big.bin", os.urandom(12 * MiB)))
    ref = run(backend.checkpoint())
    fill(small_disk, leave=4 * MiB)
    workspaces = sorted(p.name for p in (root / "workspaces").iterdir())
    with pytest.raises(
        StorageFull, match=f"no space left on the disk holding the data directory {root}:"
    ):
        run(provider.checkout(ref, "rt-2"))
    assert sorted(p.name for p in (root / "workspaces").iterdir()) == workspaces
