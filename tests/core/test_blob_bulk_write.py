"""The blob store's one write path: chunks and manifests staged, then recorded at once.

What a caller relies on: nothing is recorded before `commit`, everything at it; a commit
that fails leaves the store exactly as it was (its chunks gone at once, not after the gc
grace period) without taking a chunk from another writer; a writer that died half way is
cleared by garbage collection, a live one never; many threads can stage into one write.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ditto_jupyter.core.blobs import SMALL_OBJECT_LIMIT, BlobNotFound, BlobStore, BulkWrite
from ditto_jupyter.core.blobs.local_disk import DiskBatch, LocalDiskChunks
from tests.fakes.full_disk import FillingDiskChunks
from tests.support.stored_blobs import blob_store_state

BIG = SMALL_OBJECT_LIMIT + 1000  # a chunk of this size gets a file of its own


@pytest.fixture(params=[True, False], ids=["durable", "loose"])
def blobs(tmp_path: Path, request: pytest.FixtureRequest) -> BlobStore:
    return BlobStore(tmp_path / "blobs", durable=request.param)


def age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def staging(blobs: BlobStore) -> list[str]:
    return sorted(p.name for p in (blobs.root / "tmp").iterdir())


@pytest.mark.parametrize("count", [3, 40], ids=["fsync-each", "syncfs"])
def test_nothing_is_recorded_before_the_commit_and_everything_at_it(
    blobs: BlobStore, count: int
) -> None:
    payloads = [os.urandom(BIG) for _ in range(count)] + [b"small" * 10]
    with blobs.bulk_write() as bulk:
        names = [bulk.put_chunk(data)[0] for data in payloads]
        manifest_id = bulk.put_manifest({"kind": "test", "chunks": names})
        assert not any(blobs.has_chunk(name) for name in names)
        assert not blobs.has_manifest(manifest_id)
        assert all(bulk.has_chunk(name) for name in names)
        assert bulk.commit() > 0
    assert blobs.get_manifest(manifest_id)["chunks"] == names
    assert [blobs.get_chunk(name) for name in names] == payloads
    assert staging(blobs) == []


@pytest.mark.parametrize("count", [3, 40], ids=["fsync-each", "syncfs"])
def test_a_refused_commit_leaves_the_store_as_it_was_and_can_be_corrected(
    blobs: BlobStore, count: int
) -> None:
    """A manifest that lists a chunk nobody stored: refused inside the commit, after the
    staged chunks were named. Their names are taken back; the chunks stay staged, so the
    caller (a workspace snapshot rescanning) commits a corrected manifest at once."""
    kept = blobs.put_bytes(os.urandom(BIG))
    blobs.put_manifest({"chunks": kept.chunks})
    before = blob_store_state(blobs.root)
    with blobs.bulk_write() as bulk:
        names = [bulk.put_chunk(os.urandom(BIG))[0] for _ in range(count)]
        bulk.put_manifest({"chunks": [*names, "0" * 64]})
        with pytest.raises(BlobNotFound, match="which is not stored"):
            bulk.commit()
        after = blob_store_state(blobs.root)
        assert {k: after[k] for k in ("chunks", "manifests", "files")} == {
            k: before[k] for k in ("chunks", "manifests", "files")
        }
        manifest_id = bulk.put_manifest({"chunks": names})
        bulk.commit()
    assert blobs.get_manifest(manifest_id)["chunks"] == names
    assert all(blobs.has_chunk(name) for name in names)
    assert staging(blobs) == []


def test_leaving_a_bulk_write_uncommitted_drops_what_it_staged(blobs: BlobStore) -> None:
    before = blob_store_state(blobs.root)
    with pytest.raises(RuntimeError, match="the caller failed"), blobs.bulk_write() as bulk:
        bulk.put_chunk(os.urandom(BIG))
        bulk.put_chunk(b"tiny")
        bulk.put_manifest({"chunks": []})
        assert staging(blobs) != []
        raise RuntimeError("the caller failed")
    assert blob_store_state(blobs.root) == before


def test_a_failed_commit_keeps_a_chunk_another_writer_recorded_meanwhile(
    blobs: BlobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deduplication: the chunk a failing write named may be the one another write
    records before the failing one takes its names back. It is never taken from it."""
    shared = os.urandom(BIG)
    other: list[str] = []
    real_take_back = BulkWrite._take_back

    def other_writer_first(self: BulkWrite, batch: DiskBatch) -> None:
        with blobs.bulk_write() as second:
            name, _ = second.put_chunk(shared)
            other.append(second.put_manifest({"chunks": [name]}))
            second.commit()
        real_take_back(self, batch)

    monkeypatch.setattr(BulkWrite, "_take_back", other_writer_first)
    with blobs.bulk_write() as bulk:
        name, _ = bulk.put_chunk(shared)
        bulk.put_manifest({"chunks": [name, "0" * 64]})
        with pytest.raises(BlobNotFound):
            bulk.commit()
    assert blobs.get_bytes(blobs.get_manifest(other[0])["chunks"]) == shared


