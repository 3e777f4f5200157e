"""Workspace snapshots: the manifest, the file index that spares re-reads, checkout copies.

`scan_workspace` writes a signed blob-store manifest:

    {"kind": "workspace", "clock_ns": ..., "files": [{path, mode, size, mtime_ns, ctime_ns,
     ino, chunks}], "dirs": [{path, mode}], "symlinks": [{path, target}],
     "skipped": [{path, reason}], "chunks": [every chunk id]}

Files are streamed in 1 MiB chunks (on `SNAPSHOT_THREADS` threads) through a `ChunkSink`:
the workspace writes through one `core.blobs.BulkWrite`, which makes the whole snapshot
durable with one sync and records it with its manifest in one step. A file whose size,
mtime, ctime and inode are unchanged since the previous snapshot of the same workspace is
not re-read: its chunk list is reused.
Like git's "racy" index entries, an entry whose ctime is not strictly older than the
snapshot's start (`clock_ns`, read from the filesystem's own clock through a marker file)
is never trusted, because a later write in the same timestamp tick would leave its
fingerprint unchanged. Symlinks are kept only when they resolve inside the workspace (as
a relative target); sockets, FIFOs, devices and escaping symlinks are listed under
`skipped` with the reason, never dropped silently. `materialise` writes a snapshot back as
real files in a new directory, its files on `CHECKOUT_THREADS` threads taking folders in
turn, each chunk kernel-copied where it can be (`copying`).
"""

from __future__ import annotations

import itertools
import logging
import os
import posixpath
import shutil
import stat as stat_mod
import threading
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

from ditto_jupyter.backends.local.copying import copy_chunk
from ditto_jupyter.backends.local.parallel import MAX_THREADS, run_parallel
from ditto_jupyter.backends.local.paths import inside, member
from ditto_jupyter.core.blobs import CHUNK_SIZE, BlobError, BlobStore
from ditto_jupyter.core.blobs.errors import DISK_FAILURES, FULL_ERRNOS, full_disk
from ditto_jupyter.core.errors import BackendError
from ditto_jupyter.core.private import PRIVATE_DIR_MODE

_log = logging.getLogger(__name__)

#: The `kind` of a workspace snapshot manifest.
MANIFEST_KIND = "workspace"
#: Threads a snapshot reads files on. A new chunk's cost is mostly creating its staged
#: file; each thread stages into a folder of its own, so two threads create at once.
SNAPSHOT_THREADS = MAX_THREADS
#: Threads a checkout writes files on (files go to many directories, copies in the kernel).
CHECKOUT_THREADS = MAX_THREADS


