"""Path confinement shared by a workspace and its snapshots: nothing may leave the root."""

from __future__ import annotations

import os
from pathlib import PurePosixPath


def inside(root: str, real: str) -> bool:
    """Whether the resolved path `real` is `root` or lies under it."""
    return real == root or real.startswith(root + os.sep)


def member(root: str, rel: object) -> str:
    """A manifest path turned into a path under `root`, refusing anything that escapes."""
    if not isinstance(rel, str) or not rel or rel.startswith("/"):
        raise ValueError(f"bad path {rel!r} in the snapshot manifest")
    if ".." in PurePosixPath(rel).parts or "\x00" in rel:
        raise ValueError(f"bad path {rel!r} in the snapshot manifest")
    return os.path.join(root, rel)
