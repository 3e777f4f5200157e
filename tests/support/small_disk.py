"""A real small filesystem for full-disk tests: a tmpfs mounted under the test's tmp_path.

Mounting needs root (and a kernel that lets this process mount); elsewhere the tests that
need it are skipped, and the full-disk behaviour is still covered through
`tests.fakes.full_disk`. `fill` leaves a given number of bytes free.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

#: Size of the filesystem, as the outside probe of the full-disk findings used.
SIZE_MIB = 40


def _can_mount() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """An empty 40 MiB tmpfs, unmounted after the test."""
    if not _can_mount():
        pytest.skip("mounting a tmpfs needs root")
    mount_point = tmp_path / "small-disk"
    mount_point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SIZE_MIB}m,mode=0700", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=True)


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
