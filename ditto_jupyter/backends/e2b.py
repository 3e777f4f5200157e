"""The E2B backend: files and exec in an E2B sandbox through the official SDK (`e2b==2.63.0`).

`E2BProvider` creates sandboxes from a template, checks a provider snapshot out into a new
sandbox (`AsyncSandbox.create(snapshot_id)`), re-attaches to a live sandbox after a restart
(`AsyncSandbox.connect(sandbox_id, timeout=...)`) and deletes snapshots
(`AsyncSandbox.delete_snapshot`, E2B's delete-template API). `E2BBackend` is one live
sandbox: a workspace directory inside it (`workdir`, relative to the sandbox user's home)
holds every path the caller names; `checkpoint` takes a provider snapshot
(`create_snapshot`), `release` kills the sandbox. Whether a release is needed at all (no
runtime left bound to the sandbox) is the BackendManager's call, not ours.

Every SDK failure becomes a control-plane error: rate or concurrency limits (HTTP 429, and
503 "no capacity now") are `RateLimited`, anything else the provider reports is
`BackendError` carrying the provider's reason. A cleanup that fails is logged; a sandbox
that a failed setup could not kill is raised as `ResourceLeftBehind`, which names it, so
the control plane records it (`ditto doctor` lists it) instead of a paid sandbox leaking
without a trace. Paths are checked before any provider call,
so bad input never reaches E2B. Connection settings default to the SDK's environment
variables (`E2B_API_KEY`, `E2B_API_URL`, `E2B_SANDBOX_URL`, `E2B_DOMAIN`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import posixpath
import re
import shlex
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2b import AsyncSandbox
from e2b.exceptions import RateLimitException, ServiceBusyException
from e2b.sandbox.commands.command_handle import CommandExitException
from e2b.sandbox.filesystem.filesystem import FileType

from ditto_jupyter.backends.base import (
    Backend,
    BackendLocator,
    ExecResult,
    FileKind,
    FileStat,
    LeftBehind,
    ResourceLeftBehind,
    SearchMatch,
)
from ditto_jupyter.core.errors import (
    BackendError,
    DittoError,
    InvalidRequest,
    RateLimited,
    UnsupportedBackend,
)
from ditto_jupyter.core.models import BackendCheckpointRef

E2B_KIND = "e2b"
TEMP_DIR = ".ditto-tmp"

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class E2BConfig:
    """How to reach E2B and what sandboxes to make; `None` fields fall back to the SDK's env.

    `sandbox_timeout` is E2B's sandbox lifetime in seconds (passed as `timeout=` on create
    and connect); `request_timeout` bounds each HTTP request; `retries` is the SDK's retry
    count for 429/502/503/504 answers of the control plane.
    """

    template: str = "base"
    workdir: str = "workspace"
    sandbox_timeout: int = 3600
    request_timeout: float = 60.0
    retries: int = 3
    exec_timeout: float = 600.0
    max_output_bytes: int = 1 << 20
    api_key: str | None = None
    api_url: str | None = None
    sandbox_url: str | None = None
    domain: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.template:
            raise InvalidRequest("E2B template must be a non-empty name or id")
        _normalize(self.workdir, what="E2B workdir")
        if self.sandbox_timeout <= 0:
            raise InvalidRequest(f"sandbox_timeout must be positive, got {self.sandbox_timeout}")
        if self.request_timeout <= 0:
            raise InvalidRequest(f"request_timeout must be positive, got {self.request_timeout}")
        if self.retries < 0:
            raise InvalidRequest(f"retries must be zero or more, got {self.retries}")
        if self.exec_timeout <= 0:
            raise InvalidRequest(f"exec_timeout must be positive, got {self.exec_timeout}")
        if self.max_output_bytes <= 0:
            raise InvalidRequest(f"max_output_bytes must be positive, got {self.max_output_bytes}")

    def api_params(self) -> dict[str, Any]:
        """The SDK's connection options (ApiParams) set here; the SDK fills the rest from env."""
        params: dict[str, Any] = {
            "request_timeout": self.request_timeout,
            "retries": self.retries,
        }
        for name in ("api_key", "api_url", "sandbox_url", "domain"):
            value = getattr(self, name)
            if value is not None:
                params[name] = value
        return params


