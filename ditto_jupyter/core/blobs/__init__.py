"""The blob store: content-addressed chunks and signed manifests, written in bulk.

Kernel namespaces and local workspace snapshots are stored here: byte strings split into
chunks named by their BLAKE3 hash (so a chunk already stored is never written again), and
manifests (signed JSON documents listing the chunks and child manifests they need).

Layout under the store's root (mode 0700, see `core.private`):

    objects.db              the catalogue (`index`): every manifest's signed document,
                            every small chunk inline, every chunk's and manifest's
                            reference count and last use
    chunks/ab/<blake3 hex>  a big chunk (stored size of SMALL_OBJECT_LIMIT or more), one
                            codec byte then its payload (`codec`): raw, zstd, or shuffled
                            then zstd (`shuffle`)
    secret                  the store's HMAC key, mode 0600, made on first use
    tmp/                    staging: one folder per bulk write in progress (`local_disk`)

A manifest is stored as `{"body": ..., "signature": HMAC-SHA256(secret, canonical body)}`
(zstd-compressed when that pays); its id is the BLAKE3 hash of the canonical body. A body
names its `"kind"`, must list every chunk it references under `"chunks"` and may list
child manifests under `"manifests"`. A checkpoint's variables are a
`NAMESPACE_MANIFEST_KIND` manifest whose signed body names the runtime it was captured for
(`"runtime_id"`; manifests written before that field lack it).

Modules, one job each:

- `store`: `BlobStore`, the one object per root that callers hold;
- `bulk`: `BulkWrite`, the one write path: stage chunks and manifests, sync once, then
  name and record them all in one catalogue transaction. A manifest is recorded only when
  every chunk it lists is durable, and a write that fails leaves the store as it was
  (`BlobStore.bulk_write()`; `put_chunk`/`put_bytes`/`put_manifest` are bulk writes too);
- `arrivals`: the log of a fetch still under way, which a restore reads each blob from as
  it lands, before the fetch is recorded (`BlobStore.reading_arrivals`);
- `index`: the catalogue (SQLite), shared by every process on the root;
- `storage`: the seam, `ChunkStorage`: where big chunks keep their bytes;
- `local_disk`: `LocalDiskChunks`, that storage on the local disk;
- `codec`, `shuffle`: how a chunk is stored;
- `gc`: collection, whose cost follows the garbage (references are counted as manifests
  come and go);
- `legacy`: the import of a store written by an older release (one file per manifest);
- `errors`: the error types, and how a failing disk becomes one (a full disk is
  `BlobStorageFull`, HTTP 507; any other OS failure `BlobStoreUnavailable`, HTTP 503).

The seam. The store decides what is kept, when it is durable and when it is freed; a
`ChunkStorage` only keeps the stored form of big chunks by name, through a small protocol:
a bulk write with create-only puts (`batch()`: add, sync once, publish), `get`, `exists`,
`local_path` (a file to kernel-copy from, when there is one), `delete`, and
`stale_batches` (what dead writers left, for collection). Another place to keep chunks,
such as an object store, is a new module implementing `ChunkStorage` and `ChunkBatch`,
passed as `BlobStore(root, storage=...)`; no caller changes. Manifests and reference counts
stay in the catalogue, whose SQL lives in this package alone.
"""

from __future__ import annotations

from ditto_jupyter.core.blobs.bulk import BulkWrite
from ditto_jupyter.core.blobs.codec import CHUNK_SIZE, CODEC_RAW, CODEC_ZSTD
from ditto_jupyter.core.blobs.errors import (
    BlobError,
    BlobIntegrityError,
    BlobNotFound,
    BlobStorageFull,
    BlobStoreUnavailable,
    ManifestSignatureError,
)
from ditto_jupyter.core.blobs.gc import GcReport, ReferenceCheck
from ditto_jupyter.core.blobs.index import SMALL_OBJECT_LIMIT
from ditto_jupyter.core.blobs.local_disk import LocalDiskChunks
from ditto_jupyter.core.blobs.shuffle import CODEC_SHUFFLE
from ditto_jupyter.core.blobs.storage import ChunkBatch, ChunkStorage, StaleBatch
from ditto_jupyter.core.blobs.store import (
    GRACE_SECONDS,
    MANIFEST_COMPRESS_MIN,
    NAMESPACE_MANIFEST_KIND,
    BlobStore,
    StoredBytes,
)

__all__ = [
    "CHUNK_SIZE",
    "CODEC_RAW",
    "CODEC_SHUFFLE",
    "CODEC_ZSTD",
    "GRACE_SECONDS",
    "MANIFEST_COMPRESS_MIN",
    "NAMESPACE_MANIFEST_KIND",
    "SMALL_OBJECT_LIMIT",
    "BlobError",
    "BlobIntegrityError",
    "BlobNotFound",
    "BlobStorageFull",
    "BlobStore",
    "BlobStoreUnavailable",
    "BulkWrite",
    "ChunkBatch",
    "ChunkStorage",
    "GcReport",
    "LocalDiskChunks",
    "ManifestSignatureError",
    "ReferenceCheck",
    "StaleBatch",
    "StoredBytes",
]
