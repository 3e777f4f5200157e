"""A FAKE of E2B's cloud for tests: the control-plane REST API and the in-sandbox envd service.

E2B's cloud cannot be reached from the test machines, so the real `e2b` SDK (pinned 2.63.0)
is pointed at this fake through `E2B_API_URL` / `E2B_SANDBOX_URL`. Two HTTP servers run on
127.0.0.1 (free ports) in one background thread with its own event loop:

- the *API* server answers the REST routes the SDK calls (`POST /v2/sandboxes`,
  `POST /v2/sandboxes/{id}/connect`, `DELETE /sandboxes/{id}`, `GET /sandboxes/{id}`,
  `GET /v2/sandboxes`, `POST /sandboxes/{id}/snapshots`, `GET /snapshots`,
  `DELETE /templates/{id}`, `POST /sandboxes/{id}/timeout`), checking `X-API-KEY`;
- the *envd* server answers what the SDK sends to a sandbox: the HTTP file API (`GET` and
  `POST /files`, `GET /health`) and the Connect-RPC services `filesystem.Filesystem` and
  `process.Process`, served by the `connectrpc` server classes generated in the SDK itself
  (so the wire format -- Connect protocol, JSON codec, enveloped server streams -- is the
  real one). The sandbox is chosen by the `E2b-Sandbox-Id` header, as E2B's edge proxy
  does, and the sandbox's `X-Access-Token` is checked.

Each fake sandbox is a real temp directory (`home/` is the user's home, `tmp/` its
`TMPDIR`); commands really run with subprocesses in it; a snapshot is a copy of `home/`;
creating a sandbox from a snapshot copies it back. File paths are confined to the sandbox
directory (commands are not: they are ordinary host processes).

Fault injection: `fail_next(route, status, times=n)` makes the next `n` calls of `route`
(a key of the form `"METHOD /path/{param}"`, see the `ROUTE_*` constants) answer `status`
with a JSON error body carrying `message`, as E2B does; a 429 carries `Retry-After: 0`.
Latency injection: `hold_next(route)` makes the next call of `route` wait, before it is
answered, until the `threading.Event` it returns is set, so a test can order a race.

The module runs past 600 lines because it is one fake of one service: the two apps share
the cloud's state, its errors and its ASGI helpers, and a test reads them all together.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import email.parser
import email.policy
import grp
import gzip
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import stat as stat_mod
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote

import uvicorn
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from connectrpc.request import RequestContext
from e2b.envd.filesystem import filesystem_connect, filesystem_pb
from e2b.envd.process import process_connect, process_pb
from protobuf import Oneof
from protobuf.wkt import Timestamp

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

FAKE_ENVD_VERSION = "0.6.4"
FAKE_API_KEY = "e2b_fake_0000000000000000000000000000000000000000"
BASE_TEMPLATE = "base"

ROUTE_CREATE_SANDBOX = "POST /v2/sandboxes"
ROUTE_CONNECT_SANDBOX = "POST /v2/sandboxes/{sandboxID}/connect"
ROUTE_KILL_SANDBOX = "DELETE /sandboxes/{sandboxID}"
ROUTE_GET_SANDBOX = "GET /sandboxes/{sandboxID}"
ROUTE_LIST_SANDBOXES = "GET /v2/sandboxes"
ROUTE_CREATE_SNAPSHOT = "POST /sandboxes/{sandboxID}/snapshots"
ROUTE_LIST_SNAPSHOTS = "GET /snapshots"
ROUTE_DELETE_TEMPLATE = "DELETE /templates/{templateID}"
ROUTE_SET_TIMEOUT = "POST /sandboxes/{sandboxID}/timeout"
ROUTE_FILES_READ = "GET /files"
ROUTE_FILES_WRITE = "POST /files"
ROUTE_HEALTH = "GET /health"
ROUTE_FS_STAT = "POST /filesystem.Filesystem/Stat"
ROUTE_FS_MAKE_DIR = "POST /filesystem.Filesystem/MakeDir"
ROUTE_FS_LIST_DIR = "POST /filesystem.Filesystem/ListDir"
ROUTE_FS_REMOVE = "POST /filesystem.Filesystem/Remove"
ROUTE_FS_MOVE = "POST /filesystem.Filesystem/Move"
ROUTE_PROCESS_START = "POST /process.Process/Start"
ROUTE_PROCESS_SIGNAL = "POST /process.Process/SendSignal"

_API_ROUTES = (
    ROUTE_CREATE_SANDBOX,
    ROUTE_CONNECT_SANDBOX,
    ROUTE_KILL_SANDBOX,
    ROUTE_GET_SANDBOX,
    ROUTE_LIST_SANDBOXES,
    ROUTE_CREATE_SNAPSHOT,
    ROUTE_LIST_SNAPSHOTS,
    ROUTE_DELETE_TEMPLATE,
    ROUTE_SET_TIMEOUT,
)

_DEFAULT_FAULT_MESSAGES = {
    404: "fake: injected not found",
    429: "fake: injected rate limit, concurrent sandbox limit reached",
    500: "fake: injected internal server error",
}


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, tz=dt.timezone.utc).isoformat().replace("+00:00", "Z")


def _match(pattern: str, method: str, path: str) -> dict[str, str] | None:
    """Match `METHOD /a/{x}/b` against a request; returns the path parameters or None."""
    p_method, p_path = pattern.split(" ", 1)
    if p_method != method:
        return None
    p_parts = p_path.strip("/").split("/")
    parts = path.strip("/").split("/")
    if len(p_parts) != len(parts):
        return None
    params: dict[str, str] = {}
    for want, got in zip(p_parts, parts, strict=True):
        if want.startswith("{") and want.endswith("}"):
            params[want[1:-1]] = unquote(got)
        elif want != got:
            return None
    return params


# ---- state --------------------------------------------------------------------------------


@dataclass
class FakeSandbox:
    """One fake sandbox: a directory with `home/` and `tmp/`, and its running processes."""

    sandbox_id: str
    template_id: str
    root: Path
    access_token: str
    started_at: float
    timeout_s: int
    metadata: dict[str, str] = field(default_factory=dict)
    processes: dict[int, asyncio.subprocess.Process] = field(default_factory=dict)

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    def resolve(self, path: str) -> Path:
        """The host path of a sandbox path (relative paths are relative to home).

        Raises ConnectError PERMISSION_DENIED when the path leaves the sandbox directory.
        """
        if path == "~" or path.startswith("~/"):
            path = str(self.home) + path[1:]
        candidate = Path(path) if os.path.isabs(path) else self.home / path
        normal = Path(os.path.normpath(candidate))
        root = Path(os.path.normpath(self.root))
        if normal != root and root not in normal.parents:
            raise ConnectError(
                Code.PERMISSION_DENIED, f"fake: path '{path}' is outside the sandbox"
            )
        return normal


@dataclass
class FakeSnapshot:
    """A snapshot: a copy of a sandbox's home directory, usable as a template."""

    snapshot_id: str
    source_sandbox_id: str
    path: Path
    names: list[str]
    created_at: float


