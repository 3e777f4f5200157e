"""Real ipykernel kernels through JupyterClientHost and KernelContextDriver.

Two kernels serve the whole module (each start costs a second or two): `kernel` is the
working kernel (tests start by restoring it to an empty namespace, itself the in-place
restore path); `fresh` receives checkpoints the way a new kernel does on checkout or resume.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.core.errors import BackendError, InvalidRequest
from ditto_jupyter.core.models import SessionRecord
from ditto_jupyter.hosts.jupyter_client_host import JupyterClientHost
from ditto_jupyter.hosts.kernel_channel import KernelChannel
from ditto_jupyter.hosts.kernel_context_driver import KernelContextDriver
from ditto_jupyter.hosts.kernel_host import KernelHost
from ditto_jupyter.hosts.kernel_start import channel_to
from ditto_jupyter.kernel.capture import CHUNK_SIZE
from tests.support.stored_blobs import tamper_manifest, write_manifest_document

pytestmark = pytest.mark.slow
T = TypeVar("T")
#: A cell that runs long enough to be seen running.
SLEEP = "import time; time.sleep(1.5)"


class Kernels:
    """The module's event loop, host, context capture and two live kernels."""

    def __init__(self, root: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.root = root
        self.host = JupyterClientHost()
        self.blob_root = root / "blobs"
        # The kernels run in the test's folder: what their cells write stays out of the checkout.
        self.context = KernelContextDriver(
            self.host, self.blob_root, notebook_folder=lambda _: root
        )
        self.workspace = root / "workspace"
        self.workspace.mkdir()
        self.kernel = self.start("main")
        self.fresh = self.start("fresh")

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coroutine)

    def start(self, runtime_id: str) -> SessionRecord:
        session = SessionRecord(session_id=runtime_id, conversation_id="nb.ipynb", sender_id="t")
        handle = self.run(self.context.start(session, self.workspace))
        return session.model_copy(update={"handle_state": handle})

    def execute(self, session: SessionRecord, code: str) -> str:
        return self.run(self.host.execute(session.handle_state["kernel_id"], code))  # type: ignore[attr-defined]

    def value(self, session: SessionRecord, expression: str) -> Any:
        """Evaluate an expression in the kernel, through its JSON text on stdout."""
        return json.loads(
            self.execute(session, f"import json as _j; print(_j.dumps({expression}))")
        )

    def close(self) -> None:
        self.run(self.host.shutdown_all())
        self.loop.close()


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernels]:
    kernels = Kernels(tmp_path_factory.mktemp("kernels"))
    try:
        yield kernels
    finally:
        kernels.close()


@pytest.fixture
def k(kernels: Kernels) -> Kernels:
    kernels.run(kernels.context.restore(kernels.kernel, None))
    return kernels


def test_host_and_context_satisfy_their_protocols(k: Kernels) -> None:
    from ditto_jupyter.control.context_driver import ContextDriver

    assert isinstance(k.host, KernelHost)
    assert isinstance(k.context, ContextDriver)
    assert k.kernel.handle_state["kernel_id"] != k.fresh.handle_state["kernel_id"]


def test_call_passes_arguments_as_json_never_as_code(k: Kernels) -> None:
    kernel_id = k.kernel.handle_state["kernel_id"]
    hostile = "'); import os; os._exit(1) #\"\n\\u0000 {x}"
    result = k.run(k.host.call(kernel_id, "json:dumps", {"obj": {"name": hostile}}))
    assert result == json.dumps({"name": hostile})
    count_before = k.value(k.kernel, "len(In)")
    k.run(k.host.call(kernel_id, "json:dumps", {"obj": 1}))
    assert k.value(k.kernel, "len(In)") == count_before + 1  # only the probe cell counted


def test_call_errors_carry_the_kernel_reason(k: Kernels) -> None:
    kernel_id = k.kernel.handle_state["kernel_id"]
    with pytest.raises(BackendError, match=r"ModuleNotFoundError: No module named 'no_such_mod'"):
        k.run(k.host.call(kernel_id, "no_such_mod:f", {}))
    with pytest.raises(BackendError, match="JSONDecodeError"):
        k.run(k.host.call(kernel_id, "json:loads", {"s": "{not json"}))
    with pytest.raises(InvalidRequest, match="not 'module:function'"):
        k.run(k.host.call(kernel_id, "os.system('x')", {}))
    with pytest.raises(BackendError, match="not running"):
        k.run(k.host.call("no-such-kernel", "json:dumps", {"obj": 1}))
    with pytest.raises(BackendError, match="ZeroDivisionError"):
        k.execute(k.kernel, "1 / 0")


