"""Workspace snapshots at disk speed: one sync per snapshot, threads, kernel-copied checkouts.

Every store here is durable (the production setting), unlike most local-backend tests, so
the durability promise is what is checked: a snapshot's chunks are synced before they are
named and its manifest is recorded, and a snapshot whose sync fails records nothing and
leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import errno
import os
import stat
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ditto_jupyter.backends.local import LocalBackend, LocalProvider, copying, parallel, snapshots
from ditto_jupyter.core.blobs import CODEC_RAW, BlobStore, local_disk
from ditto_jupyter.core.errors import BackendError, StoreUnavailable

T = TypeVar("T")
MiB = 1 << 20


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@pytest.fixture
def provider(tmp_path: Path) -> LocalProvider:
    return LocalProvider(tmp_path / "workspaces", BlobStore(tmp_path / "blobs"))


@pytest.fixture
def backend(provider: LocalProvider) -> LocalBackend:
    return run(provider.create("rt-1"))


#: Big enough that a blob store keeping small chunks inline in an index still writes a file.
CHUNK_FILE_BYTES = 70_000


def fill(backend: LocalBackend, files: int) -> None:
    """`files` files of distinct random content (one chunk file each) in a few directories."""
    for i in range(files):
        run(backend.write_bytes(f"d{i % 5}/f{i:03}.bin", os.urandom(CHUNK_FILE_BYTES + i)))


def tree_of(root: Path) -> dict[str, tuple[str, bytes | str | None, int, int]]:
    """Everything under `root`: kind, content or link target, permission bits, file mtime."""
    out: dict[str, tuple[str, bytes | str | None, int, int]] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        st_ = os.lstat(path)
        if path.is_symlink():
            out[rel] = ("symlink", os.readlink(path), 0, 0)
        elif path.is_dir():
            out[rel] = ("dir", None, stat.S_IMODE(st_.st_mode), 0)
        else:
            out[rel] = ("file", path.read_bytes(), stat.S_IMODE(st_.st_mode), st_.st_mtime_ns)
    return out


def manifests(blobs: BlobStore) -> set[str]:
    return set(blobs.iter_manifests())


class FsyncCounter:
    """Counts os.fsync calls (every per-file and per-directory sync goes through it)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        real = os.fsync

        def counting(fd: int) -> None:
            self.calls += 1
            real(fd)

        monkeypatch.setattr(os, "fsync", counting)


# ---- one sync per snapshot --------------------------------------------------------------


