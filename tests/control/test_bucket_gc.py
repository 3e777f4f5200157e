"""Garbage collection of the bucket that several servers share (`control.bucket_gc`).

Services on their own data directories share one PostgreSQL database and one bucket of a
real Ceph gateway, as the servers of a deployment do. What no checkpoint references goes
from the bucket at one server's collection; a chunk an in-flight checkpoint on another
server wrote stays; of two servers collecting at once exactly one collects; and a chunk
collected and then needed again by another server's checkpoint is uploaded again, so the
checkpoint resumes elsewhere; and the intent of a server that stopped blocks nobody. A
server whose bounded cache evicted a chunk that collection then deleted from the bucket
stores the chunk's bytes again when a capture reuses a manifest listing it.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ditto_jupyter.control.bucket_gc import BucketCoordination
from ditto_jupyter.control.service import RuntimeService
from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.core.blobs.replica import Transfer, manifest_key
from ditto_jupyter.core.blobs.replicated_chunks import chunk_key
from ditto_jupyter.core.errors import CaptureLost
from ditto_jupyter.core.models import ContextCapture
from ditto_jupyter.kernel.capture.capturing import capture_namespace
from ditto_jupyter.kernel.capture_again import record_own_capture
from tests.fakes.fake_context_capture import ctx
from tests.support.ceph_gateway import CephGateway, S3Bucket
from tests.support.deployment import Deployment, deploy

pytest_plugins = ["tests.support.ceph_fixtures", "tests.support.postgres_fixtures"]
pytestmark = [pytest.mark.s3, pytest.mark.postgres]

T = TypeVar("T")
TABLE = b"a,b\n" * 50_000


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@pytest.fixture
def deployment(
    tmp_path: Path,
    postgres_url: str,
    ceph_gateway: CephGateway,
    s3_bucket: S3Bucket,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Deployment]:
    yield from deploy(
        tmp_path,
        ceph_gateway,
        s3_bucket,
        monkeypatch,
        store_url=postgres_url,
        durability="replicated",
    )


def coordination(service: RuntimeService) -> BucketCoordination:
    found = service.replication.coordination
    assert found is not None
    return found


def in_bucket(service: RuntimeService, name: str) -> bool:
    replica = service.replication.replica
    assert replica is not None
    return replica.bucket.exists(name)


def closure(blobs: BlobStore, manifests: Iterable[str]) -> set[str]:
    """The bucket names of these manifests and of everything they list."""
    names: set[str] = set()
    pending = list(manifests)
    while pending:
        manifest_id = pending.pop()
        if manifest_key(manifest_id) in names:
            continue
        names.add(manifest_key(manifest_id))
        body = blobs.get_manifest(manifest_id)
        names.update(chunk_key(c) for c in body.get("chunks", []))
        pending.extend(body.get("manifests", []))
    return names


async def paused_with_table(service: RuntimeService, notebook: str) -> tuple[str, str]:
    """A runtime with variables and the table in its workspace, paused: (runtime, head)."""
    runtime = await service.create_runtime(notebook, "ana")
    rid = runtime.runtime_id
    ctx(service).execute(rid, x=41)
    backend = service.backends.get(rid)
    assert backend is not None
    await backend.write_bytes("data/table.csv", TABLE)
    paused = await service.pause(rid)
    return rid, paused.checkpoint_id


def garbage_of_dropped_snapshot(service: RuntimeService, checkpoint_id: str) -> set[str]:
    """Delete a checkpoint's workspace snapshot; the bucket names only it kept alive."""
    ref = service.get_checkpoint(checkpoint_id).backend_ref
    assert ref is not None
    dropped = closure(service.blobs, service.backends.referenced_manifests(ref))
    run(service.delete_snapshot(checkpoint_id))
    assert service.collector.wait_idle(timeout=120)  # its own collection is done
    return dropped - closure(service.blobs, service.live_manifests())


def test_one_servers_collection_deletes_what_no_checkpoint_references(
    deployment: Deployment,
) -> None:
    a = deployment.server("a")
    _, head = run(paused_with_table(a, "nb.ipynb"))
    garbage = garbage_of_dropped_snapshot(a, head)
    assert any(name.startswith("chunks/") for name in garbage)
    assert all(in_bucket(a, name) for name in garbage)  # nothing deleted it yet

    b = deployment.server("b")
    report = b.bucket_gc(grace_seconds=0)
    assert report is not None and report.collected and report.reason is None
    assert report.deleted_chunks + report.deleted_manifests == len(garbage)
    assert not any(in_bucket(a, name) for name in garbage)
    live = closure(a.blobs, a.live_manifests())
    assert live and all(in_bucket(a, name) for name in live)  # the rest stays


