"""Benchmark: local workspace snapshots against `cp -a` and `tar cf` of the same tree.

A workspace of 1,000 files / 200 MiB (half random bytes, half compressible text; 100 files
of 1 MiB, 900 of ~114 KiB, in 20 directories) is built under benchmarks/.work/ and
measured in one run:

  * first checkpoint (every file read, chunked, hashed, stored; durable blob store: fsync)
  * clean re-checkpoint through DirtyTrackingBackend (must return the same ref; target 5 ms)
  * re-checkpoint after `mark_dirty` with nothing changed (the cost of the stat walk alone)
  * re-checkpoint after rewriting one 1 MiB file (cost and new bytes in proportion to it)
  * checkout materialisation of the last snapshot into a new workspace

each beside `cp -a` and `tar cf` of the same tree, timed in the same run (page cache warm
for all of them). The tree is deleted at the end. Run from the repo root:

    .venv/bin/python -m benchmarks.bench_backends
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import blake3  # noqa: E402

from benchmarks.results_table import markdown_table, write_section  # noqa: E402
from ditto_jupyter.backends.local import LocalBackend, LocalProvider  # noqa: E402
from ditto_jupyter.backends.manager import BackendManager  # noqa: E402
from ditto_jupyter.core.blobs import BlobStore  # noqa: E402

T = TypeVar("T")
MiB = 1 << 20
N_FILES = 1000
N_BIG = 100
TOTAL = 200 * MiB
N_DIRS = 20
CLEAN_REPEATS = 200


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def build_tree(root: Path) -> int:
    """1,000 files, 200 MiB: 100 of 1 MiB and 900 sharing the rest; half random, half text."""
    small = (TOTAL - N_BIG * MiB) // (N_FILES - N_BIG)
    total = 0
    words = [b"alpha", b"beta", b"gamma", b"delta", b"cell", b"kernel", b"frame", b"row"]
    for i in range(N_FILES):
        folder = root / f"dir{i % N_DIRS:02}"
        folder.mkdir(exist_ok=True)
        size = MiB if i < N_BIG else small
        if i % 2:
            data = os.urandom(size)
        else:
            seed = os.urandom(64).hex().encode()
            line = b" ".join(words[(j + i) % len(words)] for j in range(12)) + b" " + seed + b"\n"
            data = (line * (size // len(line) + 1))[:size]
        (folder / f"file{i:04}.{'bin' if i % 2 else 'txt'}").write_bytes(data)
        total += size
    return total


def tree_digest(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): blake3.blake3(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def timed_after_sync(fn: Callable[[], T]) -> tuple[float, T]:
    """Time `fn` after flushing dirty pages, so no row pays for an earlier row's writeback."""
    os.sync()
    return timed(fn)


class Anchors:
    """`cp -a` and `tar cf` of the tree, measured right before each row they are set beside.

    The machine is shared and its I/O load drifts over seconds, so each row is compared
    with anchors taken next to it rather than once for the whole run.
    """

    def __init__(self, tree: Path, scratch: Path) -> None:
        self.tree, self.scratch = tree, scratch
        self.cp: list[float] = []
        self.tar: list[float] = []

    def sample(self) -> tuple[float, float]:
        copy, archive = self.scratch / "cp-copy", self.scratch / "copy.tar"
        cp_cmd = ["cp", "-a", str(self.tree), str(copy)]
        tar_cmd = ["tar", "cf", str(archive), "-C", str(self.tree), "."]
        cp_s = timed_after_sync(lambda: subprocess.run(cp_cmd, check=True))[0]
        tar_s = timed_after_sync(lambda: subprocess.run(tar_cmd, check=True))[0]
        shutil.rmtree(copy)
        archive.unlink()
        self.cp.append(cp_s)
        self.tar.append(tar_s)
        return cp_s, tar_s


def fmt_s(seconds: float) -> str:
    if seconds < 0.001:
        return f"{seconds * 1e6:.1f} µs"
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def fmt_bytes(n: int) -> str:
    return f"{n / MiB:.2f} MiB" if n >= MiB else f"{n / 1024:.1f} KiB"


