"""Chunks as files on the local disk: `chunks/ab/<hex>`, written in batches through `tmp/`.

A batch stages every chunk as a file of its own in a private folder `tmp/bulk-<hex>/`
(a subfolder for each further writing thread: creating files in one folder is serialised
by the kernel), named by the chunk, and starts writing it back to the disk at once. `sync` makes
them all durable together: one `syncfs` of the filesystem, or an fsync of each file when at
most `FSYNC_EACH_LIMIT` are new (a few chunks never wait for other tenants' dirty data).
`publish` then renames each into place without replacing what is there
(`renameat2(RENAME_NOREPLACE)`, or a hard link where that is missing), and makes the names
durable the same way: an fsync of each folder it renamed into, or one `syncfs` for many.
So a chunk's name never points at bytes that are not on the disk, and one sync serves a
whole workspace snapshot instead of two fsyncs a file.

Before the sync, the batch writes the names it stages into its folder (`names.<n>`). A
writer killed after `publish` but before its catalogue commit leaves chunks no row records;
its folder, unlocked (a live batch holds an flock on it) and older than the grace period,
is a `StaleDiskBatch` that garbage collection clears, names included.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import logging
import os
import secrets
import shutil
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ditto_jupyter.core.blobs.errors import BlobNotFound, os_failure

#: Up to this many new chunk files, a batch fsyncs each one; beyond, one `syncfs`.
FSYNC_EACH_LIMIT = 16
#: Name prefix of a batch's staging folder under `tmp/`.
BATCH_PREFIX = "bulk-"
_NAMES_PREFIX = "names."
_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
_SYNC_FILE_RANGE_WRITE = 2
_YOUNGEST_STALE_S = 5.0
_log = logging.getLogger(__name__)


def _libc_function(name: str) -> Any:
    try:
        return getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):  # not Linux, or an old C library
        return None


_syncfs = _libc_function("syncfs")
_renameat2 = _libc_function("renameat2")
_sync_file_range = _libc_function("sync_file_range")


def sync_filesystem(fd: int, place: str) -> None:
    """Write back everything dirty on the filesystem holding the open folder `fd`."""
    if _syncfs(fd) != 0:
        error = ctypes.get_errno()
        raise os_failure(OSError(error, os.strerror(error)), place, "syncing the blob store")


def fsync_path(path: str) -> None:
    """fsync one file or folder by name."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def rename_noreplace(source: str, target: str) -> bool:
    """Rename `source` to `target` unless `target` exists; whether it was renamed (when
    not, `source` is gone all the same: the target holds the same content)."""
    global _renameat2
    if _renameat2 is not None:
        if _renameat2(_AT_FDCWD, source.encode(), _AT_FDCWD, target.encode(), _RENAME_NOREPLACE):
            error = ctypes.get_errno()
            if error == errno.EEXIST:
                os.unlink(source)
                return False
            if error not in (errno.ENOSYS, errno.EINVAL):  # EINVAL: this filesystem has none
                raise OSError(error, os.strerror(error), target)
            _renameat2 = None
        else:
            return True
    try:
        os.link(source, target)
    except FileExistsError:
        os.unlink(source)
        return False
    os.unlink(source)
    return True


def _write_all(fd: int, parts: Sequence[bytes | memoryview]) -> None:
    """Write every part, in order, with as few system calls as the kernel allows."""
    views = [memoryview(part).cast("B") for part in parts if len(part)]
    while views:
        written = os.writev(fd, views)
        while views and written >= len(views[0]):
            written -= len(views[0])
            views.pop(0)
        if views and written:
            views[0] = views[0][written:]