def _normalize(path: str, *, what: str = "path") -> str:
    """A caller's path as a normalized relative POSIX path, or InvalidRequest saying why not."""
    if not isinstance(path, str):
        raise InvalidRequest(f"{what} must be a string, got {type(path).__name__}")
    if "\x00" in path:
        raise InvalidRequest(f"{what} {path!r} contains a NUL byte")
    if path.startswith("/") or path.startswith("~"):
        raise InvalidRequest(f"{what} {path!r} must be relative to the workspace")
    if not path:
        raise InvalidRequest(f"{what} is empty; use '.' for the workspace root")
    normal = posixpath.normpath(path)
    if normal == ".." or normal.startswith("../"):
        raise InvalidRequest(f"{what} {path!r} escapes the workspace")
    return normal


def _in_home(workdir: str) -> str:
    """The workspace as envd expands it: `~` is the sandbox user's home in every envd version
    (a bare relative path is resolved against envd's own working directory in older ones)."""
    return "~" if workdir == "." else f"~/{workdir}"


def _error(op: str, exc: BaseException) -> DittoError:
    """Map an SDK exception to RateLimited (429 / 503) or BackendError, keeping the reason."""
    reason = str(exc).strip() or type(exc).__name__
    status = getattr(exc, "status_code", None)
    if isinstance(exc, (RateLimitException, ServiceBusyException)) or status == 429:
        return RateLimited(f"E2B refused {op} for rate or concurrency limits: {reason}")
    return BackendError(f"E2B {op} failed: {reason}")


@contextlib.asynccontextmanager
async def _provider_call(op: str) -> AsyncIterator[None]:
    """Turn any SDK failure inside the block into a control-plane error naming `op`."""
    try:
        yield
    except (DittoError, asyncio.CancelledError):
        raise
    except Exception as exc:
        raise _error(op, exc) from exc


