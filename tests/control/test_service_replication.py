"""RuntimeService with its blob store replicated to a real S3 server (Ceph's gateway).

Two services on two data directories, sharing one checkpoint store (a SQLite file) and one
bucket, stand for two servers of a deployment. A checkpoint is `local` until its blobs are
in the bucket; with `replicated` durability, and for every pause, they are there before the
record is written; a pause on one server resumes on the other; and a gateway that is
stopped or refuses the credentials fails a pause with one sentence naming it, leaving the
runtime running and nothing recorded. A resume on the other server fetches the variables
while the context restores them; when that fails (a chunk that fails its check, a
manifest the bucket lacks, a gateway that stops mid-fetch), the runtime stays paused and
nothing of the fetch is recorded.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

from ditto_jupyter.control.service import RuntimeService
from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.core.blobs.errors import NotReplicated, ObjectMissing, ObjectStoreUnavailable
from ditto_jupyter.core.blobs.index import SMALL_OBJECT_LIMIT
from ditto_jupyter.core.blobs.replica import BucketReplica, manifest_key
from ditto_jupyter.core.blobs.replica_ledger import ObjectKind
from ditto_jupyter.core.blobs.replicated_chunks import chunk_key
from ditto_jupyter.core.errors import StoreUnavailable
from ditto_jupyter.core.models import SessionLifecycleStatus
from tests.fakes.fake_context_capture import ctx
from tests.support.ceph_gateway import fetched_bytes
from tests.support.deployment import Deployment

pytest_plugins = ["tests.support.ceph_fixtures"]
pytestmark = pytest.mark.s3

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


async def fill(service: RuntimeService, runtime_id: str) -> None:
    """A cell's worth of variables, and a file in the workspace."""
    ctx(service).execute(runtime_id, x=41, rows=list(range(1000)))
    backend = service.backends.get(runtime_id)
    assert backend is not None
    await backend.write_bytes("data/table.csv", b"a,b\n" * 50_000)


def in_bucket(deployment: Deployment, service: RuntimeService, checkpoint_id: str) -> bool:
    checkpoint = service.get_checkpoint(checkpoint_id)
    replica = service.replication.replica
    assert replica is not None
    return all(
        replica.bucket.exists(manifest_key(m)) for m in service.parts.manifests_of(checkpoint)
    )


def test_a_checkpoint_is_local_until_its_blobs_are_uploaded_behind_it(
    deployment: Deployment,
) -> None:
    a = deployment.server("a")
    runtime = run(a.create_runtime("nb.ipynb", "ana"))
    run(fill(a, runtime.runtime_id))
    with deployment.gateway.stopped():  # the upload behind it cannot happen yet
        taken = run(a.checkpoint(runtime.runtime_id, "first"))
        record = a.get_checkpoint(taken.checkpoint_id)
        assert record.replication == "local"
        listed = run(a.list_checkpoints(runtime.runtime_id)).checkpoints
        assert [c.replication for c in listed] == ["local"]
    assert a.replication.drain(timeout=60)
    listed = run(a.list_checkpoints(runtime.runtime_id)).checkpoints
    assert [c.replication for c in listed] == ["replicated"]
    assert in_bucket(deployment, a, taken.checkpoint_id)
    b = deployment.server("b")  # another server reads it off the shared record
    assert b.get_checkpoint(taken.checkpoint_id).replication == "replicated"
    assert [c.replication for c in run(b.list_checkpoints(runtime.runtime_id)).checkpoints] == [
        "replicated"
    ]


def test_uploads_cut_short_are_taken_up_when_the_server_starts_again(
    deployment: Deployment,
) -> None:
    a = deployment.server("a")
    runtime = run(a.create_runtime("nb.ipynb", "ana"))
    run(fill(a, runtime.runtime_id))
    with deployment.gateway.stopped():
        taken = run(a.checkpoint(runtime.runtime_id))
        a.replication.close(timeout=0.5)  # stops with the upload still queued
        deployment.servers.remove(a)
        a.store.close()
    again = deployment.server("a")
    assert again.replication.drain(timeout=60)
    assert again.get_checkpoint(taken.checkpoint_id).replication == "replicated"
    assert in_bucket(deployment, again, taken.checkpoint_id)


