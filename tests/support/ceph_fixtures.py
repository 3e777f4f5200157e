"""The pytest fixtures of the real S3 server (`ceph_gateway`), for a test module with
`pytest_plugins = ["tests.support.ceph_fixtures"]`:

- `ceph_gateway`: the session's gateway (started on first use, stopped at the end);
- `s3_bucket`: a new, empty bucket of it for one test, as `S3Bucket` (its URL, endpoint
  and the user's keys, and the environment that hands those keys to the standard AWS
  credential chain);
- `deployment`: one deployment on that bucket (`tests.support.deployment`: a SQLite store
  under the test's `tmp_path`, one signing secret), its servers stopped after the test.

A machine without the gateway's binaries skips (`make radosgw` installs them; under
CI=true a skip is a failure).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.ceph_gateway import CephGateway, S3Bucket, missing_binaries, running_gateway
from tests.support.deployment import Deployment, deploy


@pytest.fixture(scope="session")
def ceph_gateway() -> Iterator[CephGateway]:
    """The test session's Ceph RADOS Gateway (skip when its binaries are missing)."""
    missing = missing_binaries()
    if missing:
        pytest.skip(f"the Ceph gateway's binaries are missing ({', '.join(missing)}): make radosgw")
    pytest.importorskip("boto3", reason="boto3 (the S3 client) is not installed")
    with running_gateway() as gateway:
        yield gateway


@pytest.fixture
def s3_bucket(ceph_gateway: CephGateway) -> S3Bucket:
    """A new, empty bucket of the session's gateway."""
    return ceph_gateway.bucket()


@pytest.fixture
def deployment(
    tmp_path: Path, ceph_gateway: CephGateway, s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Deployment]:
    """One deployment on the test's bucket; its servers stopped after the test."""
    yield from deploy(tmp_path, ceph_gateway, s3_bucket, monkeypatch)