class _OutputBuffer:
    """Collects a command's output up to a byte cap and notes whether it cut anything."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.size = 0
        self.parts: list[str] = []
        self.truncated = False

    def add(self, chunk: str) -> None:
        if self.truncated:
            return
        data = chunk.encode("utf-8", "replace")
        room = self.cap - self.size
        if len(data) > room:
            data = data[:room]
            self.truncated = True
            chunk = data.decode("utf-8", "ignore")
        self.size += len(data)
        self.parts.append(chunk)

    def text(self) -> str:
        return "".join(self.parts)


class E2BBackend:
    """One live E2B sandbox used as a backend; paths are relative to its workspace."""

    def __init__(self, sandbox: Any, provider: E2BProvider, workdir: str, root: str) -> None:
        self._sandbox = sandbox
        self._provider = provider
        self._workdir = workdir
        self._root = root.rstrip("/") or "/"
        self._released = False

    # ---- identity -------------------------------------------------------------------------

    @property
    def backend_id(self) -> str:
        return str(self._sandbox.sandbox_id)

    @property
    def kind(self) -> str:
        return E2B_KIND

    @property
    def local_path(self) -> Path | None:
        return None

    @property
    def root(self) -> str:
        """The workspace's absolute path inside the sandbox."""
        return self._root

    def locator(self) -> BackendLocator:
        return BackendLocator(
            kind=E2B_KIND,
            backend_id=self.backend_id,
            details={"workdir": self._workdir, "template": self._provider.config.template},
        )

    # ---- helpers --------------------------------------------------------------------------

    def _live(self) -> None:
        if self._released:
            raise BackendError(f"E2B sandbox {self.backend_id} was released")

    def _abs(self, relative: str) -> str:
        return self._root if relative == "." else f"{self._root}/{relative}"

    # ---- files ----------------------------------------------------------------------------

    async def stat(self, path: str) -> FileStat:
        rel = _normalize(path)
        self._live()
        async with _provider_call(f"stat of {rel!r}"):
            info = await self._sandbox.files.get_info(self._abs(rel))
        kind: FileKind
        if info.type == FileType.SYMLINK:
            kind = "symlink"
        elif info.type == FileType.DIR:
            kind = "dir"
        elif info.type == FileType.FILE:
            kind = "file"
        else:
            kind = "other"
        modified = info.modified_time
        mtime_ns = (
            int(modified.timestamp()) * 1_000_000_000 + modified.microsecond * 1_000
            if modified is not None
            else 0
        )
        return FileStat(path=rel, kind=kind, size=int(info.size), mtime_ns=mtime_ns)

    async def read_bytes(self, path: str) -> bytes:
        rel = _normalize(path)
        self._live()
        async with _provider_call(f"read of {rel!r}"):
            data = await self._sandbox.files.read(self._abs(rel), format="bytes")
        return bytes(data)

    async def write_bytes(self, path: str, data: bytes) -> None:
        rel = _normalize(path)
        if rel == ".":
            raise InvalidRequest("cannot write to the workspace root itself")
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise InvalidRequest(f"data must be bytes, got {type(data).__name__}")
        self._live()
        async with _provider_call(f"write of {rel!r}"):
            await self._sandbox.files.write(self._abs(rel), bytes(data), use_octet_stream=True)

    async def create_dir_all(self, path: str) -> None:
        rel = _normalize(path)
        self._live()
        async with _provider_call(f"mkdir of {rel!r}"):
            await self._sandbox.files.make_dir(self._abs(rel))

    async def temp_path(self, suffix: str = "") -> str:
        if "/" in suffix or "\x00" in suffix:
            raise InvalidRequest(f"temp suffix {suffix!r} may not contain '/' or NUL")
        rel = f"{TEMP_DIR}/tmp-{uuid.uuid4().hex}{suffix}"
        self._live()
        async with _provider_call("temp file creation"):
            await self._sandbox.files.write(self._abs(rel), b"", use_octet_stream=True)
        return rel

    # ---- commands -------------------------------------------------------------------------

    async def exec(
        self,
        command: str,
        *,
        cwd: str | None = None,
        timeout: float | None = None,
        env: dict[str, str] | None = None,
    ) -> ExecResult:
        if not isinstance(command, str) or not command.strip():
            raise InvalidRequest("command must be a non-empty string")
        rel = _normalize(cwd if cwd is not None else ".", what="cwd")
        limit = self._provider.config.exec_timeout if timeout is None else timeout
        if isinstance(limit, bool) or not isinstance(limit, int | float) or limit <= 0:
            raise InvalidRequest(f"exec timeout must be a positive number of seconds: {limit!r}")
        for key, value in (env or {}).items():
            if not isinstance(key, str) or not key or "=" in key or not isinstance(value, str):
                raise InvalidRequest(f"exec env entry {key!r} must map a name to a string")
        self._live()
        cap = self._provider.config.max_output_bytes
        out, err = _OutputBuffer(cap), _OutputBuffer(cap)
        async with _provider_call("exec"):
            handle = await self._sandbox.commands.run(
                command,
                background=True,
                cwd=self._abs(rel),
                envs=dict(env or {}),
                on_stdout=out.add,
                on_stderr=err.add,
                timeout=limit + 30,
                retain_output=False,
            )
            waiter = asyncio.ensure_future(handle.wait())
            try:
                done, _ = await asyncio.wait({waiter}, timeout=limit)
                timed_out = not done
                if timed_out:
                    await handle.kill()
                try:
                    result = await waiter
                    exit_code = int(result.exit_code)
                except CommandExitException as exc:
                    exit_code = int(exc.exit_code)
            except BaseException:
                # Cancelled or failed while the command runs: do not leave it running.
                waiter.cancel()
                try:
                    await handle.kill()
                except Exception as error:  # the sandbox itself is released later
                    _log.warning(
                        "ditto: could not kill a command left running in E2B sandbox %s "
                        "(%s); it runs on until it ends or the sandbox is released",
                        self.backend_id,
                        error,
                    )
                raise
        return ExecResult(
            exit_code=exit_code,
            stdout=out.text(),
            stderr=err.text(),
            timed_out=timed_out,
            truncated=out.truncated or err.truncated,
        )

    async def search(
        self, pattern: str, path: str = ".", *, max_results: int = 1000
    ) -> list[SearchMatch]:
        if not isinstance(pattern, str) or not pattern:
            raise InvalidRequest("search pattern must be a non-empty string")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise InvalidRequest(
                f"search pattern {pattern!r} is not a valid regex: {exc}"
            ) from None
        if max_results < 1:
            raise InvalidRequest(f"max_results must be at least 1, got {max_results}")
        rel = _normalize(path)
        await self.stat(rel)  # a clear error for a missing path
        # Regular files only (symlinks not followed), in sorted order so a capped result is
        # always the same subset; -I skips binary files, -P is Perl (Python-like) regex.
        script = (
            f"find {shlex.quote(rel)} -type f -print0 | LC_ALL=C sort -z | "
            f"xargs -0 -r grep -nHIZP -e {shlex.quote(pattern)} -- | head -n {int(max_results)}"
        )
        result = await self.exec(script, timeout=self._provider.config.exec_timeout)
        matches: list[SearchMatch] = []
        for raw in result.stdout.splitlines():
            name, sep, rest = raw.partition("\x00")
            number, sep2, line = rest.partition(":")
            if not sep or not sep2 or not number.isdigit():
                continue
            matches.append(
                SearchMatch(path=posixpath.normpath(name), line_number=int(number), line=line)
            )
        if not matches and result.stderr.strip():
            raise BackendError(f"E2B search of {rel!r} failed: {result.stderr.strip()}")
        return matches[:max_results]

    async def export(self, path: str = ".") -> bytes:
        rel = _normalize(path)
        await self.stat(rel)  # a clear error for a missing path, before any tar runs
        script = (
            't="$(mktemp)" && '
            f'tar -cf "$t" -C {shlex.quote(self._root)} -- {shlex.quote(rel)} && '
            'printf %s "$t"'
        )
        result = await self.exec(script, timeout=self._provider.config.exec_timeout)
        archive = result.stdout.strip()
        if result.exit_code != 0 or not archive.startswith("/"):
            reason = result.stderr.strip() or f"tar exited with {result.exit_code}"
            raise BackendError(f"E2B export of {rel!r} failed: {reason}")
        try:
            async with _provider_call(f"export download of {rel!r}"):
                data = await self._sandbox.files.read(archive, format="bytes")
        finally:
            try:
                await self._sandbox.files.remove(archive)
            except Exception as error:  # a temporary file, gone with the sandbox
                _log.warning(
                    "ditto: could not remove the export archive %s in E2B sandbox %s (%s); "
                    "it stays until the sandbox is released",
                    archive,
                    self.backend_id,
                    error,
                )
        return bytes(data)

    # ---- snapshots and release ------------------------------------------------------------

    async def checkpoint(self) -> BackendCheckpointRef:
        self._live()
        async with _provider_call(f"snapshot of sandbox {self.backend_id}"):
            info = await self._sandbox.create_snapshot()
        return BackendCheckpointRef(
            backend_kind=E2B_KIND,
            backend_id=self.backend_id,
            provider_snapshot_id=str(info.snapshot_id),
            details={
                "workdir": self._workdir,
                "names": [str(n) for n in info.names],
                "template": self._provider.config.template,
            },
        )

    async def release(self) -> bool:
        """Kill the sandbox; True when E2B deleted it, False when it was already gone."""
        if self._released:
            return False
        async with _provider_call(f"kill of sandbox {self.backend_id}"):
            killed = bool(await self._sandbox.kill())
        self._released = True
        return killed


