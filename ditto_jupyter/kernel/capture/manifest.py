"""The kernel-namespace manifest: its kind, version and the names of its entries.

One checkpoint is one signed blob-store manifest:

    {"kind": "kernel-namespace", "version": 1, "runtime_id": ..., "chunk_size": ...,
     "components": [{"names", "types", "summaries", "digests", "stream": STORED,
                     "buffers": [STORED + kind, readonly], "slots"?}],
     "parts": [part manifest id], "manifests": [part manifest id],
     "modules": {name: module}, "namespace_refs": [name], "unrestorable": [...],
     "chunks": [every chunk id the components listed here reference]}

where `summaries` and `digests` map each name to its short description and to a hash of
the component's chunk names (`summaries`; what the server lists and compares without
unpickling); `slots`, when present, gives each name's place among the values the stream
loads (a stream kept from an earlier capture also holds the old values of names bound anew
since: a restore loads them and binds none of them); and STORED is `{"size", "chunks",
"fps"}`: the chunk ids of one byte string and the XXH3-128 fingerprints of those chunks
(what the chunk memo learns from). `runtime_id` is the runtime the capture was made for:
the server accepts a kernel's own capture as a new checkpoint only for that runtime.
Manifests written before it lack it and restore as ever. `autocheckpoint_keep`, when
present, says `%autocheckpoint` was on (keeping that many) when the kernel was captured: a
kernel that a resume or a checkout restores it into turns it on again.

A small namespace keeps its components inline. A larger one (more than `INLINE_MAX`
components, or one component over `BIG_COMPONENT` chunks) stores them in *parts*: signed
child manifests `{"kind": "kernel-namespace-part", "version": 1, "components": [...],
"chunks": [...]}` listed in order under `"parts"` (and under `"manifests"`, so garbage
collection keeps them). Parts are content-addressed like every manifest, so a part whose
components did not change is the parent's part, stored once: a checkpoint after a small
change writes one part and a short top manifest instead of every component's entry. Part
boundaries depend only on the names of the components (a boundary after a name whose CRC-32
is 0 modulo `PART_SPREAD`, or after `PART_MAX` components), so a new or changed variable
moves few other boundaries; a big component stands in a part of its own. Manifests of 1 KiB
or more are stored zstd-compressed by the blob store.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any

from ditto_jupyter.core.blobs import NAMESPACE_MANIFEST_KIND, BlobError, BlobStore
from ditto_jupyter.core.namespace_manifest import NAMESPACE_PART_KIND, NAMESPACE_VERSION

MANIFEST_KIND = NAMESPACE_MANIFEST_KIND
#: The key of the kernel's `%autocheckpoint` setting when it was captured (how many kept),
#: absent while it was off: a resumed or checked-out kernel takes it up again.
AUTOCHECKPOINT_KEY = "autocheckpoint_keep"
MANIFEST_VERSION = NAMESPACE_VERSION
PART_KIND = NAMESPACE_PART_KIND
#: Up to this many components stay inline in the manifest.
INLINE_MAX = 16
#: A component referencing more chunks than this is big: it gets a part of its own.
BIG_COMPONENT = 16
#: A part ends after about one component in this many (chosen by name)...
PART_SPREAD = 8
#: ... and after this many at most.
PART_MAX = 2 * PART_SPREAD

#: Kinds of a component's out-of-band buffers: a pickle protocol-5 buffer (numpy, pandas,
#: arrow data), or a big bytes / bytearray object taken out of the stream.
BUFFER_PICKLE = "pickle"
BUFFER_BYTES = "bytes"
BUFFER_BYTEARRAY = "bytearray"


def _chunk_count(component: dict[str, Any]) -> int:
    return len(component["stream"]["chunks"]) + sum(len(b["chunks"]) for b in component["buffers"])


def uses_parts(components: list[dict[str, Any]]) -> bool:
    """Whether a capture stores these components in parts rather than inline."""
    return len(components) > INLINE_MAX or any(_chunk_count(c) > BIG_COMPONENT for c in components)


def split_into_parts(components: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Components (sorted by name) cut into parts at name-chosen boundaries."""
    parts: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    for component in components:
        big = _chunk_count(component) > BIG_COMPONENT
        if big and current:
            parts.append(current)
            current = []
        current.append(component)
        chosen = zlib.crc32(component["names"][0].encode()) % PART_SPREAD == 0
        if big or chosen or len(current) >= PART_MAX:
            parts.append(current)
            current = []
    if current:
        parts.append(current)
    return parts


def part_body(components: list[dict[str, Any]]) -> dict[str, Any]:
    """The manifest body of one part."""
    chunks: dict[str, None] = {}
    for stored in _entries(components):
        chunks.update(dict.fromkeys(stored["chunks"]))
    return {
        "kind": PART_KIND,
        "version": MANIFEST_VERSION,
        "components": components,
        "chunks": list(chunks),
    }


def load_manifest(blobs: BlobStore, manifest_id: str) -> dict[str, Any]:
    """A kernel-namespace manifest, signature checked (ManifestSignatureError otherwise),
    with the components of its parts (each signature checked too) in `"components"`."""
    body = blobs.get_manifest(manifest_id)
    if body.get("kind") != MANIFEST_KIND or body.get("version") != MANIFEST_VERSION:
        raise BlobError(f"manifest {manifest_id} is not a kernel-namespace manifest")
    part_ids = body.get("parts") or []
    if not part_ids:
        return body
    components = list(body.get("components", []))
    for part_id in part_ids:
        part = blobs.get_manifest(part_id)
        if part.get("kind") != PART_KIND or part.get("version") != MANIFEST_VERSION:
            raise BlobError(f"manifest {part_id} is not a part of kernel-namespace {manifest_id}")
        components.extend(part["components"])
    return {**body, "components": components}


def _entries(components: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for component in components:
        yield component["stream"]
        yield from component["buffers"]


def stored_entries(body: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every stored byte string of a (loaded) manifest: each component's stream and buffers."""
    yield from _entries(body.get("components", []))