def main() -> None:
    work = REPO / "benchmarks" / ".work" / f"bench_backends-{os.getpid()}"
    work.mkdir(parents=True)
    try:
        body = measure(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        with_parent = work.parent
        if with_parent.is_dir() and not any(with_parent.iterdir()):
            with_parent.rmdir()
    write_section("bench_backends", "Local workspace backend: snapshots vs cp -a and tar", body)
    print(body)


async def clean_checkpoints(manager: BackendManager, expected: Any) -> list[float]:
    """Time clean re-checkpoints through the manager's runtime-id path (as the service calls
    it) inside one event loop, so loop start-up is not in the figure."""
    times = []
    for _ in range(CLEAN_REPEATS):
        start = time.perf_counter()
        again = await manager.checkpoint_backend(runtime_id="bench")
        times.append(time.perf_counter() - start)
        assert again is expected, "a clean re-checkpoint must reuse the ref"
    return times


def measure(work: Path) -> str:
    blobs = BlobStore(work / "blobs")  # durable: every chunk fsynced, as in production
    provider = LocalProvider(work / "workspaces", blobs)
    manager = BackendManager({"local": provider})
    backend = run(manager.create("bench", "local"))
    inner = backend.inner
    assert isinstance(inner, LocalBackend)
    tree = inner.local_path
    total = build_tree(tree)
    anchors = Anchors(tree, work)
    rows: list[list[object]] = []

    def row(name: str, seconds: float, near: tuple[float, float], *rest: object) -> None:
        cp_s, tar_s = near
        rows.append(
            [
                name,
                fmt_s(seconds),
                fmt_s(cp_s),
                f"{seconds / cp_s:.2g}x",
                fmt_s(tar_s),
                f"{seconds / tar_s:.2g}x",
                *rest,
            ]
        )

    def det(ref: Any) -> dict[str, int]:
        return dict(ref.details)

    def read(ref: Any) -> str:
        return f"{det(ref)['files_read']} / {fmt_bytes(det(ref)['bytes_read'])}"

    # The same first snapshot into a store that does not fsync: what durability costs.
    loose = LocalProvider(work / "loose-ws", BlobStore(work / "loose-blobs", durable=False))
    loose_backend = LocalBackend(loose, inner.backend_id, tree)
    near = anchors.sample()
    loose_s, loose_ref = timed_after_sync(lambda: run(loose_backend.checkpoint()))
    shutil.rmtree(work / "loose-blobs")

    near_first = anchors.sample()
    first_s, first = timed_after_sync(lambda: run(backend.checkpoint()))
    row(
        "first checkpoint",
        first_s,
        near_first,
        read(first),
        fmt_bytes(det(first)["bytes_written"]),
        f"blob store holds {fmt_bytes(blobs.stored_bytes())} (zstd on the text half)",
    )
    row(
        "first checkpoint, blob store without fsync",
        loose_s,
        near,
        read(loose_ref),
        fmt_bytes(det(loose_ref)["bytes_written"]),
        "same tree into a `durable=False` store: the share fsync takes above",
    )

    clean_times = run(clean_checkpoints(manager, first))
    clean_s = statistics.median(clean_times)
    row(
        "clean re-checkpoint (BackendManager -> DirtyTrackingBackend)",
        clean_s,
        near_first,
        "0 / 0",
        "0",
        f"same ref returned; median of {CLEAN_REPEATS}, max {fmt_s(max(clean_times))}; "
        f"target < 5 ms: {'met' if clean_s < 0.005 else 'MISSED'}",
    )

    near = anchors.sample()
    backend.mark_dirty()
    walk_s, walk = timed_after_sync(lambda: run(backend.checkpoint()))
    row(
        "dirty re-checkpoint, nothing changed (stat walk)",
        walk_s,
        near,
        read(walk),
        fmt_bytes(det(walk)["bytes_written"]),
        f"{det(walk)['files_reused']} files reused; only a new manifest is written",
    )

    near = anchors.sample()
    run(backend.write_bytes("dir00/file0000.txt", os.urandom(MiB)))
    stored_before_change = blobs.stored_bytes()
    change_s, changed = timed_after_sync(lambda: run(backend.checkpoint()))
    row(
        "re-checkpoint after rewriting one 1 MiB file",
        change_s,
        near,
        read(changed),
        fmt_bytes(det(changed)["bytes_written"]),
        f"{det(changed)['files_reused']} files reused; chunk storage grew by "
        f"{fmt_bytes(blobs.stored_bytes() - stored_before_change)}, the rest is the manifest",
    )

    near = anchors.sample()
    checkout_s, child = timed_after_sync(lambda: run(provider.checkout(changed, "bench-child")))
    assert tree_digest(child.local_path) == tree_digest(tree), "checkout differs from the source"
    run(child.release())
    row(
        "checkout materialisation",
        checkout_s,
        near,
        "",
        "",
        "real copies (no hard links), verified equal to the source by BLAKE3",
    )

    headers = [
        "operation",
        "time",
        "`cp -a` next to it",
        "ratio",
        "`tar cf` next to it",
        "ratio",
        "files / bytes read",
        "new bytes stored",
        "notes",
    ]
    intro = (
        f"Workspace: {N_FILES} files, {fmt_bytes(total)} ({N_BIG} of 1 MiB, the rest "
        f"~{fmt_bytes((TOTAL - N_BIG * MiB) // (N_FILES - N_BIG))}), half random bytes, half "
        "compressible text, in 20 directories. Blob store durable (each chunk fsynced, then "
        "renamed); `cp -a` and `tar cf` do not fsync. Page cache warm and dirty pages flushed "
        "(`sync`) before every timed row. The machine is shared, so each row has its own "
        "`cp -a` and `tar cf` of the same tree, timed just before it; ratio = row time / "
        "anchor time. All anchors of the run: "
        f"`cp -a` {', '.join(fmt_s(x) for x in anchors.cp)}; "
        f"`tar cf` {', '.join(fmt_s(x) for x in anchors.tar)}."
    )
    return intro + "\n\n" + markdown_table(headers, rows)


if __name__ == "__main__":
    main()
