"""A resume on another server, with real kernels and the real S3 gateway: the kernel
restores while the variables' last chunks are still arriving, and a fetch that fails while
it waits fails the resume with the fetch's own sentence, at once, with the runtime paused
and nothing of the fetch recorded.

One chunk of the variables is held back in the second server's fetch until a kernel
process waits for it in the fetch's arrival log (read off /proc: `arrival_readers`); a
server that fetched everything before the kernel started reading would have no such log,
and the chunk goes on at once.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest

from ditto_jupyter.control.service import RuntimeService
from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.core.blobs.errors import ObjectStoreUnavailable
from ditto_jupyter.core.blobs.replica import BucketReplica, manifest_key
from ditto_jupyter.core.blobs.replica_ledger import ObjectKind
from ditto_jupyter.core.blobs.replicated_chunks import chunk_key
from ditto_jupyter.core.models import SessionLifecycleStatus, SessionRecord, UnrestorableValue
from ditto_jupyter.hosts.jupyter_client_host import JupyterClientHost
from ditto_jupyter.hosts.kernel_context_driver import KernelContextDriver
from tests.support.arrival_readers import waiting_in
from tests.support.deployment import Deployment

pytest_plugins = ["tests.support.ceph_fixtures"]
pytestmark = [pytest.mark.s3, pytest.mark.slow]  # real kernels, two servers

CELL = (
    "import numpy as np\n"
    "data = np.random.default_rng(7).random(3_000_000)\n"  # 24 MB: 23 chunks of their own
    "note = 'from server a'\n"
)
PROBE = "print(data.shape, repr(float(data.sum())), note)"


class WatchedKernels(KernelContextDriver):
    """The kernel driver, saying when a restore call (or a start) is over."""

    def __init__(self, host: JupyterClientHost, blob_root: Path) -> None:
        super().__init__(host, blob_root)
        self.over = threading.Event()

    async def start(self, session: SessionRecord, workspace: Path | None) -> dict[str, Any]:
        try:
            return await super().start(session, workspace)
        except BaseException:
            self.over.set()
            raise

    async def restore(
        self, session: SessionRecord, manifest_id: str | None, *, arrivals: str | None = None
    ) -> list[UnrestorableValue]:
        try:
            return await super().restore(session, manifest_id, arrivals=arrivals)
        finally:
            self.over.set()


def kernels(host: JupyterClientHost, made: list[WatchedKernels]) -> Callable[[BlobStore], Any]:
    def factory(blobs: BlobStore) -> WatchedKernels:
        made.append(WatchedKernels(host, blobs.root))
        return made[-1]

    return factory


def a_kernel_waits_in(log: Path, over: threading.Event) -> bool:
    """Until a kernel of this test waits in the arrival log (True), or the restore is
    over without it (False)."""
    while not over.is_set():
        for child in psutil.Process().children(recursive=True):
            try:
                if waiting_in(child.pid, str(log)):
                    return True
            except (FileNotFoundError, PermissionError):  # gone meanwhile
                continue
        over.wait(0.005)
    return False


def hold_back(
    replica: BucketReplica,
    chunk: str,
    over: threading.Event,
    then: Callable[[bool], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Hold the fetch of `chunk` back until a kernel waits in the fetch's arrival log (or
    there is none: a fetch before the restore; or the restore is `over`), call
    `then(a kernel waited)`, then let it go on."""
    get = replica.bucket.get
    staging = replica.store.root / "tmp"

    def get_held_back(name: str) -> bytes:
        if name == chunk_key(chunk):
            logs = list(staging.glob("arrivals-*"))
            then(bool(logs) and a_kernel_waits_in(logs[0], over))
        return get(name)

    monkeypatch.setattr(replica.bucket, "get", get_held_back)


