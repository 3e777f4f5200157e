"""Benchmark: local workspace snapshots against `cp -a` and `tar cf` of the same tree.

A workspace of 1,000 files / 200 MiB (half random bytes, half compressible text; 100 files
of 1 MiB, 900 of ~114 KiB, in 20 directories) is built under benchmarks/.work/ and
measured in one run:

  * first checkpoint (every file read, chunked, hashed, stored; durable blob store: one
    bulk write, `core.blobs.bulk`), into a store as a data directory in use has it (its
    chunk folders made), and apart into a brand-new one
  * clean re-checkpoint through DirtyTrackingBackend (must return the same ref; target 5 ms)
  * re-checkpoint after `mark_dirty` with nothing changed (the cost of the stat walk alone)
  * re-checkpoint after rewriting one 1 MiB file (cost and new bytes in proportion to it)
  * checkout materialisation of the last snapshot into a new workspace

each beside `cp -a` and `tar cf` of the same tree, timed just before it (page cache warm,
dirty pages flushed). The code before issue 13's section 3 (a durable write per chunk, one
thread, chunks copied through user space) runs in the same run beside the current code:
its `snapshots.py` is loaded from git at BASELINE_COMMIT (override with the environment
variable DITTO_BENCH_BASELINE) and driven as its `LocalBackend` drove it (every chunk
through `BlobStore.put_chunk`, then the manifest), called directly: without the event-loop
hop and the state-file write the current code's figures include, so the comparison
flatters the old code by a few milliseconds. `put_chunk` is a bulk
write of one chunk today (it syncs the chunk, its name and the catalogue), so that row
shows what writing chunk by chunk costs, not the old release's exact figure. Rows that are
repeated interleave the variants and report medians. Trees a row made are deleted between
sections of rows, never just before a timed row (see `Trash`), and everything at the end.
Run from the repo root:

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
import types
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import blake3  # noqa: E402

from benchmarks.results_table import markdown_table, write_section  # noqa: E402
from ditto_jupyter.backends.local import LocalBackend, LocalProvider, snapshots  # noqa: E402
from ditto_jupyter.backends.manager import BackendManager  # noqa: E402
from ditto_jupyter.core.blobs import BlobStore  # noqa: E402

T = TypeVar("T")
MiB = 1 << 20
N_FILES = 1000
N_BIG = 100
TOTAL = 200 * MiB
N_DIRS = 20
CLEAN_REPEATS = 200
#: Repeats of each compared row (variants interleaved; medians reported).
REPEATS = int(os.environ.get("DITTO_BENCH_REPEATS", "5"))
#: The last commit before the snapshot changes of issue 13 section 3.
BASELINE_COMMIT = os.environ.get("DITTO_BENCH_BASELINE", "76a3773")
BASELINE_PATH = "ditto_jupyter/backends/local/snapshots.py"


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


class Trash:
    """Trees the run is done with: moved aside, and deleted between sections of rows.

    On this ext4 (no journal), creating a file passes over every inode deleted near it in
    the last minute (`recently_deleted` in the kernel's inode allocator): a 1,000-file tree
    deleted just before a timed row makes that row pay for the deletion, so the row after
    each cleanup would lose. No timed row follows a deletion by less than `SETTLE_S`.
    """

    SETTLE_S = 61.0

    def __init__(self, folder: Path) -> None:
        folder.mkdir()
        self.folder = folder
        self.count = 0

    def put(self, path: Path) -> None:
        path.rename(self.folder / str(self.count))
        self.count += 1

    def empty(self, *, settle: bool = True) -> None:
        for path in list(self.folder.iterdir()):
            shutil.rmtree(path)
        if settle:
            os.sync()
            time.sleep(self.SETTLE_S)


class Anchors:
    """`cp -a` and `tar cf` of the tree, measured right before each row they are set beside.

    The machine is shared and its I/O load drifts over seconds, so each row is compared
    with anchors taken next to it rather than once for the whole run.
    """

    def __init__(self, tree: Path, scratch: Path, trash: Trash) -> None:
        self.tree, self.scratch, self.trash = tree, scratch, trash
        self.cp: list[float] = []
        self.tar: list[float] = []

    def sample(self) -> tuple[float, float]:
        copy, archive = self.scratch / "cp-copy", self.scratch / "copy.tar"
        cp_cmd = ["cp", "-a", str(self.tree), str(copy)]
        tar_cmd = ["tar", "cf", str(archive), "-C", str(self.tree), "."]
        cp_s = timed_after_sync(lambda: subprocess.run(cp_cmd, check=True))[0]
        tar_s = timed_after_sync(lambda: subprocess.run(tar_cmd, check=True))[0]
        self.trash.put(copy)
        archive.unlink()  # one file: no matter
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


def load_baseline() -> types.ModuleType:
    """`backends/local/snapshots.py` as it was at BASELINE_COMMIT, as a module."""
    name = "ditto_jupyter.backends.local.baseline_snapshots"
    source = subprocess.run(
        [
            "git",
            "-C",
            str(REPO),
            "show",
            f"{BASELINE_COMMIT}:ditto_jupyter/backends/local/snapshots.py",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    module = types.ModuleType(name)
    sys.modules[name] = module  # dataclasses look their module up
    exec(compile(source, f"{BASELINE_COMMIT}:snapshots.py", "exec"), module.__dict__)
    return module


class Baseline:
    """One workspace's snapshots through the old code, as its LocalBackend ran them (scan
    into the durable store a chunk at a time, then put the manifest), called directly."""

    def __init__(self, code: types.ModuleType, tree: Path, blobs: BlobStore, marker: Path) -> None:
        self.code, self.tree, self.blobs, self.marker = code, tree, blobs, marker
        self.index = code.FileIndex.empty()
        self.manifest_id = ""

    def checkpoint(self) -> dict[str, int]:
        manifest, index, stats = self.code.scan_workspace(
            str(self.tree), self.blobs, self.marker, self.index, verify_chunks=False
        )
        self.manifest_id, written = self.blobs.put_manifest(manifest)
        self.index = index
        stats.bytes_written += written
        return dict(stats.as_dict())

    def checkout(self, folder: Path) -> None:
        body = self.blobs.get_manifest(self.manifest_id)
        self.code.materialise(self.blobs, body, folder, folder.with_suffix(".clock"))


class Samples:
    """Times of one row, each with the `cp -a` / `tar cf` anchors taken right before it."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.cp: list[float] = []
        self.tar: list[float] = []

    def add(self, seconds: float, near: tuple[float, float]) -> None:
        self.times.append(seconds)
        self.cp.append(near[0])
        self.tar.append(near[1])

    def median(self) -> float:
        return statistics.median(self.times)

    def cp_ratio(self) -> float:
        return statistics.median(t / c for t, c in zip(self.times, self.cp, strict=True))

    def tar_ratio(self) -> float:
        return statistics.median(t / c for t, c in zip(self.times, self.tar, strict=True))


