"""What a data directory takes on disk: every file's blocks, as `du` counts them.

The store (`ditto.db`), the blob store (`blobs/`: `objects.db`, the chunk files, staging),
the budgets, the workspaces, and every database's write-ahead log and index beside it: the
bytes a disk loses to the data directory, which is what the benchmarks count too (disk
blocks, not file lengths). A file removed while it is walked counts nothing.
"""

from __future__ import annotations

import os
from pathlib import Path


def data_dir_bytes(root: Path) -> int:
    """Bytes the files under `root` take on disk (their blocks); 0 when it is missing."""
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
            except FileNotFoundError:  # removed meanwhile (a collection, a staging folder)
                continue
    return total
