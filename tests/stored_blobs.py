"""Reach into a blob store's object index, as a damaged or tampered store would look.

Manifests (and small chunks) are rows of `objects.db` under the blob store's root, not
files; tests that tamper with a stored manifest edit its row through these helpers.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from pathlib import Path


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
