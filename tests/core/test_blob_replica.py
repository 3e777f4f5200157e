"""The blob store's replica in a real S3 server (Ceph's RADOS Gateway, tests/support).

Two data directories sharing one bucket and one signing secret stand for two servers:
what one uploads, the other fetches, verifies and restores byte for byte; a fetch on the
server that wrote the chunks reads nothing from the network; the cache evicts only what is
in the bucket, and a read of an evicted chunk goes through to it; and every failure of the
object store is one sentence naming what failed, with nothing recorded as kept.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
from pathlib import Path

import pytest

from ditto_jupyter.core.blobs import (
    BlobIntegrityError,
    BlobNotFound,
    BlobStore,
    ManifestSignatureError,
)
from ditto_jupyter.core.blobs.arrivals import ArrivalLog, FetchFailed
from ditto_jupyter.core.blobs.errors import (
    BlobError,
    ObjectStoreUnavailable,
    PrefixOwnedElsewhere,
)
from ditto_jupyter.core.blobs.object_store import ObjectStoreLocation
from ditto_jupyter.core.blobs.replica import BucketReplica, manifest_key
from ditto_jupyter.core.blobs.replica_ledger import ObjectKind
from ditto_jupyter.core.blobs.replicated_chunks import ReplicatedChunks, chunk_key
from ditto_jupyter.core.blobs.replicated_store import open_replicated_store
from tests.support.arrival_readers import Reading
from tests.support.ceph_gateway import CephGateway, S3Bucket, fetched_bytes

pytest_plugins = ["tests.support.ceph_fixtures"]
pytestmark = pytest.mark.s3

MIB = 1 << 20


@pytest.fixture
def secret() -> bytes:
    """The deployment's shared signing secret."""
    return secrets.token_bytes(32)


