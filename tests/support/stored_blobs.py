"""Reach into a blob store's object index, as a damaged or tampered store would look.

Manifests (and small chunks) are rows of `objects.db` under the blob store's root, not
files; tests that tamper with a stored manifest edit its row through these helpers.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import zstandard


def _index(blob_root: Path) -> contextlib.closing[sqlite3.Connection]:
    return contextlib.closing(sqlite3.connect(blob_root / "objects.db", isolation_level=None))


def manifest_document(blob_root: Path, manifest_id: str) -> bytes:
    """The stored document (signed JSON) of a manifest."""
    with _index(blob_root) as conn:
        row = conn.execute(
            "SELECT document FROM manifests WHERE id = ?", (bytes.fromhex(manifest_id),)
        ).fetchone()
    assert row is not None, f"manifest {manifest_id} is not stored"
    document = row[0]
    assert isinstance(document, bytes)
    return document


def write_manifest_document(blob_root: Path, manifest_id: str, document: bytes) -> None:
    """Overwrite a stored manifest's document."""
    with _index(blob_root) as conn:
        conn.execute(
            "UPDATE manifests SET document = ? WHERE id = ?",
            (document, bytes.fromhex(manifest_id)),
        )


def tamper_manifest(blob_root: Path, manifest_id: str, edit: Callable[[bytes], bytes]) -> bytes:
    """Rewrite a stored manifest's document with `edit`; the original document."""
    original = manifest_document(blob_root, manifest_id)
    write_manifest_document(blob_root, manifest_id, edit(original))
    return original


def manifest_body(blob_root: Path, manifest_id: str) -> dict[str, Any]:
    """The stored (signed) document of a manifest, parsed: {"body": ..., "signature": ...}."""
    document = manifest_document(blob_root, manifest_id)
    if document[:1] == b"Z":
        document = zstandard.ZstdDecompressor().decompress(document[1:])
    parsed = orjson.loads(document)
    assert isinstance(parsed, dict)
    return parsed


def delete_manifest_row(blob_root: Path, manifest_id: str) -> None:
    """Remove a manifest from the index, as a lost file would have been."""
    with _index(blob_root) as conn:
        conn.execute("DELETE FROM manifests WHERE id = ?", (bytes.fromhex(manifest_id),))


def stored_manifest_ids(blob_root: Path) -> set[str]:
    """Ids of every manifest the index holds."""
    with _index(blob_root) as conn:
        return {bytes(key).hex() for (key,) in conn.execute("SELECT id FROM manifests")}


def tamper_chunk(blob_root: Path, digest: str, edit: Callable[[bytes], bytes]) -> None:
    """Rewrite a stored chunk (codec byte + payload), in its row or in its file."""
    with _index(blob_root) as conn:
        row = conn.execute(
            "SELECT data FROM chunks WHERE digest = ?", (bytes.fromhex(digest),)
        ).fetchone()
        assert row is not None, f"chunk {digest} is not stored"
        if row[0] is not None:
            conn.execute(
                "UPDATE chunks SET data = ? WHERE digest = ?",
                (edit(bytes(row[0])), bytes.fromhex(digest)),
            )
            return
    path = blob_root / "chunks" / digest[:2] / digest
    path.write_bytes(edit(path.read_bytes()))


def delete_chunk(blob_root: Path, digest: str) -> None:
    """Lose a stored chunk: its row's inline data, or its file (the row stays, as a crash
    between them would leave it)."""
    with _index(blob_root) as conn:
        row = conn.execute(
            "SELECT data FROM chunks WHERE digest = ?", (bytes.fromhex(digest),)
        ).fetchone()
        if row is not None and row[0] is not None:
            conn.execute("DELETE FROM chunks WHERE digest = ?", (bytes.fromhex(digest),))
            return
    (blob_root / "chunks" / digest[:2] / digest).unlink()


def blob_store_state(blob_root: Path) -> dict[str, Any]:
    """Everything a blob store holds but the times of last use: its catalogue's rows (every
    chunk's references, size and inline bytes, every manifest's references and document),
    its chunk files and whatever its staging folder holds. Equal states: an unchanged store.
    """
    with _index(blob_root) as conn:
        chunks = sorted(
            (bytes(key).hex(), refs, size, data)
            for key, refs, size, data in conn.execute("SELECT digest, refs, size, data FROM chunks")
        )
        manifests = sorted(
            (bytes(key).hex(), refs, unchecked, document)
            for key, refs, unchecked, document in conn.execute(
                "SELECT id, refs, unchecked, document FROM manifests"
            )
        )
    files = {
        path.relative_to(blob_root).as_posix(): path.read_bytes()
        for path in sorted((blob_root / "chunks").rglob("*"))
        if path.is_file()
    }
    staging = sorted(p.relative_to(blob_root).as_posix() for p in (blob_root / "tmp").rglob("*"))
    return {"chunks": chunks, "manifests": manifests, "files": files, "staging": staging}
