"""Garbage collection of a blob store: its cost follows the garbage, not the store.

Two kinds of candidates, both found through partial indexes of the object index:

1. Manifests nobody has vouched for (`unchecked`): new ones whose checkpoint has not marked
   them referenced (a capture that failed, a self-capture the server refused) and ones
   whose references may have gone (delete-snapshot marks them). For each batch the caller
   says which a checkpoint still references; the others are deleted, giving back the
   references they held on chunks and child manifests.
2. Chunks no manifest lists (`refs = 0`).

Anything touched (written or reused) within the grace period is kept. Every decision is
re-checked inside the write transaction that deletes: a chunk gaining a reference, or a
manifest reused or vouched for, between the query and the delete is never deleted.
Batches are short transactions, so writers in other threads and processes wait at most
one batch. Killed at any point, the index is as after the last whole batch; a chunk file
unlinked by a batch that never committed belongs to a row that is garbage anyway (no
manifest lists it, and storing the chunk again writes the file again). Last, what writers
that died left in the chunk storage's staging is cleared (`clear_stale_temp_files`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ditto_jupyter.core.blobs.index import hex_of, key_of

if TYPE_CHECKING:
    from ditto_jupyter.core.blobs.store import BlobStore

#: Objects examined per transaction.
BATCH = 256

#: Which of some manifest ids a checkpoint references (asked by garbage collection).
ReferenceCheck = Callable[[Sequence[str]], Collection[str]]


@dataclass(frozen=True)
class GcReport:
    """What a garbage collection freed."""

    freed_chunks: int
    freed_bytes: int
    freed_manifests: int


def collect(store: BlobStore, referenced: ReferenceCheck, *, grace_seconds: float) -> GcReport:
    """Free what no checkpoint references and was not touched within `grace_seconds`."""
    cutoff = time.time() - grace_seconds
    freed_manifests = 0
    while True:  # a freed manifest may leave children unreferenced: look again
        freed = _collect_manifests(store, referenced, cutoff)
        freed_manifests += freed
        if not freed:
            break
    freed_chunks, freed_bytes = _collect_chunks(store, cutoff)
    store.clear_stale_temp_files(cutoff)
    store.index.return_free_pages()
    return GcReport(freed_chunks, freed_bytes, freed_manifests)


def _collect_manifests(store: BlobStore, referenced: ReferenceCheck, cutoff: float) -> int:
    freed = 0
    after = b""
    while True:
        rows = store.index.read(
            "SELECT id FROM manifests WHERE unchecked = 1 AND id > ? AND touched < ? "
            "ORDER BY id LIMIT ?",
            (after, cutoff, BATCH),
        )
        if not rows:
            return freed
        keys = [key for (key,) in rows if isinstance(key, bytes)]
        ids = [hex_of(key) for key in keys]
        live = set(referenced(ids))
        with store.index.write() as conn:
            conn.executemany(
                "UPDATE manifests SET unchecked = 0 WHERE id = ?",
                [(key_of(m),) for m in ids if m in live],
            )
            for manifest_id in ids:
                if manifest_id in live:
                    continue
                key = key_of(manifest_id)
                row = conn.execute(
                    "DELETE FROM manifests WHERE id = ? AND unchecked = 1 AND refs = 0 "
                    "AND touched < ? RETURNING document",
                    (key, cutoff),
                ).fetchone()
                if row is not None:
                    store.release_references(conn, manifest_id, row[0])
                    freed += 1
                else:  # kept by a parent manifest: it gives it back when it goes
                    conn.execute(
                        "UPDATE manifests SET unchecked = 0 WHERE id = ? AND refs > 0", (key,)
                    )
        after = keys[-1]


def _collect_chunks(store: BlobStore, cutoff: float) -> tuple[int, int]:
    freed = freed_bytes = 0
    while True:
        rows = store.index.read(
            "SELECT digest FROM chunks WHERE refs = 0 AND touched < ? LIMIT ?", (cutoff, BATCH)
        )
        if not rows:
            return freed, freed_bytes
        with store.index.write() as conn:
            for (key,) in rows:
                assert isinstance(key, bytes)
                row = conn.execute(
                    "DELETE FROM chunks WHERE digest = ? AND refs = 0 AND touched < ? "
                    "RETURNING size, data IS NULL",
                    (key, cutoff),
                ).fetchone()
                if row is None:
                    continue
                freed += 1
                freed_bytes += int(row[0])
                if row[1]:
                    store.storage.delete(hex_of(key))
