"""A real small filesystem for the full-disk tests: a tmpfs of a few MiB, then filled.

Mounting needs root (tests skip without it); `filled` writes a file until the disk refuses
(ENOSPC), so the next write anywhere on it fails the way a full disk fails.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_tmpfs(where: Path, size_mib: int = 40) -> Iterator[Path]:
    """A tmpfs of `size_mib` MiB mounted at `where` for the block (skip unless root)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    where.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m,mode=0700", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True, check=False).returncode:
            subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


@contextlib.contextmanager
def filled(disk: Path) -> Iterator[Path]:
    """Fill `disk` to the last byte for the block; the filler is removed after it."""
    filler = disk / "filler.bin"
    block = b"\0" * (1 << 20)
    with filler.open("wb", buffering=0) as out:
        try:
            while True:
                out.write(block)
        except OSError as error:
            assert error.errno == errno.ENOSPC, error
        for size in (4096, 512, 1):  # the last partial blocks too
            with contextlib.suppress(OSError):
                while True:
                    out.write(b"\0" * size)
    try:
        yield filler
    finally:
        filler.unlink()