def variables_of(
    service: RuntimeService, checkpoint_id: str, replica: BucketReplica
) -> tuple[list[str], list[str]]:
    """The manifests of a checkpoint's variables (in the bucket) and their chunks, in the
    order a restore reads them."""
    manifest_id = service.get_checkpoint(checkpoint_id).context_manifest_id
    assert manifest_id is not None
    manifests, chunks = [manifest_id], []
    for listed in manifests:
        document = replica.bucket.get(manifest_key(listed))
        body = replica.store.verified_body(listed, document)
        manifests += body.get("manifests", [])
        chunks += body.get("chunks", [])
    return manifests, chunks


async def paused_on_a(deployment: Deployment, host: JupyterClientHost) -> tuple[str, str]:
    made: list[WatchedKernels] = []
    a = deployment.server("a", context_factory=kernels(host, made))
    rid = (await a.create_runtime("nb.ipynb", "ana")).runtime_id
    await host.execute(a.session(rid).handle_state["kernel_id"], CELL)
    paused = await a.pause(rid)
    deployment.stop(a)  # the node goes away
    return rid, paused.checkpoint_id


async def paused_on_a_then_b(
    deployment: Deployment, host: JupyterClientHost
) -> tuple[
    str, tuple[RuntimeService, BucketReplica, list[WatchedKernels]], tuple[list[str], list[str]]
]:
    """A runtime paused on server a (gone), server b started, and what b's resume reads:
    the runtime id, (b, its replica, the kernels b starts), (manifests, chunks)."""
    rid, checkpoint_id = await paused_on_a(deployment, host)
    made: list[WatchedKernels] = []
    b = deployment.server("b", context_factory=kernels(host, made))
    replica = b.replication.replica
    assert replica is not None
    return rid, (b, replica, made), variables_of(b, checkpoint_id, replica)


def test_a_kernel_restores_exactly_while_the_last_chunks_are_still_arriving(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        host = JupyterClientHost()
        try:
            rid, (b, replica, made), (manifests, chunks) = await paused_on_a_then_b(
                deployment, host
            )
            waited: list[bool] = []
            hold_back(replica, chunks[-1], made[0].over, waited.append, monkeypatch)
            resumed = await b.resume(rid)
            assert waited == [True]  # the kernel was reading while the chunk was on its way
            assert resumed.kernel_id is not None
            expected = np.random.default_rng(7).random(3_000_000)
            shown = (await host.execute(resumed.kernel_id, PROBE)).strip()
            assert shown == f"(3000000,) {float(expected.sum())!r} from server a"
            assert all(b.blobs.has_manifest(m) for m in manifests)  # recorded once over
            assert replica.ledger.known(ObjectKind.CHUNK, chunks) == set(chunks)
        finally:
            await host.shutdown_all()

    asyncio.run(scenario())


def test_a_fetch_failing_while_the_kernel_waits_fails_the_resume_at_once(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        host = JupyterClientHost()
        try:
            rid, (b, replica, made), (manifests, chunks) = await paused_on_a_then_b(
                deployment, host
            )
            waited: list[bool] = []

            def gateway_goes(kernel_waits: bool) -> None:
                waited.append(kernel_waits)
                if kernel_waits:
                    deployment.gateway.stop_gateway()  # the chunk the kernel waits for fails

            hold_back(replica, chunks[-1], made[0].over, gateway_goes, monkeypatch)
            try:
                with pytest.raises(ObjectStoreUnavailable, match="cannot be reached"):
                    await b.resume(rid)
            finally:
                deployment.gateway.start_gateway()
            assert waited == [True]
            assert (await b.get_runtime(rid)).status is SessionLifecycleStatus.PAUSED
            assert host.manager.list_kernel_ids() == []  # the kernel started for it is gone
            assert not any(b.blobs.has_manifest(m) for m in manifests)
            assert not any(b.blobs.has_chunk(c) for c in chunks)
            assert not list((b.blobs.root / "tmp").iterdir())
            assert not replica.ledger.known(ObjectKind.CHUNK, chunks)
            monkeypatch.undo()
            resumed = await b.resume(rid)  # the gateway is back
            assert resumed.kernel_id is not None
            shown = (await host.execute(resumed.kernel_id, "print(note)")).strip()
            assert shown == "from server a"
        finally:
            await host.shutdown_all()

    asyncio.run(scenario())