def test_bad_input_is_refused_with_one_line(k: Kernels) -> None:
    with pytest.raises(BackendError, match="could not start a no-such-kernel kernel"):
        k.run(k.host.start_kernel("no-such-kernel"))
    with pytest.raises(InvalidRequest, match="not a directory"):
        k.run(k.host.start_kernel(cwd=k.root / "missing"))
    kernel_id = k.kernel.handle_state["kernel_id"]
    with pytest.raises(InvalidRequest, match="not JSON"):
        k.run(k.host.call(kernel_id, "json:dumps", {"obj": object()}))
    with pytest.raises(BackendError, match="no live kernel"):
        k.run(k.context.capture(k.kernel.model_copy(update={"handle_state": {}})))


def test_is_busy_follows_the_kernel(k: Kernels) -> None:
    async def scenario() -> bool:
        kernel_id = k.kernel.handle_state["kernel_id"]
        task = asyncio.ensure_future(k.host.execute(kernel_id, SLEEP))
        seen_busy = False
        while not task.done() and not seen_busy:
            seen_busy = await k.context.is_busy(k.kernel)
            await asyncio.sleep(0.01)
        await task
        return seen_busy

    assert k.run(scenario()) is True
    assert k.run(k.context.is_busy(k.kernel)) is False


def start_a_cell_after_the_kernel_info_reply(
    k: Kernels, opening: KernelChannel, code: str, monkeypatch: pytest.MonkeyPatch
) -> list[asyncio.Future[str]]:
    """Holds the opening channel's kernel_info reply until `code` runs on the kernel's other
    channel, so the cell starts before the opening channel reads IOPub. The cell's future is
    in the list returned once the reply has come."""
    running = k.host.channel(k.kernel.handle_state["kernel_id"])
    replies = opening.client.get_shell_msg
    cells: list[asyncio.Future[str]] = []

    async def reply_once_a_cell_runs(*args: Any, **kwargs: Any) -> Any:
        reply = await replies(*args, **kwargs)
        if not cells:
            cells.append(asyncio.ensure_future(running.execute(code, timeout=60)))
            while not running.busy:
                await asyncio.sleep(0.01)
        return reply

    monkeypatch.setattr(opening.client, "get_shell_msg", reply_once_a_cell_runs)
    return cells