def test_a_chunk_of_a_checkpoint_in_flight_on_another_server_is_not_deleted(
    deployment: Deployment,
) -> None:
    a = deployment.server("a")
    b = deployment.server("b")
    written: set[str] = set()

    async def scenario() -> None:
        runtime = await b.create_runtime("nb.ipynb", "ben")
        rid = runtime.runtime_id
        ctx(b).execute(rid, fresh=list(range(5000)))
        uploaded = asyncio.Event()
        go_on = asyncio.Event()
        upload = b.replication.upload

        async def upload_then_wait(manifests: Any) -> Transfer:
            moved = await upload(manifests)  # the chunks are in the bucket, not recorded
            written.update(closure(b.blobs, manifests))
            uploaded.set()
            await go_on.wait()
            return moved

        b.replication.upload = upload_then_wait  # type: ignore[method-assign]
        taking = asyncio.create_task(b.checkpoint(rid, "in flight"))
        await uploaded.wait()
        report = await asyncio.to_thread(a.bucket_gc, grace_seconds=0)
        assert report is not None and report.collected
        assert report.reason is not None and "in flight" in report.reason
        assert await asyncio.to_thread(lambda: all(in_bucket(a, n) for n in written))
        go_on.set()
        taken = await taking
        assert b.get_checkpoint(taken.checkpoint_id).replication == "replicated"

    run(scenario())
    assert any(name.startswith("chunks/") for name in written)
    report = a.bucket_gc(grace_seconds=0)  # committed now: referenced, so kept
    assert report is not None and report.reason is None
    assert all(in_bucket(a, name) for name in written)


def test_of_two_servers_collecting_at_once_exactly_one_collects(
    deployment: Deployment,
) -> None:
    a = deployment.server("a")
    b = deployment.server("b")
    _, head = run(paused_with_table(a, "nb.ipynb"))
    garbage = garbage_of_dropped_snapshot(a, head)
    started, go_on = threading.Event(), threading.Event()

    def slow_roots() -> set[str]:
        started.set()
        go_on.wait(timeout=120)
        return a.live_manifests()

    reports: list[Any] = []
    first = threading.Thread(
        target=lambda: reports.append(coordination(a).collect(slow_roots, grace_seconds=0))
    )
    first.start()
    try:
        assert started.wait(timeout=120)
        second = b.bucket_gc(grace_seconds=0)  # while a collects
    finally:
        go_on.set()
        first.join(timeout=120)
    assert second is not None and not second.collected
    assert second.deleted_chunks == second.deleted_manifests == 0
    assert second.reason is not None and "collects" in second.reason
    [report] = reports
    assert report.collected and report.deleted_chunks + report.deleted_manifests == len(garbage)
    again = b.bucket_gc(grace_seconds=0)  # a is done: b may collect now, and finds nothing
    assert again is not None and again.collected
    assert again.deleted_chunks == again.deleted_manifests == 0


def test_a_chunk_collected_and_needed_again_is_uploaded_again_and_resumes_elsewhere(
    deployment: Deployment,
) -> None:
    b = deployment.server("b")
    _, head = run(paused_with_table(b, "old.ipynb"))
    garbage = garbage_of_dropped_snapshot(b, head)
    table_chunks = {name for name in garbage if name.startswith("chunks/")}
    assert table_chunks
    a = deployment.server("a")
    report = a.bucket_gc(grace_seconds=0)  # another server collects the table's chunks
    assert report is not None and report.deleted_chunks >= len(table_chunks)
    assert not any(in_bucket(b, name) for name in table_chunks)

    rid, _ = run(paused_with_table(b, "new.ipynb"))  # the same table again, on b
    assert all(in_bucket(b, name) for name in table_chunks)  # uploaded again
    deployment.stop(b)
    c = deployment.server("c")  # a node that has never seen the table
    run(c.resume(rid))
    workspace = c.workspace_path(rid)
    assert workspace is not None
    assert (workspace / "data" / "table.csv").read_bytes() == TABLE
    assert ctx(c).namespace(rid) == {"x": 41}


