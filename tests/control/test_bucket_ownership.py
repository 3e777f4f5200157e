"""Two deployments whose configuration points at one bucket prefix (a real Ceph gateway).

A deployment is the servers that share one checkpoint store and one signing secret. Here
deployment one pauses a runtime (its bytes `replicated` to the prefix), and deployment
two, with its own store and its own secret but a copied configuration, starts on the same
prefix: it is refused at start, its collection deletes nothing, its uploads go nowhere,
and deployment one's runtime still resumes. A manifest in the prefix signed with another
key is never garbage to the collector, nor is anything it lists. And an object a
replicated checkpoint relies on that is gone from the bucket is named as missing, not as
"not replicated (yet)".
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ditto_jupyter.control.service import RuntimeService
from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.core.blobs.errors import ObjectMissing, PrefixOwnedElsewhere
from ditto_jupyter.core.blobs.prefix_owner import OWNER_OBJECT
from ditto_jupyter.core.blobs.replica import BucketReplica, manifest_key
from ditto_jupyter.core.blobs.replicated_chunks import chunk_key
from ditto_jupyter.core.errors import DittoError
from ditto_jupyter.core.models import SessionLifecycleStatus
from tests.fakes.fake_context_capture import ctx
from tests.support.ceph_gateway import CephGateway, S3Bucket
from tests.support.deployment import Deployment, deploy

pytest_plugins = ["tests.support.ceph_fixtures"]
pytestmark = pytest.mark.s3

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@pytest.fixture
def deployments(
    tmp_path: Path, ceph_gateway: CephGateway, s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Deployment, Deployment]]:
    """Two deployments (each its own SQLite store and secret) on one bucket prefix."""
    made = []
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        made.append(deploy(tmp_path / name, ceph_gateway, s3_bucket, monkeypatch))
    one, two = (next(generator) for generator in made)
    yield one, two
    for generator in reversed(made):
        next(generator, None)


def replica_of(service: RuntimeService) -> BucketReplica:
    found = service.replication.replica
    assert found is not None
    return found


def objects(service: RuntimeService) -> set[str]:
    """Every object of the prefix (chunks and manifests)."""
    bucket = replica_of(service).bucket
    return {*bucket.listing("chunks/"), *bucket.listing("manifests/")}


def paused_runtime(service: RuntimeService) -> str:
    """A runtime with variables and a file in its workspace, paused (in the bucket)."""
    rid = run(service.create_runtime("nb.ipynb", "ana")).runtime_id
    ctx(service).execute(rid, x=41, noise=os.urandom(200_000).hex())
    backend = service.backends.get(rid)
    assert backend is not None
    run(backend.write_bytes("data/table.csv", b"a,b\n" * 50_000))
    run(service.pause(rid))
    return rid


def test_a_second_deployment_on_the_same_prefix_is_refused_and_the_first_resumes(
    deployments: tuple[Deployment, Deployment],
) -> None:
    one, two = deployments
    a = one.server("a")
    rid = paused_runtime(a)
    before = objects(a)
    assert len(before) >= 3  # chunks and manifests of the variables and the files
    one.stop(a)

    b = two.server("b")  # its own store and secret, the same prefix
    with pytest.raises(PrefixOwnedElsewhere) as refused:
        b.replication.check_at_start()
    line = str(refused.value)
    assert line.startswith("blob_store_url: the prefix ")
    assert "belongs to the deployment whose signing key is" in line
    assert "\n" not in line
    with pytest.raises(PrefixOwnedElsewhere):
        b.bucket_gc(grace_seconds=0)
    own = run(b.create_runtime("theirs.ipynb", "bob")).runtime_id
    ctx(b).execute(own, y=1)
    with pytest.raises(PrefixOwnedElsewhere):  # a pause must reach the bucket first
        run(b.pause(own))
    assert run(b.get_runtime(own)).status is SessionLifecycleStatus.IDLE  # it runs on
    assert objects(b) == before  # nothing deleted, nothing added

    c = one.server("c")  # deployment one, on a new node with an empty cache
    c.replication.check_at_start()
    resumed = run(c.resume(rid))
    assert resumed.runtime.status is SessionLifecycleStatus.IDLE
    assert ctx(c).namespace(rid)["x"] == 41
    workspace = c.workspace_path(rid)
    assert workspace is not None
    assert (workspace / "data" / "table.csv").read_bytes() == b"a,b\n" * 50_000


def test_a_manifest_signed_with_another_key_is_never_collected_nor_what_it_lists(
    deployment: Deployment, tmp_path: Path
) -> None:
    a = deployment.server("a")
    rid = paused_runtime(a)
    bucket = replica_of(a).bucket
    foreign = BlobStore(tmp_path / "foreign-store")  # a key of its own
    big = foreign.put_bytes(os.urandom(300_000))
    small, _ = foreign.put_chunk(b"a small chunk of another deployment")
    child, _ = foreign.put_manifest({"kind": "child", "chunks": [small]})
    top, _ = foreign.put_manifest({"kind": "top", "chunks": big.chunks, "manifests": [child]})
    theirs = {manifest_key(top), manifest_key(child)}
    theirs |= {chunk_key(c) for c in [*big.chunks, small]}
    for manifest_id in (top, child):
        bucket.put_new(manifest_key(manifest_id), foreign.manifest_document(manifest_id))
    for chunk in [*big.chunks, small]:
        bucket.put_new(chunk_key(chunk), foreign.stored_chunk(chunk))
    run(a.resume(rid))
    head = a.store.get_head(rid)
    assert head is not None
    ours = objects(a) - theirs
    run(a.delete_snapshot(head))  # garbage of this deployment's own
    assert a.collector.wait_idle(timeout=120)

    report = a.bucket_gc(grace_seconds=0)
    assert report is not None and report.collected
    assert report.deleted_chunks + report.deleted_manifests > 0  # its own garbage went
    assert report.kept_foreign == 2  # both manifests are signed with the other key
    left = objects(a)
    assert theirs <= left
    assert left - theirs < ours


def test_a_manifest_of_a_replicated_checkpoint_gone_from_the_bucket_is_named_missing(
    deployment: Deployment,
) -> None:
    a = deployment.server("a")
    rid = paused_runtime(a)
    head = a.store.get_head(rid)
    assert head is not None
    variables = a.get_checkpoint(head).context_manifest_id
    assert variables is not None
    deployment.stop(a)
    b = deployment.server("b")
    bucket = replica_of(b).bucket
    document = bucket.get(manifest_key(variables))
    bucket.delete(manifest_key(variables))  # as another deployment's collector did
    with pytest.raises(ObjectMissing) as missing:
        run(b.resume(rid))
    message = str(missing.value)
    assert f"manifest {variables} is missing from the object store" in message
    assert deployment.bucket.name in message and "not replicated" not in message
    assert isinstance(missing.value, DittoError) and missing.value.http_status == 502
    assert run(b.get_runtime(rid)).status is SessionLifecycleStatus.PAUSED
    bucket.put_new(manifest_key(variables), document)
    run(b.resume(rid))
    assert ctx(b).namespace(rid)["x"] == 41


def test_a_chunk_a_bucket_manifest_lists_gone_from_the_bucket_is_named_missing(
    deployment: Deployment,
) -> None:
    a = deployment.server("a")
    rid = paused_runtime(a)
    head = a.store.get_head(rid)
    assert head is not None
    variables = a.get_checkpoint(head).context_manifest_id
    assert variables is not None
    victim = a.blobs.get_manifest(variables)["chunks"][0]
    deployment.stop(a)
    b = deployment.server("b")
    bucket = replica_of(b).bucket
    stored = bucket.get(chunk_key(victim))
    bucket.delete(chunk_key(victim))
    with pytest.raises(ObjectMissing) as missing:
        run(b.resume(rid))
    message = str(missing.value)
    assert f"chunk {victim}, which manifest {variables} lists, is missing" in message
    assert run(b.get_runtime(rid)).status is SessionLifecycleStatus.PAUSED
    bucket.put_new(chunk_key(victim), stored)
    run(b.resume(rid))
    assert ctx(b).namespace(rid)["x"] == 41


def test_the_owner_object_is_never_collected(deployment: Deployment) -> None:
    a = deployment.server("a")
    paused_runtime(a)
    bucket = replica_of(a).bucket
    assert bucket.exists(OWNER_OBJECT)
    report = a.bucket_gc(grace_seconds=0)
    assert report is not None and report.collected
    assert bucket.exists(OWNER_OBJECT)
