"""Chunk storage with the object store behind the local disk: a bounded read-through cache.

`ReplicatedChunks` is a `ChunkStorage` (see `storage`). Chunks are written to the local
disk as `LocalDiskChunks` writes them, at disk speed; `replica` uploads them to the bucket
later (or before the checkpoint returns, as the deployment says). Reads come from the local
file; a chunk that is not there (evicted, or written by another server) is fetched from
the bucket and kept on the local disk again, so it is fetched once.

`ChunkCache` bounds the chunk files to `limit_bytes`, least recently used first. It only
ever evicts a chunk the ledger knows is in the bucket: a chunk that is not replicated yet is
the only copy, and stays whatever the bound. Nor does it evict one used in the last
`MIN_AGE_S`: a restore reads the chunks it has just made local. Small chunks live inline
in the catalogue (`index`) and are not counted.

A kernel of the server opens its own store on the same root with no bucket (it never gets
the credentials): there `exists` still counts chunks the ledger knows are in the bucket,
so a capture that lists an evicted chunk records it, and `get` of one says it is only in
the object store; the server fetches what a restore needs before the kernel reads it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence

from ditto_jupyter.core.blobs.errors import BlobNotFound, ObjectMissing
from ditto_jupyter.core.blobs.local_disk import DiskBatch, LocalDiskChunks, StaleDiskBatch
from ditto_jupyter.core.blobs.object_store import ObjectStore
from ditto_jupyter.core.blobs.replica_ledger import ObjectKind, ReplicaLedger

#: Seconds a chunk file is kept after its last use, whatever the bound.
MIN_AGE_S = 60.0
#: The object key of a chunk in the bucket (under the replica's prefix).
CHUNK_KEY = "chunks/{name}"
_log = logging.getLogger(__name__)


def chunk_key(name: str) -> str:
    """The key of chunk `name` in the bucket."""
    return CHUNK_KEY.format(name=name)


class ChunkCache:
    """The chunk files of one data directory, in least-recently-used order, kept under
    `limit_bytes` by evicting replicated ones (None: no bound, nothing tracked)."""

    def __init__(
        self,
        local: LocalDiskChunks,
        ledger: ReplicaLedger,
        limit_bytes: int | None,
        *,
        min_age_s: float = MIN_AGE_S,
    ) -> None:
        self._local = local
        self._ledger = ledger
        self.limit_bytes = limit_bytes
        self._min_age_s = min_age_s
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, tuple[int, float]] = OrderedDict()  # name -> size, used
        self._total = 0
        self._scanned = False
        self.evicted = 0

    @property
    def total_bytes(self) -> int:
        """Bytes of chunk files this cache counts."""
        with self._lock:
            self._scan()
            return self._total

    def _scan(self) -> None:
        """Learn the chunk files on disk, oldest first (once; the lock is held)."""
        if self._scanned:
            return
        found: list[tuple[float, str, int]] = []
        try:
            shards = list(os.scandir(self._local.chunks))
        except FileNotFoundError:
            shards = []
        for shard in shards:
            if not shard.is_dir(follow_symlinks=False):
                continue
            for entry in os.scandir(shard.path):
                try:
                    stat = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                found.append((stat.st_mtime, entry.name, stat.st_size))
        for used, name, size in sorted(found):
            self._entries[name] = (size, used)
            self._total += size
        self._scanned = True

    def use(self, names: Iterable[str]) -> None:
        """These chunks were just written or read: the most recently used now."""
        if self.limit_bytes is None:  # no bound: nothing to keep track of
            return
        now = time.time()
        with self._lock:
            self._scan()
            for name in names:
                entry = self._entries.pop(name, None)
                if entry is None:
                    try:
                        size = os.stat(self._local.local_path(name)).st_size
                    except FileNotFoundError:  # inline in the catalogue: not a file
                        continue
                    self._total += size
                else:
                    size = entry[0]
                self._entries[name] = (size, now)
        self.evict()

    def forget(self, name: str) -> None:
        """A chunk file went (garbage collection)."""
        with self._lock:
            entry = self._entries.pop(name, None)
            if entry is not None:
                self._total -= entry[0]

    def evict(self) -> int:
        """Evict replicated chunks, least recently used first, until under the bound;
        how many went."""
        if self.limit_bytes is None:
            return 0
        gone = 0
        with self._lock:
            self._scan()
            if self._total <= self.limit_bytes:
                return 0
            cutoff = time.time() - self._min_age_s
            old = [n for n, (_, used) in self._entries.items() if used < cutoff]
            replicated = self._ledger.known(ObjectKind.CHUNK, old) if old else set()
            for name in old:
                if self._total <= self.limit_bytes:
                    break
                if name not in replicated:
                    continue  # the only copy: kept until it is uploaded
                size, _ = self._entries.pop(name)
                self._total -= size
                if self._local.delete(name):
                    gone += 1
        self.evicted += gone
        if gone:
            _log.info("evicted %d replicated chunk(s) from the blob cache", gone)
        return gone


class CachedBatch:
    """A `LocalDiskChunks` batch that tells the cache what it named."""

    def __init__(self, batch: DiskBatch, cache: ChunkCache) -> None:
        self._batch = batch
        self._cache = cache

    def add(self, name: str, parts: Sequence[bytes | memoryview]) -> None:
        """Stage one chunk."""
        self._batch.add(name, parts)

    def __len__(self) -> int:
        return len(self._batch)

    def staged(self, name: str) -> str | None:
        """The staged file of a chunk (None once published)."""
        return self._batch.staged(name)

    def sync(self) -> None:
        """Make the staged bytes durable."""
        self._batch.sync()

    def publish(self) -> None:
        """Name the staged chunks (create-only)."""
        self._batch.publish()

    def unpublish(self, recorded: set[str]) -> None:
        """Take back the names `publish` created, except `recorded` ones."""
        self._batch.unpublish(recorded)

    @property
    def published(self) -> list[str]:
        """The names `publish` created."""
        return self._batch.published

    def close(self, *, committed: bool) -> None:
        """Forget the staging; a committed batch's chunks count in the cache."""
        named = self._batch.published if committed else []
        self._batch.close(committed=committed)
        if named:
            self._cache.use(named)


