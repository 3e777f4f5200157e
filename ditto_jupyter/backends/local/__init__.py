"""Local workspace backend: one directory per backend, snapshotted into the blob store.

- `workspace`: `LocalBackend`, a workspace directory (`DITTO_WORKSPACE`) with every path
  confined to it, and its file operations, exec, search and export;
- `snapshots`: the workspace manifest, the file index that spares re-reading unchanged
  files, and materialising a snapshot as a new workspace;
- `provider`: `LocalProvider`, which creates, re-opens and checks out workspaces;
- `paths`: the confinement checks both sides share.
"""

from __future__ import annotations

from ditto_jupyter.backends.local.provider import LocalProvider
from ditto_jupyter.backends.local.snapshots import (
    MANIFEST_KIND,
    FileEntry,
    FileIndex,
    SnapshotStats,
    store_file,
)
from ditto_jupyter.backends.local.workspace import (
    DEFAULT_EXEC_TIMEOUT,
    DEFAULT_OUTPUT_LIMIT,
    KIND,
    TEMP_DIR,
    LocalBackend,
)

__all__ = [
    "DEFAULT_EXEC_TIMEOUT",
    "DEFAULT_OUTPUT_LIMIT",
    "KIND",
    "MANIFEST_KIND",
    "TEMP_DIR",
    "FileEntry",
    "FileIndex",
    "LocalBackend",
    "LocalProvider",
    "SnapshotStats",
    "store_file",
]
