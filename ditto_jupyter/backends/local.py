"""Local workspace backend: one directory per backend, snapshotted into the blob store.

A `LocalBackend` is a workspace directory (the kernel's cwd). Every path it is given is
relative to that directory and confined to it: absolute paths, `..` components and
symlinks that resolve outside are refused with `InvalidRequest`. I/O failures raise
`BackendError`.

`checkpoint()` writes a signed blob-store manifest:

    {"kind": "workspace", "clock_ns": ..., "files": [{path, mode, size, mtime_ns, ctime_ns,
     ino, chunks}], "dirs": [{path, mode}], "symlinks": [{path, target}],
     "skipped": [{path, reason}], "chunks": [every chunk id]}

Files are streamed in 1 MiB chunks. A file whose size, mtime, ctime and inode are unchanged
since the previous snapshot of the same workspace is not re-read: its chunk list is reused.
Like git's "racy" index entries, an entry whose ctime is not strictly older than the
snapshot's start (`clock_ns`, read from the filesystem's own clock through a marker file)
is never trusted, because a later write in the same timestamp tick would leave its
fingerprint unchanged. Symlinks are kept only when they resolve inside the workspace (as
a relative target); sockets, FIFOs, devices and escaping symlinks are listed under
`skipped` with the reason, never dropped silently.

`release()` deletes the workspace directory (the local counterpart of killing a sandbox;
the manager calls it only when no runtime is bound any more, and pause snapshots first)
and returns True. `exec` waits for the command's output pipes to close: a background job
that keeps stdout open holds the call until the timeout, which then kills the whole
process group.

State kept beside (not inside) the workspaces, under `<workspaces_root>/.state/`: the id
of each workspace's last manifest (so a new process reuses unchanged files too) and the
clock marker file.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import re
import secrets
import shutil
import signal
import stat as stat_mod
import tarfile
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import orjson

from ditto_jupyter.backends.base import (
    BackendLocator,
    ExecResult,
    FileKind,
    FileStat,
    SearchMatch,
)
from ditto_jupyter.core.blobs import CHUNK_SIZE, BlobError, BlobNotFound, BlobStore
from ditto_jupyter.core.errors import BackendError, InvalidRequest, UnsupportedBackend
from ditto_jupyter.core.models import BackendCheckpointRef

KIND = "local"
TEMP_DIR = ".ditto-tmp"
DEFAULT_EXEC_TIMEOUT = 600.0
DEFAULT_OUTPUT_LIMIT = 1 << 20
_DRAIN_SECONDS = 2.0
_STATE_DIR = ".state"
_ID_PATTERN = re.compile(r"^local-[0-9a-f]{32}$")


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

    def as_dict(self) -> dict[str, int]:
        """Plain dict for `BackendCheckpointRef.details`."""
        return {
            "files_read": self.files_read,
            "files_reused": self.files_reused,
            "bytes_read": self.bytes_read,
            "bytes_written": self.bytes_written,
        }


def _inside(root: str, real: str) -> bool:
    return real == root or real.startswith(root + os.sep)


def store_file(blobs: BlobStore, fd: int) -> tuple[list[str], int, int]:
    """Stream an open file into the blob store in 1 MiB chunks: (chunks, size, bytes written).

    Module-level so tests can count how many files a snapshot really reads.
    """
    chunks: list[str] = []
    size = written = 0
    buffer = bytearray(CHUNK_SIZE)
    view = memoryview(buffer)
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


class LocalBackend:
    """One workspace directory: files, exec, search, export and blob-store snapshots."""

    def __init__(
        self,
        provider: LocalProvider,
        backend_id: str,
        root: Path,
        *,
        index: FileIndex | None = None,
        last_manifest_id: str | None = None,
    ) -> None:
        self._provider = provider
        self._backend_id = backend_id
        self._root = os.path.realpath(root)
        self._index = index or FileIndex.empty()
        self._last_manifest_id = last_manifest_id
        self._released = False

    # ---- identity ---------------------------------------------------------------------

    @property
    def backend_id(self) -> str:
        """The control-plane id of this workspace ("local-<hex>")."""
        return self._backend_id

    @property
    def kind(self) -> str:
        """Always "local"."""
        return KIND

    @property
    def local_path(self) -> Path:
        """The workspace directory (the kernel's cwd)."""
        return Path(self._root)

    @property
    def last_manifest_id(self) -> str | None:
        """The manifest of this workspace's latest snapshot (None before the first)."""
        return self._last_manifest_id

    def locator(self) -> BackendLocator:
        """How to re-open this workspace after a restart."""
        return BackendLocator(
            kind=KIND,
            backend_id=self._backend_id,
            details={"path": self._root, "last_manifest_id": self._last_manifest_id},
        )

    # ---- path confinement -------------------------------------------------------------

    def _live_root(self) -> str:
        if self._released:
            raise BackendError(f"workspace {self._backend_id} has been released")
        if not os.path.isdir(self._root):
            raise BackendError(f"workspace directory {self._root} no longer exists")
        return self._root

    def _resolve(self, path: str) -> tuple[str, str]:
        """(lexical path inside the workspace, fully resolved real path), both confined."""
        root = self._live_root()
        if not isinstance(path, str):
            raise InvalidRequest(f"a path must be a string, not {type(path).__name__}")
        if path == "":
            raise InvalidRequest("the path is empty; use '.' for the workspace root")
        if "\x00" in path:
            raise InvalidRequest(f"the path {path!r} contains a NUL byte")
        if path.startswith("/"):
            raise InvalidRequest(
                f"absolute path {path!r} refused: give a path relative to the workspace"
            )
        if ".." in PurePosixPath(path).parts:
            raise InvalidRequest(f"path {path!r} refused: '..' is not allowed")
        lexical = os.path.normpath(os.path.join(root, path))
        real = os.path.realpath(lexical)
        parent_real = os.path.realpath(os.path.dirname(lexical)) if lexical != root else root
        if not (_inside(root, real) and _inside(root, parent_real)):
            raise InvalidRequest(f"path {path!r} refused: it resolves outside the workspace")
        return lexical, real

    def _relative(self, real: str) -> str:
        rel = os.path.relpath(real, self._root)
        return "." if rel == "." else PurePosixPath(rel).as_posix()

    # ---- file operations --------------------------------------------------------------

    async def stat(self, path: str) -> FileStat:
        """Kind, size and mtime of `path` (a symlink is reported as a symlink)."""
        lexical, _ = self._resolve(path)
        return await asyncio.to_thread(self._stat_sync, path, lexical)

    def _stat_sync(self, path: str, lexical: str) -> FileStat:
        try:
            st = os.lstat(lexical)
        except FileNotFoundError:
            raise BackendError(f"{path!r} does not exist in the workspace") from None
        except OSError as exc:
            raise BackendError(f"cannot stat {path!r}: {exc.strerror}") from None
        kind: FileKind
        if stat_mod.S_ISREG(st.st_mode):
            kind = "file"
        elif stat_mod.S_ISDIR(st.st_mode):
            kind = "dir"
        elif stat_mod.S_ISLNK(st.st_mode):
            kind = "symlink"
        else:
            kind = "other"
        return FileStat(path=path, kind=kind, size=st.st_size, mtime_ns=st.st_mtime_ns)

    async def read_bytes(self, path: str) -> bytes:
        """The content of a file (through symlinks that stay inside)."""
        _, real = self._resolve(path)
        return await asyncio.to_thread(self._read_sync, path, real)

    @staticmethod
    def _read_sync(path: str, real: str) -> bytes:
        try:
            with open(real, "rb") as handle:
                return handle.read()
        except FileNotFoundError:
            raise BackendError(f"{path!r} does not exist in the workspace") from None
        except IsADirectoryError:
            raise BackendError(f"{path!r} is a directory, not a file") from None
        except OSError as exc:
            raise BackendError(f"cannot read {path!r}: {exc.strerror}") from None

    async def write_bytes(self, path: str, data: bytes) -> None:
        """Replace `path` with `data` atomically, creating missing parent directories."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise InvalidRequest(f"write_bytes needs bytes, not {type(data).__name__}")
        _, real = self._resolve(path)
        if real == self._root:
            raise InvalidRequest("cannot write to the workspace root itself")
        await asyncio.to_thread(self._write_sync, path, real, bytes(data))

    def _write_sync(self, path: str, real: str, data: bytes) -> None:
        parent = os.path.dirname(real)
        if os.path.isdir(real):
            raise BackendError(f"{path!r} is a directory; cannot write a file there")
        created: list[str] = []
        tmp = os.path.join(parent, f".{os.path.basename(real)}.{secrets.token_hex(6)}.tmp")
        try:
            probe = parent
            while not os.path.isdir(probe):
                created.append(probe)
                probe = os.path.dirname(probe)
            for folder in reversed(created):
                os.mkdir(folder)
            try:
                mode: int | None = stat_mod.S_IMODE(os.stat(real).st_mode)
            except FileNotFoundError:
                mode = None  # a new file: 0o666 minus the umask, like open()
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            if mode is not None:
                os.chmod(tmp, mode)
            os.replace(tmp, real)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            for folder in created:
                with contextlib.suppress(OSError):
                    os.rmdir(folder)
            raise BackendError(f"cannot write {path!r}: {exc.strerror or exc}") from None

    async def create_dir_all(self, path: str) -> None:
        """Create `path` and its missing parents (no error if it is already a directory)."""
        _, real = self._resolve(path)
        await asyncio.to_thread(self._mkdir_sync, path, real)

    @staticmethod
    def _mkdir_sync(path: str, real: str) -> None:
        try:
            os.makedirs(real, exist_ok=True)
        except FileExistsError:
            raise BackendError(f"{path!r} exists and is not a directory") from None
        except OSError as exc:
            raise BackendError(f"cannot create directory {path!r}: {exc.strerror}") from None

    async def temp_path(self, suffix: str = "") -> str:
        """Create an empty, uniquely named file under `.ditto-tmp/` and return its path."""
        if not isinstance(suffix, str) or "/" in suffix or "\x00" in suffix:
            raise InvalidRequest(f"temp_path suffix {suffix!r} must not contain '/' or NUL")
        _, real_dir = self._resolve(TEMP_DIR)
        return await asyncio.to_thread(self._temp_sync, real_dir, suffix)

    def _temp_sync(self, real_dir: str, suffix: str) -> str:
        try:
            os.makedirs(real_dir, exist_ok=True)
            name = os.path.join(real_dir, f"tmp-{secrets.token_hex(8)}{suffix}")
            os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except OSError as exc:
            raise BackendError(f"cannot create a temporary file: {exc.strerror}") from None
        return self._relative(name)

    # ---- exec ---------------------------------------------------------------------------

    async def exec(
        self,
        command: str,
        *,
        cwd: str | None = None,
        timeout: float | None = None,
        env: dict[str, str] | None = None,
    ) -> ExecResult:
        """Run `/bin/sh -c command` in the workspace; a non-zero exit is still a result.

        The command runs in its own process group: on timeout the whole group is killed
        and the result says `timed_out`. Each stream keeps at most `output_limit` bytes;
        beyond that it is drained and dropped, and the result says `truncated`.
        """
        if not isinstance(command, str) or not command.strip():
            raise InvalidRequest("exec needs a non-empty command string")
        limit = self._provider.exec_timeout if timeout is None else timeout
        if not isinstance(limit, int | float) or limit <= 0:
            raise InvalidRequest(f"exec timeout must be a positive number of seconds: {limit!r}")
        for key, value in (env or {}).items():
            if not isinstance(key, str) or not isinstance(value, str) or "=" in key or not key:
                raise InvalidRequest(f"exec env entry {key!r} must map a name to a string")
        _, workdir = self._resolve(cwd if cwd is not None else ".")
        if not os.path.isdir(workdir):
            raise InvalidRequest(f"exec cwd {cwd!r} is not a directory in the workspace")
        full_env = {**os.environ, **(env or {}), "PWD": workdir}
        try:
            proc = await asyncio.create_subprocess_exec(
                "/bin/sh",
                "-c",
                command,
                cwd=workdir,
                env=full_env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            raise BackendError(f"cannot start /bin/sh: {exc.strerror}") from None
        assert proc.stdout is not None and proc.stderr is not None
        cap = self._provider.output_limit
        out, err = _CappedStream(cap), _CappedStream(cap)
        readers = [
            asyncio.ensure_future(out.drain(proc.stdout)),
            asyncio.ensure_future(err.drain(proc.stderr)),
        ]
        timed_out = False
        try:
            await asyncio.wait_for(proc.wait(), limit)
        except asyncio.TimeoutError:
            timed_out = True
            _kill_group(proc.pid)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(proc.wait(), _DRAIN_SECONDS)
        except BaseException:
            _kill_group(proc.pid)
            for task in readers:
                task.cancel()
            raise
        _, pending = await asyncio.wait(readers, timeout=_DRAIN_SECONDS)
        for task in pending:
            task.cancel()
        code = proc.returncode
        return ExecResult(
            exit_code=code if code is not None else -int(signal.SIGKILL),
            stdout=out.text(),
            stderr=err.text(),
            timed_out=timed_out,
            truncated=out.truncated or err.truncated,
        )

    # ---- search and export --------------------------------------------------------------

    async def search(
        self, pattern: str, path: str = ".", *, max_results: int = 1000
    ) -> list[SearchMatch]:
        """Lines matching the regex `pattern` in text files under `path` (binary skipped)."""
        if not isinstance(pattern, str):
            raise InvalidRequest("search pattern must be a string")
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise InvalidRequest(
                f"search pattern {pattern!r} is not a valid regex: {exc}"
            ) from None
        if not isinstance(max_results, int) or max_results < 1:
            raise InvalidRequest(f"max_results must be a positive integer: {max_results!r}")
        _, real = self._resolve(path)
        if not os.path.exists(real):
            raise BackendError(f"{path!r} does not exist in the workspace")
        return await asyncio.to_thread(self._search_sync, regex, real, max_results)

    def _search_sync(
        self, regex: re.Pattern[str], real: str, max_results: int
    ) -> list[SearchMatch]:
        matches: list[SearchMatch] = []
        files = [real] if os.path.isfile(real) else self._walk_files(real)
        for file_path in files:
            try:
                with open(file_path, "rb") as handle:
                    if b"\x00" in handle.read(8192):
                        continue
                    handle.seek(0)
                    for number, raw in enumerate(handle, start=1):
                        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                        if regex.search(line):
                            matches.append(SearchMatch(self._relative(file_path), number, line))
                            if len(matches) >= max_results:
                                return matches
            except OSError:
                continue  # unreadable files are not searchable; search is best effort
        return matches

    @staticmethod
    def _walk_files(top: str) -> Iterator[str]:
        """Regular files under `top`, sorted, never following symlinks."""
        for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
            dirnames.sort()
            for name in sorted(filenames):
                full = os.path.join(dirpath, name)
                if stat_mod.S_ISREG(os.lstat(full).st_mode):
                    yield full

    async def export(self, path: str = ".") -> bytes:
        """An uncompressed tar archive of `path` (symlinks stored as links, not followed)."""
        _, real = self._resolve(path)
        if not os.path.exists(real):
            raise BackendError(f"{path!r} does not exist in the workspace")
        return await asyncio.to_thread(self._export_sync, path, real)

    def _export_sync(self, path: str, real: str) -> bytes:
        buffer = io.BytesIO()
        arcname = self._relative(real)
        try:
            with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
                archive.add(real, arcname=arcname, recursive=True)
        except OSError as exc:
            raise BackendError(f"cannot export {path!r}: {exc.strerror or exc}") from None
        return buffer.getvalue()

    # ---- snapshots ----------------------------------------------------------------------

    async def checkpoint(self) -> BackendCheckpointRef:
        """Snapshot the workspace into the blob store (unchanged files are not re-read)."""
        self._live_root()
        return await asyncio.to_thread(self._checkpoint_sync)

    def _checkpoint_sync(self) -> BackendCheckpointRef:
        with self._provider.write_lock:
            try:
                manifest, index, stats = self._scan(verify_chunks=False)
                try:
                    manifest_id, written = self._provider.snapshot_writer.put_manifest(manifest)
                except BlobNotFound:
                    # A reused chunk was collected (its old snapshot was deleted and gc
                    # ran): scan again, re-reading the files whose chunks are gone.
                    manifest, index, stats = self._scan(verify_chunks=True)
                    manifest_id, written = self._provider.snapshot_writer.put_manifest(manifest)
            except (OSError, BlobError) as exc:
                raise BackendError(
                    f"snapshot of workspace {self._backend_id} failed: {exc}"
                ) from exc
        stats.bytes_written += written
        self._index = index
        self._last_manifest_id = manifest_id
        with contextlib.suppress(OSError):  # only an optimisation for a later process
            self._provider.save_state(self._backend_id, manifest_id)
        return BackendCheckpointRef(
            backend_kind=KIND,
            backend_id=self._backend_id,
            provider_snapshot_id=manifest_id,
            details={"files": len(manifest["files"]), **stats.as_dict()},
        )

    def _scan(self, *, verify_chunks: bool) -> tuple[dict[str, Any], FileIndex, SnapshotStats]:
        """Walk the workspace; reuse unchanged files' chunks (checked to exist if asked)."""
        clock_ns = _touch_clock(self._provider.clock_marker(self._backend_id))
        previous = self._index
        prefix = len(self._root) + 1
        stats = SnapshotStats()
        files: list[dict[str, Any]] = []
        dirs: list[dict[str, Any]] = []
        symlinks: list[dict[str, str]] = []
        skipped: list[dict[str, str]] = []
        all_chunks: dict[str, None] = {}
        entries: dict[str, FileEntry] = {}
        pending = [self._root]
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
                    if _inside(self._root, target) and target != self._root:
                        link = os.path.relpath(target, folder)
                        symlinks.append({"path": rel, "target": PurePosixPath(link).as_posix()})
                    else:
                        skipped.append({"path": rel, "reason": "symlink points outside"})
                elif stat_mod.S_ISREG(st.st_mode):
                    entry = self._snapshot_file(item.path, rel, st, previous, stats, verify_chunks)
                    if entry is None:
                        skipped.append({"path": rel, "reason": "vanished while reading"})
                        continue
                    entries[rel] = entry
                    files.append(entry.to_json())
                    all_chunks.update(dict.fromkeys(entry.chunks))
                else:
                    skipped.append({"path": rel, "reason": "not a regular file"})
        files.sort(key=lambda f: f["path"])
        dirs.sort(key=lambda d: d["path"])
        manifest: dict[str, Any] = {
            "kind": "workspace",
            "clock_ns": clock_ns,
            "files": files,
            "dirs": dirs,
            "symlinks": sorted(symlinks, key=lambda s: s["path"]),
            "skipped": sorted(skipped, key=lambda s: s["path"]),
            "chunks": list(all_chunks),
        }
        return manifest, FileIndex(entries=entries, clock_ns=clock_ns), stats

    def _snapshot_file(
        self,
        path: str,
        rel: str,
        st: os.stat_result,
        previous: FileIndex,
        stats: SnapshotStats,
        verify_chunks: bool,
    ) -> FileEntry | None:
        blobs = self._provider.snapshot_writer
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
            stats.files_reused += 1
            return FileEntry(
                rel,
                stat_mod.S_IMODE(st.st_mode),
                old.size,
                old.mtime_ns,
                old.ctime_ns,
                old.ino,
                old.chunks,
            )
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        try:
            before = os.fstat(fd)
            chunks, size, written = store_file(blobs, fd)
        finally:
            os.close(fd)
        stats.files_read += 1
        stats.bytes_read += size
        stats.bytes_written += written
        # Record the fingerprint taken before reading: if the file changed while it was
        # read, the next snapshot sees a different fingerprint and reads it again.
        return FileEntry(
            rel,
            stat_mod.S_IMODE(before.st_mode),
            size,
            before.st_mtime_ns,
            before.st_ctime_ns,
            before.st_ino,
            tuple(chunks),
        )

    async def release(self) -> bool:
        """Delete the workspace directory; True when it existed and was removed."""
        if self._released:
            return False
        existed = await asyncio.to_thread(self._provider.remove_workspace, self._backend_id)
        self._released = True
        return existed


class _CappedStream:
    """Collects at most `cap` bytes of a stream and drains (drops) the rest."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.parts: list[bytes] = []
        self.kept = 0
        self.truncated = False

    async def drain(self, stream: asyncio.StreamReader) -> None:
        while True:
            block = await stream.read(65536)
            if not block:
                return
            room = self.cap - self.kept
            if len(block) > room:
                self.truncated = True
                block = block[: max(room, 0)]
            if block:
                self.parts.append(block)
                self.kept += len(block)

    def text(self) -> str:
        return b"".join(self.parts).decode("utf-8", errors="replace")


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


class LocalProvider:
    """Creates local workspaces under `workspaces_root` and manages their snapshots."""

    def __init__(
        self,
        workspaces_root: str | os.PathLike[str],
        blobs: BlobStore,
        *,
        exec_timeout: float = DEFAULT_EXEC_TIMEOUT,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
    ) -> None:
        if exec_timeout <= 0 or output_limit < 0:
            raise InvalidRequest("exec_timeout must be positive and output_limit non-negative")
        self.root = Path(workspaces_root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.root = Path(os.path.realpath(self.root))
        self.blobs = blobs
        self.exec_timeout = exec_timeout
        self.output_limit = output_limit
        # Snapshots run in worker threads. A BlobStore's compressor is not thread-safe, so
        # they write through a private instance on the same directory (same secret, same
        # content-addressed names, as when processes share a store), one at a time.
        self.snapshot_writer = BlobStore(blobs.root, durable=blobs.durable)
        self.write_lock = threading.Lock()
        (self.root / _STATE_DIR).mkdir(exist_ok=True)

    @property
    def kind(self) -> str:
        """Always "local"."""
        return KIND

    # ---- bookkeeping beside the workspaces ----------------------------------------------

    def workspace_dir(self, backend_id: str) -> Path:
        """Where the workspace of `backend_id` lives."""
        if not _ID_PATTERN.match(backend_id):
            raise InvalidRequest(f"{backend_id!r} is not a local backend id")
        return self.root / backend_id

    def clock_marker(self, backend_id: str) -> Path:
        """The marker file touched to read the filesystem clock at snapshot start."""
        return self.root / _STATE_DIR / f"{backend_id}.clock"

    def _state_file(self, backend_id: str) -> Path:
        return self.root / _STATE_DIR / f"{backend_id}.json"

    def save_state(self, backend_id: str, manifest_id: str) -> None:
        """Remember the workspace's last manifest id (atomically) for a later process."""
        target = self._state_file(backend_id)
        tmp = target.with_suffix(f".{secrets.token_hex(4)}.tmp")
        tmp.write_bytes(orjson.dumps({"last_manifest_id": manifest_id}))
        os.replace(tmp, target)

    def _saved_manifest_id(self, backend_id: str) -> str | None:
        try:
            value = orjson.loads(self._state_file(backend_id).read_bytes()).get("last_manifest_id")
        except (OSError, orjson.JSONDecodeError, AttributeError):
            return None
        return value if isinstance(value, str) else None

    def remove_workspace(self, backend_id: str) -> bool:
        """Delete a workspace and its bookkeeping; True when the directory existed."""
        folder = self.workspace_dir(backend_id)
        existed = folder.is_dir()
        if existed:
            shutil.rmtree(folder)
        for extra in (self._state_file(backend_id), self.clock_marker(backend_id)):
            extra.unlink(missing_ok=True)
        return existed

    def _load_index(self, manifest_id: str | None) -> FileIndex | None:
        """The file index of a manifest, or None if it is gone or refused."""
        if not manifest_id:
            return None
        try:
            body = self.blobs.get_manifest(manifest_id)
            if body.get("kind") != "workspace":
                return None
            entries = {str(f["path"]): FileEntry.from_json(f) for f in body.get("files", [])}
            return FileIndex(entries=entries, clock_ns=int(body.get("clock_ns", 0)))
        except (BlobError, KeyError, TypeError, ValueError):
            return None

    # ---- BackendProvider ------------------------------------------------------------------

    async def create(self, runtime_id: str) -> LocalBackend:
        """A fresh, empty workspace directory for `runtime_id`."""
        backend_id = f"local-{uuid.uuid4().hex}"
        folder = self.workspace_dir(backend_id)
        try:
            folder.mkdir(mode=0o755)
        except OSError as exc:
            raise BackendError(f"cannot create workspace {folder}: {exc.strerror}") from None
        return LocalBackend(self, backend_id, folder)

    async def attach(self, locator: BackendLocator) -> LocalBackend:
        """Re-open a workspace recorded before a restart, with its last snapshot's index."""
        if locator.kind != KIND:
            raise UnsupportedBackend(f"a {locator.kind!r} locator cannot be opened as local")
        folder = self.workspace_dir(locator.backend_id)
        if not folder.is_dir():
            raise BackendError(f"workspace {locator.backend_id} is gone from {self.root}")
        index: FileIndex | None = None
        manifest_id: str | None = None
        candidates = [self._saved_manifest_id(locator.backend_id)]
        recorded = locator.details.get("last_manifest_id")
        candidates.append(recorded if isinstance(recorded, str) else None)
        for candidate in candidates:
            index = self._load_index(candidate)
            if index is not None:
                manifest_id = candidate
                break
        return LocalBackend(
            self, locator.backend_id, folder, index=index, last_manifest_id=manifest_id
        )

    async def checkout(self, ref: BackendCheckpointRef, runtime_id: str) -> LocalBackend:
        """A new workspace holding real copies of every file of the snapshot `ref`."""
        if ref.backend_kind != KIND:
            raise UnsupportedBackend(
                f"a {ref.backend_kind!r} snapshot cannot be checked out locally"
            )
        if not ref.provider_snapshot_id:
            raise UnsupportedBackend("the checkpoint's local snapshot has been deleted")
        try:
            body = self.blobs.get_manifest(ref.provider_snapshot_id)
        except BlobNotFound:
            raise BackendError(
                f"local snapshot {ref.provider_snapshot_id} is missing from the blob store"
            ) from None
        except BlobError as exc:
            raise BackendError(f"local snapshot refused: {exc}") from None
        if body.get("kind") != "workspace":
            raise BackendError(f"manifest {ref.provider_snapshot_id} is not a workspace snapshot")
        backend_id = f"local-{uuid.uuid4().hex}"
        folder = self.workspace_dir(backend_id)
        index = await asyncio.to_thread(self._materialise, body, folder)
        return LocalBackend(self, backend_id, folder, index=index)

    def _materialise(self, body: dict[str, Any], folder: Path) -> FileIndex:
        """Write the snapshot into a new directory; on any failure remove it entirely."""
        root = str(folder)
        try:
            folder.mkdir(mode=0o700)
            entries: dict[str, FileEntry] = {}
            dirs = sorted(body.get("dirs", []), key=lambda d: str(d["path"]))
            for raw in dirs:
                os.mkdir(self._member(root, raw["path"]), 0o700)
            for raw in body.get("files", []):
                entry = FileEntry.from_json(raw)
                target = self._member(root, entry.path)
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                try:
                    for digest in entry.chunks:
                        data = memoryview(self.blobs.get_chunk(digest))
                        while data:
                            data = data[os.write(fd, data) :]
                    os.fchmod(fd, entry.mode & 0o7777)
                    os.utime(fd, ns=(entry.mtime_ns, entry.mtime_ns))
                    st = os.fstat(fd)
                finally:
                    os.close(fd)
                entries[entry.path] = FileEntry(
                    entry.path,
                    entry.mode,
                    st.st_size,
                    st.st_mtime_ns,
                    st.st_ctime_ns,
                    st.st_ino,
                    entry.chunks,
                )
            for raw in body.get("symlinks", []):
                os.symlink(str(raw["target"]), self._member(root, raw["path"]))
            for raw in sorted(dirs, key=lambda d: str(d["path"]), reverse=True):
                os.chmod(self._member(root, raw["path"]), int(raw["mode"]) & 0o7777)
            os.chmod(root, 0o755)
            clock_ns = _touch_clock(self.clock_marker(folder.name))
        except (OSError, BlobError, KeyError, TypeError, ValueError) as exc:
            shutil.rmtree(folder, ignore_errors=True)
            self.clock_marker(folder.name).unlink(missing_ok=True)
            raise BackendError(f"checkout of the local snapshot failed: {exc}") from None
        return FileIndex(entries=entries, clock_ns=clock_ns)

    @staticmethod
    def _member(root: str, rel: object) -> str:
        """A manifest path turned into a path under `root`, refusing anything that escapes."""
        if not isinstance(rel, str) or not rel or rel.startswith("/"):
            raise ValueError(f"bad path {rel!r} in the snapshot manifest")
        if ".." in PurePosixPath(rel).parts or "\x00" in rel:
            raise ValueError(f"bad path {rel!r} in the snapshot manifest")
        return os.path.join(root, rel)

    async def delete_snapshot(self, ref: BackendCheckpointRef) -> bool:
        """Delete the snapshot's manifest (its chunks go at the next gc); False if gone."""
        if ref.backend_kind != KIND:
            raise UnsupportedBackend(f"a {ref.backend_kind!r} snapshot is not a local snapshot")
        if not ref.provider_snapshot_id:
            return False
        try:
            return self.blobs.delete_manifest(ref.provider_snapshot_id)
        except BlobNotFound:
            return False

    def referenced_manifests(self, ref: BackendCheckpointRef) -> list[str]:
        """The manifest a local snapshot keeps alive."""
        return [ref.provider_snapshot_id] if ref.provider_snapshot_id else []
