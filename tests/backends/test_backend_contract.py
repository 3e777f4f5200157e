"""The backend contract (`ditto_jupyter.testing.contracts`) on every backend we ship: the
local workspace (with the three capabilities it has: reading a snapshot's files and the
live ones, restoring a snapshot in place) and E2B, on the real `e2b` SDK against the FAKE
E2B cloud (tests/fakes/e2b_cloud.py: real directories and real subprocesses behind E2B's
REST API and envd); and the FAKE provider a deployment would name in
`backend_provider_class` (tests/fakes/deployment_parts.py), as a deployment proves its own.
What only one of them does is tested beside it
(test_local_backend.py, test_e2b_backend.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ditto_jupyter.backends.e2b import E2BConfig, E2BProvider
from ditto_jupyter.backends.local import LocalProvider
from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.testing.contracts import (
    BackendContract,
    InPlaceRestorerContract,
    LiveTreeReaderContract,
    SnapshotReaderContract,
)
from tests.fakes.deployment_parts import FakeSandboxProvider
from tests.fakes.e2b_cloud import FakeE2BCloud

pytest_plugins = ["tests.fakes.e2b_fixtures"]  # the `fake_e2b` fixture


class TestLocalBackend(
    BackendContract, SnapshotReaderContract, LiveTreeReaderContract, InPlaceRestorerContract
):
    """Local workspaces under the test's folder, snapshots in a real blob store."""

    @pytest.fixture
    def provider(self, tmp_path: Path) -> LocalProvider:
        return LocalProvider(tmp_path / "workspaces", BlobStore(tmp_path / "blobs", durable=False))


class TestE2BBackend(BackendContract):
    """E2B sandboxes of the fake cloud; no SDK retries, so a fault surfaces at once."""

    @pytest.fixture
    def provider(self, fake_e2b: FakeE2BCloud) -> E2BProvider:
        return E2BProvider(E2BConfig(retries=0))


class TestFakeSandboxProvider(BackendContract):
    """A deployment's own backend kind, as the server makes it from its trait."""

    @pytest.fixture
    def provider(self, tmp_path: Path) -> FakeSandboxProvider:
        return FakeSandboxProvider(
            data_dir=tmp_path, blobs=BlobStore(tmp_path / "blobs", durable=False)
        )