class ReplicatedChunks:
    """`ChunkStorage`: chunk files on the local disk, the object store behind them (see the
    module). With no `bucket` (a kernel's store) nothing is fetched."""

    def __init__(
        self,
        local: LocalDiskChunks,
        ledger: ReplicaLedger,
        bucket: ObjectStore | None = None,
        *,
        cache_bytes: int | None = None,
    ) -> None:
        self.local = local
        self.ledger = ledger
        self.bucket = bucket
        self.cache = ChunkCache(local, ledger, cache_bytes)
        self.fetched = 0  # chunks fetched by `get` (read-through)

    @property
    def place(self) -> str:
        """The local data directory (the bucket is named by errors of its own)."""
        return self.local.place

    @property
    def evicts(self) -> bool:
        """True: the cache lets chunks the bucket holds go, and collection may delete the
        bucket's copy since (a kernel's store counts too: its server's cache evicts)."""
        return True

    def batch(self, *, durable: bool) -> CachedBatch:
        """A bulk write into the local disk."""
        return CachedBatch(self.local.batch(durable=durable), self.cache)

    def get(self, name: str) -> bytes:
        """The chunk's stored form, from the local disk or else the bucket (kept then)."""
        try:
            stored = self.local.get(name)
        except BlobNotFound:
            if self.bucket is None:
                if self.ledger.known(ObjectKind.CHUNK, [name]):
                    raise BlobNotFound(
                        f"chunk {name} is only in the object store now (this server's cache "
                        "let it go); a restore through the server fetches it first"
                    ) from None
                raise
            try:
                stored = self.bucket.get(chunk_key(name))
            except BlobNotFound:  # only a chunk the bucket held is ever let go here
                raise ObjectMissing(
                    f"chunk {name} is missing from the object store {self.bucket.location}, "
                    "and this server has no copy: it was deleted from the bucket after it "
                    "was put there, by a collector or by hand"
                ) from None
            self.keep(name, stored)
            self.fetched += 1
            return stored
        self.cache.use([name])
        return stored

    def keep(self, name: str, stored: bytes) -> None:
        """Put a fetched chunk back on the local disk (no sync: the bucket has it)."""
        batch = self.local.batch(durable=False)
        try:
            batch.add(name, [stored])
            batch.sync()
            batch.publish()
        finally:
            batch.close(committed=True)
        self.cache.use([name])

    def exists(self, name: str) -> bool:
        """Whether the chunk is on the local disk or known to be in the bucket."""
        return self.local.exists(name) or bool(self.ledger.known(ObjectKind.CHUNK, [name]))

    def is_cached(self, name: str) -> bool:
        """Whether the chunk's file is on the local disk."""
        return self.local.exists(name)

    def local_path(self, name: str) -> str:
        """Where the chunk's file is (or would be) on the local disk."""
        return self.local.local_path(name)

    def delete(self, name: str) -> bool:
        """Free the chunk's local file (garbage collection); the bucket keeps its copy."""
        self.cache.forget(name)
        return self.local.delete(name)

    def drop_corrupt(self, name: str) -> bool:
        """Free a local copy that failed its check when the bucket holds the chunk, so that
        the next read or fetch brings it again (True); else keep it, the only copy."""
        if not self.ledger.known(ObjectKind.CHUNK, [name]):
            return False
        self.delete(name)
        return True

    def stale_batches(self, cutoff: float) -> Iterator[StaleDiskBatch]:
        """What local writers that died left."""
        return self.local.stale_batches(cutoff)