def test_a_channel_opened_as_a_cell_starts_sees_the_kernel_busy(
    k: Kernels, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cell that starts between a new channel's kernel_info reply and its first IOPub read
    is seen running. jupyter_client's `wait_for_ready` threw that IOPub away, and the channel
    said idle until the cell ended: a checkout that must be refused went through."""

    async def scenario() -> bool:
        opening = channel_to(k.host.manager, k.kernel.handle_state["kernel_id"])
        cells = start_a_cell_after_the_kernel_info_reply(k, opening, SLEEP, monkeypatch)
        await opening.start()
        try:
            while not cells[0].done() and not opening.busy:
                await asyncio.sleep(0.01)
            seen_busy = opening.busy and not cells[0].done()
            await cells[0]
            return seen_busy
        finally:
            await opening.stop()

    assert k.run(scenario()) is True


def test_a_channel_whose_iopub_connects_after_a_cell_started_sees_it_busy(
    k: Kernels, monkeypatch: pytest.MonkeyPatch
) -> None:
    """IOPub connected late: the new channel never sees the running cell's `busy` (nor its
    own kernel_info's statuses), only the cell's output. It says busy while the cell runs,
    and idle once the cell has ended."""

    async def scenario() -> tuple[bool, bool]:
        opening = channel_to(k.host.manager, k.kernel.handle_state["kernel_id"])
        code = "print('started', flush=True); " + SLEEP
        cells = start_a_cell_after_the_kernel_info_reply(k, opening, code, monkeypatch)
        messages = opening.client.get_iopub_msg
        connected: list[bool] = []

        async def iopub_from_the_cells_output(*args: Any, **kwargs: Any) -> Any:
            while True:  # what IOPub published before the cell's output never arrives
                message = await messages(*args, **kwargs)
                if connected or message["header"]["msg_type"] == "stream":
                    connected.append(True)
                    return message

        monkeypatch.setattr(opening.client, "get_iopub_msg", iopub_from_the_cells_output)
        await opening.start()
        try:
            seen_busy = opening.busy and not cells[0].done()
            await cells[0]
            while opening.busy:  # the cell's idle, or the channel's second kernel_info's
                await asyncio.sleep(0.01)
            return seen_busy, opening.execution_state == "idle"
        finally:
            await opening.stop()

    assert k.run(scenario()) == (True, True)


def test_a_call_keeps_its_reply_when_another_client_of_the_kernel_connects(k: Kernels) -> None:
    """A client of the kernel's manager (`client()`, the manager's session), opened while
    the host's request runs, does not take that request's reply (issue 22 section 1: the
    idle pause's capture waited its whole timeout when a cell came from such a client)."""

    async def scenario() -> tuple[str, str]:
        kernel_id = k.kernel.handle_state["kernel_id"]
        channel = k.host.channel(kernel_id)
        request = asyncio.ensure_future(
            channel.execute("import time; time.sleep(1.5); print('slept')", timeout=60)
        )
        while not channel.busy:
            await asyncio.sleep(0.01)
        other = k.host.manager.get_kernel(kernel_id).client()
        other.start_channels()
        try:
            reply = await other.execute_interactive("y = 1", timeout=60)
        finally:
            other.stop_channels()
        return str(reply["content"]["status"]), await request

    assert k.run(scenario()) == ("ok", "slept\n")
    assert k.value(k.kernel, "y") == 1


CELLS = """
import numpy as np
import collections
from os import path as p
a = b = []
arr = np.arange(300_000, dtype=np.float64)
d = {"ref": arr}
offset = 10
def add(x):
    return x + offset
twice = lambda y: add(y) * 2
class Point:
    def __init__(self, x):
        self.x = x
    def moved(self):
        return self.x + offset
pt = Point(1)
counts = collections.Counter("hello")
"""

CHECKS = (
    "[a is b, d['ref'] is arr, float(arr[-1]), twice(1), pt.moved(), isinstance(pt, Point),"
    " p.__name__, np.__name__, counts['l']]"
)
EXPECTED = [True, True, 299_999.0, 22, 11, True, "posixpath", "numpy", 2]


def test_capture_and_restore_in_place_and_into_a_fresh_kernel(k: Kernels) -> None:
    k.execute(k.kernel, CELLS)
    captured = k.run(k.context.capture(k.kernel))
    assert captured.unrestorable == []
    assert captured.execution_count == k.value(k.kernel, "len(In) - 1") - 1

    k.execute(k.kernel, "later = 1\na = [5]\narr[0] = -1\noffset = 0")
    assert k.run(k.context.restore(k.kernel, captured.manifest_id)) == []
    assert k.value(k.kernel, CHECKS) == EXPECTED
    assert k.value(k.kernel, "'later' in globals()") is False
    assert k.value(k.kernel, "float(arr[0])") == 0.0

    k.run(k.context.restore(k.fresh, captured.manifest_id))
    assert k.value(k.fresh, CHECKS) == EXPECTED
    k.execute(k.fresh, "offset = 100")
    assert k.value(k.fresh, "[twice(1), pt.moved()]") == [202, 101]  # live globals


def test_ipython_names_are_not_state(k: Kernels) -> None:
    k.execute(k.kernel, "x = 41\nx + 1")
    k.execute(k.kernel, "_ + 1")
    captured = k.run(k.context.capture(k.kernel))
    body = BlobStore(k.blob_root).get_manifest(captured.manifest_id)
    names = {name for component in body["components"] for name in component["names"]}
    assert names == {"x"}
    assert set(body["modules"]) == set()
    k.execute(k.kernel, "y = 3")
    k.run(k.context.restore(k.kernel, captured.manifest_id))
    assert k.value(k.kernel, "[x, 'y' in globals(), len(Out) > 0, get_ipython() is not None]") == [
        41,
        False,
        True,
        True,
    ]


# `fh` is opened first, on a path under the test's temporary folder (the kernel's working
# directory is the checkout, which a test never writes into).
UNPICKLABLE = """
import socket, sqlite3, threading
def numbers():
    yield 1
gen = numbers()
sock = socket.socket()
lock = threading.Lock()
worker = threading.Thread(target=lambda: None)
conn = sqlite3.connect(":memory:")
keep = {"fine": [1, 2]}
"""


def test_unpicklable_values_are_reported_and_the_rest_restored(k: Kernels) -> None:
    k.execute(k.kernel, f"fh = open({str(k.root / 'data.txt')!r}, 'w')")
    k.execute(k.kernel, UNPICKLABLE)
    captured = k.run(k.context.capture(k.kernel))
    lost = {u.name: (u.type, u.reason) for u in captured.unrestorable}
    assert set(lost) == {"gen", "fh", "sock", "lock", "worker", "conn"}
    assert lost["gen"][0] == "generator" and "generator" in lost["gen"][1]
    assert lost["fh"][0] == "_io.TextIOWrapper" and "open file" in lost["fh"][1]
    assert lost["sock"][0] == "socket.socket"
    assert lost["lock"][0] == "_thread.lock"
    assert lost["worker"][0] == "threading.Thread"
    assert lost["conn"][0] == "sqlite3.Connection"

    again = k.run(k.context.restore(k.fresh, captured.manifest_id))
    assert {u.name for u in again} == set(lost)
    assert k.value(k.fresh, "[keep, 'numbers' in globals(), 'gen' in globals()]") == [
        {"fine": [1, 2]},
        True,
        False,
    ]
    k.execute(k.kernel, "fh.close(); sock.close(); conn.close()")


def test_incremental_checkpoint_after_one_element_change(k: Kernels) -> None:
    k.execute(k.kernel, f"import numpy as np\nbig = np.random.rand({16 * CHUNK_SIZE // 8})")
    first = k.run(k.context.capture(k.kernel))
    assert first.bytes_written > 12 * CHUNK_SIZE  # random floats: byte-shuffled, ~0.84
    k.execute(k.kernel, "big[0] = 42")
    second = k.run(k.context.capture(k.kernel))
    assert CHUNK_SIZE // 2 <= second.bytes_written < 2 * CHUNK_SIZE  # the one chunk
    k.run(k.context.restore(k.kernel, first.manifest_id))
    assert k.value(k.kernel, "float(big[0]) != 42") is True


def test_a_kernel_captures_and_restores_its_own_namespace(k: Kernels) -> None:
    """The magic path: the kernel captures itself while busy, the service gets the result."""
    k.execute(k.kernel, "items = [1, 2]\nalias = items")
    module = "__import__('ditto_jupyter.kernel.capture', fromlist=['_'])"
    store = f"{module}.open_blob_store({str(k.blob_root)!r})"
    code = f"print({module}.capture_namespace(get_ipython().user_ns, {store}).model_dump_json())"
    from ditto_jupyter.core.models import ContextCapture

    captured = ContextCapture.model_validate_json(k.execute(k.kernel, code))
    body = BlobStore(k.blob_root).get_manifest(captured.manifest_id)
    # one component (its names in stream order: the member pickled first, then the others)
    assert [sorted(c["names"]) for c in body["components"]] == [["alias", "items"]]

    k.run(k.context.restore(k.fresh, captured.manifest_id))
    assert k.value(k.fresh, "[items, alias is items]") == [[1, 2], True]

    k.execute(k.kernel, "items.append(3)\nextra = 1")
    restore = (
        f"print(len({module}.restore_namespace(get_ipython().user_ns, {store}, "
        f"{captured.manifest_id!r})))"
    )
    assert k.execute(k.kernel, restore).strip() == "0"
    assert k.value(k.kernel, "[items, alias is items, 'extra' in globals()]") == [
        [1, 2],
        True,
        False,
    ]


def test_a_tampered_manifest_is_refused_and_the_kernel_is_unchanged(k: Kernels) -> None:
    k.execute(k.kernel, "secret = 1")
    captured = k.run(k.context.capture(k.kernel))
    original = tamper_manifest(
        k.blob_root, captured.manifest_id, lambda doc: doc.replace(b'"secret"', b'"hacked"')
    )
    try:
        k.execute(k.kernel, "secret = 2\nnewer = 3")
        with pytest.raises(BackendError, match="ManifestSignatureError"):
            k.run(k.context.restore(k.kernel, captured.manifest_id))
        assert k.value(k.kernel, "[secret, newer]") == [2, 3]
    finally:
        write_manifest_document(k.blob_root, captured.manifest_id, original)


def test_stop_is_idempotent_and_a_dead_kernel_is_reported(k: Kernels) -> None:
    session = k.start("doomed")
    kernel_id = session.handle_state["kernel_id"]
    with pytest.raises(BackendError, match="died"):
        k.execute(session, "import os; os._exit(3)")
    assert k.run(k.host.is_alive(kernel_id)) is False
    k.run(k.context.stop(session))
    k.run(k.context.stop(session))  # already gone: fine
    with pytest.raises(BackendError, match="not running"):
        k.run(k.context.capture(session))


def test_a_manager_given_with_no_kernels_yet_is_the_one_used() -> None:
    from jupyter_client.multikernelmanager import AsyncMultiKernelManager

    manager = AsyncMultiKernelManager()
    assert len(manager) == 0  # falsy: `manager or default` would drop it
    assert JupyterClientHost(manager).manager is manager


def test_a_kernel_starts_where_jupyters_runtime_dir_does_not_exist_yet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A machine that never ran a Jupyter server has no runtime dir: `%checkout` without a
    server (the embedded host) must still start its kernel, not fail on the connection file."""
    runtime_dir = tmp_path / "never-made" / "runtime"
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(runtime_dir))
    host = JupyterClientHost()
    loop = asyncio.new_event_loop()
    try:
        kernel_id = loop.run_until_complete(host.start_kernel(cwd=tmp_path))
        try:
            assert loop.run_until_complete(host.execute(kernel_id, "print(6 * 7)")).strip() == "42"
            assert runtime_dir.is_dir()
            assert runtime_dir.stat().st_mode & 0o777 == 0o700
        finally:
            loop.run_until_complete(host.shutdown_kernel(kernel_id))
    finally:
        loop.close()