@pytest.fixture(autouse=True)
def credentials(s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    """The gateway user's keys for the standard AWS chain (environment variables)."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in s3_bucket.credentials_env().items():
        monkeypatch.setenv(name, value)


def location(bucket: S3Bucket, prefix: str = "deployment") -> ObjectStoreLocation:
    return ObjectStoreLocation.parse(f"{bucket.url}/{prefix}", endpoint_url=bucket.endpoint)


def replica(
    root: Path, bucket: S3Bucket, secret: bytes, *, cache_bytes: int | None = None
) -> BucketReplica:
    return open_replicated_store(
        root, location(bucket), secret=secret, cache_bytes=cache_bytes, durable=False
    )


def state(store: BlobStore, size: int = 3 * MIB, seed: int = 1) -> tuple[str, bytes]:
    """A manifest holding `size` random bytes (big chunks) and a small inline chunk, with
    a child manifest; its id and the bytes."""
    data = os.urandom(size) if seed else b""
    stored = store.put_bytes(data)
    small, _ = store.put_chunk(b"small chunk %d" % seed)
    child, _ = store.put_manifest({"kind": "child", "chunks": [small]})
    manifest_id, _ = store.put_manifest(
        {"kind": "test", "chunks": stored.chunks, "manifests": [child], "size": size}
    )
    return manifest_id, data


def body_bytes(store: BlobStore, manifest_id: str) -> bytes:
    return store.get_bytes(store.get_manifest(manifest_id)["chunks"])


def contents(store: BlobStore) -> tuple[list[tuple[str, int]], list[str], list[str], list[str]]:
    """What a store holds: its catalogue's chunks and manifests, its chunk files, and what
    is left in its staging folder."""
    files = sorted(p.name for p in (store.root / "chunks").rglob("*") if p.is_file())
    staging = sorted(p.name for p in (store.root / "tmp").iterdir())
    return sorted(store.iter_chunks()), sorted(store.iter_manifests()), files, staging


# ---- round trips ----------------------------------------------------------------------


def test_what_one_server_uploads_another_fetches_and_restores_exactly(
    tmp_path: Path, s3_bucket: S3Bucket, secret: bytes
) -> None:
    a = replica(tmp_path / "a", s3_bucket, secret)
    manifest_id, data = state(a.store)
    sent = a.upload([manifest_id])
    assert sent.chunks == 4 and sent.manifests == 2  # 3 big chunks + 1 small; 2 manifests
    assert a.replicated([manifest_id])

    b = replica(tmp_path / "b", s3_bucket, secret)
    assert not b.store.has_manifest(manifest_id)
    got = b.fetch([manifest_id])
    assert (got.chunks, got.manifests) == (4, 2)
    assert body_bytes(b.store, manifest_id) == data
    child = b.store.get_manifest(manifest_id)["manifests"][0]
    assert b.store.get_manifest(child)["kind"] == "child"
    assert b.replicated([manifest_id])  # what was fetched is known to be in the bucket
    again = b.fetch([manifest_id])
    assert (again.chunks, again.manifests) == (0, 0)


def test_a_fetch_on_the_server_that_wrote_the_chunks_reads_nothing_from_the_network(
    tmp_path: Path, ceph_gateway: CephGateway, s3_bucket: S3Bucket, secret: bytes
) -> None:
    a = replica(tmp_path / "a", s3_bucket, secret)
    manifest_id, data = state(a.store, size=4 * MIB)
    a.upload([manifest_id])
    before = ceph_gateway.counters()
    got = a.fetch([manifest_id])
    assert body_bytes(a.store, manifest_id) == data
    after = ceph_gateway.counters()
    assert (got.chunks, got.manifests) == (0, 0)
    assert after["get"] == before["get"]
    assert fetched_bytes(before, after) == 0


def test_uploads_are_create_only_so_repeats_and_races_are_harmless(
    tmp_path: Path, s3_bucket: S3Bucket, secret: bytes
) -> None:
    a = replica(tmp_path / "a", s3_bucket, secret)
    b = replica(tmp_path / "b", s3_bucket, secret)
    first, _ = state(a.store, seed=7)
    second, _ = state(b.store, seed=7)  # random bytes differ; the small chunk is shared
    results: list[object] = []

    def upload(r: BucketReplica, m: str) -> None:
        results.append(r.upload([m]))

    threads = [
        threading.Thread(target=upload, args=(a, first)),
        threading.Thread(target=upload, args=(b, second)),
        threading.Thread(target=upload, args=(a, first)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 3
    c = replica(tmp_path / "c", s3_bucket, secret)
    c.fetch([first, second])
    assert body_bytes(c.store, first) == body_bytes(a.store, first)
    assert body_bytes(c.store, second) == body_bytes(b.store, second)
    assert a.upload([first]).chunks == 0  # known there: nothing is put again


def test_a_second_put_of_a_name_keeps_the_first_object(
    tmp_path: Path, s3_bucket: S3Bucket, secret: bytes
) -> None:
    bucket = replica(tmp_path / "a", s3_bucket, secret).bucket
    assert bucket.put_new("chunks/same-name", b"first") is True
    assert bucket.put_new("chunks/same-name", b"second") is False
    assert bucket.get("chunks/same-name") == b"first"


# ---- the cache ------------------------------------------------------------------------


def test_the_cache_evicts_only_replicated_chunks_and_reads_evicted_ones_through(
    tmp_path: Path, ceph_gateway: CephGateway, s3_bucket: S3Bucket, secret: bytes
) -> None:
    a = replica(tmp_path / "a", s3_bucket, secret, cache_bytes=2 * MIB)
    storage = a.storage
    storage.cache._min_age_s = 0.0  # no grace for a just-used chunk, for the test
    manifest_id, data = state(a.store, size=4 * MIB)
    big = [c for c in a.store.get_manifest(manifest_id)["chunks"]]
    assert all(storage.is_cached(c) for c in big)  # not replicated: the only copy stays
    a.upload([manifest_id])
    assert storage.cache.total_bytes <= 2 * MIB + 64
    evicted = [c for c in big if not storage.is_cached(c)]
    assert len(evicted) >= 2
    assert a.store.has_chunk(evicted[0])  # still stored: in the bucket
    before = ceph_gateway.counters()
    assert body_bytes(a.store, manifest_id) == data  # read through the bucket
    assert ceph_gateway.counters()["get"] - before["get"] >= len(evicted)
    got = a.fetch([manifest_id])  # a restore makes the closure local
    assert all(storage.is_cached(c) for c in big) or got.chunks > 0


def test_a_kernel_store_on_the_root_counts_evicted_replicated_chunks_as_stored(
    tmp_path: Path, s3_bucket: S3Bucket, secret: bytes
) -> None:
    a = replica(tmp_path / "a", s3_bucket, secret, cache_bytes=0)
    a.storage.cache._min_age_s = 0.0
    manifest_id, _ = state(a.store, size=2 * MIB)
    a.upload([manifest_id])
    chunks = a.store.get_manifest(manifest_id)["chunks"]
    assert not any(a.storage.is_cached(c) for c in chunks)
    kernel = BlobStore(tmp_path / "a", durable=False)  # what a kernel opens: no bucket
    assert isinstance(kernel.storage, ReplicatedChunks) and kernel.storage.bucket is None
    assert all(kernel.has_chunk(c) for c in chunks)
    reused, _ = kernel.put_manifest({"kind": "test", "chunks": chunks, "size": 1})
    assert kernel.has_manifest(reused)
    with pytest.raises(BlobNotFound, match="only in the object store"):
        kernel.get_chunk(chunks[0])


# ---- what is refused ------------------------------------------------------------------


def test_a_manifest_not_signed_with_the_shared_secret_is_refused(
    tmp_path: Path, s3_bucket: S3Bucket, secret: bytes
) -> None:
    a = replica(tmp_path / "a", s3_bucket, secret)
    manifest_id, _ = state(a.store)
    a.upload([manifest_id])
    other = BlobStore(tmp_path / "other")  # another key, writing into the prefix
    body = a.store.get_manifest(manifest_id)
    for chunk in body["chunks"]:
        other.put_chunk(a.store.get_chunk(chunk))
    for child in body["manifests"]:
        other.put_chunk(a.store.get_chunk(a.store.get_manifest(child)["chunks"][0]))
        other.put_manifest(a.store.get_manifest(child))
    signed, _ = other.put_manifest(body)
    assert signed == manifest_id
    a.bucket.delete(manifest_key(manifest_id))
    a.bucket.put_new(manifest_key(manifest_id), other.manifest_document(manifest_id))
    b = replica(tmp_path / "b", s3_bucket, secret)
    with pytest.raises(ManifestSignatureError, match="nothing of it was loaded"):
        b.fetch([manifest_id])
    assert not b.store.has_manifest(manifest_id)
    assert b.store.stored_bytes() == 0


def test_a_replica_with_another_secret_is_refused_the_prefix(
    tmp_path: Path, s3_bucket: S3Bucket, secret: bytes
) -> None:
    a = replica(tmp_path / "a", s3_bucket, secret)
    manifest_id, _ = state(a.store)
    a.upload([manifest_id])
    other = replica(tmp_path / "other", s3_bucket, secrets.token_bytes(32))
    mine, _ = state(other.store, seed=2)
    for refused in (lambda: other.fetch([manifest_id]), lambda: other.upload([mine])):
        with pytest.raises(PrefixOwnedElsewhere, match="belongs to the deployment"):
            refused()
    assert not other.store.has_manifest(manifest_id)
    assert not other.bucket.exists(manifest_key(mine))


def test_a_small_chunk_changed_in_the_bucket_is_refused_and_nothing_is_recorded(
    tmp_path: Path, s3_bucket: S3Bucket, secret: bytes
) -> None:
    a = replica(tmp_path / "a", s3_bucket, secret)
    manifest_id, _ = state(a.store)
    a.upload([manifest_id])
    child = a.store.get_manifest(manifest_id)["manifests"][0]
    victim = a.store.get_manifest(child)["chunks"][0]  # kept inline: checked as it arrives
    a.bucket.delete(chunk_key(victim))
    a.bucket.put_new(chunk_key(victim), b"R" + b"not the small chunk")
    b = replica(tmp_path / "b", s3_bucket, secret)
    with pytest.raises(BlobIntegrityError):
        b.fetch([manifest_id])
    assert not b.store.has_manifest(manifest_id)
    assert b.store.stored_bytes() == 0
    assert not b.ledger.known(ObjectKind.MANIFEST, [manifest_id])


@pytest.mark.parametrize("read", ["get_chunk", "read_chunk_into"])
def test_a_big_chunk_changed_in_the_bucket_is_refused_at_its_first_read_and_fetched_again(
    tmp_path: Path, s3_bucket: S3Bucket, secret: bytes, read: str
) -> None:
    a = replica(tmp_path / "a", s3_bucket, secret)
    manifest_id, data = state(a.store)
    a.upload([manifest_id])
    chunks = a.store.get_manifest(manifest_id)["chunks"]
    victim = chunks[1]
    good = a.store.stored_chunk(victim)
    a.bucket.delete(chunk_key(victim))
    a.bucket.put_new(chunk_key(victim), b"R" + os.urandom(MIB))
    b = replica(tmp_path / "b", s3_bucket, secret)
    b.fetch([manifest_id])
    with pytest.raises(BlobIntegrityError, match="copy was dropped"):
        if read == "get_chunk":
            b.store.get_chunk(victim)
        else:
            b.store.read_chunk_into(victim, memoryview(bytearray(MIB)))
    assert not b.storage.is_cached(victim)  # the bad copy is not read again
    a.bucket.delete(chunk_key(victim))  # the bucket has its good copy again
    a.bucket.put_new(chunk_key(victim), good)
    again = b.fetch([manifest_id])
    assert again.chunks == 1
    assert b.store.get_bytes(chunks) == data


def test_a_chunk_that_fails_its_check_with_no_other_copy_is_kept(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "alone")
    stored = store.put_bytes(os.urandom(2 * MIB))
    victim = stored.chunks[0]
    path = Path(store.chunk_file(victim))
    path.chmod(0o644)
    path.write_bytes(b"R" + os.urandom(MIB))
    with pytest.raises(BlobIntegrityError) as refused:
        store.get_chunk(victim)
    assert "dropped" not in str(refused.value)
    assert path.exists()  # the only copy: evidence, never deleted by a read


def test_a_manifest_never_replicated_is_named_as_such(
    tmp_path: Path, s3_bucket: S3Bucket, secret: bytes
) -> None:
    a = replica(tmp_path / "a", s3_bucket, secret)
    manifest_id, _ = state(a.store)
    b = replica(tmp_path / "b", s3_bucket, secret)
    with pytest.raises(BlobNotFound, match="has not replicated it"):
        b.fetch([manifest_id])
    assert not b.bucket.exists(manifest_key(manifest_id))


def test_a_data_directory_with_another_secret_is_refused(
    tmp_path: Path, s3_bucket: S3Bucket, secret: bytes
) -> None:
    BlobStore(tmp_path / "old")  # made its own secret
    with pytest.raises(BlobError, match="signing secret of its own"):
        replica(tmp_path / "old", s3_bucket, secret)


# ---- a fetch read as it lands -------------------------------------------------------


def test_a_staged_fetch_is_read_as_it_lands_and_recorded_only_once_committed(
    tmp_path: Path, s3_bucket: S3Bucket, secret: bytes
) -> None:
    a = replica(tmp_path / "a", s3_bucket, secret)
    manifest_id, data = state(a.store)
    a.upload([manifest_id])
    b = replica(tmp_path / "b", s3_bucket, secret)
    before = contents(b.store)
    log = ArrivalLog(b.store.root / "tmp", place=b.store.place)
    staged = b.stage([manifest_id], log=log)
    kernel = BlobStore(b.store.root)  # as a kernel of the server opens it
    with kernel.reading_arrivals(log.path) as reader:
        assert body_bytes(reader, manifest_id) == data  # every manifest and chunk, logged
        child = reader.get_manifest(manifest_id)["manifests"][0]
        assert reader.get_chunk(reader.get_manifest(child)["chunks"][0]) == b"small chunk 1"
    assert contents(b.store)[:3] == before[:3]  # nothing recorded, nothing named yet
    assert not b.replicated([manifest_id])
    moved = staged.commit()
    log.close()
    assert (moved.chunks, moved.manifests) == (4, 2)
    assert body_bytes(BlobStore(b.store.root), manifest_id) == data
    assert b.replicated([manifest_id])
    assert contents(b.store)[3] == before[3]  # no staging, no log left
    assert (b.fetch([manifest_id]).chunks, b.fetch([manifest_id]).manifests) == (0, 0)


def test_a_staged_fetch_given_up_leaves_the_store_as_it_was(
    tmp_path: Path, s3_bucket: S3Bucket, secret: bytes
) -> None:
    a = replica(tmp_path / "a", s3_bucket, secret)
    manifest_id, _ = state(a.store)
    a.upload([manifest_id])
    b = replica(tmp_path / "b", s3_bucket, secret)
    before = contents(b.store)
    log = ArrivalLog(b.store.root / "tmp", place=b.store.place)
    b.stage([manifest_id], log=log).abort()
    log.close()
    assert contents(b.store) == before
    assert not b.ledger.known(ObjectKind.MANIFEST, [manifest_id])


def test_a_gateway_that_stops_mid_fetch_fails_the_fetch_and_the_reader_waiting_at_once(
    tmp_path: Path,
    ceph_gateway: CephGateway,
    s3_bucket: S3Bucket,
    secret: bytes,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a = replica(tmp_path / "a", s3_bucket, secret)
    manifest_id, _ = state(a.store, size=6 * MIB)
    a.upload([manifest_id])
    held = a.store.get_manifest(manifest_id)["chunks"][3]
    b = replica(tmp_path / "b", s3_bucket, secret)
    before = contents(b.store)
    reached, go = threading.Event(), threading.Event()
    get = b.bucket.get

    def get_held_back(name: str) -> bytes:
        if name == chunk_key(held):  # the gateway goes away before this chunk comes
            reached.set()
            go.wait()
        return get(name)

    monkeypatch.setattr(b.bucket, "get", get_held_back)
    log = ArrivalLog(b.store.root / "tmp", place=b.store.place)
    with BlobStore(b.store.root).reading_arrivals(log.path) as reader:
        staging = Reading(lambda: b.stage([manifest_id], log=log))
        waiting = Reading(lambda: reader.get_chunk(held))
        while not reached.is_set():
            assert staging.is_alive()
            reached.wait(0.01)
        ceph_gateway.stop_gateway()
        try:
            go.set()
            with pytest.raises(FetchFailed, match="cannot be reached"):
                waiting.outcome()
            with pytest.raises(ObjectStoreUnavailable, match="cannot be reached"):
                staging.outcome()
        finally:
            ceph_gateway.start_gateway()
    log.close()
    assert contents(b.store) == before
    assert not b.ledger.known(ObjectKind.MANIFEST, [manifest_id])


# ---- failures of the object store -----------------------------------------------------


def test_a_stopped_gateway_is_named_and_nothing_is_recorded_as_uploaded(
    tmp_path: Path, ceph_gateway: CephGateway, s3_bucket: S3Bucket, secret: bytes
) -> None:
    a = replica(tmp_path / "a", s3_bucket, secret)
    manifest_id, _ = state(a.store)
    with ceph_gateway.stopped(), pytest.raises(ObjectStoreUnavailable) as failed:
        a.upload([manifest_id])
    assert "cannot be reached" in str(failed.value)
    assert s3_bucket.name in str(failed.value)
    assert not a.replicated([manifest_id])
    assert not a.ledger.known(ObjectKind.CHUNK, a.store.get_manifest(manifest_id)["chunks"])
    assert a.upload([manifest_id]).manifests == 2  # once it is back, it all goes


def test_a_wrong_secret_key_is_named_and_never_printed(
    tmp_path: Path,
    s3_bucket: S3Bucket,
    secret: bytes,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    wrong = "W" + secrets.token_hex(19)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", wrong)
    caplog.set_level(logging.DEBUG)
    a = replica(tmp_path / "a", s3_bucket, secret)
    manifest_id, _ = state(a.store)
    with pytest.raises(ObjectStoreUnavailable) as failed:
        a.upload([manifest_id])
    message = str(failed.value)
    assert "refused the credentials" in message and "SignatureDoesNotMatch" in message
    assert "credentials from env" in message
    assert not a.replicated([manifest_id])
    for text in (message, caplog.text):
        assert wrong not in text and s3_bucket.secret_key not in text
    assert caplog.text  # botocore did log, at DEBUG: none of it holds a secret


def test_a_missing_bucket_is_named(tmp_path: Path, s3_bucket: S3Bucket, secret: bytes) -> None:
    nowhere = ObjectStoreLocation.parse(
        f"s3://no-such-bucket-{secrets.token_hex(4)}/p", endpoint_url=s3_bucket.endpoint
    )
    a = open_replicated_store(tmp_path / "a", nowhere, secret=secret, cache_bytes=None)
    manifest_id, _ = state(a.store)
    with pytest.raises(ObjectStoreUnavailable, match="does not exist"):
        a.upload([manifest_id])
    with pytest.raises(ObjectStoreUnavailable, match="does not exist"):
        a.bucket.check()
    assert not a.replicated([manifest_id])


def test_credentials_from_a_shared_credentials_file(
    tmp_path: Path, s3_bucket: S3Bucket, secret: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    shared = tmp_path / "credentials"
    shared.write_text(
        f"[default]\naws_access_key_id = {s3_bucket.access_key}\n"
        f"aws_secret_access_key = {s3_bucket.secret_key}\n"
    )
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(shared))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    a = replica(tmp_path / "a", s3_bucket, secret)
    manifest_id, _ = state(a.store, size=MIB)
    assert a.upload([manifest_id]).manifests == 2
    assert a.bucket.credentials_source() == "shared-credentials-file"


def test_urls_that_are_not_a_bucket_and_prefix_are_refused() -> None:
    for bad in ("bucket/prefix", "http://host/bucket", "s3://", "s3://key:secret@bucket/p"):
        with pytest.raises(BlobError, match=r"s3://bucket/prefix|only a bucket"):
            ObjectStoreLocation.parse(bad)
    parsed = ObjectStoreLocation.parse("s3://b/deep/prefix/", endpoint_url="http://127.0.0.1:1")
    assert (parsed.bucket, parsed.prefix, parsed.url) == ("b", "deep/prefix/", "s3://b/deep/prefix")
