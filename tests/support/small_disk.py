"""A real small filesystem for the full-disk tests: a tmpfs of a few MiB, then filled.

Mounting needs root (and a kernel that lets this process mount); elsewhere the tests that
need it are skipped, and the full-disk behaviour is still covered through
`tests.fakes.full_disk`. `filled` writes a file until the disk refuses (ENOSPC), so the next
write anywhere on it fails the way a full disk fails; `fill` leaves a given number of bytes
free.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

#: Size of the filesystem, as the outside probe of the full-disk findings used.
SIZE_MIB = 40


@contextlib.contextmanager
def small_tmpfs(where: Path, size_mib: int = SIZE_MIB) -> Iterator[Path]:
    """A tmpfs of `size_mib` MiB mounted at `where` for the block (skip unless root)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
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


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """An empty 40 MiB tmpfs, unmounted after the test."""
    with small_tmpfs(tmp_path / "small-disk") as mount_point:
        yield mount_point


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


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer can still put on the filesystem holding `path`."""
    found = os.statvfs(path)
    return found.f_bavail * found.f_frsize


def fill(disk: Path, leave: int = 0) -> Path:
    """Fill the filesystem with one file until at most `leave` bytes are free; the file."""
    filler = disk / "filler.bin"
    block = b"\0" * (1 << 20)
    with open(filler, "ab") as handle:
        while free_bytes(disk) > leave:
            want = min(len(block), free_bytes(disk) - leave)
            try:
                handle.write(block[: max(want, 4096)])
                handle.flush()
            except OSError:  # full before `leave` was reached exactly
                break
    return filler
