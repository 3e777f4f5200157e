"""The checkpoint a restore keeps of the files it replaced reaches the bucket (a real Ceph
gateway), as every other checkpoint does.

A restore in place snapshots the workspace first and, when the snapshot holds files
neither the head nor the restored checkpoint holds (written since the head), keeps it in a
checkpoint named `before-restore`. That checkpoint is made by the one builder of every
checkpoint (`checkpointing.new_checkpoint`): its record says where its bytes are, it is
uploaded behind the restore, and another server of the deployment can check it out with
the files it kept.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

from ditto_jupyter.core.blobs.replica import manifest_key
from tests.fakes.fake_context_capture import ctx
from tests.support.deployment import Deployment

pytest_plugins = ["tests.support.ceph_fixtures"]
pytestmark = pytest.mark.s3

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def test_a_before_restore_checkpoints_blobs_reach_the_bucket(deployment: Deployment) -> None:
    a = deployment.server("a")
    rid = run(a.create_runtime("nb.ipynb", "ana")).runtime_id
    ctx(a).execute(rid, x=1)
    backend = a.backends.get(rid)
    assert backend is not None
    run(backend.write_bytes("kept.txt", b"in the checkpoint"))
    first = run(a.checkpoint(rid, "first"))
    run(backend.write_bytes("late.txt", b"written after the last checkpoint\n" * 2000))
    run(a.restore(rid, first.checkpoint_id))  # replaces late.txt: kept aside first

    kept = [c for c in a.store.list_checkpoints(rid) if c.name == "before-restore"]
    assert len(kept) == 1
    assert kept[0].replication == "local"  # recorded saying where its bytes are
    assert a.replication.drain(timeout=120)  # uploaded behind the restore
    record = a.get_checkpoint(kept[0].checkpoint_id)
    assert record.replication == "replicated"
    replica = a.replication.replica
    assert replica is not None
    manifests = a.parts.manifests_of(record)
    assert manifests and all(replica.bucket.exists(manifest_key(m)) for m in manifests)

    deployment.stop(a)  # its node goes; another server checks the kept files out
    b = deployment.server("b")
    child = run(b.checkout(record.checkpoint_id))
    workspace = b.workspace_path(child.runtime.runtime_id)
    assert workspace is not None
    assert (workspace / "late.txt").read_bytes() == b"written after the last checkpoint\n" * 2000
    assert (workspace / "kept.txt").read_bytes() == b"in the checkpoint"
