"""A local workspace: one directory, every path confined to it, files, exec and search.

A `LocalBackend` is a workspace directory (`DITTO_WORKSPACE` in the runtime's kernels).
Every path it is given is relative to that directory and confined to it: absolute paths,
`..` components and symlinks that resolve outside are refused with `InvalidRequest`. I/O
failures raise `BackendError`. Its live files can be read as a tree without a snapshot
(`live_tree`, for comparisons) and a snapshot brought back into it (`restore_snapshot`,
for undo: `in_place`). `exec` waits for the command's output pipes to close: a
background job that keeps stdout open holds the call until the timeout, which then kills
the whole process group. `checkpoint()` snapshots the workspace (`snapshots`) through one
bulk write of the blob store (`core.blobs.bulk`: one sync, then the chunks and the manifest
are recorded at once; a full disk is StorageFull); `release()` deletes the directory (the
local counterpart of killing a sandbox).
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
import re
import secrets
import signal
import stat as stat_mod
import tarfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from ditto_jupyter.backends.base import (
    BackendLocator,
    ExecResult,
    FileKind,
    FileStat,
    SearchMatch,
)
from ditto_jupyter.backends.local.in_place import restore_in_place
from ditto_jupyter.backends.local.paths import inside
from ditto_jupyter.backends.local.snapshots import FileIndex, SnapshotStats, scan_workspace
from ditto_jupyter.backends.local.trees import LiveTree, scan_live
from ditto_jupyter.core.blobs import BlobError, BlobNotFound, BulkWrite
from ditto_jupyter.core.blobs.errors import DISK_FAILURES
from ditto_jupyter.core.errors import BackendError, InvalidRequest
from ditto_jupyter.core.models import BackendCheckpointRef, now_ms

if TYPE_CHECKING:
    from ditto_jupyter.backends.local.provider import LocalProvider

_log = logging.getLogger(__name__)
KIND = "local"
TEMP_DIR = ".ditto-tmp"
DEFAULT_EXEC_TIMEOUT = 600.0
DEFAULT_OUTPUT_LIMIT = 1 << 20
_DRAIN_SECONDS = 2.0


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
        # The body of the last snapshot taken or restored here: a scan that finds the same
        # tree stores it again (the same id), not a new manifest that differs by its clock.
        self._last_body: dict[str, Any] | None = None
        self._last_ref: BackendCheckpointRef | None = None  # the snapshot that body names
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
        """The workspace directory (`DITTO_WORKSPACE` in the runtime's kernels)."""
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
        if not (inside(root, real) and inside(root, parent_real)):
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
            _remove_quietly(os.unlink, tmp)
            for folder in created:
                _remove_quietly(os.rmdir, folder)
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
            try:
                await asyncio.wait_for(proc.wait(), _DRAIN_SECONDS)
            except asyncio.TimeoutError:
                _log.warning(
                    "exec %r: its process group outlived SIGKILL by %ss", command, _DRAIN_SECONDS
                )
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
            except OSError as exc:  # unreadable files are not searchable: best effort
                _log.info("search skipped %s: %s", file_path, exc)
                continue
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
        what = f"the snapshot of workspace {self._backend_id}"
        try:
            with self._provider.blobs.bulk_write() as bulk:
                manifest, index, stats = self._scan(bulk, verify_chunks=False)
                manifest = self._unless_unchanged(manifest)
                manifest_id = bulk.put_manifest(manifest)
                try:
                    # One sync for every chunk of the snapshot, then one transaction names
                    # and records them with the manifest: nothing is recorded whose bytes
                    # are not on disk, and a failure leaves the blob store as it was.
                    written = bulk.commit()
                except BlobNotFound:
                    # A reused chunk was collected (its old snapshot was deleted and gc
                    # ran): scan again, re-reading the files whose chunks are gone.
                    manifest, index, stats = self._scan(bulk, verify_chunks=True)
                    manifest_id = bulk.put_manifest(manifest)
                    written = bulk.commit()
        except DISK_FAILURES:
            raise
        except OSError as exc:
            raise self._provider.failure(exc, what) from exc
        except BlobError as exc:
            raise BackendError(f"{what} failed: {exc}") from exc
        stats.bytes_written += written
        stats.database_bytes += bulk.log_overhead
        self._index = index
        last = self._last_ref
        unchanged = manifest is self._last_body and last is not None
        if unchanged and last is not None and last.provider_snapshot_id == manifest_id:
            if not (stats.bytes_written or stats.database_bytes):
                return last  # the same snapshot, nothing written for it: the same ref
            # The same snapshot, its catalogue rows touched again (their grace renewed, a
            # page of the log): a ref that says when and what it cost, which differs from
            # the last one, so the checkpoint counts those bytes.
            details = {**last.details, **stats.as_dict(), "renewed_at_ms": now_ms()}
            self._last_ref = last.model_copy(update={"details": details})
            return self._last_ref
        self._last_manifest_id = manifest_id
        self._last_body = manifest
        self._provider.save_state(self._backend_id, manifest_id)
        self._last_ref = BackendCheckpointRef(
            backend_kind=KIND,
            backend_id=self._backend_id,
            provider_snapshot_id=manifest_id,
            details={
                "files": len(manifest["files"]),
                "entries": sum(len(manifest[k]) for k in ("files", "dirs", "symlinks", "skipped")),
                **stats.as_dict(),
            },
        )
        return self._last_ref

    def _unless_unchanged(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """The last snapshot's body when `manifest` holds the same tree (all but the scan's
        clock and the files' disk identity): stored again under its id, it is recorded
        anew if it was deleted meanwhile and costs no write otherwise. The new clock and
        identities stay in the file index, where they vouch for the files; the older ones
        in the body only make a later index, built from it, re-read more files."""
        last = self._last_body
        if last is None:
            return manifest
        return last if _content_of(last) == _content_of(manifest) else manifest

    def _scan(
        self, bulk: BulkWrite, *, verify_chunks: bool
    ) -> tuple[dict[str, Any], FileIndex, SnapshotStats]:
        """Walk the workspace; reuse unchanged files' chunks (checked to exist if asked)."""
        return scan_workspace(
            self._root,
            bulk,
            self._provider.clock_marker(self._backend_id),
            self._index,
            verify_chunks=verify_chunks,
        )

    async def live_tree(self) -> LiveTree:
        """The workspace's files as they are now, named as a snapshot names them (files the
        index vouches for are not read); nothing is stored, and the index is unchanged."""
        root = self._live_root()
        marker = self._provider.clock_marker(self._backend_id).with_suffix(".live")
        try:
            return await asyncio.to_thread(scan_live, root, marker, self._index)
        except OSError as exc:
            raise self._provider.failure(exc, f"reading workspace {self._backend_id}") from exc

    async def restore_snapshot(self, ref: BackendCheckpointRef) -> None:
        """Make the workspace exactly the snapshot `ref` (see `in_place`)."""
        root = self._live_root()
        body = self._provider.snapshot_body(ref)
        marker = self._provider.clock_marker(self._backend_id)
        what = f"bringing workspace {self._backend_id} back to snapshot {ref.provider_snapshot_id}"
        try:
            index = await asyncio.to_thread(
                restore_in_place, self._provider.blobs, root, body, self._index, marker
            )
        except DISK_FAILURES:
            raise
        except OSError as exc:
            raise self._provider.failure(exc, what) from exc
        except (BlobError, KeyError, TypeError, ValueError) as exc:
            raise BackendError(f"{what} failed: {exc}") from exc
        self._index = index
        self._last_body, self._last_ref = body, ref
        if ref.provider_snapshot_id:
            self._last_manifest_id = ref.provider_snapshot_id
            self._provider.save_state(self._backend_id, ref.provider_snapshot_id)

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
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:  # it ended on its own meanwhile
        return
    except PermissionError as exc:
        _log.warning("could not kill the process group %d of an exec: %s", pid, exc)


def _remove_quietly(remove: Any, path: str) -> None:
    """Undo part of a failed write; what cannot be removed is logged and left."""
    try:
        remove(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        _log.warning("left %s behind after a failed write: %s", path, exc)


#: What a file entry records of the file's identity on this disk, not of what it holds: a
#: file brought back in place, or copied, has a new inode and change time and the same bytes.
_IDENTITY_FIELDS = ("ctime_ns", "ino")


def _content_of(manifest: dict[str, Any]) -> dict[str, Any]:
    """A workspace manifest without the scan's clock and the files' disk identity: equal
    for two snapshots of the same tree (paths, modes, sizes, mtimes, chunks, dirs, links)."""
    content = {key: value for key, value in manifest.items() if key != "clock_ns"}
    content["files"] = [
        {key: value for key, value in entry.items() if key not in _IDENTITY_FIELDS}
        for entry in manifest.get("files", [])
    ]
    return content
