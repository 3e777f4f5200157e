"""A resume that reads a manifest the deployment must refuse (a real Ceph gateway).

Server a pauses a runtime; server b, of the same deployment, resumes it from the bucket.
When the bucket's copy of the variables' manifest was tampered with, is another manifest
put under its id, or is signed with another deployment's secret, the resume is refused
with one sentence naming the manifest and the bucket, as a 502 (`BackendError`), not a
bug's 500: nothing of it is loaded, nothing of the fetch is recorded, the runtime stays
paused, and once the bucket holds the good copy again it resumes.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ditto_jupyter.control.service import RuntimeService
from ditto_jupyter.core.blobs import BlobStore, ManifestSignatureError, codec
from ditto_jupyter.core.blobs.errors import ManifestRefused
from ditto_jupyter.core.blobs.replica import manifest_key
from ditto_jupyter.core.blobs.replicated_chunks import chunk_key
from ditto_jupyter.core.errors import BackendError
from ditto_jupyter.core.models import SessionLifecycleStatus
from tests.fakes.fake_context_capture import ctx
from tests.support.deployment import Deployment

pytest_plugins = ["tests.support.ceph_fixtures"]
pytestmark = pytest.mark.s3

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def paused_on_a(deployment: Deployment) -> tuple[str, str, RuntimeService]:
    """A runtime paused on server a, which then stops: its id, its variables' manifest,
    and server b (an empty data directory)."""
    a = deployment.server("a")
    rid = run(a.create_runtime("nb.ipynb", "ana")).runtime_id
    ctx(a).execute(rid, x=41, noise=os.urandom(200_000).hex())
    paused = run(a.pause(rid))
    variables = a.get_checkpoint(paused.checkpoint_id).context_manifest_id
    assert variables is not None
    deployment.stop(a)
    return rid, variables, deployment.server("b")


def refused_copy(how: str, good: bytes, manifest_id: str, b: RuntimeService, tmp: Path) -> bytes:
    """What the bucket holds instead of the good manifest document."""
    if how == "tampered":  # a byte of its body changed, its signature left
        return good.replace(b'"kind"', b'"kinD"', 1)
    if how == "swapped":  # another manifest of the deployment, under this one's id
        other, _ = b.blobs.put_manifest({"kind": "another manifest"})
        return b.blobs.manifest_document(other)
    foreign = BlobStore(tmp / "another-deployment")  # the same body, another key
    body = b.blobs.verified_body(manifest_id, good)
    replica = b.replication.replica
    assert replica is not None
    for chunk in body["chunks"]:  # its store must hold what it lists to sign it
        foreign.put_chunk(codec.decode(chunk, replica.bucket.get(chunk_key(chunk))))
    signed, _ = foreign.put_manifest(body)
    assert signed == manifest_id  # an id names the body, whatever key signed it
    return foreign.manifest_document(signed)


@pytest.mark.parametrize(
    ("how", "says"),
    [
        ("tampered", "fails its signature check"),
        ("swapped", "does not match its id"),
        ("signed-elsewhere", "fails its signature check"),
    ],
)
def test_a_resume_reading_a_refused_manifest_answers_502_naming_it(
    deployment: Deployment, tmp_path: Path, how: str, says: str
) -> None:
    rid, variables, b = paused_on_a(deployment)
    replica = b.replication.replica
    assert replica is not None
    good = replica.bucket.get(manifest_key(variables))
    replica.bucket.delete(manifest_key(variables))
    replica.bucket.put_new(manifest_key(variables), refused_copy(how, good, variables, b, tmp_path))

    with pytest.raises(ManifestRefused) as refused:
        run(b.resume(rid))
    error = refused.value
    assert isinstance(error, BackendError) and error.http_status == 502
    assert isinstance(error, ManifestSignatureError)  # what a damaged manifest always was
    message = str(error)
    assert f"manifest {variables}" in message and says in message
    assert deployment.bucket.name in message and "nothing of it was loaded" in message
    assert "\n" not in message
    assert run(b.get_runtime(rid)).status is SessionLifecycleStatus.PAUSED
    assert not b.blobs.has_manifest(variables)
    assert not list((b.blobs.root / "tmp").iterdir())  # nothing of the fetch is kept

    replica.bucket.delete(manifest_key(variables))
    replica.bucket.put_new(manifest_key(variables), good)
    run(b.resume(rid))
    assert ctx(b).namespace(rid)["x"] == 41
