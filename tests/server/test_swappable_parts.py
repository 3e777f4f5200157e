"""A deployment's own store, backend provider and context driver, named in the extension's
`Type` traits, are the ones a real server uses (issue 41 section 3).

The server is configured as a deployment would configure it (`store_class`,
`backend_provider_class` with `default_backend` its kind, `context_driver_class`), with the
FAKE parts of tests/fakes/deployment_parts.py. A notebook opened and checkpointed over REST
lands in that store, on that backend kind, captured by that driver. A class that is not the
part its trait asks for is refused at start in one line naming the trait.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from traitlets import TraitError

from ditto_jupyter.backends.local import LocalProvider
from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.core.errors import ConfigurationError
from ditto_jupyter.server.app import DittoJupyterApp
from ditto_jupyter.server.swappable_parts import PartRefused, SwappableParts
from ditto_jupyter.wiring import open_runtime_service
from tests.fakes.deployment_parts import (
    FAKE_KIND,
    FakeDeploymentDriver,
    FakeDeploymentStore,
    FakeSandboxProvider,
    NotAStore,
)
from tests.fakes.fake_context_capture import InMemoryContextCapture
from tests.server.conftest import Api, OpenRuntime


@pytest.fixture
def ditto_load_magics() -> bool:
    return False  # REST only


@pytest.fixture
def jp_server_config(jp_server_config: Any) -> Any:
    """The test server's configuration, with the deployment's own three parts."""
    parts = jp_server_config["DittoJupyterApp"]
    parts["store_class"] = "tests.fakes.deployment_parts.FakeDeploymentStore"
    parts["backend_provider_class"] = "tests.fakes.deployment_parts.FakeSandboxProvider"
    parts["default_backend"] = FAKE_KIND
    parts["context_driver_class"] = "tests.fakes.deployment_parts.FakeDeploymentDriver"
    return jp_server_config


async def test_the_deployments_own_parts_are_the_ones_used(
    ditto_app: DittoJupyterApp, api: Api, open_runtime: OpenRuntime, ditto_data_dir: Path
) -> None:
    service = ditto_app.service
    assert service is not None
    assert isinstance(service.store, FakeDeploymentStore)
    assert FakeDeploymentStore.opened[-1] == (None, Path(ditto_app.data_dir))
    assert isinstance(service.backends.provider(FAKE_KIND), FakeSandboxProvider)

    runtime = await open_runtime("notebooks/own-parts.ipynb", x=41)
    assert FakeSandboxProvider.created[-1] == runtime.runtime_id
    captured_before = len(FakeDeploymentDriver.captured)
    status, body = await api("POST", "checkpoint", {"runtime_id": runtime.runtime_id})
    assert status == 200, body

    assert FakeDeploymentDriver.captured[captured_before:] == [runtime.runtime_id]
    stored = service.store.get_checkpoint(body["checkpoint_id"])
    assert stored is not None and stored.runtime_id == runtime.runtime_id
    assert stored.backend_ref is not None and stored.backend_ref.backend_kind == FAKE_KIND
    binding = service.store.get_binding(runtime.runtime_id)
    assert binding is not None and binding.kind == FAKE_KIND
    assert (ditto_data_dir / "fake-sandboxes" / binding.backend_id).is_dir()


def test_a_class_that_is_not_the_part_is_refused_naming_the_trait(tmp_path: Path) -> None:
    # a store or driver class is checked as the configuration is read
    with pytest.raises(TraitError, match=r"The 'store_class' trait .* expected a subclass of"):
        SwappableParts(store_class=NotAStore)
    with pytest.raises(TraitError, match="The 'context_driver_class' trait"):
        SwappableParts(context_driver_class=NotAStore)
    # a provider (its protocol has a property) once it is made, when the server starts
    parts = SwappableParts(backend_provider_class=NotAStore)
    make = parts.provider_factory()
    assert make is not None
    refused = r"^DittoJupyterApp.backend_provider_class: .*NotAStore is not a BackendProvider;"
    with pytest.raises(PartRefused, match=refused + " it lacks attach, checkout, create"):
        make(tmp_path, BlobStore(tmp_path / "blobs", durable=False))


def test_a_provider_may_not_take_the_local_kind(tmp_path: Path) -> None:
    class LocalAgain(LocalProvider):
        def __init__(self, *, data_dir: Path, blobs: BlobStore) -> None:
            super().__init__(data_dir / "again", blobs)

    make = SwappableParts(backend_provider_class=LocalAgain).provider_factory()
    assert make is not None
    with pytest.raises(PartRefused, match="kind 'local' is the built-in workspace's"):
        make(tmp_path, BlobStore(tmp_path / "blobs", durable=False))


def test_a_default_backend_no_provider_has_is_refused_at_start(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigurationError,
        match=r"default_backend 'docker' is not a backend kind of this server \(local\)",
    ):
        open_runtime_service(
            tmp_path, context_factory=InMemoryContextCapture, default_backend="docker"
        )