def test_replicated_durability_puts_the_blobs_in_the_bucket_before_the_record(
    deployment: Deployment,
) -> None:
    a = deployment.server("a", durability="replicated")
    runtime = run(a.create_runtime("nb.ipynb", "ana"))
    run(fill(a, runtime.runtime_id))
    taken = run(a.checkpoint(runtime.runtime_id))
    assert a.get_checkpoint(taken.checkpoint_id).replication == "replicated"
    assert in_bucket(deployment, a, taken.checkpoint_id)
    ctx(a).execute(runtime.runtime_id, x=42)
    with deployment.gateway.stopped(), pytest.raises(StoreUnavailable, match="cannot be reached"):
        run(a.checkpoint(runtime.runtime_id, "refused"))
    names = [c.name for c in run(a.list_checkpoints(runtime.runtime_id)).checkpoints]
    assert names == [None]  # the refused checkpoint was not recorded
    assert a.store.get_head(runtime.runtime_id) == taken.checkpoint_id


def test_a_pause_on_one_server_resumes_on_another_and_on_its_own_from_the_cache(
    deployment: Deployment,
) -> None:
    a = deployment.server("a")
    runtime = run(a.create_runtime("nb.ipynb", "ana"))
    rid = runtime.runtime_id
    run(fill(a, rid))
    paused = run(a.pause(rid))
    assert a.get_checkpoint(paused.checkpoint_id).replication == "replicated"
    assert in_bucket(deployment, a, paused.checkpoint_id)  # before pause returned
    deployment.stop(a)  # the node goes away

    b = deployment.server("b")
    before = deployment.gateway.counters()
    resumed = run(b.resume(rid))
    assert resumed.runtime.status is SessionLifecycleStatus.IDLE
    assert ctx(b).namespace(rid) == {"x": 41, "rows": list(range(1000))}
    workspace = b.workspace_path(rid)
    assert workspace is not None
    assert (workspace / "data" / "table.csv").read_bytes() == b"a,b\n" * 50_000
    assert fetched_bytes(before, deployment.gateway.counters()) > 0

    ctx(b).execute(rid, x=43)
    again = run(b.pause(rid))
    before = deployment.gateway.counters()
    run(b.resume(rid))  # the same server: everything is in its cache
    after = deployment.gateway.counters()
    assert ctx(b).namespace(rid)["x"] == 43
    assert after["get"] == before["get"]
    assert fetched_bytes(before, after) == 0
    assert again.checkpoint_id == b.store.get_head(rid)


