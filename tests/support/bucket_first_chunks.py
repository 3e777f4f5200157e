"""Chunk storage whose committed chunks live in the bucket only: the blob store's suite on it.

`BucketFirstChunks` is the product's `ReplicatedChunks` with its cache at zero: when a bulk
write commits, every chunk it named is put in the bucket (create-only) at once, recorded in
the ledger, and its local file removed. Every later read of a big chunk is then a read
through to the real S3 server, and every `exists` a ledger or bucket answer, so the blob
store's own tests (`tests/core/test_blobs_on_object_store.py`) run against the object
store rather than the local disk. Not a fake: the bucket is the real gateway; only the
eviction policy is the test's (the product evicts least recently used beyond a bound).
"""

from __future__ import annotations

from collections.abc import Sequence

from ditto_jupyter.core.blobs.local_disk import LocalDiskChunks
from ditto_jupyter.core.blobs.object_store import ObjectStore
from ditto_jupyter.core.blobs.replica_ledger import ObjectKind, ReplicaLedger
from ditto_jupyter.core.blobs.replicated_chunks import CachedBatch, ReplicatedChunks, chunk_key


class BucketFirstBatch(CachedBatch):
    """A batch that, once committed, moves what it named to the bucket."""

    def __init__(self, storage: BucketFirstChunks, durable: bool) -> None:
        super().__init__(storage.local.batch(durable=durable), storage.cache)
        self._storage = storage

    def close(self, *, committed: bool) -> None:
        named = self.published if committed else []
        super().close(committed=committed)
        self._storage.move_to_bucket(named)


class BucketFirstChunks(ReplicatedChunks):
    """`ReplicatedChunks` that keeps no committed chunk on the local disk."""

    def __init__(self, local: LocalDiskChunks, ledger: ReplicaLedger, bucket: ObjectStore) -> None:
        super().__init__(local, ledger, bucket, cache_bytes=None)
        self.moved = 0

    def batch(self, *, durable: bool) -> BucketFirstBatch:
        return BucketFirstBatch(self, durable)

    def keep(self, name: str, stored: bytes) -> None:
        """A chunk read through is not kept either: the next read goes to the bucket too."""

    def move_to_bucket(self, names: Sequence[str]) -> None:
        """Put these chunks in the bucket, record them, and remove their local files."""
        assert self.bucket is not None
        for name in names:
            self.bucket.put_new(chunk_key(name), self.local.get(name))
        self.ledger.record(ObjectKind.CHUNK, names)
        for name in names:
            self.local.delete(name)
        self.moved += len(names)
