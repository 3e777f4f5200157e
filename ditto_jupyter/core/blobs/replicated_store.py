"""Open a data directory's blob store with its replica in an object store.

The store itself is the local one (catalogue, chunk files, secret), on `ReplicatedChunks`
storage: the local disk as a bounded cache, the bucket behind it. The replica
(`BucketReplica`) uploads and fetches closures; the ledger (`replica.db`) records what is
known to be in the bucket and what waits for upload. The shared signing secret becomes the
store's key (`shared_secret`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ditto_jupyter.core.blobs.errors import BlobSettingError, os_failure, place_of
from ditto_jupyter.core.blobs.local_disk import LocalDiskChunks
from ditto_jupyter.core.blobs.object_store import ObjectStore, ObjectStoreLocation
from ditto_jupyter.core.blobs.replica import BucketReplica
from ditto_jupyter.core.blobs.replica_ledger import LEDGER_FILE, SqliteReplicaLedger
from ditto_jupyter.core.blobs.replicated_chunks import ReplicatedChunks
from ditto_jupyter.core.blobs.shared_secret import install_secret, read_secret_file
from ditto_jupyter.core.blobs.store import BlobStore
from ditto_jupyter.core.private import private_dir

#: Bytes of chunk files the local cache keeps by default.
DEFAULT_CACHE_BYTES = 10 << 30


@dataclass(frozen=True)
class ObjectStoreSettings:
    """How a deployment replicates its blob stores: where (`url`, `endpoint_url`,
    `region`), the shared signing secret's file, the local cache's bound (None: no bound)
    and where a checkpoint's bytes must be before it returns (`local`, `replicated`)."""

    url: str
    secret_file: Path | None = None
    endpoint_url: str | None = None
    region: str | None = None
    cache_bytes: int | None = DEFAULT_CACHE_BYTES
    durability: str = "local"

    def location(self) -> ObjectStoreLocation:
        """The bucket and prefix (BlobSettingError for a URL that is not one)."""
        return ObjectStoreLocation.parse(
            self.url, endpoint_url=self.endpoint_url, region=self.region
        )

    def secret(self) -> bytes:
        """The shared signing secret (BlobSettingError when it is not configured or not
        usable)."""
        if self.secret_file is None:
            raise BlobSettingError(
                "blob_secret_file (DITTO_BLOB_SECRET_FILE) is not set: servers that share "
                f"the object store {self.url} need one manifest signing secret; set it to a "
                "file of 32 random bytes or 64 hex digits that every server of the "
                "deployment reads"
            )
        return read_secret_file(self.secret_file)

    def check(self) -> None:
        """BlobSettingError naming the first setting that is wrong (nothing is opened)."""
        self.location()
        self.secret()
        if self.durability not in ("local", "replicated"):
            raise BlobSettingError(
                f"checkpoint_durability (DITTO_CHECKPOINT_DURABILITY) {self.durability!r} "
                "is neither 'local' nor 'replicated'"
            )

    def open(self, root: str | Path, *, durable: bool = True) -> BucketReplica:
        """The replicated blob store of the data directory's `root`."""
        self.check()
        return open_replicated_store(
            root,
            self.location(),
            secret=self.secret(),
            cache_bytes=self.cache_bytes,
            durable=durable,
        )


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