class E2BProvider:
    """Creates E2B sandboxes, checks snapshots out, re-attaches, deletes snapshots."""

    def __init__(self, config: E2BConfig | None = None) -> None:
        self.config = config or E2BConfig()

    @property
    def kind(self) -> str:
        return E2B_KIND

    async def _open(self, sandbox: Any, workdir: str) -> E2BBackend:
        """Make sure the workspace exists and learn its absolute path; kill on failure."""
        try:
            async with _provider_call(f"workspace setup in sandbox {sandbox.sandbox_id}"):
                await sandbox.files.make_dir(_in_home(workdir))
                info = await sandbox.files.get_info(_in_home(workdir))
        except BaseException as error:
            left = await self._kill_after_failed_setup(sandbox, error)
            if left is not None and isinstance(error, Exception):  # a cancellation stays one
                raise ResourceLeftBehind(
                    f"{error}; the sandbox {sandbox.sandbox_id} could not be killed either", left
                ) from error
            raise
        return E2BBackend(sandbox, self, workdir, str(info.path))

    @staticmethod
    async def _kill_after_failed_setup(sandbox: Any, error: BaseException) -> LeftBehind | None:
        """Kill a sandbox whose setup failed; what is left behind when the kill fails too."""
        try:
            await sandbox.kill()
        except Exception as kill_error:  # a paid sandbox nobody else knows of
            _log.warning(
                "ditto: E2B sandbox %s could not be set up (%r) nor killed (%s); "
                "it is still running",
                sandbox.sandbox_id,
                error,
                kill_error,
            )
            return LeftBehind(
                kind="e2b-sandbox",
                resource_id=str(sandbox.sandbox_id),
                reason=f"its set-up failed ({error}), then its kill failed ({kill_error})",
            )
        return None

    async def create(self, runtime_id: str) -> Backend:
        metadata = {**self.config.metadata, "ditto_runtime_id": runtime_id}
        async with _provider_call(f"sandbox creation from template {self.config.template!r}"):
            sandbox = await AsyncSandbox.create(
                self.config.template,
                timeout=self.config.sandbox_timeout,
                metadata=metadata,
                **self.config.api_params(),
            )
        return await self._open(sandbox, _normalize(self.config.workdir, what="E2B workdir"))

    async def checkout(self, ref: BackendCheckpointRef, runtime_id: str) -> Backend:
        if ref.backend_kind != E2B_KIND:
            raise UnsupportedBackend(
                f"an E2B provider cannot check out a {ref.backend_kind!r} snapshot"
            )
        if not ref.provider_snapshot_id:
            raise UnsupportedBackend(
                "the checkpoint's E2B snapshot was deleted, so it cannot be checked out"
            )
        workdir = _normalize(str(ref.details.get("workdir", self.config.workdir)))
        metadata = {**self.config.metadata, "ditto_runtime_id": runtime_id}
        async with _provider_call(f"sandbox creation from snapshot {ref.provider_snapshot_id}"):
            sandbox = await AsyncSandbox.create(
                ref.provider_snapshot_id,
                timeout=self.config.sandbox_timeout,
                metadata=metadata,
                **self.config.api_params(),
            )
        return await self._open(sandbox, workdir)

    async def attach(self, locator: BackendLocator) -> Backend:
        if locator.kind != E2B_KIND:
            raise UnsupportedBackend(f"an E2B provider cannot attach a {locator.kind!r} backend")
        workdir = _normalize(str(locator.details.get("workdir", self.config.workdir)))
        async with _provider_call(f"connect to sandbox {locator.backend_id}"):
            sandbox = await AsyncSandbox.connect(
                locator.backend_id,
                timeout=self.config.sandbox_timeout,
                **self.config.api_params(),
            )
            info = await sandbox.files.get_info(_in_home(workdir))
        return E2BBackend(sandbox, self, workdir, str(info.path))

    async def delete_snapshot(self, ref: BackendCheckpointRef) -> bool:
        """Delete the recorded snapshot; False when E2B answers 404 (already deleted)."""
        if ref.backend_kind != E2B_KIND:
            raise UnsupportedBackend(
                f"an E2B provider cannot delete a {ref.backend_kind!r} snapshot"
            )
        if not ref.provider_snapshot_id:
            return False
        async with _provider_call(f"deletion of snapshot {ref.provider_snapshot_id}"):
            deleted = await AsyncSandbox.delete_snapshot(
                ref.provider_snapshot_id, **self.config.api_params()
            )
        return bool(deleted)

    def referenced_manifests(self, ref: BackendCheckpointRef) -> list[str]:
        """E2B snapshots live at the provider: they keep no blob-store manifest alive."""
        return []