@dataclass
class _Fault:
    status: int
    message: str


class FakeE2BCloud:
    """The fake E2B cloud (API + envd) on 127.0.0.1; use `start()`/`stop()` or `with`."""

    def __init__(self, base_dir: Path, *, api_key: str = FAKE_API_KEY) -> None:
        self.base_dir = Path(base_dir)
        self.api_key = api_key
        self.sandboxes: dict[str, FakeSandbox] = {}
        self.snapshots: dict[str, FakeSnapshot] = {}
        self.killed: list[str] = []
        self.calls: list[tuple[str, int]] = []
        self._faults: dict[str, deque[_Fault]] = {}
        self._holds: dict[str, deque[threading.Event]] = {}
        self._holds_issued: list[threading.Event] = []
        self._lock = threading.RLock()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._servers: list[uvicorn.Server] = []
        self._sockets: list[socket.socket] = []
        self._startup_error: BaseException | None = None
        self.api_url = ""
        self.sandbox_url = ""
        (self.base_dir / "sandboxes").mkdir(parents=True, exist_ok=True)
        (self.base_dir / "snapshots").mkdir(parents=True, exist_ok=True)

    # ---- life cycle ----------------------------------------------------------------------

    def __enter__(self) -> FakeE2BCloud:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Bind both servers on free 127.0.0.1 ports and serve them in a background thread."""
        if self._thread is not None:
            raise RuntimeError("fake E2B cloud already started")
        for _ in range(2):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", 0))
            sock.listen(128)
            sock.set_inheritable(False)
            self._sockets.append(sock)
        api_port = self._sockets[0].getsockname()[1]
        envd_port = self._sockets[1].getsockname()[1]
        self.api_url = f"http://127.0.0.1:{api_port}"
        self.sandbox_url = f"http://127.0.0.1:{envd_port}"
        envd_app = _EnvdApp(self)
        for app in (_ApiApp(self), envd_app):
            config = uvicorn.Config(
                app,
                http="h11",
                ws="none",
                lifespan="off",
                log_level="warning",
                access_log=False,
                timeout_graceful_shutdown=1,
            )
            self._servers.append(uvicorn.Server(config))
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(ready,), name="fake-e2b-cloud", daemon=True
        )
        self._thread.start()
        ready.wait()
        while self._thread.is_alive() and not all(s.started for s in self._servers):
            time.sleep(0.005)
        if self._startup_error is not None or not self._thread.is_alive():
            raise RuntimeError(f"fake E2B cloud failed to start: {self._startup_error!r}")

    def _run(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        ready.set()
        try:
            loop.run_until_complete(
                asyncio.gather(
                    *(
                        s.serve(sockets=[sock])
                        for s, sock in zip(self._servers, self._sockets, strict=True)
                    )
                )
            )
        except BaseException as exc:  # surfaced to start() / stop()
            self._startup_error = exc
        finally:
            loop.run_until_complete(self._kill_all_processes())
            loop.close()

    def stop(self) -> None:
        """Kill every fake process and shut both servers down."""
        if self._thread is None:
            return
        with self._lock:
            for gate in self._holds_issued:
                gate.set()  # a held call must not keep the servers from stopping
        for server in self._servers:
            server.should_exit = True
        self._thread.join()
        self._thread = None
        for sock in self._sockets:
            sock.close()
        self._sockets.clear()
        self._servers.clear()

    async def _kill_all_processes(self) -> None:
        with self._lock:
            boxes = list(self.sandboxes.values())
        for box in boxes:
            await _kill_processes(box)

    # ---- fault injection and inspection --------------------------------------------------

    def fail_next(
        self, route: str, status: int, *, times: int = 1, message: str | None = None
    ) -> None:
        """Make the next `times` calls of `route` answer `status` with `message`."""
        if status < 400:
            raise ValueError(f"fault status must be an error status, got {status}")
        if times < 1:
            raise ValueError(f"times must be at least 1, got {times}")
        msg = message or _DEFAULT_FAULT_MESSAGES.get(status, f"fake: injected {status}")
        with self._lock:
            queue = self._faults.setdefault(route, deque())
            queue.extend(_Fault(status, msg) for _ in range(times))

    def pending_faults(self, route: str) -> int:
        """How many injected faults of `route` have not fired yet."""
        with self._lock:
            return len(self._faults.get(route, ()))

    def take_fault(self, route: str) -> _Fault | None:
        with self._lock:
            queue = self._faults.get(route)
            if not queue:
                return None
            return queue.popleft()

    def hold_next(self, route: str) -> threading.Event:
        """Make the next call of `route` wait before it is answered until the event is set."""
        gate = threading.Event()
        with self._lock:
            self._holds.setdefault(route, deque()).append(gate)
            self._holds_issued.append(gate)
        return gate

    async def wait_if_held(self, route: str) -> None:
        """Called by the apps before answering `route`: wait out a hold set by `hold_next`."""
        with self._lock:
            queue = self._holds.get(route)
            gate = queue.popleft() if queue else None
        while gate is not None and not gate.is_set():
            await asyncio.sleep(0.005)

    def record(self, route: str, status: int) -> None:
        with self._lock:
            self.calls.append((route, status))

    def count_calls(self, route: str, status: int | None = None) -> int:
        """How many calls of `route` (with `status`, when given) the fake has answered."""
        with self._lock:
            return sum(1 for r, s in self.calls if r == route and (status is None or s == status))

    def running_sandbox_ids(self) -> list[str]:
        with self._lock:
            return sorted(self.sandboxes)

    def snapshot_ids(self) -> list[str]:
        with self._lock:
            return sorted(self.snapshots)

    def sandbox_home(self, sandbox_id: str) -> Path:
        with self._lock:
            return self.sandboxes[sandbox_id].home

    # ---- control-plane operations (called from the API app, in the server loop) ----------

    def _new_sandbox(
        self, template_id: str, timeout_s: int, metadata: dict[str, str]
    ) -> FakeSandbox:
        with self._lock:
            source: Path | None
            if template_id == BASE_TEMPLATE:
                source = None
            else:
                snap = self._find_snapshot(template_id)
                if snap is None:
                    raise _HttpError(404, f"template '{template_id}' not found")
                source = snap.path
            sandbox_id = "isb" + uuid.uuid4().hex[:17]
            root = self.base_dir / "sandboxes" / sandbox_id
            root.mkdir(parents=True)
            if source is None:
                (root / "home").mkdir()
            else:
                shutil.copytree(source, root / "home", symlinks=True)
            (root / "tmp").mkdir()
            box = FakeSandbox(
                sandbox_id=sandbox_id,
                template_id=template_id,
                root=root,
                access_token=secrets.token_hex(16),
                started_at=time.time(),
                timeout_s=timeout_s,
                metadata=metadata,
            )
            self.sandboxes[sandbox_id] = box
            return box

    def _find_snapshot(self, ref: str) -> FakeSnapshot | None:
        snap = self.snapshots.get(ref)
        if snap is not None:
            return snap
        for candidate in self.snapshots.values():
            if ref in candidate.names:
                return candidate
        return None

    def _snapshot(self, sandbox_id: str, name: str | None) -> FakeSnapshot:
        with self._lock:
            box = self.sandboxes.get(sandbox_id)
            if box is None:
                raise _HttpError(404, f"sandbox '{sandbox_id}' not found")
            snapshot_id = "snap" + uuid.uuid4().hex[:16]
            path = self.base_dir / "snapshots" / snapshot_id
            shutil.copytree(box.home, path, symlinks=True)
            snap = FakeSnapshot(
                snapshot_id=snapshot_id,
                source_sandbox_id=sandbox_id,
                path=path,
                names=[name or f"fake-team/{snapshot_id}:default"],
                created_at=time.time(),
            )
            self.snapshots[snapshot_id] = snap
            return snap

    def _delete_template(self, template_id: str) -> None:
        with self._lock:
            snap = self._find_snapshot(template_id)
            if snap is None:
                raise _HttpError(404, f"template '{template_id}' not found")
            del self.snapshots[snap.snapshot_id]
        shutil.rmtree(snap.path, ignore_errors=True)

    async def _kill(self, sandbox_id: str) -> None:
        with self._lock:
            box = self.sandboxes.pop(sandbox_id, None)
            if box is None:
                raise _HttpError(404, f"sandbox '{sandbox_id}' not found")
            self.killed.append(sandbox_id)
        await _kill_processes(box)
        shutil.rmtree(box.root, ignore_errors=True)

    def _live(self, sandbox_id: str) -> FakeSandbox:
        with self._lock:
            box = self.sandboxes.get(sandbox_id)
        if box is None:
            raise _HttpError(404, f"sandbox '{sandbox_id}' not found")
        return box

    def _sandbox_body(self, box: FakeSandbox) -> dict[str, Any]:
        return {
            "templateID": box.template_id,
            "sandboxID": box.sandbox_id,
            "clientID": "fake-client",
            "envdVersion": FAKE_ENVD_VERSION,
            "envdAccessToken": box.access_token,
            "domain": None,
        }

    def _detail_body(self, box: FakeSandbox) -> dict[str, Any]:
        return {
            "templateID": box.template_id,
            "sandboxID": box.sandbox_id,
            "clientID": "fake-client",
            "startedAt": _iso(box.started_at),
            "endAt": _iso(box.started_at + box.timeout_s),
            "cpuCount": 2,
            "memoryMB": 512,
            "diskSizeMB": 1024,
            "state": "running",
            "envdVersion": FAKE_ENVD_VERSION,
            "metadata": box.metadata,
        }

    def sandbox_for_envd(self, sandbox_id: str | None, token: str | None) -> FakeSandbox:
        """The sandbox an envd request addresses, or a proxy-style error."""
        with self._lock:
            box = self.sandboxes.get(sandbox_id or "")
        if box is None:
            raise _HttpError(502, f"The sandbox {sandbox_id} was not found")
        if token != box.access_token:
            raise _HttpError(401, "fake: invalid or missing X-Access-Token")
        return box


class _HttpError(Exception):
    """An error answer of the fake: HTTP status and message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