def test_a_durable_snapshot_does_not_fsync_each_chunk(
    backend: LocalBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: a durable store fsynced every chunk file and its directory (two fsyncs a
    file, over 200 here); now the chunks share one filesystem sync, and so do their names."""
    fill(backend, 100)
    fsyncs = FsyncCounter(monkeypatch)
    ref = run(backend.checkpoint())
    assert ref.details["files_read"] == 100
    assert fsyncs.calls <= 5


def chunk_files(blobs: BlobStore) -> set[str]:
    """Every chunk file of the store's local disk, and whatever its staging holds."""
    root = blobs.root
    return {p.relative_to(root).as_posix() for p in (root / "chunks").rglob("*") if p.is_file()}


def staging(blobs: BlobStore) -> list[str]:
    return sorted(p.name for p in (blobs.root / "tmp").iterdir())


@pytest.mark.skipif(local_disk._syncfs is None, reason="syncfs is Linux-only")
def test_the_sync_happens_before_the_chunks_are_named_and_recorded(
    provider: LocalProvider, backend: LocalBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    fill(backend, 40)
    seen_at_sync: list[tuple[set[str], set[str]]] = []
    real = local_disk.sync_filesystem

    def watching(fd: int, place: str) -> None:
        seen_at_sync.append((manifests(provider.blobs), chunk_files(provider.blobs)))
        real(fd, place)

    monkeypatch.setattr(local_disk, "sync_filesystem", watching)
    ref = run(backend.checkpoint())
    # the bytes are synced before any chunk has its name, the names before the manifest
    assert len(seen_at_sync) == 2
    assert seen_at_sync[0] == (set(), set())
    assert seen_at_sync[1][0] == set() and len(seen_at_sync[1][1]) == 40
    assert manifests(provider.blobs) == {ref.provider_snapshot_id}
    assert len(chunk_files(provider.blobs)) == 40


@pytest.mark.skipif(local_disk._syncfs is None, reason="syncfs is Linux-only")
def test_a_snapshot_whose_sync_fails_records_nothing_and_leaves_nothing(
    provider: LocalProvider, backend: LocalBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An I/O error in the sync: no manifest, no new chunk, no staging left, the old head
    kept; the error says the store failed (503), not the workspace."""
    fill(backend, 30)
    first = run(backend.checkpoint())
    files_before, stored_before = chunk_files(provider.blobs), provider.blobs.stored_bytes()
    fill(backend, 40)  # rewrites 30 files, adds 10: more than the fsync-each limit

    def failing(fd: int, place: str) -> None:
        raise local_disk.os_failure(OSError(errno.EIO, "simulated I/O error"), place, "syncing")

    monkeypatch.setattr(local_disk, "sync_filesystem", failing)
    with pytest.raises(StoreUnavailable, match="simulated I/O error"):
        run(backend.checkpoint())
    assert manifests(provider.blobs) == {first.provider_snapshot_id}
    assert chunk_files(provider.blobs) == files_before
    assert provider.blobs.stored_bytes() == stored_before
    assert staging(provider.blobs) == []
    assert backend.last_manifest_id == first.provider_snapshot_id
    monkeypatch.undo()
    again = run(backend.checkpoint())
    assert manifests(provider.blobs) == {first.provider_snapshot_id, again.provider_snapshot_id}
    child = run(provider.checkout(again, "rt-2"))
    assert tree_of(child.local_path) == tree_of(backend.local_path)


def test_a_few_new_chunks_are_fsynced_one_by_one(
    backend: LocalBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Changing one file does not sync the whole filesystem (other tenants' dirty data)."""
    fill(backend, 30)
    run(backend.checkpoint())
    run(backend.write_bytes("d0/f000.bin", os.urandom(CHUNK_FILE_BYTES)))
    syncs: list[object] = []
    monkeypatch.setattr(local_disk, "sync_filesystem", lambda fd, place: syncs.append(fd))
    fsyncs = FsyncCounter(monkeypatch)
    ref = run(backend.checkpoint())
    assert ref.details["files_read"] >= 1
    assert syncs == []
    assert 2 <= fsyncs.calls <= 6  # the staged chunk, its list and folder, its new folder


def test_a_bulk_write_into_a_loose_store_never_syncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loose = BlobStore(tmp_path / "a", durable=False)
    fsyncs = FsyncCounter(monkeypatch)
    monkeypatch.setattr(local_disk, "sync_filesystem", lambda fd, place: pytest.fail("synced"))
    with loose.bulk_write() as bulk:
        digests = [bulk.put_chunk(os.urandom(CHUNK_FILE_BYTES))[0] for _ in range(40)]
        bulk.commit()
    assert fsyncs.calls == 0
    assert all(loose.has_chunk(d) for d in digests)


def test_a_bulk_write_stages_each_new_chunk_file_once(tmp_path: Path) -> None:
    durable = BlobStore(tmp_path / "a")
    data = os.urandom(CHUNK_FILE_BYTES)
    with durable.bulk_write() as bulk:
        first, written = bulk.put_chunk(data)
        again, rewritten = bulk.put_chunk(data)
        assert first == again and written > 0 and rewritten == 0
        assert bulk.staged_files == 1
        assert not durable.has_chunk(first) and bulk.has_chunk(first)
        bulk.commit()
        assert bulk.staged_files == 0
    assert durable.get_chunk(first) == data
    assert staging(durable) == []


# ---- threads ----------------------------------------------------------------------------


def test_run_parallel_keeps_order_and_uses_another_thread() -> None:
    names: set[str] = set()
    barrier = threading.Barrier(2, timeout=30)

    def work(n: int) -> int:
        names.add(threading.current_thread().name)
        if n < 2:
            barrier.wait()  # the first two jobs can only finish on two threads at once
        return n * n

    assert parallel.run_parallel(work, list(range(50)), threads=2) == [n * n for n in range(50)]
    assert len(names) == 2


def test_run_parallel_raises_the_first_failure_and_stops() -> None:
    done: list[int] = []

    def work(n: int) -> int:
        if n == 3:
            raise ValueError("job 3 failed")
        done.append(n)
        return n

    with pytest.raises(ValueError, match="job 3 failed"):
        parallel.run_parallel(work, list(range(1000)), threads=2)
    assert len(done) < 999


def test_snapshot_on_two_threads_equals_one_thread(
    provider: LocalProvider, backend: LocalBackend
) -> None:
    fill(backend, 60)
    run(backend.write_bytes("big", os.urandom(2 * MiB + 7)))
    root = str(backend.local_path)
    marker = provider.root / ".state" / "probe.clock"
    one, _, stats_one = snapshots.scan_workspace(
        root, provider.blobs, marker, snapshots.FileIndex.empty(), verify_chunks=False, threads=1
    )
    two, _, stats_two = snapshots.scan_workspace(
        root, provider.blobs, marker, snapshots.FileIndex.empty(), verify_chunks=False, threads=2
    )
    for key in ("files", "dirs", "symlinks", "skipped", "chunks"):
        assert one[key] == two[key]
    assert stats_one.files_read == stats_two.files_read == 61


# ---- checkout: kernel copies, fallbacks, damaged chunks ---------------------------------


def populate(backend: LocalBackend) -> None:
    ws = backend.local_path
    run(backend.write_bytes("raw/random", os.urandom(2 * MiB + 5)))
    run(backend.write_bytes("text/zstd", b"compressible line of text\n" * 50000))
    run(backend.write_bytes("tiny", b"x"))
    run(backend.write_bytes("empty-file", b""))
    run(backend.create_dir_all("empty/nested"))
    os.chmod(ws / "raw" / "random", 0o751)
    os.chmod(ws / "empty" / "nested", 0o700)
    os.utime(ws / "tiny", ns=(1_000_000_000, 1_234_567_890_123))
    os.symlink("../text/zstd", ws / "raw" / "link")


@pytest.mark.parametrize("kernel_copy", [True, False], ids=["copy_file_range", "pwrite"])
@pytest.mark.parametrize("threads", [1, 2])
def test_checkout_keeps_bytes_modes_mtimes_links_and_empty_dirs(
    provider: LocalProvider,
    backend: LocalBackend,
    monkeypatch: pytest.MonkeyPatch,
    kernel_copy: bool,
    threads: int,
) -> None:
    populate(backend)
    original = tree_of(backend.local_path)
    ref = run(backend.checkpoint())
    monkeypatch.setattr(copying, "_kernel_copy", kernel_copy)
    assert ref.provider_snapshot_id is not None
    body = provider.blobs.get_manifest(ref.provider_snapshot_id)
    folder = provider.root / "manual-checkout"
    snapshots.materialise(
        provider.blobs, body, folder, provider.root / "probe.clock", threads=threads
    )
    assert tree_of(folder) == original


def test_checkout_uses_copy_file_range_for_raw_chunks(
    provider: LocalProvider, backend: LocalBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    populate(backend)
    ref = run(backend.checkpoint())
    copied: list[int] = []
    real = os.copy_file_range

    def counting(src: int, dst: int, count: int, *offsets: int) -> int:
        n = real(src, dst, count, *offsets)
        copied.append(n)
        return n

    monkeypatch.setattr(os, "copy_file_range", counting)
    child = run(provider.checkout(ref, "rt-2"))
    assert sum(copied) >= 2 * MiB  # the random file's chunks went through the kernel
    assert (child.local_path / "raw" / "random").read_bytes() == (
        backend.local_path / "raw" / "random"
    ).read_bytes()


def test_checkout_falls_back_when_the_kernel_refuses_to_copy(
    provider: LocalProvider, backend: LocalBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    populate(backend)
    original = tree_of(backend.local_path)
    ref = run(backend.checkpoint())

    def refusing(*args: int) -> int:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "copy_file_range", refusing)
    child = run(provider.checkout(ref, "rt-2"))
    assert tree_of(child.local_path) == original


def test_a_damaged_raw_chunk_fails_the_checkout_and_leaves_nothing(
    provider: LocalProvider, backend: LocalBackend
) -> None:
    """The kernel copy checks the chunk's name first: damaged bytes never reach a file."""
    populate(backend)
    ref = run(backend.checkpoint())
    assert ref.provider_snapshot_id is not None
    body = provider.blobs.get_manifest(ref.provider_snapshot_id)
    entry = next(f for f in body["files"] if f["path"] == "raw/random")
    chunk = Path(provider.blobs.chunk_file(entry["chunks"][0]))
    raw = bytearray(chunk.read_bytes())
    assert raw[:1] == CODEC_RAW
    raw[1000] ^= 0xFF
    chunk.chmod(0o600)
    chunk.write_bytes(bytes(raw))
    before = sorted(p.name for p in provider.root.iterdir())
    with pytest.raises(BackendError, match="does not match its content hash"):
        run(provider.checkout(ref, "rt-2"))
    assert sorted(p.name for p in provider.root.iterdir()) == before


def test_run_parallel_does_not_wait_for_a_helper_busy_elsewhere() -> None:
    """A call whose helper is queued behind another call's blocked jobs finishes alone."""
    release = threading.Event()
    both_started = threading.Barrier(3, timeout=30)

    def blocking(n: int) -> int:
        both_started.wait()
        assert release.wait(60)
        return n

    other = threading.Thread(
        target=lambda: parallel.run_parallel(blocking, [0, 1], threads=2), daemon=True
    )
    other.start()
    done = threading.Event()
    results: list[list[int]] = []

    def second_call() -> None:
        results.append(parallel.run_parallel(lambda n: n + 1, list(range(10)), threads=2))
        done.set()

    try:
        both_started.wait()  # the other call's thread and the only helper are both blocked
        threading.Thread(target=second_call, daemon=True).start()
        assert done.wait(30), "the second call waited for a helper busy elsewhere"
        assert results == [list(range(1, 11))]
    finally:
        release.set()
        other.join(30)
