"""The context-driver contract (`ditto_jupyter.testing.contracts.ContextDriverContract`) on
both drivers: the kernel driver (`KernelContextDriver`) on real kernels of the embedded
host, and the control plane's test double (`InMemoryContextCapture`), so the double the
service's tests run on behaves as a kernel does.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Coroutine, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.core.errors import BackendError
from ditto_jupyter.core.models import SessionRecord
from ditto_jupyter.hosts.jupyter_client_host import JupyterClientHost
from ditto_jupyter.hosts.kernel_context_driver import KernelContextDriver
from ditto_jupyter.kernel.pause_fence import RuntimePausing
from ditto_jupyter.testing.contracts import ContextDriverContract
from tests.fakes.fake_context_capture import InMemoryContextCapture

T = TypeVar("T")

#: The kernel's variables that hold JSON values: the user's, not IPython's own.
READ_VALUES = """
import json as _json
print(_json.dumps({
    _name: _value for _name, _value in dict(globals()).items()
    if not _name.startswith("_") and _name not in ("In", "Out", "exit", "quit", "get_ipython")
    and isinstance(_value, (bool, int, float, str, list, dict, type(None)))
}))
"""


class KernelHarness:
    """Real kernels of the embedded host on one event loop, run in the test's folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.loop = asyncio.new_event_loop()
        self.host = JupyterClientHost()
        self.blobs = BlobStore(root / "blobs", durable=False)
        self.driver = KernelContextDriver(
            self.host, self.blobs.root, notebook_folder=lambda _: root
        )
        self.workspace = root / "workspace"
        self.workspace.mkdir()

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(work)

    def _execute(self, session: SessionRecord, code: str) -> str:
        return self.run(self.host.execute(self.driver.kernel_id(session), code))

    def run_cell(self, session: SessionRecord, values: Mapping[str, Any]) -> bool:
        code = "".join(f"{name} = {value!r}\n" for name, value in values.items())
        try:
            self._execute(session, code)
        except BackendError as error:
            if RuntimePausing.__name__ in str(error):
                return False
            raise
        return True

    def read(self, session: SessionRecord) -> dict[str, Any]:
        read: dict[str, Any] = json.loads(self._execute(session, READ_VALUES))
        return read

    @contextmanager
    def running_cell(self, session: SessionRecord) -> Iterator[None]:
        hold = self.root / f"hold-{uuid.uuid4().hex}"
        hold.touch()
        cell = f"import os, time\nwhile os.path.exists({str(hold)!r}): time.sleep(0.01)"
        running = self.loop.create_task(self.host.execute(self.driver.kernel_id(session), cell))
        try:
            yield
        finally:
            hold.unlink()
            self.run(running)

    def close(self) -> None:
        self.run(self.host.shutdown_all())
        self.loop.close()


class InMemoryHarness:
    """The test double: a JSON namespace per runtime."""

    def __init__(self, root: Path) -> None:
        self.blobs = BlobStore(root / "blobs", durable=False)
        self.driver = InMemoryContextCapture(self.blobs)
        self.workspace = root / "workspace"
        self.workspace.mkdir()

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run(work)

    def run_cell(self, session: SessionRecord, values: Mapping[str, Any]) -> bool:
        try:
            self.driver.execute(session.session_id, **values)
        except BackendError as error:
            if "is pausing" in str(error):
                return False
            raise
        return True

    def read(self, session: SessionRecord) -> dict[str, Any]:
        return dict(self.driver.namespace(session.session_id))

    @contextmanager
    def running_cell(self, session: SessionRecord) -> Iterator[None]:
        self.driver.busy.add(session.session_id)
        try:
            yield
        finally:
            self.driver.busy.discard(session.session_id)


class TestKernelContextDriver(ContextDriverContract):
    @pytest.fixture
    def context(self, tmp_path: Path) -> Iterator[KernelHarness]:
        harness = KernelHarness(tmp_path)
        yield harness
        harness.close()


class TestInMemoryContextCapture(ContextDriverContract):
    @pytest.fixture
    def context(self, tmp_path: Path) -> InMemoryHarness:
        return InMemoryHarness(tmp_path)