def test_a_writer_that_died_after_naming_its_chunks_is_cleared_by_gc(tmp_path: Path) -> None:
    """Killed between naming its chunks and recording them: the names it published are
    listed in its staging folder, which gc clears once it is stale and unlocked. A chunk
    another writer has recorded since stays."""
    blobs = BlobStore(tmp_path / "blobs")
    storage = blobs.storage
    assert isinstance(storage, LocalDiskChunks)
    dead = storage.batch(durable=True)
    orphan, shared = os.urandom(BIG), os.urandom(BIG)
    names = [blobs.digest(orphan), blobs.digest(shared)]
    for name, data in zip(names, [orphan, shared], strict=True):
        dead.add(name, [b"R", data])
    dead.sync()
    dead.publish()
    assert all(os.path.exists(blobs.chunk_file(name)) for name in names)
    folder = Path(blobs.chunk_file(names[0])).parents[2] / "tmp"
    (batch_folder,) = folder.iterdir()
    assert dead._folder_fd is not None
    os.close(dead._folder_fd)  # the writer dies: its lock goes with it
    recorded = blobs.put_bytes(shared)
    manifest_id, _ = blobs.put_manifest({"chunks": recorded.chunks})
    age(batch_folder, 3600)
    blobs.gc(lambda ids: [m for m in ids if m == manifest_id], grace_seconds=60)
    assert not os.path.exists(blobs.chunk_file(names[0]))
    assert blobs.get_chunk(names[1]) == shared
    assert staging(blobs) == []


def test_gc_never_clears_a_live_bulk_write(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path / "blobs")
    data = os.urandom(BIG)
    with blobs.bulk_write() as bulk:
        name, _ = bulk.put_chunk(data)
        (batch_folder,) = (blobs.root / "tmp").iterdir()
        age(batch_folder, 3600)
        blobs.gc(lambda ids: [], grace_seconds=0)
        assert (blobs.root / "tmp" / batch_folder.name).is_dir()
        manifest_id = bulk.put_manifest({"chunks": [name]})
        bulk.commit()
    assert blobs.get_bytes(blobs.get_manifest(manifest_id)["chunks"]) == data


def test_many_threads_stage_into_one_bulk_write(blobs: BlobStore) -> None:
    payloads = [os.urandom(BIG) for _ in range(24)] + [f"{i} ".encode() * 100 for i in range(24)]
    with blobs.bulk_write() as bulk:
        with ThreadPoolExecutor(max_workers=6) as pool:
            first = list(pool.map(lambda data: bulk.put_chunk(data)[0], payloads))
            again = list(pool.map(lambda data: bulk.put_chunk(data), payloads))
        assert [name for name, _ in again] == first
        assert all(written == 0 for _, written in again)
        assert bulk.staged_files == 24
        manifest_id = bulk.put_manifest({"chunks": first})
        bulk.commit()
    assert [blobs.get_chunk(name) for name in blobs.get_manifest(manifest_id)["chunks"]] == (
        payloads
    )


def test_another_chunk_storage_plugs_in_through_the_seam(tmp_path: Path) -> None:
    """BlobStore(root, storage=...) takes any ChunkStorage: here a test double with room
    for 3 MiB. Writes, reads, deletes and collection go through it; nothing else changes."""
    root = tmp_path / "blobs"
    storage = FillingDiskChunks(root, size=3 << 20)
    blobs = BlobStore(root, storage=storage)
    stored = blobs.put_bytes(os.urandom(2 << 20) + b"text " * 20000)
    manifest_id, _ = blobs.put_manifest({"chunks": stored.chunks})
    assert storage.used > 2 << 20
    assert blobs.get_bytes(blobs.get_manifest(manifest_id)["chunks"]).endswith(b"text ")
    blobs.delete_manifest(manifest_id)
    report = blobs.gc(lambda ids: [], grace_seconds=0)
    assert report.freed_chunks == len(set(stored.chunks))
    assert not any(blobs.has_chunk(name) for name in stored.chunks)
