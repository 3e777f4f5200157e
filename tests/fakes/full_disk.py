"""A TEST DOUBLE of a filling disk under the blob store: chunk storage with little room.

`FillingDiskChunks` is the real `LocalDiskChunks` (files in the store's folder), plugged in
through the store's seam (`BlobStore(root, storage=...)`), on a pretend disk of `size`
bytes: a staged chunk that would make its files (chunks and staging) take more fails as a
real disk's write does, with ENOSPC, which the store turns into BlobStorageFull. Files
removed give their room back, as on a disk. It lets the full-disk behaviour be
tested where no small filesystem can be mounted (tests/support/small_disk.py needs root),
and shows that a second kind of chunk storage plugs in without touching a caller.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Sequence
from pathlib import Path

from ditto_jupyter.core.blobs import LocalDiskChunks
from ditto_jupyter.core.blobs.errors import os_failure, place_of
from ditto_jupyter.core.blobs.local_disk import DiskBatch


class FillingDiskChunks(LocalDiskChunks):
    """Local chunk files on a pretend disk of `size` bytes."""

    def __init__(self, root: Path, *, size: int) -> None:
        super().__init__(root, place=place_of(root))
        self.size = size
        self.refused = 0
        self._lock = threading.Lock()

    @property
    def used(self) -> int:
        """Bytes the chunk files and the staged files take now."""
        folders = (self.chunks, self.staging)
        return sum(p.stat().st_size for f in folders for p in f.rglob("*") if p.is_file())

    def take(self, size: int) -> bool:
        """Whether `size` more bytes fit."""
        with self._lock:
            if self.used + size > self.size:
                self.refused += 1
                return False
            return True

    def batch(self, *, durable: bool) -> DiskBatch:
        return FillingDiskBatch(self, durable=durable)


class FillingDiskBatch(DiskBatch):
    """A batch whose staged writes fail with ENOSPC once its storage's room is used up."""

    def __init__(self, storage: FillingDiskChunks, *, durable: bool) -> None:
        super().__init__(storage, durable=durable)
        self._disk = storage

    def add(self, name: str, parts: Sequence[bytes | memoryview]) -> None:
        if not self._disk.take(sum(len(part) for part in parts)):
            error = OSError(errno.ENOSPC, "No space left on device")
            raise os_failure(error, self._disk.place, f"writing chunk {name}")
        super().add(name, parts)