async def _kill_processes(box: FakeSandbox) -> None:
    for proc in list(box.processes.values()):
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    for proc in list(box.processes.values()):
        with contextlib.suppress(Exception):
            await proc.wait()


# ---- ASGI helpers ------------------------------------------------------------------------


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def _respond(
    send: Send,
    status: int,
    body: bytes = b"",
    content_type: str | None = None,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    headers: list[tuple[bytes, bytes]] = [(b"content-length", str(len(body)).encode())]
    if content_type:
        headers.append((b"content-type", content_type.encode()))
    headers.extend(extra or [])
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _respond_json(send: Send, status: int, payload: Any) -> None:
    await _respond(send, status, json.dumps(payload).encode(), "application/json")


async def _respond_error(send: Send, status: int, message: str) -> None:
    extra = [(b"retry-after", b"0")] if status == 429 else None
    body = json.dumps({"code": status, "message": message}).encode()
    await _respond(send, status, body, "application/json", extra)


class _RecordingSend:
    """ASGI `send` that records the call's status as its answer starts, so a client that
    has the answer always finds the call in `FakeE2BCloud.calls`."""

    def __init__(self, cloud: FakeE2BCloud, route: str, send: Send) -> None:
        self.cloud = cloud
        self.route = route
        self.send = send
        self.started = False

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start" and not self.started:
            self.started = True
            self.cloud.record(self.route, int(message["status"]))
        await self.send(message)

    def record_if_unanswered(self) -> None:
        """A call that raised before answering: the server answers 500."""
        if not self.started:
            self.started = True
            self.cloud.record(self.route, 500)


# ---- the control-plane API app -----------------------------------------------------------


class _ApiApp:
    """ASGI app of the fake control-plane REST API."""

    def __init__(self, cloud: FakeE2BCloud) -> None:
        self.cloud = cloud

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        method, path = scope["method"], scope["path"]
        route, params = None, None
        for candidate in _API_ROUTES:
            params = _match(candidate, method, path)
            if params is not None:
                route = candidate
                break
        if route is None or params is None:
            await _respond_error(send, 404, f"fake: no route {method} {path}")
            return
        body = await _read_body(receive)
        answer = _RecordingSend(self.cloud, route, send)
        try:
            if _headers(scope).get("x-api-key") != self.cloud.api_key:
                raise _HttpError(401, "fake: invalid API key")
            await self.cloud.wait_if_held(route)
            fault = self.cloud.take_fault(route)
            if fault is not None:
                raise _HttpError(fault.status, fault.message)
            query = parse_qs(scope.get("query_string", b"").decode())
            status, payload = await self._dispatch(route, params, body, query)
            if payload is None:
                await _respond(answer, status)
            else:
                await _respond_json(answer, status, payload)
        except _HttpError as err:
            await _respond_error(answer, err.status, err.message)
        finally:
            answer.record_if_unanswered()

    async def _dispatch(
        self, route: str, params: dict[str, str], body: bytes, query: dict[str, list[str]]
    ) -> tuple[int, Any]:
        cloud = self.cloud
        data: dict[str, Any] = json.loads(body) if body else {}
        if route == ROUTE_CREATE_SANDBOX:
            template = data.get("templateID")
            if not isinstance(template, str) or not template:
                raise _HttpError(400, "templateID is required")
            box = cloud._new_sandbox(
                template, int(data.get("timeout", 300)), dict(data.get("metadata") or {})
            )
            return 201, cloud._sandbox_body(box)
        if route == ROUTE_CONNECT_SANDBOX:
            live = cloud._live(params["sandboxID"])
            if "timeout" in data:
                live.timeout_s = max(live.timeout_s, int(data["timeout"]))
            return 200, cloud._sandbox_body(live)
        if route == ROUTE_KILL_SANDBOX:
            await cloud._kill(params["sandboxID"])
            return 204, None
        if route == ROUTE_GET_SANDBOX:
            return 200, cloud._detail_body(cloud._live(params["sandboxID"]))
        if route == ROUTE_LIST_SANDBOXES:
            with cloud._lock:
                boxes = list(cloud.sandboxes.values())
            return 200, [cloud._detail_body(b) for b in boxes]
        if route == ROUTE_CREATE_SNAPSHOT:
            snap = cloud._snapshot(params["sandboxID"], data.get("name"))
            return 201, {"snapshotID": snap.snapshot_id, "names": snap.names}
        if route == ROUTE_LIST_SNAPSHOTS:
            wanted = query["sandboxID"][0] if query.get("sandboxID") else None
            with cloud._lock:
                snaps = [
                    s
                    for s in cloud.snapshots.values()
                    if wanted is None or s.source_sandbox_id == wanted
                ]
            return 200, [{"snapshotID": s.snapshot_id, "names": s.names} for s in snaps]
        if route == ROUTE_DELETE_TEMPLATE:
            cloud._delete_template(params["templateID"])
            return 204, None
        if route == ROUTE_SET_TIMEOUT:
            live = cloud._live(params["sandboxID"])
            live.timeout_s = int(data.get("timeout", live.timeout_s))
            return 204, None
        raise _HttpError(404, f"fake: route {route} not implemented")


# ---- envd: files, health, and the Connect-RPC services -----------------------------------


def _entry_info(path: Path) -> filesystem_pb.EntryInfo:
    st = os.lstat(path)
    is_link = stat_mod.S_ISLNK(st.st_mode)
    target_st = st
    if is_link:
        with contextlib.suppress(OSError):
            target_st = os.stat(path)
    if stat_mod.S_ISDIR(target_st.st_mode):
        ftype = filesystem_pb.FileType.DIRECTORY
    elif stat_mod.S_ISREG(target_st.st_mode):
        ftype = filesystem_pb.FileType.FILE
    else:
        ftype = filesystem_pb.FileType.UNSPECIFIED
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return filesystem_pb.EntryInfo(
        name=path.name,
        type=ftype,
        path=str(path),
        size=st.st_size,
        mode=stat_mod.S_IMODE(st.st_mode),
        permissions=stat_mod.filemode(st.st_mode),
        owner=owner,
        group=group,
        modified_time=Timestamp.from_nanos(st.st_mtime_ns),
        symlink_target=os.readlink(path) if is_link else None,
        is_symlink=is_link,
    )


def _box_from_ctx(cloud: FakeE2BCloud, ctx: RequestContext[Any, Any]) -> FakeSandbox:
    headers = ctx.request_headers
    try:
        return cloud.sandbox_for_envd(headers.get("e2b-sandbox-id"), headers.get("x-access-token"))
    except _HttpError as err:
        code = Code.UNAVAILABLE if err.status == 502 else Code.UNAUTHENTICATED
        raise ConnectError(code, err.message) from None


class _FakeFilesystem(filesystem_connect.Filesystem):
    """`filesystem.Filesystem` over the sandbox directory (Stat, MakeDir, ListDir, Remove, Move)."""

    def __init__(self, cloud: FakeE2BCloud) -> None:
        self.cloud = cloud

    async def stat(
        self, request: filesystem_pb.StatRequest, ctx: RequestContext[Any, Any], /
    ) -> filesystem_pb.StatResponse:
        path = _box_from_ctx(self.cloud, ctx).resolve(request.path)
        if not os.path.lexists(path):
            raise ConnectError(Code.NOT_FOUND, f"file not found: {request.path}")
        return filesystem_pb.StatResponse(entry=_entry_info(path))

    async def make_dir(
        self, request: filesystem_pb.MakeDirRequest, ctx: RequestContext[Any, Any], /
    ) -> filesystem_pb.MakeDirResponse:
        path = _box_from_ctx(self.cloud, ctx).resolve(request.path)
        if path.is_dir():
            raise ConnectError(Code.ALREADY_EXISTS, f"directory already exists: {request.path}")
        try:
            path.mkdir(parents=True)
        except (FileExistsError, NotADirectoryError) as exc:
            raise ConnectError(
                Code.INVALID_ARGUMENT, f"cannot create directory {request.path}: {exc}"
            ) from None
        return filesystem_pb.MakeDirResponse(entry=_entry_info(path))

    async def list_dir(
        self, request: filesystem_pb.ListDirRequest, ctx: RequestContext[Any, Any], /
    ) -> filesystem_pb.ListDirResponse:
        path = _box_from_ctx(self.cloud, ctx).resolve(request.path)
        if not path.is_dir():
            raise ConnectError(Code.NOT_FOUND, f"directory not found: {request.path}")
        depth = request.depth or 1
        entries: list[filesystem_pb.EntryInfo] = []

        def walk(directory: Path, level: int) -> None:
            for child in sorted(directory.iterdir()):
                entries.append(_entry_info(child))
                if level < depth and child.is_dir() and not child.is_symlink():
                    walk(child, level + 1)

        walk(path, 1)
        return filesystem_pb.ListDirResponse(entries=entries)

    async def remove(
        self, request: filesystem_pb.RemoveRequest, ctx: RequestContext[Any, Any], /
    ) -> filesystem_pb.RemoveResponse:
        path = _box_from_ctx(self.cloud, ctx).resolve(request.path)
        if not os.path.lexists(path):
            raise ConnectError(Code.NOT_FOUND, f"file not found: {request.path}")
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
        return filesystem_pb.RemoveResponse()

    async def move(
        self, request: filesystem_pb.MoveRequest, ctx: RequestContext[Any, Any], /
    ) -> filesystem_pb.MoveResponse:
        box = _box_from_ctx(self.cloud, ctx)
        source, destination = box.resolve(request.source), box.resolve(request.destination)
        if not os.path.lexists(source):
            raise ConnectError(Code.NOT_FOUND, f"file not found: {request.source}")
        destination.parent.mkdir(parents=True, exist_ok=True)
        os.replace(source, destination)
        return filesystem_pb.MoveResponse(entry=_entry_info(destination))


def _end_event(returncode: int) -> process_pb.ProcessEvent:
    if returncode < 0:
        end = process_pb.ProcessEvent.EndEvent(
            exit_code=-1,
            exited=False,
            status=f"signal: {signal.Signals(-returncode).name.lower()[3:]}",
            error=f"signal: {signal.Signals(-returncode).name}",
        )
    else:
        end = process_pb.ProcessEvent.EndEvent(
            exit_code=returncode, exited=True, status=f"exit status {returncode}"
        )
    return _event("end", end)


def _event(kind: str, value: Any) -> process_pb.ProcessEvent:
    """A ProcessEvent with its `event` oneof set to `kind`."""
    oneof: Any = Oneof(kind, value)
    return process_pb.ProcessEvent(event=oneof)


class _FakeProcess(process_connect.Process):
    """`process.Process` with real subprocesses in the sandbox directory (Start, SendSignal)."""

    def __init__(self, cloud: FakeE2BCloud) -> None:
        self.cloud = cloud

    async def start(
        self, request: process_pb.StartRequest, ctx: RequestContext[Any, Any], /
    ) -> AsyncIterator[process_pb.StartResponse]:
        box = _box_from_ctx(self.cloud, ctx)
        config = request.process or process_pb.ProcessConfig()
        cwd = box.resolve(config.cwd) if config.cwd else box.home
        if not cwd.is_dir():
            raise ConnectError(Code.INVALID_ARGUMENT, f"cwd '{config.cwd}' is not a directory")
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(box.home),
            "TMPDIR": str(box.tmp),
            "USER": "user",
            "LANG": "C.UTF-8",
            **dict(config.envs or {}),
        }
        proc = await asyncio.create_subprocess_exec(
            config.cmd,
            *list(config.args or []),
            cwd=str(cwd),
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        box.processes[proc.pid] = proc
        try:
            start = process_pb.ProcessEvent.StartEvent(pid=proc.pid)
            yield process_pb.StartResponse(event=_event("start", start))
            queue: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()

            async def pump(name: str, stream: asyncio.StreamReader | None) -> None:
                if stream is None:
                    return
                while chunk := await stream.read(65536):
                    await queue.put((name, chunk))

            pumps = [
                asyncio.ensure_future(pump("stdout", proc.stdout)),
                asyncio.ensure_future(pump("stderr", proc.stderr)),
            ]
            done = asyncio.ensure_future(asyncio.gather(*pumps))
            while not (done.done() and queue.empty()):
                getter = asyncio.ensure_future(queue.get())
                waiting: set[asyncio.Future[Any]] = {getter, done}
                await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                if getter.done():
                    name, chunk = getter.result()
                    output: Any = Oneof(name, chunk)
                    data = process_pb.ProcessEvent.DataEvent(output=output)
                    yield process_pb.StartResponse(event=_event("data", data))
                else:
                    getter.cancel()
            await done
            returncode = await proc.wait()
            yield process_pb.StartResponse(event=_end_event(returncode))
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
            box.processes.pop(proc.pid, None)

    async def send_signal(
        self, request: process_pb.SendSignalRequest, ctx: RequestContext[Any, Any], /
    ) -> process_pb.SendSignalResponse:
        box = _box_from_ctx(self.cloud, ctx)
        selector = request.process.selector if request.process else None
        pid = selector.value if isinstance(selector, Oneof) and selector.field == "pid" else None
        proc = box.processes.get(pid) if isinstance(pid, int) else None
        if proc is None or proc.returncode is not None:
            raise ConnectError(Code.NOT_FOUND, f"process {pid} not found")
        sig = signal.SIGTERM if request.signal == process_pb.Signal.SIGTERM else signal.SIGKILL
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        return process_pb.SendSignalResponse()


class _EnvdApp:
    """ASGI app of the fake envd: routes by `E2b-Sandbox-Id`, checks the access token."""

    def __init__(self, cloud: FakeE2BCloud) -> None:
        self.cloud = cloud
        self.filesystem = filesystem_connect.FilesystemASGIApplication(_FakeFilesystem(cloud))
        self.process = process_connect.ProcessASGIApplication(_FakeProcess(cloud))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        route = f"{scope['method']} {scope['path']}"
        headers = _headers(scope)
        answer = _RecordingSend(self.cloud, route, send)
        try:
            await self.cloud.wait_if_held(route)
            fault = self.cloud.take_fault(route)
            if fault is not None:
                raise _HttpError(fault.status, fault.message)
            box = self.cloud.sandbox_for_envd(
                headers.get("e2b-sandbox-id"), headers.get("x-access-token")
            )
            if scope["path"].startswith("/filesystem.Filesystem/"):
                await self.filesystem(scope, receive, answer)
            elif scope["path"].startswith("/process.Process/"):
                await self.process(scope, receive, answer)
            elif route == ROUTE_HEALTH:
                await _respond(answer, 204)
            elif route == ROUTE_FILES_READ:
                await self._read_file(box, scope, answer)
            elif route == ROUTE_FILES_WRITE:
                await self._write_files(box, scope, headers, receive, answer)
            else:
                raise _HttpError(404, f"fake envd: no route {route}")
        except _HttpError as err:
            await _respond_error(answer, err.status, err.message)
        except ConnectError as err:
            status = 403 if err.code == Code.PERMISSION_DENIED else 400
            await _respond_error(answer, status, err.message)
        finally:
            answer.record_if_unanswered()

    async def _read_file(self, box: FakeSandbox, scope: Scope, send: Send) -> None:
        query = parse_qs(scope.get("query_string", b"").decode())
        raw = (query.get("path") or [""])[0]
        path = box.resolve(raw)
        if path.is_dir():
            raise _HttpError(400, f"path '{raw}' is a directory")
        if not path.is_file():
            raise _HttpError(404, f"file '{raw}' not found")
        await _respond(send, 200, path.read_bytes(), "application/octet-stream")

    async def _write_files(
        self,
        box: FakeSandbox,
        scope: Scope,
        headers: dict[str, str],
        receive: Receive,
        send: Send,
    ) -> None:
        query = parse_qs(scope.get("query_string", b"").decode())
        body = await _read_body(receive)
        if headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        content_type = headers.get("content-type", "")
        uploads: list[tuple[str, bytes]] = []
        query_path = (query.get("path") or [None])[0]
        if content_type.startswith("application/octet-stream"):
            if not query_path:
                raise _HttpError(400, "path is required for an octet-stream upload")
            uploads.append((query_path, body))
        elif content_type.startswith("multipart/form-data"):
            raw = f"Content-Type: {content_type}\r\n\r\n".encode() + body
            message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(raw)
            parts = [
                p
                for p in message.iter_parts()
                if p.get_param("name", header="content-disposition") == "file"
            ]
            for part in parts:
                filename = part.get_filename() or ""
                target = query_path if query_path and len(parts) == 1 else filename
                payload = part.get_payload(decode=True)
                uploads.append((target, payload if isinstance(payload, bytes) else b""))
        else:
            raise _HttpError(400, f"unsupported content type '{content_type}'")
        result = []
        for target, data in uploads:
            path = box.resolve(target)
            if path.is_dir():
                raise _HttpError(400, f"path '{target}' is a directory")
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.upload-{uuid.uuid4().hex[:8]}")
            tmp.write_bytes(data)
            os.replace(tmp, path)
            result.append({"name": path.name, "type": "file", "path": str(path)})
        await _respond_json(send, 200, result)