@dataclass(frozen=True)
class FileEntry:
    """One regular file of a snapshot: its fingerprint and the chunks holding its bytes."""

    path: str
    mode: int
    size: int
    mtime_ns: int
    ctime_ns: int
    ino: int
    chunks: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """The manifest form of this entry."""
        return {
            "path": self.path,
            "mode": self.mode,
            "size": self.size,
            "mtime_ns": self.mtime_ns,
            "ctime_ns": self.ctime_ns,
            "ino": self.ino,
            "chunks": list(self.chunks),
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> FileEntry:
        """Read an entry back from a manifest."""
        return cls(
            path=str(raw["path"]),
            mode=int(raw["mode"]),
            size=int(raw["size"]),
            mtime_ns=int(raw["mtime_ns"]),
            ctime_ns=int(raw.get("ctime_ns", raw["mtime_ns"])),
            ino=int(raw["ino"]),
            chunks=tuple(str(c) for c in raw["chunks"]),
        )


@dataclass
class FileIndex:
    """What the previous snapshot of a workspace saw: entries by path and its start clock."""

    entries: dict[str, FileEntry]
    clock_ns: int

    @classmethod
    def empty(cls) -> FileIndex:
        """An index that trusts nothing (every file is read)."""
        return cls(entries={}, clock_ns=0)


@dataclass
class SnapshotStats:
    """What one snapshot cost: files read and reused, bytes read and newly written."""

    files_read: int = 0
    files_reused: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    #: What the blob catalogue's log took beyond the bytes written (its rows' pages).
    database_bytes: int = 0

    def as_dict(self) -> dict[str, int]:
        """Plain dict for `BackendCheckpointRef.details`."""
        return {
            "files_read": self.files_read,
            "files_reused": self.files_reused,
            "bytes_read": self.bytes_read,
            "bytes_written": self.bytes_written,
            "database_bytes": self.database_bytes,
        }


class ChunkSink(Protocol):
    """Where a snapshot stores chunks: a `BulkWrite` (or a `BlobStore`, which commits each
    chunk on its own)."""

    def put_chunk(self, data: bytes | memoryview, digest: str | None = None) -> tuple[str, int]: ...

    def has_chunk(self, digest: str) -> bool: ...


_buffers = threading.local()


def _read_buffer() -> memoryview:
    """This thread's 1 MiB read buffer (allocated once, not once per file)."""
    view: memoryview | None = getattr(_buffers, "view", None)
    if view is None:
        view = _buffers.view = memoryview(bytearray(CHUNK_SIZE))
    return view


def store_file(blobs: ChunkSink, fd: int) -> tuple[list[str], int, int]:
    """Stream an open file into the blob store in 1 MiB chunks: (chunks, size, bytes written).

    Module-level so tests can count how many files a snapshot really reads.
    """
    chunks: list[str] = []
    size = written = 0
    view = _read_buffer()
    with os.fdopen(os.dup(fd), "rb", buffering=0) as handle:
        while True:
            filled = 0
            while filled < CHUNK_SIZE:
                n = handle.readinto(view[filled:])
                if not n:
                    break
                filled += n
            if filled == 0:
                break
            digest, n_written = blobs.put_chunk(view[:filled])
            chunks.append(digest)
            size += filled
            written += n_written
            if filled < CHUNK_SIZE:
                break
    return chunks, size, written


def _touch_clock(marker: Path) -> int:
    """The filesystem's own current time, read back from a freshly touched marker file."""
    marker.parent.mkdir(parents=True, exist_ok=True)
    with open(marker, "ab"):
        pass
    os.utime(marker, None)
    return os.stat(marker).st_ctime_ns


def touch_clock(marker: Path) -> int:
    """The filesystem's current time, from the marker file (the clock a file index uses)."""
    return _touch_clock(marker)


def scan_workspace(
    root: str,
    blobs: ChunkSink,
    clock_marker: Path,
    previous: FileIndex,
    *,
    verify_chunks: bool,
    threads: int | None = None,
) -> tuple[dict[str, Any], FileIndex, SnapshotStats]:
    """Walk the workspace `root` into a manifest, storing the files `previous` cannot vouch
    for (on `threads` threads); unchanged files reuse their chunks (checked to exist when
    `verify_chunks`)."""
    clock_ns = _touch_clock(clock_marker)
    prefix = len(root) + 1
    stats = SnapshotStats()
    dirs: list[dict[str, Any]] = []
    symlinks: list[dict[str, str]] = []
    skipped: list[dict[str, str]] = []
    reused: list[FileEntry] = []
    to_read: list[tuple[str, str]] = []
    pending = [root]
    while pending:
        folder = pending.pop()
        with os.scandir(folder) as listing:
            items = sorted(listing, key=lambda item: item.name)
        for item in items:
            rel = item.path[prefix:]
            st = item.stat(follow_symlinks=False)
            if stat_mod.S_ISDIR(st.st_mode):
                dirs.append({"path": rel, "mode": stat_mod.S_IMODE(st.st_mode)})
                pending.append(item.path)
            elif stat_mod.S_ISLNK(st.st_mode):
                target = os.path.realpath(item.path)
                if inside(root, target) and target != root:
                    link = os.path.relpath(target, folder)
                    symlinks.append({"path": rel, "target": PurePosixPath(link).as_posix()})
                else:
                    skipped.append({"path": rel, "reason": "symlink points outside"})
            elif stat_mod.S_ISREG(st.st_mode):
                entry = _reusable_entry(blobs, rel, st, previous, verify_chunks)
                if entry is None:
                    to_read.append((item.path, rel))
                else:
                    stats.files_reused += 1
                    reused.append(entry)
            else:
                skipped.append({"path": rel, "reason": "not a regular file"})
    count = SNAPSHOT_THREADS if threads is None else threads
    read = run_parallel(lambda job: _read_file(blobs, *job), to_read, threads=count)
    entries: dict[str, FileEntry] = {entry.path: entry for entry in reused}
    for (_, rel), outcome in zip(to_read, read, strict=True):
        if outcome is None:
            skipped.append({"path": rel, "reason": "vanished while reading"})
            continue
        entry, written = outcome
        stats.files_read += 1
        stats.bytes_read += entry.size
        stats.bytes_written += written
        entries[rel] = entry
    ordered = sorted(entries.values(), key=lambda e: e.path)
    all_chunks: dict[str, None] = {}
    for entry in ordered:
        all_chunks.update(dict.fromkeys(entry.chunks))
    dirs.sort(key=lambda d: d["path"])
    manifest: dict[str, Any] = {
        "kind": MANIFEST_KIND,
        "clock_ns": clock_ns,
        "files": [entry.to_json() for entry in ordered],
        "dirs": dirs,
        "symlinks": sorted(symlinks, key=lambda s: s["path"]),
        "skipped": sorted(skipped, key=lambda s: s["path"]),
        "chunks": list(all_chunks),
    }
    return manifest, FileIndex(entries=entries, clock_ns=clock_ns), stats


def _reusable_entry(
    blobs: ChunkSink, rel: str, st: os.stat_result, previous: FileIndex, verify_chunks: bool
) -> FileEntry | None:
    """The previous snapshot's entry for `rel` when it still vouches for the file."""
    old = previous.entries.get(rel)
    if (
        old is not None
        and old.size == st.st_size
        and old.mtime_ns == st.st_mtime_ns
        and old.ctime_ns == st.st_ctime_ns
        and old.ino == st.st_ino
        and old.ctime_ns < previous.clock_ns
        and (not verify_chunks or all(blobs.has_chunk(c) for c in old.chunks))
    ):
        return FileEntry(
            rel,
            stat_mod.S_IMODE(st.st_mode),
            old.size,
            old.mtime_ns,
            old.ctime_ns,
            old.ino,
            old.chunks,
        )
    return None


def _read_file(blobs: ChunkSink, path: str, rel: str) -> tuple[FileEntry, int] | None:
    """Store one file's bytes: its entry and the bytes newly written (None if it vanished)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    try:
        before = os.fstat(fd)
        chunks, size, written = store_file(blobs, fd)
    finally:
        os.close(fd)
    # Record the fingerprint taken before reading: if the file changed while it was
    # read, the next snapshot sees a different fingerprint and reads it again.
    entry = FileEntry(
        rel,
        stat_mod.S_IMODE(before.st_mode),
        size,
        before.st_mtime_ns,
        before.st_ctime_ns,
        before.st_ino,
        tuple(chunks),
    )
    return entry, written


def load_index(blobs: BlobStore, manifest_id: str | None) -> FileIndex | None:
    """The file index of a workspace manifest, or None if it is gone or refused."""
    if not manifest_id:
        return None
    try:
        body = blobs.get_manifest(manifest_id)
        if body.get("kind") != MANIFEST_KIND:
            return None
        entries = {str(f["path"]): FileEntry.from_json(f) for f in body.get("files", [])}
        return FileIndex(entries=entries, clock_ns=int(body.get("clock_ns", 0)))
    except (BlobError, KeyError, TypeError, ValueError) as exc:
        # only an optimisation: without it, the next snapshot reads every file
        _log.info("not reusing workspace manifest %s: %s", manifest_id, exc)
        return None


def materialise(
    blobs: BlobStore,
    body: dict[str, Any],
    folder: Path,
    clock_marker: Path,
    *,
    threads: int | None = None,
    place: str | None = None,
) -> FileIndex:
    """Write the snapshot `body` into the new directory `folder` (files on `threads`
    threads), and the index its first snapshot trusts; on any failure remove the directory
    entirely: StorageFull when the disk (of `place`) is full, the blob store's own error
    when it failed, else BackendError."""
    root = str(folder)
    try:
        folder.mkdir(mode=0o700)
        dirs = sorted(body.get("dirs", []), key=lambda d: str(d["path"]))
        for raw in dirs:
            os.mkdir(member(root, raw["path"]), 0o700)
        wanted = _across_folders([FileEntry.from_json(raw) for raw in body.get("files", [])])
        count = CHECKOUT_THREADS if threads is None else threads
        written = run_parallel(lambda entry: _write_file(blobs, root, entry), wanted, threads=count)
        entries = {entry.path: entry for entry in written}
        for raw in body.get("symlinks", []):
            os.symlink(str(raw["target"]), member(root, raw["path"]))
        for raw in sorted(dirs, key=lambda d: str(d["path"]), reverse=True):
            os.chmod(member(root, raw["path"]), int(raw["mode"]) & 0o7777)
        os.chmod(root, PRIVATE_DIR_MODE)
        clock_ns = _touch_clock(clock_marker)
    except (OSError, BlobError, KeyError, TypeError, ValueError) as exc:
        shutil.rmtree(folder, onerror=_log_leftover)
        clock_marker.unlink(missing_ok=True)
        if isinstance(exc, DISK_FAILURES):
            raise
        if isinstance(exc, OSError) and exc.errno in FULL_ERRNOS:
            raise full_disk(place or f"the folder {folder.parent}") from None
        raise BackendError(f"checkout of the local snapshot failed: {exc}") from None
    return FileIndex(entries=entries, clock_ns=clock_ns)


def _log_leftover(function: Any, path: str, info: Any) -> None:
    """`shutil.rmtree`'s error hook while removing a failed checkout: what stays is logged."""
    if not isinstance(info[1], FileNotFoundError):
        _log.warning("a failed checkout left %s behind (%s): %s", path, function.__name__, info[1])


def _across_folders(entries: list[FileEntry]) -> list[FileEntry]:
    """The entries in turn from each folder (one of the first folder, one of the second,
    ...): threads taking the next job then create files in different folders, which the
    kernel lets happen at once (creations in one folder take turns)."""
    by_folder: dict[str, list[FileEntry]] = {}
    for entry in entries:
        by_folder.setdefault(posixpath.dirname(entry.path), []).append(entry)
    queues = list(by_folder.values())
    return [entry for row in itertools.zip_longest(*queues) for entry in row if entry is not None]


def _write_file(blobs: BlobStore, root: str, entry: FileEntry) -> FileEntry:
    """Create one file of a checkout from its chunks; its entry with the new fingerprint."""
    target = member(root, entry.path)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        position = 0
        for digest in entry.chunks:
            position += copy_chunk(blobs, digest, fd, position)
        os.fchmod(fd, entry.mode & 0o7777)
        os.utime(fd, ns=(entry.mtime_ns, entry.mtime_ns))
        st = os.fstat(fd)
    finally:
        os.close(fd)
    return FileEntry(
        entry.path,
        entry.mode,
        st.st_size,
        st.st_mtime_ns,
        st.st_ctime_ns,
        st.st_ino,
        entry.chunks,
    )