def test_a_pause_the_object_store_refuses_leaves_the_runtime_running(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = deployment.server("a")
    runtime = run(a.create_runtime("nb.ipynb", "ana"))
    rid = runtime.runtime_id
    run(fill(a, rid))
    with deployment.gateway.stopped(), pytest.raises(ObjectStoreUnavailable) as stopped:
        run(a.pause(rid))
    assert "cannot be reached" in str(stopped.value)
    assert a.store.get_session(rid) is not None
    assert run(a.get_runtime(rid)).status is SessionLifecycleStatus.IDLE
    assert a.store.get_head(rid) is None  # no pause checkpoint was recorded
    assert ctx(a).namespace(rid)["x"] == 41  # the kernel runs on

    wrong = secrets.token_hex(20)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", wrong)
    refused_server = deployment.server("a-wrong-key")
    other = run(refused_server.create_runtime("nb2.ipynb", "ana"))
    with pytest.raises(ObjectStoreUnavailable) as refused:
        run(refused_server.pause(other.runtime_id))
    assert "refused the credentials" in str(refused.value) and wrong not in str(refused.value)
    assert run(refused_server.get_runtime(other.runtime_id)).status is SessionLifecycleStatus.IDLE

    paused = run(a.pause(rid))  # the gateway is back, with the right key
    assert in_bucket(deployment, a, paused.checkpoint_id)


def test_a_checkpoint_still_local_on_its_server_is_not_checked_out_elsewhere(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = deployment.server("a")
    runtime = run(a.create_runtime("nb.ipynb", "ana"))
    run(fill(a, runtime.runtime_id))
    replica = a.replication.replica
    assert replica is not None
    with monkeypatch.context() as held:  # queued, and not uploaded until the test says so
        held.setattr(a.replication, "upload_soon", replica.ledger.enqueue)
        taken = run(a.checkpoint(runtime.runtime_id))
    b = deployment.server("b")
    with pytest.raises(NotReplicated, match="not replicated it"):
        run(b.checkout(taken.checkpoint_id))
    assert [s.session_id for s in b.sessions()] == [runtime.runtime_id]  # nothing was made
    a.replication.start()  # takes the queue up, as after a restart
    assert a.replication.drain(timeout=60)
    child = run(b.checkout(taken.checkpoint_id))
    assert ctx(b).namespace(child.runtime.runtime_id)["x"] == 41


# ---- a resume elsewhere that fails while the variables are fetched ---------------------


def paused_elsewhere(deployment: Deployment) -> tuple[str, str, RuntimeService, BucketReplica]:
    """A runtime filled (with a big variable: chunks of their own) and paused on server a,
    which then stops; its id, the variables' manifest, server b and b's replica."""
    a = deployment.server("a")
    rid = run(a.create_runtime("nb.ipynb", "ana")).runtime_id
    run(fill(a, rid))
    ctx(a).execute(rid, noise=os.urandom(400_000).hex())  # does not compress below 64 KiB
    paused = run(a.pause(rid))
    variables = a.get_checkpoint(paused.checkpoint_id).context_manifest_id
    assert variables is not None
    deployment.stop(a)
    b = deployment.server("b")
    replica = b.replication.replica
    assert replica is not None
    return rid, variables, b, replica


def listed_chunks(replica: BucketReplica, manifest_id: str) -> list[str]:
    """The chunks a manifest in the bucket lists (read from the bucket, verified)."""
    document = replica.bucket.get(manifest_key(manifest_id))
    return list(replica.store.verified_body(manifest_id, document)["chunks"])


def holds_none_of(store: BlobStore, replica: BucketReplica, manifest_id: str) -> bool:
    """Whether nothing of a manifest's fetch is on the server: not the manifest, not a row
    or a file of a chunk it lists, nothing staged, nothing in the ledger."""
    chunks = listed_chunks(replica, manifest_id)
    return (
        not store.has_manifest(manifest_id)
        and not any(store.has_chunk(c) or os.path.exists(store.chunk_file(c)) for c in chunks)
        and not list((store.root / "tmp").iterdir())
        and not replica.ledger.known(ObjectKind.MANIFEST, [manifest_id])
        and not replica.ledger.known(ObjectKind.CHUNK, chunks)
    )


def test_a_chunk_failing_its_check_in_a_resume_elsewhere_records_nothing_of_the_fetch(
    deployment: Deployment,
) -> None:
    rid, variables, b, replica = paused_elsewhere(deployment)
    victim = next(
        c
        for c in listed_chunks(replica, variables)
        if len(replica.bucket.get(chunk_key(c))) >= SMALL_OBJECT_LIMIT  # checked at its read
    )
    good = replica.bucket.get(chunk_key(victim))
    replica.bucket.delete(chunk_key(victim))
    replica.bucket.put_new(chunk_key(victim), b"R" + os.urandom(len(good) - 1))
    with pytest.raises(Exception, match="does not match its content hash"):
        run(b.resume(rid))
    assert run(b.get_runtime(rid)).status is SessionLifecycleStatus.PAUSED
    assert holds_none_of(b.blobs, replica, variables)
    replica.bucket.delete(chunk_key(victim))
    replica.bucket.put_new(chunk_key(victim), good)  # the bucket has its good copy again
    run(b.resume(rid))
    assert ctx(b).namespace(rid)["x"] == 41


def test_a_resume_elsewhere_whose_variables_went_from_the_bucket_records_nothing(
    deployment: Deployment,
) -> None:
    rid, variables, b, replica = paused_elsewhere(deployment)
    document = replica.bucket.get(manifest_key(variables))
    replica.bucket.delete(manifest_key(variables))  # a pause is replicated: it was there
    with pytest.raises(ObjectMissing, match="is missing from the object store"):
        run(b.resume(rid))
    assert run(b.get_runtime(rid)).status is SessionLifecycleStatus.PAUSED
    assert not b.blobs.has_manifest(variables)
    assert not list((b.blobs.root / "tmp").iterdir())
    replica.bucket.put_new(manifest_key(variables), document)
    run(b.resume(rid))
    assert ctx(b).namespace(rid)["x"] == 41


def test_a_gateway_that_stops_mid_resume_is_named_and_the_runtime_stays_paused(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    rid, variables, b, replica = paused_elsewhere(deployment)
    held = listed_chunks(replica, variables)[0]
    reached, go = threading.Event(), threading.Event()
    get = replica.bucket.get

    def get_held_back(name: str) -> bytes:
        if name == chunk_key(held):  # the gateway goes away before this chunk comes
            reached.set()
            go.wait()
        return get(name)

    def stop_the_gateway_when_reached() -> None:
        reached.wait()
        deployment.gateway.stop_gateway()
        go.set()

    monkeypatch.setattr(replica.bucket, "get", get_held_back)
    stopper = threading.Thread(target=stop_the_gateway_when_reached, daemon=True)
    stopper.start()
    try:
        with pytest.raises(ObjectStoreUnavailable, match="cannot be reached"):
            run(b.resume(rid))
    finally:
        stopper.join()
        deployment.gateway.start_gateway()
    assert run(b.get_runtime(rid)).status is SessionLifecycleStatus.PAUSED
    assert holds_none_of(b.blobs, replica, variables)
    run(b.resume(rid))
    assert ctx(b).namespace(rid)["x"] == 41