class LocalDiskChunks:
    """`ChunkStorage` on the local disk: one file per chunk under `<root>/chunks/`."""

    def __init__(self, root: Path, *, place: str) -> None:
        self._place = place
        self.chunks = root / "chunks"
        self.staging = root / "tmp"
        self._chunks_dir = str(self.chunks)
        self._shards: set[str] = set()  # shard folders known to exist
        for folder in (self.chunks, self.staging):
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise os_failure(exc, place, f"creating {folder}") from None

    @property
    def place(self) -> str:
        """What messages call this storage's place."""
        return self._place

    @property
    def evicts(self) -> bool:
        """False: a chunk file goes only when garbage collection frees it."""
        return False

    def local_path(self, name: str) -> str:
        """The file holding the chunk `name` (which may not exist)."""
        return os.path.join(self._chunks_dir, name[:2], name)

    def batch(self, *, durable: bool) -> DiskBatch:
        """A new bulk write into this folder."""
        return DiskBatch(self, durable=durable)

    def get(self, name: str) -> bytes:
        """The stored form of a chunk, read from its file."""
        try:
            with open(self.local_path(name), "rb") as handle:
                return handle.read()
        except FileNotFoundError:
            raise BlobNotFound(f"chunk {name} is missing from the blob store") from None
        except OSError as exc:
            raise os_failure(exc, self._place, f"reading chunk {name}") from None

    def exists(self, name: str) -> bool:
        """Whether the chunk's file exists."""
        return os.path.exists(self.local_path(name))

    def delete(self, name: str) -> bool:
        """Remove the chunk's file; False when it was not there."""
        try:
            os.unlink(self.local_path(name))
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise os_failure(exc, self._place, f"deleting chunk {name}") from None
        return True

    def drop_corrupt(self, name: str) -> bool:
        """Keep a chunk file that failed its check: it is the only copy (False)."""
        return False

    def shard(self, name: str) -> tuple[str, bool]:
        """The folder of chunk `name`, created if missing; whether it was created now."""
        prefix = name[:2]
        folder = os.path.join(self._chunks_dir, prefix)
        if prefix in self._shards:
            return folder, False
        try:
            os.mkdir(folder, 0o700)
            created = True
        except FileExistsError:
            created = False
        self._shards.add(prefix)
        return folder, created

    def stale_batches(self, cutoff: float) -> Iterator[StaleDiskBatch]:
        """Staging folders of batches whose writers are gone (unlocked) and that nothing
        has touched since before `cutoff` (and a few seconds at least: a folder is locked
        just after it is made)."""
        cutoff = min(cutoff, time.time() - _YOUNGEST_STALE_S)
        for entry in os.scandir(self.staging):
            if not entry.name.startswith(BATCH_PREFIX) or not entry.is_dir(follow_symlinks=False):
                continue
            try:
                if entry.stat(follow_symlinks=False).st_mtime >= cutoff:
                    continue
                fd = os.open(entry.path, os.O_RDONLY | os.O_DIRECTORY)
            except FileNotFoundError:  # its writer finished meanwhile
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # a live writer holds it
                os.close(fd)
                continue
            yield StaleDiskBatch(entry.path, fd)


