"""The errors of the blob store, and how a failure of the disk under it becomes one.

Damage is a `BlobError` of its own kind: a chunk that no longer matches its name, a
manifest whose signature fails. A failing disk is not damage:

- no room left (ENOSPC, EDQUOT, SQLite's "database or disk is full") is `BlobStorageFull`,
  the control plane's `StorageFull` (HTTP 507);
- any other OS or SQLite failure (EIO, a read-only remount, a lock held too long) is
  `BlobStoreUnavailable`, the control plane's `StoreUnavailable` (HTTP 503): the store
  could not be read or written, which is neither bad input nor a backend's fault
  (`BackendError` is for providers: E2B, a workspace, a kernel);
- an object store that cannot be reached, refuses the credentials or has no such bucket
  is `ObjectStoreUnavailable`, a `BlobStoreUnavailable` (HTTP 503) whose sentence names
  which of those failed.

What the object store holds can be wrong too, and that is neither: a manifest fetched from
it that fails its signature or its id (`ManifestRefused`), or an object a replicated
checkpoint relies on that is gone from it (`ObjectMissing`), are the control plane's
`BackendError` (HTTP 502: the store upstream answered something unusable), each naming
the object and where. A prefix of the bucket that another deployment owns is a
`PrefixOwnedElsewhere`, the control plane's `ConfigurationError` (HTTP 503).

Both are `BlobError`s too, so code that handles blob-store failures keeps handling them,
and both are `DittoError`s, so every front end shows them as one line.
"""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

from ditto_jupyter.core.errors import (
    BackendError,
    ConfigurationError,
    StorageFull,
    StoreUnavailable,
)

#: OS error numbers that mean "no room left" (a full disk, or a quota reached).
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


class BlobError(Exception):
    """Base of blob-store failures."""


class BlobNotFound(BlobError):
    """A chunk or manifest that is not (or no longer) in the store."""


class BlobIntegrityError(BlobError):
    """A chunk whose content no longer matches its BLAKE3 name."""


class ManifestSignatureError(BlobError):
    """A manifest whose HMAC signature fails: it is refused, never loaded."""


class BlobStorageFull(BlobError, StorageFull):
    """The disk holding the blob store has no room left; nothing of the write was kept."""


class BlobStoreUnavailable(BlobError, StoreUnavailable):
    """The disk under the blob store failed a read or write (not a full disk, not damage)."""


class ObjectStoreUnavailable(BlobStoreUnavailable):
    """The object store holding the blob store's replica failed a request (unreachable,
    credentials refused, no such bucket, or an error answer): nothing it was asked to keep
    is counted as kept there."""


class NotReplicated(BlobNotFound, StoreUnavailable):
    """A manifest neither here nor in the object store: the server that wrote it has not
    replicated it (yet). HTTP 503: it may be there later."""


class ManifestRefused(ManifestSignatureError, BackendError):
    """A manifest fetched from the object store that fails its signature (damaged, or
    signed with another deployment's secret) or does not match its id (swapped): refused,
    nothing of it loaded. HTTP 502."""


class ObjectMissing(BlobNotFound, BackendError):
    """An object the object store held and no longer holds: a manifest of a checkpoint
    recorded `replicated`, or a chunk a manifest in the bucket lists (a manifest is put
    only after all it lists). Deleted since, by a collector or by hand. HTTP 502."""


class BlobSettingError(BlobError, ConfigurationError):
    """A setting of the object store is wrong (`blob_store_url`, `blob_store_endpoint`,
    `blob_secret_file`, `checkpoint_durability`): the message names it and what is wrong."""


class PrefixOwnedElsewhere(BlobSettingError):
    """The bucket prefix belongs to another deployment (`prefix_owner`): this one neither
    uploads, fetches nor collects there. HTTP 503, with the line naming the setting."""


#: The errors of a failing disk under the store (not damage, not bad input): callers that
#: turn blob-store failures into errors of their own let these through as they are.
DISK_FAILURES: tuple[type[BlobError], ...] = (BlobStorageFull, BlobStoreUnavailable)


def place_of(root: Path) -> str:
    """How messages name a folder of the data directory (`<data dir>/blobs`, or
    `<data dir>/workspaces`): by the data directory; any other folder by itself."""
    if root.name in ("blobs", "workspaces"):
        return f"the data directory {root.parent}"
    return f"the folder {root}"


def full_disk(place: str) -> BlobStorageFull:
    """The one-sentence error of a write that found no room."""
    return BlobStorageFull(
        f"no space left on the disk holding {place}: nothing was saved; "
        "free some space there and try again"
    )


def os_failure(error: OSError, place: str, doing: str) -> BlobError:
    """An OS error of the disk under a blob store, as the blob-store error it means."""
    if error.errno in FULL_ERRNOS:
        return full_disk(place)
    reason = error.strerror or str(error)
    return BlobStoreUnavailable(f"{doing} failed on the disk holding {place}: {reason}")


def is_full(error: sqlite3.Error) -> bool:
    """Whether SQLite failed for want of room (SQLITE_FULL)."""
    code = getattr(error, "sqlite_errorcode", None)  # Python 3.11+
    if code is not None:
        return bool(code & 0xFF == sqlite3.SQLITE_FULL)
    return "database or disk is full" in str(error)


def sqlite_failure(error: sqlite3.Error, place: str, doing: str) -> BlobError:
    """A SQLite error of the object index, as the blob-store error it means: a full disk,
    a damaged file (a plain BlobError, which `ditto doctor` reports), or a disk that failed."""
    if is_full(error):
        return full_disk(place)
    if isinstance(error, sqlite3.OperationalError):
        return BlobStoreUnavailable(f"{doing} failed on the disk holding {place}: {error}")
    return BlobError(f"{doing} failed: the blob index of {place} is damaged: {error}")
