"""Directories and files that only their owner may open.

The data directory, the blob store and the workspaces hold users' variables and files, and
the store file their records: they are created private (0700 directories, 0600 files), and
one left looser (made by an older version, or copied) is tightened when it is opened.
Parents created on the way keep the default mode: they are not ours.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

#: Mode of every directory the data directory holds, the data directory included.
PRIVATE_DIR_MODE = 0o700
#: Mode of the store's database file (and SQLite's -wal and -shm beside it).
PRIVATE_FILE_MODE = 0o600


def tighten(path: Path, mode: int) -> None:
    """Take from `path` every permission bit `mode` lacks (nothing if it is gone or not ours)."""
    try:
        current = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        return
    if current & ~mode:
        with contextlib.suppress(PermissionError):
            os.chmod(path, current & mode)


def private_dir(path: Path) -> Path:
    """`path` as a directory only its owner may enter, created (with parents) if missing."""
    path.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    tighten(path, PRIVATE_DIR_MODE)
    return path


def private_file(path: Path) -> Path:
    """`path` as a file only its owner may read, created empty if missing (in a folder that
    exists); SQLite gives its -wal and -shm files the mode of the database file."""
    with contextlib.suppress(FileExistsError, FileNotFoundError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE))
    for sibling in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        tighten(sibling, PRIVATE_FILE_MODE)
    return path