class DiskBatch:
    """One bulk write into a `LocalDiskChunks` (`ChunkBatch`); `add` is thread-safe."""

    def __init__(self, storage: LocalDiskChunks, *, durable: bool) -> None:
        self._storage = storage
        self._durable = durable
        self._lock = threading.Lock()
        self._folder: str | None = None
        self._folder_fd: int | None = None
        self._thread_folders: dict[int, str] = {}
        self._staged: dict[str, str] = {}  # chunk name -> its staged file
        self._created: list[str] = []  # names `publish` created, not yet committed or taken back
        self._names_written = 0
        self._new_shards = False  # whether this batch made a shard folder (chunks/ab/)

    def __len__(self) -> int:
        with self._lock:
            return len(self._staged)

    @property
    def published(self) -> list[str]:
        """The names `publish` created."""
        return list(self._created)

    def staged(self, name: str) -> str | None:
        """The staged file of a chunk `add` has written (None once published)."""
        with self._lock:
            return self._staged.get(name)

    def _staging_folder(self) -> str:
        """This batch's own folder under tmp/ (made on first use), locked while it lives."""
        if self._folder is None:
            folder = os.path.join(self._storage.staging, BATCH_PREFIX + secrets.token_hex(8))
            os.mkdir(folder, 0o700)
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._folder, self._folder_fd = folder, fd
        return self._folder

    def _thread_folder(self) -> str:
        """Where this thread stages (with the batch's lock held): the first thread in the
        staging folder itself, every other one in a subfolder of its own."""
        thread = threading.get_ident()
        folder = self._thread_folders.get(thread)
        if folder is None:
            folder = self._staging_folder()
            if self._thread_folders:
                folder = os.path.join(folder, str(len(self._thread_folders)))
                os.mkdir(folder, 0o700)
            self._thread_folders[thread] = folder
        return folder

    def add(self, name: str, parts: Sequence[bytes | memoryview]) -> None:
        """Stage one chunk as a file, and start writing it back to the disk."""
        with self._lock:
            if name in self._staged:
                return
            try:
                path = os.path.join(self._thread_folder(), name)
            except OSError as exc:
                raise os_failure(exc, self._storage.place, "staging chunks") from None
            self._staged[name] = path
        try:
            if self._storage.shard(name)[1]:  # made here, off the catalogue's lock
                self._new_shards = True
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                _write_all(fd, parts)
                if self._durable and _sync_file_range is not None:
                    _sync_file_range(
                        fd, ctypes.c_longlong(0), ctypes.c_longlong(0), _SYNC_FILE_RANGE_WRITE
                    )
            finally:
                os.close(fd)
        except OSError as exc:
            with self._lock:
                self._staged.pop(name, None)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            raise os_failure(exc, self._storage.place, f"writing chunk {name}") from None

    def sync(self) -> None:
        """Record the staged names, then make every staged file durable with one sync."""
        with self._lock:
            staged = list(self._staged.values())
            unrecorded = [n for n in self._staged if n not in self._created]
        if not staged:
            return
        folder = self._staging_folder()
        try:
            names = os.path.join(folder, f"{_NAMES_PREFIX}{self._names_written}")
            with open(names, "w", encoding="ascii") as handle:
                handle.write("\n".join(unrecorded))
            self._names_written += 1
            if not self._durable:
                return
            assert self._folder_fd is not None
            if _syncfs is not None and len(staged) > FSYNC_EACH_LIMIT:
                sync_filesystem(self._folder_fd, self._storage.place)
                return
            for path in [*staged, names]:
                fsync_path(path)
            os.fsync(self._folder_fd)
        except OSError as exc:
            raise os_failure(exc, self._storage.place, "syncing staged chunks") from None

    def publish(self) -> None:
        """Rename every staged chunk into place (never over an existing one), durably."""
        with self._lock:
            staged, self._staged = self._staged, {}
        folders: set[str] = set()
        try:
            for name, path in staged.items():
                folder = self._storage.shard(name)[0]
                if rename_noreplace(path, os.path.join(folder, name)):
                    self._created.append(name)
                    folders.add(folder)
            if self._durable and folders:
                if self._new_shards:
                    folders.add(str(self._storage.chunks))
                if _syncfs is not None and len(folders) > FSYNC_EACH_LIMIT:
                    assert self._folder_fd is not None
                    sync_filesystem(self._folder_fd, self._storage.place)
                else:
                    for folder in sorted(folders):
                        fsync_path(folder)
        except OSError as exc:
            with self._lock:  # what was not renamed yet is still staged
                self._staged.update({n: p for n, p in staged.items() if os.path.exists(p)})
            raise os_failure(exc, self._storage.place, "naming staged chunks") from None

    def unpublish(self, recorded: set[str]) -> None:
        """Move the names `publish` created back into staging, except `recorded` ones."""
        folder = self._folder  # back into a folder that exists: a full disk may have no
        for name in list(self._created):  # room for a new one
            if name not in recorded:
                assert folder is not None
                staged = os.path.join(folder, name)
                try:
                    os.rename(self._storage.local_path(name), staged)
                except OSError as exc:
                    doing = f"taking back chunk {name}"
                    raise os_failure(exc, self._storage.place, doing) from None
                with self._lock:
                    self._staged[name] = staged
            self._created.remove(name)

    def close(self, *, committed: bool) -> None:
        """Remove the staging folder; when names were published and neither committed nor
        taken back, leave their list in it (unlocked) for garbage collection."""
        if self._folder is None:
            return
        if self._created and not committed:
            for path in self._staged.values():
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            _log.warning(
                "left %d chunk name(s) of a failed write in %s for garbage collection",
                len(self._created),
                self._folder,
            )
        else:
            shutil.rmtree(self._folder, onerror=_log_removal_failure)
        assert self._folder_fd is not None
        os.close(self._folder_fd)  # and with it the lock
        self._folder = self._folder_fd = None
        self._thread_folders.clear()
        self._staged.clear()
        self._created.clear()


class StaleDiskBatch:
    """A staging folder of a writer that died (`StaleBatch`); its lock is held by us."""

    def __init__(self, folder: str, fd: int) -> None:
        self._folder = folder
        self._fd = fd

    @property
    def names(self) -> list[str]:
        """Every chunk name the writer recorded before it could have published it."""
        found: list[str] = []
        for entry in os.scandir(self._folder):
            if entry.name.startswith(_NAMES_PREFIX):
                with open(entry.path, encoding="ascii") as handle:
                    found += [line for line in handle.read().split("\n") if line]
        return found

    def remove(self) -> None:
        """Delete the folder."""
        try:
            shutil.rmtree(self._folder, onerror=_log_removal_failure)
        finally:
            os.close(self._fd)


def _log_removal_failure(function: Any, path: str, info: Any) -> None:
    """`shutil.rmtree`'s error hook: a staging file that cannot be removed is logged (it
    is garbage; the next collection tries again)."""
    if not isinstance(info[1], FileNotFoundError):
        _log.warning("could not remove %s (%s): %s", path, function.__name__, info[1])
