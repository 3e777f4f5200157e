"""`KernelChannel`: calls, cell execution and the busy state over one kernel client.

The message logic of every kernel host: it wraps any `AsyncKernelClient`, so the embedded
host (`JupyterClientHost`) and the server's (`ServerKernelHost`) share it as is.

A call runs `module:function(**args)` as the single user expression of an empty, silent
execute request: nothing lands in the user's history or namespace, and the arguments reach
the kernel as one JSON string literal (never user text pasted into code). The result comes
back as the expression's `application/json` representation.

A request is bound to the kernel process it was sent to. Jupyter's restarter revives a
killed kernel under the same id, within the time a liveness poll takes, so "is the kernel
alive?" can answer yes while the process that had the request is gone and its answer will
never come. The channel asks which process runs now (`running_process`) and ends the
request with `KernelDied` when it is not the one the request went to.

A channel's client has a session of its own (`own_client`). A kernel manager's `client()`
shares the manager's session, whose id is the zmq identity of the client's shell socket,
and ipykernel's shell socket hands a route over to the newest peer with an identity
(ROUTER_HANDOVER): any other client of the same manager, opened while a call waits, would
take the call's reply, and the call would wait for its whole timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from queue import Empty
from typing import Any

import zmq
from jupyter_client.asynchronous.client import AsyncKernelClient
from jupyter_client.session import Session

from ditto_jupyter.core.errors import (
    STORAGE_ERRORS,
    BackendError,
    InvalidRequest,
    error_type_of,
)

_FUNCTION = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
#: Seconds between two looks at the kernel process while a request waits for its reply.
_POLL_S = 0.5
#: Opening a channel: IOPub is read for at most `_SETTLE_S` seconds, and until it is quiet
#: for `_QUIET_S`, to learn the kernel's state (`KernelChannel._settle_state`).
_SETTLE_S = 1.0
_QUIET_S = 0.2

#: Which kernel process runs now: an identity to compare, or None when none runs.
ProcessProbe = Callable[[], Awaitable[object | None]]

log = logging.getLogger(__name__)


class KernelDied(BackendError):
    """The kernel process a request was sent to died before it answered (502)."""


class KernelUnreachable(BackendError):
    """The kernel's shell port takes no messages: another kind of socket holds it, so a
    kernel starting on it dies there, or one that ran there is gone (502)."""


async def running_process(kernel: Any) -> object | None:
    """The process a jupyter_client kernel manager runs now, or None when it runs none.

    A local kernel's identity is its provisioner's `Popen` (a restart makes a new one,
    and holding it keeps the comparison safe from pid reuse); other provisioners give
    their pid. A kernel that is alive with neither is its manager: liveness alone.
    """
    if not await kernel.is_alive():
        return None
    provisioner = getattr(kernel, "provisioner", None)
    process: object | None = getattr(provisioner, "process", None)
    if process is not None:
        return process
    pid: object | None = getattr(provisioner, "pid", None)
    return pid if pid is not None else kernel


def own_client(kernel: Any) -> AsyncKernelClient:
    """A client of a jupyter_client kernel manager with a session (a zmq identity) of its own.

    It signs with the manager's key, as every client must, under a new session id: no
    other client of the manager (`kernel.client()`, which reuses the manager's session)
    shares its shell socket's identity and so takes its replies.
    """
    shared: Session = kernel.session
    session = Session(
        key=shared.key,
        signature_scheme=shared.signature_scheme,
        username=shared.username,
        packer=shared.packer,
        unpacker=shared.unpacker,
    )
    client: AsyncKernelClient = kernel.client(session=session)
    return client


def call_expression(function: str, args: dict[str, object]) -> str:
    """The user expression of a call: the request travels as one JSON string literal."""
    if not isinstance(function, str) or not _FUNCTION.fullmatch(function):
        raise InvalidRequest(f"kernel call target {function!r} is not 'module:function'")
    if not isinstance(args, dict):
        raise InvalidRequest("kernel call arguments must be a dict")
    try:
        request = json.dumps({"function": function, "args": args})
    except (TypeError, ValueError) as error:
        raise InvalidRequest(f"kernel call arguments are not JSON: {error}") from None
    module = "__import__('ditto_jupyter.kernel', fromlist=['dispatch_call'])"
    return f"{module}.dispatch_call({request!r})"


def call_result(reply: dict[str, Any], function: str, kernel_id: str) -> object:
    """The JSON result of a call from its execute_reply, or BackendError with the reason
    (a storage error raised in the kernel keeps its own type: see `STORAGE_ERRORS`)."""
    content = reply.get("content", {})
    if content.get("status") != "ok":
        reason = f"{content.get('ename', 'Error')}: {content.get('evalue', '')}"
        raise BackendError(f"kernel {kernel_id} refused the call to {function}: {reason}")
    result = content.get("user_expressions", {}).get("result", {})
    if result.get("status") != "ok":
        storage = error_type_of(result.get("ename"))
        if storage is not None and storage in STORAGE_ERRORS:  # a full disk stays a full disk
            raise storage(str(result.get("evalue", "")))
        reason = f"{result.get('ename', 'Error')}: {result.get('evalue', '')}".rstrip(": ")
        raise BackendError(f"{function} failed in kernel {kernel_id}: {reason}")
    data = result.get("data", {}).get("application/json")
    if not isinstance(data, dict) or "result" not in data:
        raise BackendError(f"{function} in kernel {kernel_id} returned no JSON result")
    return data["result"]


def _status_of(message: dict[str, Any]) -> str | None:
    """The execution state an IOPub `status` message reports; None for any other message."""
    if message.get("header", {}).get("msg_type") != "status":
        return None
    state = message.get("content", {}).get("execution_state")
    return state if isinstance(state, str) and state else None


@dataclass
class _Pending:
    """Output of one request, gathered from iopub until the kernel goes idle for it."""

    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)
    error: dict[str, Any] | None = None
    idle: asyncio.Event = field(default_factory=asyncio.Event)


class KernelChannel:
    """Request/reply over one kernel client: calls, cell execution, the busy state.

    One reader task follows iopub (the kernel's `execution_state`, and the output of our own
    requests); shell requests are sent one at a time. `process` says which kernel process
    runs now (`running_process` of the kernel's manager); without it, a request waits for
    its reply or its timeout.
    """

    def __init__(
        self,
        client: AsyncKernelClient,
        kernel_id: str,
        *,
        process: ProcessProbe | None = None,
    ) -> None:
        self.client = client
        self.kernel_id = kernel_id
        self.process = process
        self.execution_state = "starting"
        self._pending: dict[str, _Pending] = {}
        self._lock = asyncio.Lock()
        self._reader: asyncio.Task[None] | None = None

    async def start(self, timeout: float = 60.0) -> None:
        """Open the channels and wait until the kernel answers.

        No send may wait: jupyter_client's `Session.send` sends through a blocking shadow
        of the asyncio socket, on the event loop's thread. A shell socket whose peer is
        gone for good (the dead kernel's port now held by a socket of another type) has
        no pipe, and that send waited forever, freezing the server. SNDTIMEO=0 makes it
        fail at once (zmq.Again) instead. The heartbeat channel is not started: liveness
        comes from the kernel manager (`process`), and the heartbeat's lingering socket held
        `stop_channels` on the loop for a second with a dead kernel.
        """
        if self.process is not None and await self.process() is None:
            raise KernelDied(f"kernel {self.kernel_id} died before it answered")
        self.client.start_channels(hb=False)
        for channel in (self.client.shell_channel, self.client.stdin_channel):
            channel.socket.setsockopt(zmq.SNDTIMEO, 0)
        try:
            await self._wait_for_ready(timeout)
        except (RuntimeError, zmq.ZMQError) as error:
            self.client.stop_channels()
            raise self._start_error(error) from error
        self._reader = asyncio.get_running_loop().create_task(self._read_iopub())

    async def _wait_for_ready(self, timeout: float) -> None:
        """A kernel_info reply on shell, then IOPub followed until the state is known.

        jupyter_client's `wait_for_ready` does the same but then throws away what IOPub
        holds: a cell starting meanwhile lost its `busy` status, and the channel said idle
        until that cell ended. Here every status seen is kept (`_settle_state`), and what
        follows is the reader's.
        """
        deadline = time.monotonic() + timeout
        asked: set[str] = set()
        while True:
            asked.add(self.client.kernel_info())
            try:
                reply = await self.client.get_shell_msg(timeout=1)
            except Empty:
                reply = None
            if reply is not None and reply["msg_type"] == "kernel_info_reply":
                self.client._handle_kernel_info_reply(reply)
                if await self._settle_state(asked):
                    return
            if not await self.client.is_alive():
                raise RuntimeError("Kernel died before replying to kernel_info")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kernel didn't respond in {timeout:.0f} seconds")

    async def _settle_state(self, asked: set[str]) -> bool:
        """Read IOPub until our own kernel_info's `idle` (IOPub was connected before it, so
        every later status is seen in order) or until it falls quiet; False if nothing came
        (IOPub not connected yet: ask again).

        IOPub connected late, after the statuses of our request, is told by output with no
        status before it: a cell whose `busy` was published before we listened is running.
        The channel then says busy and asks the kernel_info once more without waiting; its
        `idle`, which the kernel sends once its shell is free, reaches the reader and ends it.
        """
        seen_any = seen_status = False
        settle_until = time.monotonic() + _SETTLE_S
        while time.monotonic() < settle_until:
            try:
                message = await self.client.get_iopub_msg(timeout=_QUIET_S)
            except Empty:
                break
            seen_any = True
            state = _status_of(message)
            if state is None:
                continue
            self.execution_state = state
            seen_status = True
            if state == "idle" and message.get("parent_header", {}).get("msg_id") in asked:
                return True
        if seen_any and not seen_status:
            self.execution_state = "busy"
            self.client.kernel_info()
        return seen_any

    def _start_error(self, error: Exception) -> BackendError:
        if isinstance(error, zmq.ZMQError):
            return self._unreachable(error)
        return BackendError(f"kernel {self.kernel_id} did not start: {error}")

    def _unreachable(self, error: zmq.ZMQError) -> KernelUnreachable:
        return KernelUnreachable(
            f"kernel {self.kernel_id} is unreachable: its shell channel takes no messages ({error})"
        )

    async def stop(self) -> None:
        """Stop following the kernel and close the channels."""
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                try:
                    await self._reader
                except Exception:
                    log.warning("iopub reader of kernel %s failed", self.kernel_id, exc_info=True)
            self._reader = None
        self.client.stop_channels()

    @property
    def busy(self) -> bool:
        """Whether the kernel last reported itself busy."""
        return self.execution_state == "busy"

    async def _read_iopub(self) -> None:
        while True:
            try:
                message = await self.client.get_iopub_msg(timeout=None)
            except Empty:
                continue
            except asyncio.CancelledError:
                raise
            except Exception:  # a malformed message must not stop the busy tracking
                log.debug("unreadable iopub message from kernel %s", self.kernel_id, exc_info=True)
                await asyncio.sleep(0.05)
                continue
            kind = message.get("header", {}).get("msg_type")
            content = message.get("content", {})
            parent = message.get("parent_header", {}).get("msg_id")
            state = _status_of(message)
            if state is not None:
                self.execution_state = state
            pending = self._pending.get(parent) if parent else None
            if pending is None:
                continue
            if kind == "stream":
                target = pending.stdout if content.get("name") == "stdout" else pending.stderr
                target.append(content.get("text", ""))
            elif kind == "error":
                pending.error = content
            elif state == "idle":
                pending.idle.set()

    async def _bound_process(self) -> object | None:
        """The process a request about to be sent goes to (KernelDied when none runs)."""
        if self.process is None:
            return None
        process = await self.process()
        if process is None:
            raise KernelDied(f"kernel {self.kernel_id} died")
        return process

    async def _check_process(self, bound: object | None) -> None:
        """KernelDied when the process a request went to is no longer the one running."""
        if self.process is None:
            return
        if await self.process() != bound:
            # The dead process never reports idle: it is not busy any more.
            self.execution_state = "dead"
            raise KernelDied(f"kernel {self.kernel_id} died")

    async def _reply(
        self, msg_id: str, bound: object | None, timeout: float | None
    ) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            try:
                reply: dict[str, Any] = await self.client.get_shell_msg(timeout=_POLL_S)
            except Empty:
                await self._check_process(bound)
                if deadline is not None and loop.time() > deadline:
                    raise BackendError(
                        f"kernel {self.kernel_id} did not answer within {timeout:g} s"
                    ) from None
                continue
            if reply.get("parent_header", {}).get("msg_id") == msg_id:
                return reply

    async def _request(
        self,
        code: str,
        *,
        silent: bool,
        user_expressions: dict[str, str] | None = None,
        timeout: float | None,
    ) -> tuple[dict[str, Any], _Pending]:
        async with self._lock:
            pending = _Pending()
            bound = await self._bound_process()
            try:
                msg_id = self.client.execute(
                    code,
                    silent=silent,
                    store_history=not silent,
                    user_expressions=user_expressions or {},
                    allow_stdin=False,
                )
            except zmq.ZMQError as error:
                raise self._unreachable(error) from error
            self._pending[msg_id] = pending
            try:
                reply = await self._reply(msg_id, bound, timeout)
                if self._reader is not None:  # all output is in once the kernel is idle
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(pending.idle.wait(), 10.0)
            finally:
                self._pending.pop(msg_id, None)
        return reply, pending

    async def call(
        self, function: str, args: dict[str, object], *, timeout: float | None = None
    ) -> object:
        """Run `module:function(**args)` in the kernel; its JSON result."""
        expression = call_expression(function, args)
        reply, _ = await self._request(
            "", silent=True, user_expressions={"result": expression}, timeout=timeout
        )
        return call_result(reply, function, self.kernel_id)

    async def execute(self, code: str, *, timeout: float | None = None) -> str:
        """Run a cell as a user would (it counts in the history); its stdout.

        Raises BackendError with the exception's one-line reason when the cell fails.
        """
        reply, pending = await self._request(code, silent=False, timeout=timeout)
        content = reply.get("content", {})
        if content.get("status") != "ok":
            error = pending.error or content
            raise BackendError(
                f"cell failed in kernel {self.kernel_id}: "
                f"{error.get('ename', 'Error')}: {error.get('evalue', '')}"
            )
        return "".join(pending.stdout)
