"""The blob store's suite (`test_blobs.py`) again, with its chunks in a real S3 server.

As LangGraph runs one suite over every saver, the tests of `test_blobs.py` that use the
`blobs` fixture run here on a store whose committed chunks are in a bucket of the real
gateway (tests/support: Ceph's RADOS Gateway) and nowhere else (`BucketFirstChunks`): a
read of a big chunk is a GET, a check for one a ledger or bucket answer. The few tests
about the local disk's own layout (chunk files, their damage on disk) are listed in
`DISK_LAYOUT` and not run here; the replica's own tests are `test_blob_replica.py`.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
import test_blobs
from test_blobs import *  # noqa: F403  (the suite: its tests are collected here again)

from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.core.blobs.errors import place_of
from ditto_jupyter.core.blobs.local_disk import LocalDiskChunks
from ditto_jupyter.core.blobs.object_store import ObjectStore, ObjectStoreLocation
from ditto_jupyter.core.blobs.replica_ledger import LEDGER_FILE, SqliteReplicaLedger
from ditto_jupyter.core.blobs.shared_secret import install_secret
from ditto_jupyter.core.private import private_dir
from tests.support.bucket_first_chunks import BucketFirstChunks
from tests.support.ceph_gateway import CephGateway, S3Bucket

pytest_plugins = ["tests.support.ceph_fixtures"]
pytestmark = pytest.mark.s3

#: Tests of the local disk's layout, which a bucket does not have: not run here.
DISK_LAYOUT = {
    "test_dedup_writes_a_chunk_once",  # counts chunk files
    "test_small_chunks_and_manifests_take_no_file_of_their_own",
    "test_zstd_for_compressible_raw_for_random",  # reads the codec tag off the file
    "test_a_flipped_byte_is_detected",  # flips a byte of the file (the bucket's own test:
    # test_blob_replica's test_a_chunk_changed_in_the_bucket_is_refused...)
    "test_a_chunk_whose_file_went_missing_is_written_again",  # deletes the file
}

for _name in DISK_LAYOUT:
    globals().pop(_name, None)
for _name in [n for n in dir(test_blobs) if n.startswith("test_")]:
    if "blobs" not in test_blobs.__dict__[_name].__code__.co_varnames[:8]:
        globals().pop(_name, None)  # builds its own stores: nothing of the bucket to test


@pytest.fixture
def blobs(
    tmp_path: Path, s3_bucket: S3Bucket, ceph_gateway: CephGateway, monkeypatch: pytest.MonkeyPatch
) -> Iterator[BlobStore]:
    """A blob store whose committed big chunks are in the bucket only."""
    for name, value in s3_bucket.credentials_env().items():
        monkeypatch.setenv(name, value)
    root = tmp_path / "blobs"
    private_dir(root)
    install_secret(root, secrets.token_bytes(32))
    location = ObjectStoreLocation.parse(f"{s3_bucket.url}/suite", endpoint_url=s3_bucket.endpoint)
    storage = BucketFirstChunks(
        LocalDiskChunks(root, place=place_of(root)),
        SqliteReplicaLedger(root / LEDGER_FILE),
        ObjectStore(location),
    )
    store = BlobStore(root, durable=False, create_secret=False, storage=storage)
    yield store
    if storage.moved:  # what went to the bucket was read back from it, not the disk
        assert not any(storage.is_cached(name) for name, _ in store.iter_chunks())