def test_the_intent_of_a_server_that_died_does_not_block_collection(
    deployment: Deployment,
) -> None:
    a = deployment.server("a")
    _, head = run(paused_with_table(a, "nb.ipynb"))
    garbage = garbage_of_dropped_snapshot(a, head)
    b = deployment.server("b")
    coordination(b).open_intent()  # an upload in flight, never ended
    report = a.bucket_gc(grace_seconds=0)
    assert report is not None and report.reason is not None and "in flight" in report.reason
    assert all(in_bucket(a, name) for name in garbage)
    b.ownership.close()  # b is gone: its leases, the intent with them, run out
    report = a.bucket_gc(grace_seconds=0)
    assert report is not None and report.reason is None
    assert not any(in_bucket(a, name) for name in garbage)


def test_a_reused_manifest_whose_evicted_chunk_was_collected_stores_its_bytes_again(
    deployment: Deployment,
) -> None:
    """a's bounded cache evicts the chunks of a capture no checkpoint records (they are in
    the bucket); b's collection deletes them there; a capture of the same namespace on a
    (its chunk memo names the chunks, so the same manifest comes out) must store their
    bytes again, or its upload finds them nowhere."""
    a = deployment.server("a", cache_bytes=64 << 10)
    replica = a.replication.replica
    assert replica is not None
    kernel_blobs = BlobStore(a.blobs.root)  # what a kernel of a opens: no bucket
    namespace: dict[str, object] = {"blob": os.urandom(3 << 20)}
    with coordination(a).intent():
        first = capture_namespace(namespace, kernel_blobs, runtime_id="r-1")
        replica.upload([first.manifest_id])
    names = closure(a.blobs, [first.manifest_id])
    chunks = [name.removeprefix("chunks/") for name in names if name.startswith("chunks/")]
    in_files = [c for c in chunks if replica.storage.is_cached(c)]  # not inline ones
    replica.storage.cache._min_age_s = 0.0  # no grace for a just-used chunk, for the test
    replica.storage.cache.evict()
    evicted = [c for c in in_files if not replica.storage.is_cached(c)]
    assert len(evicted) >= 3  # the 1 MiB chunks are only in the bucket now

    report = deployment.server("b").bucket_gc(grace_seconds=0)
    assert report is not None and report.collected and report.reason is None
    assert not any(in_bucket(a, name) for name in names)

    with coordination(a).intent():  # the bucket's generation moved: a forgets
        again = capture_namespace(namespace, kernel_blobs, runtime_id="r-1")
        assert again.manifest_id == first.manifest_id
        assert all(replica.storage.is_cached(c) for c in evicted)  # stored again
        replica.upload([again.manifest_id])
    assert all(in_bucket(a, name) for name in names)  # and uploaded again
    c = deployment.server("c")  # a node that never saw them reads every chunk back
    fetched = c.replication.replica
    assert fetched is not None
    fetched.fetch([again.manifest_id])
    assert all(c.blobs.get_chunk(name) for name in chunks)


def test_an_unchanged_workspace_whose_evicted_chunks_were_collected_is_snapshot_anew(
    deployment: Deployment,
) -> None:
    """a's workspace snapshot that no checkpoint records (its capture never was) has its
    chunks evicted from a's bounded cache and collected from the bucket by b; the next
    checkpoint of the unchanged workspace must not reuse that snapshot, whose bytes are
    nowhere: it reads the files again, and the runtime resumes on another server."""
    a = deployment.server("a", cache_bytes=64 << 10)
    replica = a.replication.replica
    assert replica is not None
    data = os.urandom(3 << 20)

    async def unrecorded_snapshot() -> tuple[str, str]:
        runtime = await a.create_runtime("nb.ipynb", "ana")
        backend = a.backends.get(runtime.runtime_id)
        assert backend is not None
        await backend.write_bytes("data/blob.bin", data)
        with coordination(a).intent():
            ref = await backend.checkpoint()  # no checkpoint records this snapshot
            assert ref.provider_snapshot_id is not None
            replica.upload([ref.provider_snapshot_id])
        return runtime.runtime_id, ref.provider_snapshot_id

    rid, snapshot = run(unrecorded_snapshot())
    names = closure(a.blobs, [snapshot])
    chunks = [name.removeprefix("chunks/") for name in names if name.startswith("chunks/")]
    in_files = [c for c in chunks if replica.storage.is_cached(c)]
    replica.storage.cache._min_age_s = 0.0  # no grace for a just-used chunk, for the test
    replica.storage.cache.evict()
    assert len([c for c in in_files if not replica.storage.is_cached(c)]) >= 3

    report = deployment.server("b").bucket_gc(grace_seconds=0)
    assert report is not None and report.collected and report.reason is None
    assert not any(in_bucket(a, name) for name in names)

    run(a.pause(rid))  # replicated: returns once the bucket holds everything it needs
    deployment.stop(a)
    c = deployment.server("c")
    run(c.resume(rid))
    workspace = c.workspace_path(rid)
    assert workspace is not None
    assert (workspace / "data" / "blob.bin").read_bytes() == data