def store_in_use(root: Path, *, durable: bool = True) -> BlobStore:
    """A new blob store as a data directory that has taken snapshots before has it: its
    256 chunk folders (`chunks/ab/`) exist. Each first-checkpoint sample gets a store of its
    own (so nothing of the tree is stored yet); without this, each would also make the
    chunk folders, which a data directory does once in its life (measured apart)."""
    blobs = BlobStore(root, durable=durable)
    for shard in range(256):
        (root / "chunks" / f"{shard:02x}").mkdir(exist_ok=True)
    return blobs


def verdict(value: float, limit: float) -> str:
    return "met" if value <= limit else f"MISSED by {value / limit:.2f}x"


def measure(work: Path) -> str:
    load_before = os.getloadavg()[0]
    blobs = store_in_use(work / "blobs")  # durable, as in production
    provider = LocalProvider(work / "workspaces", blobs)
    manager = BackendManager({"local": provider})
    backend = run(manager.create("bench", "local"))
    inner = backend.inner
    assert isinstance(inner, LocalBackend)
    tree = inner.local_path
    total = build_tree(tree)
    # cp -a copies into the folder checkouts go to: on this ext4, creating a file costs
    # in proportion to the files deleted near it lately, so every row creates where the
    # others create and delete
    trash = Trash(work / "trash")
    anchors = Anchors(tree, provider.root, trash)
    old_code = load_baseline()
    rows: list[list[object]] = []

    def row(name: str, samples: Samples, *rest: object) -> None:
        rows.append(
            [
                name,
                fmt_s(samples.median()),
                fmt_s(statistics.median(samples.cp)),
                f"{samples.cp_ratio():.2g}x",
                fmt_s(statistics.median(samples.tar)),
                f"{samples.tar_ratio():.2g}x",
                *rest,
            ]
        )

    def read(details: dict[str, int]) -> str:
        return f"{details['files_read']} / {fmt_bytes(details['bytes_read'])}"

    # ---- first checkpoint: current code (its threads, and 1) and the old code, interleaved
    first_new, first_one, first_old, first_empty = Samples(), Samples(), Samples(), Samples()
    new_details: dict[str, int] = {}
    old_details: dict[str, int] = {}
    old: Baseline | None = None
    first: Any = None
    threads = snapshots.SNAPSHOT_THREADS
    for repeat in range(REPEATS):
        last = repeat == REPEATS - 1
        fresh = LocalProvider(work / f"ws-{repeat}", store_in_use(work / f"blobs-1t-{repeat}"))
        one = LocalBackend(fresh, inner.backend_id, tree)
        snapshots.SNAPSHOT_THREADS = 1
        near = anchors.sample()
        first_one.add(timed_after_sync(lambda b=one: run(b.checkpoint()))[0], near)
        snapshots.SNAPSHOT_THREADS = threads
        trash.put(work / f"blobs-1t-{repeat}")
        if last:
            near = anchors.sample()
            seconds, first = timed_after_sync(lambda: run(backend.checkpoint()))
            new_details = dict(first.details)
        else:
            fresh = LocalProvider(work / f"wsn-{repeat}", store_in_use(work / f"blobs-n-{repeat}"))
            current = LocalBackend(fresh, inner.backend_id, tree)
            near = anchors.sample()
            seconds = timed_after_sync(lambda b=current: run(b.checkpoint()))[0]
            trash.put(work / f"blobs-n-{repeat}")
        first_new.add(seconds, near)
        old_store = store_in_use(work / f"blobs-old-{repeat}")
        old = Baseline(old_code, tree, old_store, work / "old.clock")
        near = anchors.sample()
        seconds, old_details = timed_after_sync(old.checkpoint)
        first_old.add(seconds, near)
        if not last:
            trash.put(work / f"blobs-old-{repeat}")
        empty = LocalProvider(work / f"wse-{repeat}", BlobStore(work / f"blobs-e-{repeat}"))
        into_empty = LocalBackend(empty, inner.backend_id, tree)
        near = anchors.sample()
        first_empty.add(timed_after_sync(lambda b=into_empty: run(b.checkpoint()))[0], near)
        trash.put(work / f"blobs-e-{repeat}")
    assert old is not None
    row(
        "first checkpoint",
        first_new,
        read(new_details),
        fmt_bytes(new_details["bytes_written"]),
        f"one bulk write: one sync of the chunks, one of their names, one commit; {threads} "
        f"threads; target <= 1.5x `cp -a`: {verdict(first_new.cp_ratio(), 1.5)}; "
        f"{first_new.median() / first_old.median():.2f}x the old code's time",
    )
    row(
        "first checkpoint, 1 thread",
        first_one,
        read(new_details),
        "",
        f"{first_one.median() / first_new.median():.2f}x the {threads}-thread time",
    )
    row(
        f"first checkpoint, old code ({BASELINE_COMMIT})",
        first_old,
        read(old_details),
        fmt_bytes(old_details["bytes_written"]),
        "a durable put_chunk per chunk, 1 thread",
    )
    row(
        "first checkpoint into a new data directory",
        first_empty,
        read(new_details),
        "",
        f"{first_empty.median() / first_new.median():.2f}x the time above: the store also "
        "makes its chunk folders (once in its life)",
    )

    # The same first snapshot into a store that does not fsync: what durability costs.
    loose = LocalProvider(work / "loose-ws", store_in_use(work / "loose-blobs", durable=False))
    loose_backend = LocalBackend(loose, inner.backend_id, tree)
    loose_samples = Samples()
    near = anchors.sample()
    seconds, loose_ref = timed_after_sync(lambda: run(loose_backend.checkpoint()))
    loose_samples.add(seconds, near)
    trash.put(work / "loose-blobs")
    trash.empty()
    row(
        "first checkpoint, blob store without fsync",
        loose_samples,
        read(dict(loose_ref.details)),
        fmt_bytes(dict(loose_ref.details)["bytes_written"]),
        "same tree into a `durable=False` store: what durability costs above",
    )

    clean_times = run(clean_checkpoints(manager, first))
    clean = Samples()
    clean.add(statistics.median(clean_times), (first_new.cp[-1], first_new.tar[-1]))
    row(
        "clean re-checkpoint (BackendManager -> DirtyTrackingBackend)",
        clean,
        "0 / 0",
        "0",
        f"same ref returned; median of {CLEAN_REPEATS}, max {fmt_s(max(clean_times))}; "
        f"target < 5 ms: {'met' if clean.median() < 0.005 else 'MISSED'}",
    )

    # ---- re-checkpoints: nothing changed, then one 1 MiB file rewritten, new vs old
    walk_new, walk_old, change_new, change_old = Samples(), Samples(), Samples(), Samples()
    walk: dict[str, int] = {}
    changed: Any = None
    stored_growth = 0
    for repeat in range(REPEATS):
        # the second of a pair walks a tree the first has just walked: take turns
        old_first = repeat % 2 == 1
        near = anchors.sample()
        if old_first:
            walk_old.add(timed_after_sync(old.checkpoint)[0], near)
        backend.mark_dirty()
        seconds, ref = timed_after_sync(lambda: run(backend.checkpoint()))
        walk_new.add(seconds, near)
        walk = dict(ref.details)
        if not old_first:
            walk_old.add(timed_after_sync(old.checkpoint)[0], near)
        run(backend.write_bytes("dir00/file0000.txt", os.urandom(MiB)))
        near = anchors.sample()
        if old_first:
            change_old.add(timed_after_sync(old.checkpoint)[0], near)
        stored_before_change = blobs.stored_bytes()
        seconds, changed = timed_after_sync(lambda: run(backend.checkpoint()))
        stored_growth = blobs.stored_bytes() - stored_before_change
        change_new.add(seconds, near)
        if not old_first:
            change_old.add(timed_after_sync(old.checkpoint)[0], near)
    row(
        "dirty re-checkpoint, nothing changed (stat walk)",
        walk_new,
        read(walk),
        fmt_bytes(walk["bytes_written"]),
        f"{walk['files_reused']} files reused; old code {fmt_s(walk_old.median())} "
        f"(new/old {walk_new.median() / walk_old.median():.2f}x; target <= 1x: "
        f"{verdict(walk_new.median() / walk_old.median(), 1.0)})",
    )
    details = dict(changed.details)
    row(
        "re-checkpoint after rewriting one 1 MiB file",
        change_new,
        read(details),
        fmt_bytes(details["bytes_written"]),
        f"{details['files_reused']} files reused; chunk storage grew by "
        f"{fmt_bytes(stored_growth)}; old code {fmt_s(change_old.median())} (new/old "
        f"{change_new.median() / change_old.median():.2f}x; target <= 1x: "
        f"{verdict(change_new.median() / change_old.median(), 1.0)})",
    )

    trash.empty()

    # ---- checkout: current code (2 and 1 threads) and the old code, interleaved
    out_new, out_one, out_old = Samples(), Samples(), Samples()
    source = tree_digest(tree)
    for repeat in range(REPEATS):
        near = anchors.sample()
        seconds, child = timed_after_sync(lambda: run(provider.checkout(changed, "bench-child")))
        out_new.add(seconds, near)
        assert tree_digest(child.local_path) == source, "checkout differs from the source"
        trash.put(child.local_path)
        run(child.release())
        snapshots.CHECKOUT_THREADS, saved = 1, snapshots.CHECKOUT_THREADS
        near = anchors.sample()
        seconds, child = timed_after_sync(lambda: run(provider.checkout(changed, "bench-child")))
        out_one.add(seconds, near)
        snapshots.CHECKOUT_THREADS = saved
        trash.put(child.local_path)
        run(child.release())
        folder = provider.root / f"old-checkout-{repeat}"
        near = anchors.sample()
        out_old.add(timed_after_sync(lambda f=folder: old.checkout(f))[0], near)
        assert tree_digest(folder) == source, "old checkout differs from the source"
        trash.put(folder)
    trash.empty(settle=False)
    row(
        "checkout materialisation",
        out_new,
        "",
        "",
        f"{snapshots.CHECKOUT_THREADS} threads taking folders in turn, copy_file_range after "
        f"the BLAKE3 check; real copies, verified equal by BLAKE3; target <= 1x `cp -a`: "
        f"{verdict(out_new.cp_ratio(), 1.0)}; {out_new.median() / out_old.median():.2f}x the "
        "old code's time",
    )
    row(
        "checkout materialisation, 1 thread",
        out_one,
        "",
        "",
        f"{out_one.median() / out_new.median():.2f}x the {snapshots.CHECKOUT_THREADS}-thread time",
    )
    row(
        f"checkout materialisation, old code ({BASELINE_COMMIT})",
        out_old,
        "",
        "",
        "1 thread, every chunk read, checked and written through user space",
    )

    headers = [
        "operation",
        "time (median)",
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
        "compressible text, in 20 directories. Blob store durable: the current code stages a "
        "snapshot's chunks as files without fsync, syncs them once (`syncfs`, or an fsync per "
        "file when at most 16 are new), renames them into place, syncs the names the same "
        "way, and records chunks and manifest in one durable catalogue commit; the old code "
        "puts chunk by chunk, each durable on its own. Each first-checkpoint sample writes "
        "into a new store whose 256 chunk folders exist, as in a data directory that has "
        "taken snapshots before; the row into a new data directory also makes them. "
        "`cp -a` and `tar cf` do not fsync. "
        "Page cache warm and dirty pages flushed (`sync`) before every timed row. Creating a "
        "file is most of what `cp -a` and a checkout cost here: this ext4 has no journal, and "
        "it looks past every recently deleted inode for each new one, so creating follows the "
        "deleting around it: so `cp -a` copies into the folder the checkouts go to, and the "
        "trees rows make are deleted only between sections of rows, a minute before the next "
        "timed row (the run holds some 6 GiB meanwhile). The machine is shared "
        "(2 cores, several engineers), so every sample has its own `cp -a` and `tar cf` of "
        f"the same tree, timed just before it; compared rows are repeated {REPEATS} times, "
        "interleaved, and show the median time, the median anchor and the median of the "
        "per-sample ratios. The machine's load average (1 minute) was "
        f"{load_before:.1f} when the run started and {os.getloadavg()[0]:.1f} when it ended. "
        "All anchors of the run: "
        f"`cp -a` {', '.join(fmt_s(x) for x in anchors.cp)}; "
        f"`tar cf` {', '.join(fmt_s(x) for x in anchors.tar)}."
    )
    return intro + "\n\n" + markdown_table(headers, rows)


if __name__ == "__main__":
    main()
