"""The errors of the blob store (`ditto_jupyter.core.blobs` re-exports them)."""

from __future__ import annotations


class BlobError(Exception):
    """Base of blob-store failures."""


class BlobNotFound(BlobError):
    """A chunk or manifest that is not (or no longer) in the store."""


class BlobIntegrityError(BlobError):
    """A chunk whose content no longer matches its BLAKE3 name."""


class ManifestSignatureError(BlobError):
    """A manifest whose HMAC signature fails: it is refused, never loaded."""