def evicted_after_upload(
    deployment: Deployment,
) -> tuple[RuntimeService, BlobStore, str, dict[str, object]]:
    """Server a (a 64 KiB cache, `local` durability), a kernel's blob store on it, a
    runtime, and its namespace, whose earlier capture was uploaded but never recorded
    and whose chunks a's cache has let go (at least 3 of them)."""
    a = deployment.server("a", cache_bytes=64 << 10, durability="local")
    replica = a.replication.replica
    assert replica is not None
    kernel_blobs = BlobStore(a.blobs.root)  # what a kernel of a opens: no bucket
    rid = run(a.create_runtime("nb.ipynb", "ana")).runtime_id
    namespace: dict[str, object] = {"blob": os.urandom(3 << 20)}
    with coordination(a).intent():  # an earlier capture, uploaded, never recorded
        first = capture_namespace(namespace, kernel_blobs, runtime_id=rid)
        replica.upload([first.manifest_id])
    in_files = [
        name.removeprefix("chunks/")
        for name in closure(a.blobs, [first.manifest_id])
        if name.startswith("chunks/") and replica.storage.is_cached(name.removeprefix("chunks/"))
    ]
    replica.storage.cache._min_age_s = 0.0  # no grace for a just-used chunk, for the test
    replica.storage.cache.evict()
    assert len([c for c in in_files if not replica.storage.is_cached(c)]) >= 3
    return a, kernel_blobs, rid, namespace


def test_a_kernels_own_capture_whose_evicted_chunks_were_collected_meanwhile_is_refused(
    deployment: Deployment,
) -> None:
    """A kernel captures itself before its server opens the checkpoint's write intent; its
    chunk memo names chunks a's cache evicted (the bucket held them), and b's collection
    deletes them from the bucket in between. With `local` durability the checkpoint would
    be recorded with those bytes nowhere: it is refused instead, and the kernel's next
    capture stores them again and is uploaded."""
    a, kernel_blobs, rid, namespace = evicted_after_upload(deployment)
    namespace["y"] = 1
    own = capture_namespace(namespace, kernel_blobs, runtime_id=rid)  # no intent yet
    report = deployment.server("b").bucket_gc(grace_seconds=0)
    assert report is not None and report.collected and report.deleted_chunks >= 3

    head = a.head_checkpoint(rid)
    with pytest.raises(CaptureLost, match="capture again"):
        run(a.checkpoint(rid, precaptured=own))
    assert a.head_checkpoint(rid) == head  # nothing recorded
    again = capture_namespace(namespace, kernel_blobs, runtime_id=rid)  # stores them again
    run(a.checkpoint(rid, precaptured=again))
    assert a.replication.drain(timeout=60)  # the upload behind the checkpoint
    assert all(in_bucket(a, name) for name in closure(a.blobs, [again.manifest_id]))


def test_a_kernel_whose_capture_is_refused_so_captures_again_by_itself(
    deployment: Deployment,
) -> None:
    """What `%checkpoint`, `%pause` and `%autocheckpoint` do with that refusal: the kernel
    forgets its chunk memo and captures again, whole, and that checkpoint is recorded; the
    user sees one checkpoint, not an error."""
    a, kernel_blobs, rid, namespace = evicted_after_upload(deployment)
    namespace["y"] = 1
    taken: list[bool] = []

    def take(whole: bool) -> ContextCapture:
        captured = capture_namespace(namespace, kernel_blobs, runtime_id=rid)
        if not taken:  # the collection runs between the first capture and its intent
            report = deployment.server("b").bucket_gc(grace_seconds=0)
            assert report is not None and report.deleted_chunks >= 3
        taken.append(whole)
        return captured

    captured, result = record_own_capture(
        take, lambda capture: run(a.checkpoint(rid, precaptured=capture))
    )
    assert taken == [False, True]
    head = a.head_checkpoint(rid)
    assert head is not None and head.checkpoint_id == result.checkpoint_id
    assert head.context_manifest_id == captured.manifest_id
    assert a.replication.drain(timeout=60)
    assert all(in_bucket(a, name) for name in closure(a.blobs, [captured.manifest_id]))
