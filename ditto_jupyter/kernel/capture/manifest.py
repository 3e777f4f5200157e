"""The kernel-namespace manifest: its kind, version and the names of its entries.

One checkpoint is one signed blob-store manifest:

    {"kind": "kernel-namespace", "version": 1, "runtime_id": ..., "chunk_size": ...,
     "components": [{"names", "types", "stream": STORED, "buffers": [STORED + kind, readonly]}],
     "modules": {name: module}, "namespace_refs": [name], "unrestorable": [...],
     "chunks": [every chunk id]}

where STORED is `{"size", "chunks", "fps"}`: the chunk ids of one byte string and the
XXH3-128 fingerprints of those chunks (what the chunk memo learns from). `runtime_id` is the
runtime the capture was made for: the server accepts a kernel's own capture as a new
checkpoint only for that runtime. Manifests written before it lack it and restore as ever.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ditto_jupyter.core.blobs import NAMESPACE_MANIFEST_KIND, BlobError, BlobStore

MANIFEST_KIND = NAMESPACE_MANIFEST_KIND
MANIFEST_VERSION = 1

#: Kinds of a component's out-of-band buffers: a pickle protocol-5 buffer (numpy, pandas,
#: arrow data), or a big bytes / bytearray object taken out of the stream.
BUFFER_PICKLE = "pickle"
BUFFER_BYTES = "bytes"
BUFFER_BYTEARRAY = "bytearray"


def load_manifest(blobs: BlobStore, manifest_id: str) -> dict[str, Any]:
    """A kernel-namespace manifest, signature checked (ManifestSignatureError otherwise)."""
    body = blobs.get_manifest(manifest_id)
    if body.get("kind") != MANIFEST_KIND or body.get("version") != MANIFEST_VERSION:
        raise BlobError(f"manifest {manifest_id} is not a kernel-namespace manifest")
    return body


def stored_entries(body: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every stored byte string of a manifest: each component's stream and buffers."""
    for component in body.get("components", []):
        yield component["stream"]
        yield from component["buffers"]
