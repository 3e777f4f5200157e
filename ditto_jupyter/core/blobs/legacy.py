"""Import a blob store written by an older release into the object index, in place.

The old layout kept one file per manifest (`manifests/<id>.json`) and one file per chunk.
The first process that opens such a store moves every manifest, and every chunk under the
small-object limit, into `objects.db`, counts the references each manifest holds, and
registers the remaining chunk files. It works in batches, each one transaction committed
durably before the files it imported are removed, so a process killed half way leaves a
store that the next opening finishes importing (nothing is counted twice: an object
already in the index is skipped). `manifests/` is removed last; while it exists, every
opening imports what is left in it. Imported manifests start unchecked: the first
collection checks them against the store once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

import orjson
import zstandard

from ditto_jupyter.core.blobs.index import SMALL_OBJECT_LIMIT, key_of

if TYPE_CHECKING:
    from ditto_jupyter.core.blobs.store import BlobStore

#: Files imported per transaction.
BATCH = 256
_log = logging.getLogger(__name__)
_HEX = frozenset("0123456789abcdef")


def _is_id(value: object) -> bool:
    return isinstance(value, str) and len(value) == 64 and _HEX.issuperset(value)


def import_legacy_layout(store: BlobStore) -> None:
    """Move the old layout's manifests and small chunks of `store` into its index."""
    folder = store.root / "manifests"
    names = sorted(path.stem for path in folder.glob("*.json") if _is_id(path.stem))
    for start in range(0, len(names), BATCH):
        imported: list[Path] = []
        with store.index.write(durable=True) as conn:
            for manifest_id in names[start : start + BATCH]:
                _import_manifest(store, conn, manifest_id, imported)
        _remove(imported)
    _import_loose_chunks(store)
    try:
        folder.rmdir()
    except OSError as exc:  # not empty: something new arrived, imported next time
        _log.info("kept %s for the next opening to import: %s", folder, exc)


def _import_manifest(
    store: BlobStore, conn: sqlite3.Connection, manifest_id: str, imported: list[Path]
) -> None:
    """Import one manifest file (its children first), counting the references it holds."""
    path = store.legacy_manifest_file(manifest_id)
    key = key_of(manifest_id)
    if conn.execute("SELECT 1 FROM manifests WHERE id = ?", (key,)).fetchone() is not None:
        imported.append(path)
        return
    try:
        document = path.read_bytes()
        touched = path.stat().st_mtime
    except FileNotFoundError:  # another process imported it meanwhile
        return
    chunks, children = _listed(document)
    for child in children:
        _import_manifest(store, conn, child, imported)
    for digest in chunks:
        if _import_chunk(store, conn, digest, imported):
            conn.execute("UPDATE chunks SET refs = refs + 1 WHERE digest = ?", (key_of(digest),))
    conn.executemany(
        "UPDATE manifests SET refs = refs + 1 WHERE id = ?", [(key_of(c),) for c in children]
    )
    conn.execute(
        "INSERT INTO manifests (id, refs, touched, unchecked, document) VALUES (?, 0, ?, 1, ?)",
        (key, touched, document),
    )
    imported.append(path)


def _listed(document: bytes) -> tuple[list[str], list[str]]:
    """The chunks and child manifests a stored manifest lists (nothing when unreadable)."""
    try:
        if document[:1] == b"Z":  # a compressed manifest (codec.CODEC_ZSTD)
            document = zstandard.ZstdDecompressor().decompress(document[1:])
        body = orjson.loads(document).get("body")
    except (orjson.JSONDecodeError, AttributeError, zstandard.ZstdError):
        return [], []
    if not isinstance(body, dict):
        return [], []
    chunks, children = body.get("chunks", []), body.get("manifests", [])
    return (
        [c for c in dict.fromkeys(chunks) if _is_id(c)] if isinstance(chunks, list) else [],
        [m for m in dict.fromkeys(children) if _is_id(m)] if isinstance(children, list) else [],
    )


def _import_chunk(
    store: BlobStore, conn: sqlite3.Connection, digest: str, imported: list[Path]
) -> bool:
    """Register one chunk file (inline when small); False when it is not stored at all."""
    key = key_of(digest)
    path = Path(store.chunk_file(digest))
    row = conn.execute("SELECT data IS NOT NULL FROM chunks WHERE digest = ?", (key,)).fetchone()
    if row is not None:
        if row[0]:  # inline already: a copy left by an import that was killed
            imported.append(path)
        return True
    try:
        stat = path.stat()
        data = path.read_bytes() if stat.st_size < SMALL_OBJECT_LIMIT else None
    except FileNotFoundError:
        return False
    conn.execute(
        "INSERT INTO chunks (digest, refs, touched, size, data) VALUES (?, 0, ?, ?, ?)",
        (key, stat.st_mtime, stat.st_size, data),
    )
    if data is not None:
        imported.append(path)
    return True


def _import_loose_chunks(store: BlobStore) -> None:
    """Register the chunk files no manifest listed (garbage, once they are old enough)."""
    root = store.root / "chunks"
    digests = sorted(
        path.name for shard in root.iterdir() if shard.is_dir() for path in shard.iterdir()
    )
    digests = [d for d in digests if _is_id(d)]
    for start in range(0, len(digests), BATCH):
        imported: list[Path] = []
        with store.index.write(durable=True) as conn:
            for digest in digests[start : start + BATCH]:
                _import_chunk(store, conn, digest, imported)
        _remove(imported)


def _remove(paths: list[Path]) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
