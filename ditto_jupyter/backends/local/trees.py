"""A local workspace's files as a `FileTree`: a snapshot's, read from its manifest, or the
live ones, read from disk without storing anything.

A file's content is named by its chunk names (BLAKE3 hashes of its 1 MiB chunks), so a
snapshot's file and a live one compare by name, and the live tree names a file's chunks
the way a snapshot would: unchanged files (by the workspace's file index, as a snapshot
trusts it) take their names from the index, the others are read and hashed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ditto_jupyter.backends.base import TreeEntry
from ditto_jupyter.backends.local.paths import member
from ditto_jupyter.backends.local.snapshots import FileIndex, scan_workspace
from ditto_jupyter.core.blobs import BlobStore


def tree_entries(body: dict[str, Any]) -> dict[str, TreeEntry]:
    """The entries of a (signature-checked) workspace manifest, by path."""
    entries: dict[str, TreeEntry] = {}
    for raw in body.get("dirs", []):
        entries[raw["path"]] = TreeEntry(raw["path"], "dir", None, raw["mode"], ())
    for raw in body.get("symlinks", []):
        entries[raw["path"]] = TreeEntry(raw["path"], "symlink", None, 0, (raw["target"],))
    entry = TreeEntry
    entries.update(
        {
            raw["path"]: entry(raw["path"], "file", raw["size"], raw["mode"], tuple(raw["chunks"]))
            for raw in body.get("files", [])
        }
    )
    return entries


class SnapshotTree:
    """The files of a workspace snapshot, read from the blob store."""

    def __init__(self, blobs: BlobStore, body: dict[str, Any]) -> None:
        self.blobs = blobs
        self._entries = tree_entries(body)

    @property
    def entries(self) -> dict[str, TreeEntry]:
        return self._entries

    def read(self, path: str, limit: int) -> bytes | None:
        entry = self._entries.get(path)
        if entry is None or entry.kind != "file" or (entry.size or 0) > limit:
            return None
        return self.blobs.get_bytes(entry.content)


class HashingSink:
    """Where a live scan puts a file's chunks: it names them (BLAKE3) and stores nothing."""

    def put_chunk(self, data: bytes | memoryview, digest: str | None = None) -> tuple[str, int]:
        return digest or BlobStore.digest(data), 0

    def has_chunk(self, digest: str) -> bool:
        return True


class LiveTree:
    """The files of a live workspace as they were when it was scanned, read from disk."""

    def __init__(self, root: str, body: dict[str, Any]) -> None:
        self.root = root
        self._entries = tree_entries(body)

    @property
    def entries(self) -> dict[str, TreeEntry]:
        return self._entries

    def read(self, path: str, limit: int) -> bytes | None:
        entry = self._entries.get(path)
        if entry is None or entry.kind != "file" or (entry.size or 0) > limit:
            return None
        try:
            fd = os.open(member(self.root, path), os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:  # gone since the scan, or replaced by a symlink: nothing to show
            return None
        try:
            with os.fdopen(os.dup(fd), "rb") as handle:
                data = handle.read(limit + 1)
        finally:
            os.close(fd)
        return data if len(data) <= limit else None


def scan_live(root: str, clock_marker: Path, index: FileIndex) -> LiveTree:
    """The live files of the workspace `root`: a snapshot's walk, with nothing stored."""
    body, _, _ = scan_workspace(root, HashingSink(), clock_marker, index, verify_chunks=False)
    return LiveTree(root, body)
