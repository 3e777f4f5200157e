"""The seam of the blob store: where chunks too big for the catalogue keep their bytes.

A `BlobStore` is two parts. Its catalogue (`index`, one SQLite file beside the store's
secret) lists every chunk and manifest, holds each manifest's signed document and every
small chunk inline, and counts references. Its `ChunkStorage` keeps the stored form (codec
tag + payload) of every other chunk, by BLAKE3 name. The store decides what is kept, when
it is durable and when it is freed; the storage only keeps bytes:

- `batch()`: a bulk write, the one way chunks get in. Its puts are create-only: a name
  that is there already keeps its bytes, which are the same (content-addressed), so a
  retried or racing write is harmless;
- `get`, `exists`, `local_path`: reads;
- `delete`: garbage collection frees a chunk;
- `evicts`: whether the storage may let a recorded chunk's bytes go on its own (a bounded
  cache of an object store), so that a stored manifest no longer proves its chunks' bytes
  exist (see `BlobStore.unbacked_chunks`);
- `stale_batches`: the batches of writers that died, for garbage collection to clear.

`local_disk.LocalDiskChunks` is the one implementation today (`chunks/ab/<hex>` files).
Another place to keep chunks (an object store) is a new module implementing these two
protocols; no caller of `BlobStore` changes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol


class ChunkBatch(Protocol):
    """Chunks put together: staged, made durable by one sync, then named in one step.

    The store drives it: `add` every chunk (from any thread), `sync` once, then inside the
    catalogue's write transaction `publish`, which names them; when that transaction
    fails, `unpublish` (in a new one) takes back the names that no catalogue row records.
    `close` forgets the staging, whatever happened.
    """

    def add(self, name: str, parts: Sequence[bytes | memoryview]) -> None:
        """Stage the stored form of one chunk (the concatenation of `parts`)."""
        ...

    def __len__(self) -> int:
        """Chunks staged."""
        ...

    def staged(self, name: str) -> str | None:
        """The file holding a staged chunk's stored form until `publish` (another process
        may read it: a kernel restoring what a fetch brings), if it has one."""
        ...

    def sync(self) -> None:
        """Make the bytes of every staged chunk durable (not yet under their names)."""
        ...

    def publish(self) -> None:
        """Give every staged chunk its name, create-only, durably."""
        ...

    def unpublish(self, recorded: set[str]) -> None:
        """Take back the names `publish` created, except those in `recorded`."""
        ...

    @property
    def published(self) -> list[str]:
        """The names `publish` created (not the ones that were there already)."""
        ...

    def close(self, *, committed: bool) -> None:
        """Forget the staging: staged chunks that were not published are gone. After a
        failed commit (`committed=False`), names still published are left listed for
        `ChunkStorage.stale_batches`."""
        ...


class StaleBatch(Protocol):
    """What a writer that died left behind: names it may have published, its staging."""

    @property
    def names(self) -> list[str]:
        """The chunks it may have named without the catalogue ever recording them."""
        ...

    def remove(self) -> None:
        """Forget its staging."""
        ...


class ChunkStorage(Protocol):
    """Where a blob store keeps the stored form of its big chunks, by BLAKE3 name."""

    @property
    def place(self) -> str:
        """What messages call the place ("the data directory /x", a bucket URL)."""
        ...

    @property
    def evicts(self) -> bool:
        """Whether a recorded chunk's bytes may go without garbage collection (evicted
        from a cache whose copy elsewhere can be collected since)."""
        ...

    def batch(self, *, durable: bool) -> ChunkBatch:
        """A new bulk write; `durable=False` skips every sync (tests, benchmarks)."""
        ...

    def get(self, name: str) -> bytes:
        """The stored form of a chunk; BlobNotFound when it is not there."""
        ...

    def exists(self, name: str) -> bool:
        """Whether the chunk is there."""
        ...

    def local_path(self, name: str) -> str:
        """A file on this machine holding the chunk's stored form, to read or kernel-copy
        from; when no such file exists, readers `get` it instead."""
        ...

    def delete(self, name: str) -> bool:
        """Free a chunk; False when it was not there."""
        ...

    def drop_corrupt(self, name: str) -> bool:
        """Free a local copy that failed its check when another copy exists to read again
        (the bucket's); whether it did. The only copy of a chunk is never dropped."""
        ...

    def stale_batches(self, cutoff: float) -> Iterator[StaleBatch]:
        """Batches whose writers died before `cutoff` (Unix seconds), for collection."""
        ...
