"""Open a data directory's blob store with its replica in an object store.

The store itself is the local one (catalogue, chunk files, secret), on `ReplicatedChunks`
storage: the local disk as a bounded cache, the bucket behind it. The replica
(`BucketReplica`) uploads and fetches closures; the ledger (`replica.db`) records what is
known to be in the bucket and what waits for upload. The shared signing secret becomes the
store's key (`shared_secret`).
"""

from __future__ import annotations

from pathlib import Path

from ditto_jupyter.core.blobs.errors import os_failure, place_of
from ditto_jupyter.core.blobs.local_disk import LocalDiskChunks
from ditto_jupyter.core.blobs.object_store import ObjectStore, ObjectStoreLocation
from ditto_jupyter.core.blobs.replica import BucketReplica
from ditto_jupyter.core.blobs.replica_ledger import LEDGER_FILE, SqliteReplicaLedger
from ditto_jupyter.core.blobs.replicated_chunks import ReplicatedChunks
from ditto_jupyter.core.blobs.shared_secret import install_secret
from ditto_jupyter.core.blobs.store import BlobStore
from ditto_jupyter.core.private import private_dir


def open_replicated_store(
    root: str | Path,
    location: ObjectStoreLocation,
    *,
    secret: bytes,
    cache_bytes: int | None,
    durable: bool = True,
) -> BucketReplica:
    """The replica of the blob store in `root` (its `store` attribute is the store)."""
    root = Path(root)
    place = place_of(root)
    try:
        private_dir(root)
    except OSError as exc:
        raise os_failure(exc, place, f"creating {root}") from None
    install_secret(root, secret)
    ledger = SqliteReplicaLedger(root / LEDGER_FILE)
    storage = ReplicatedChunks(
        LocalDiskChunks(root, place=place), ledger, ObjectStore(location), cache_bytes=cache_bytes
    )
    store = BlobStore(root, durable=durable, create_secret=False, storage=storage)
    return BucketReplica(store)
