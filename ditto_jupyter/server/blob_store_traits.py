"""The server's settings of the object store its blob store is replicated to.

A mixin of `DittoJupyterApp` (`c.DittoJupyterApp.blob_store_url = ...`); each trait
defaults to its DITTO_* environment variable (`core.environment`). Credentials are none of
them: they come from the standard AWS chain (`core.blobs.object_store`). What the
settings mean is in `control.replication` and docs/configuration.md.
"""

from __future__ import annotations

import os
from pathlib import Path

from traitlets import Enum, HasTraits, Integer, Unicode, default

from ditto_jupyter.core.blobs.replicated_store import DEFAULT_CACHE_BYTES, ObjectStoreSettings
from ditto_jupyter.core.environment import (
    BLOB_CACHE_BYTES_ENV,
    BLOB_SECRET_FILE_ENV,
    BLOB_STORE_ENDPOINT_ENV,
    BLOB_STORE_REGION_ENV,
    BLOB_STORE_URL_ENV,
    CHECKPOINT_DURABILITY_ENV,
)
from ditto_jupyter.core.errors import ConfigurationError


class BlobStoreTraits(HasTraits):
    """Where blobs are replicated, the shared signing secret, the cache, the durability."""

    blob_store_url = Unicode(
        config=True,
        help="Replicate the blob store to this S3-compatible object store, "
        "s3://bucket/prefix (default: $DITTO_BLOB_STORE_URL; empty: local disk only). "
        "Credentials come from the standard AWS chain.",
    )
    blob_store_endpoint = Unicode(
        config=True,
        help="Endpoint URL of a non-AWS object store, e.g. http://ceph:7480 "
        "(default: $DITTO_BLOB_STORE_ENDPOINT).",
    )
    blob_store_region = Unicode(
        config=True, help="Region of the object store (default: $DITTO_BLOB_STORE_REGION)."
    )
    blob_secret_file = Unicode(
        config=True,
        help="File with the manifest signing secret every server sharing the object store "
        "uses: 32 random bytes or 64 hex digits (default: $DITTO_BLOB_SECRET_FILE).",
    )
    blob_cache_bytes = Integer(
        min=0,
        config=True,
        help="Bytes of chunk files kept on the local disk; replicated ones beyond it are "
        "evicted, least recently used first (default: $DITTO_BLOB_CACHE_BYTES, else 10 GiB).",
    )
    checkpoint_durability = Enum(
        ["local", "replicated"],
        config=True,
        help="Where a checkpoint's bytes must be before it returns: 'local' (this disk; "
        "uploaded behind it) or 'replicated' (in the object store). A pause always waits "
        "for the object store (default: $DITTO_CHECKPOINT_DURABILITY, else local).",
    )

    @default("blob_store_url")
    def _default_blob_store_url(self) -> str:
        return os.environ.get(BLOB_STORE_URL_ENV, "")

    @default("blob_store_endpoint")
    def _default_blob_store_endpoint(self) -> str:
        return os.environ.get(BLOB_STORE_ENDPOINT_ENV, "")

    @default("blob_store_region")
    def _default_blob_store_region(self) -> str:
        return os.environ.get(BLOB_STORE_REGION_ENV, "")

    @default("blob_secret_file")
    def _default_blob_secret_file(self) -> str:
        return os.environ.get(BLOB_SECRET_FILE_ENV, "")

    @default("blob_cache_bytes")
    def _default_blob_cache_bytes(self) -> int:
        given = os.environ.get(BLOB_CACHE_BYTES_ENV) or ""
        if not given:
            return DEFAULT_CACHE_BYTES
        try:
            return int(given)
        except ValueError:
            raise ConfigurationError(
                f"blob_cache_bytes ({BLOB_CACHE_BYTES_ENV}) {given!r} is not a number of bytes"
            ) from None

    @default("checkpoint_durability")
    def _default_checkpoint_durability(self) -> str:
        return os.environ.get(CHECKPOINT_DURABILITY_ENV) or "local"

    def object_store(self) -> ObjectStoreSettings | None:
        """The object store the blob store is replicated to, if one is configured."""
        if not self.blob_store_url:
            return None
        return ObjectStoreSettings(
            url=self.blob_store_url,
            secret_file=Path(self.blob_secret_file) if self.blob_secret_file else None,
            endpoint_url=self.blob_store_endpoint or None,
            region=self.blob_store_region or None,
            cache_bytes=self.blob_cache_bytes,
            durability=self.checkpoint_durability,
        )
