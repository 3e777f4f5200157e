"""Many chunks into a durable blob store with one filesystem sync at the end, not one each.

A durable `BlobStore` fsyncs every chunk file it writes and the directory it renamed it
into: a workspace snapshot of 1,000 files pays for 2,000 journal commits. A `BulkWriter`
writes the same chunks through a non-durable store on the same directory and makes them
durable together in `sync()`: it fsyncs the few new chunk files (and their directories)
itself, or, when there are many, syncs the whole filesystem once (`syncfs`, Linux). The
caller records nothing (no manifest) before `sync()` has returned, so the promise stays
the durable store's: what a recorded manifest lists is on disk. A crash before the sync
leaves unrecorded chunk files, which garbage collection frees. Small chunks an object
index keeps inline are made durable by the durable store's own manifest commit, which
follows the sync.

One window stays open (the kernel capture's too): a crash can leave a chunk file under its
name whose bytes never reached the disk, and a later snapshot that finds the name reuses
it; reads and checkouts check every chunk's hash, so it is refused, never restored wrong.
Closing it needs the store to rename chunk files into place only after the sync, which
only `BlobStore` itself can do.

BulkWriter is safe to share between threads. (Starting each chunk's writeback early with
`sync_file_range`, as the kernel capture does, was measured here and dropped: the final
sync took 10-100 ms either way, and the extra open per chunk cost more.)
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any

from ditto_jupyter.core.blobs import BlobError, BlobStore

#: Up to this many new chunk files, `sync()` fsyncs each one; beyond, one `syncfs`.
FSYNC_EACH_LIMIT = 16


def _libc_function(name: str) -> Any:
    try:
        return getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):  # not Linux
        return None


_syncfs = _libc_function("syncfs")


def sync_filesystem(path: str | os.PathLike[str]) -> None:
    """Write back everything dirty on the filesystem holding `path` (`syncfs`)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if _syncfs(fd) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"syncfs of {path} failed: {os.strerror(error)}")
    finally:
        os.close(fd)


def fsync_path(path: str) -> None:
    """fsync one file or directory by name."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class BulkWriter:
    """Writes chunks into `durable`'s directory without per-chunk fsync; `sync()` at the end.

    `loose` is a non-durable store on the same root (the caller keeps one, so its
    per-thread state is reused). A store that is not durable is written directly and
    `sync()` does nothing.
    """

    def __init__(self, durable: BlobStore, loose: BlobStore) -> None:
        if loose.root != durable.root or loose.durable:
            raise BlobError("a BulkWriter needs a non-durable store on the same root")
        self.durable = durable.durable
        self._store = loose if self.durable else durable
        self._root = durable.root
        self._lock = threading.Lock()
        self._new_files: list[str] = []

    @property
    def pending_files(self) -> int:
        """New chunk files written since the last `sync()`."""
        with self._lock:
            return len(self._new_files)

    def put_chunk(self, data: bytes | memoryview, digest: str | None = None) -> tuple[str, int]:
        """Store one chunk unless it is already there; return (digest, bytes written)."""
        digest, written = self._store.put_chunk(data, digest)
        if written and self.durable:
            path = self._store.chunk_file(digest)
            if os.path.exists(path):  # not kept inline in an object index
                with self._lock:
                    self._new_files.append(path)
        return digest, written

    def has_chunk(self, digest: str) -> bool:
        """Whether the chunk is stored."""
        return self._store.has_chunk(digest)

    def sync(self) -> None:
        """Make every chunk written so far durable (files and the renames that named them)."""
        self._store.flush()  # forget the loose store's directory list: synced below
        with self._lock:
            files, self._new_files = self._new_files, []
        if not self.durable or not files:
            return
        if _syncfs is not None and len(files) > FSYNC_EACH_LIMIT:
            sync_filesystem(self._root)
            return
        for path in files:
            fsync_path(path)
        for folder in sorted({os.path.dirname(path) for path in files}):
            fsync_path(folder)
