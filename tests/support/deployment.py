"""Servers of one deployment in one test: services on their own data directories sharing
one checkpoint store, one bucket of the real Ceph gateway and one signing secret (the
servers of a JupyterHub deployment, in process, with the in-memory context capture)."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ditto_jupyter.control.context_driver import ContextDriver
from ditto_jupyter.control.service import RuntimeService
from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.core.blobs.replicated_store import ObjectStoreSettings
from ditto_jupyter.wiring import open_runtime_service
from tests.fakes.fake_context_capture import InMemoryContextCapture
from tests.support.ceph_gateway import CephGateway, S3Bucket


@dataclass
class Deployment:
    """One checkpoint store (`store_url`), one bucket, one secret; the servers started."""

    root: Path
    bucket: S3Bucket
    gateway: CephGateway
    store_url: str
    durability: str = "local"
    servers: list[RuntimeService] = field(default_factory=list)

    def settings(
        self, durability: str | None = None, *, cache_bytes: int | None = None
    ) -> ObjectStoreSettings:
        """The object store settings of a server of this deployment."""
        return ObjectStoreSettings(
            url=f"{self.bucket.url}/deployment",
            secret_file=self.root / "signing-secret",
            endpoint_url=self.bucket.endpoint,
            cache_bytes=cache_bytes,
            durability=durability or self.durability,
        )

    def server(
        self,
        name: str,
        *,
        durability: str | None = None,
        cache_bytes: int | None = None,
        context_factory: Callable[[BlobStore], ContextDriver] = InMemoryContextCapture,
    ) -> RuntimeService:
        """A server on the data directory `root/name` (its contexts in memory, unless
        `context_factory` says otherwise: real kernels)."""
        service = open_runtime_service(
            self.root / name,
            context_factory=context_factory,
            store_url=self.store_url,
            object_store=self.settings(durability, cache_bytes=cache_bytes),
        )
        self.servers.append(service)
        return service

    def stop(self, service: RuntimeService) -> None:
        """Stop one server (its uploads finish first)."""
        service.close_store(upload_timeout=30)
        self.servers.remove(service)


def share_bucket(root: Path, bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Hand the bucket's keys to the AWS credential chain, and write a deployment's
    signing secret (mode 0600) under `root`; its path."""
    for name, value in bucket.credentials_env().items():
        monkeypatch.setenv(name, value)
    secret = root / "signing-secret"
    secret.write_text(secrets.token_hex(32) + "\n")
    secret.chmod(0o600)
    return secret


def deploy(
    root: Path,
    gateway: CephGateway,
    bucket: S3Bucket,
    monkeypatch: pytest.MonkeyPatch,
    *,
    store_url: str | None = None,
    durability: str = "local",
) -> Iterator[Deployment]:
    """A fixture's body: the deployment (a SQLite store under `root` unless `store_url`),
    then every server still running stopped."""
    share_bucket(root, bucket, monkeypatch)
    found = Deployment(
        root, bucket, gateway, store_url or f"sqlite:///{root / 'shared.db'}", durability
    )
    yield found
    for service in list(found.servers):
        found.stop(service)
