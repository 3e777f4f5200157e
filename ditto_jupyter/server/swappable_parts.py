"""The parts a deployment may swap for its own classes, as `Type` traits of the extension.

As jupyter-scheduler lets a deployment name its own `scheduler_class` and
`environment_manager_class`, the extension takes three classes from its configuration:

- `store_class`: the checkpoint store (default: the built-in store `store_url` names:
  SQLite, PostgreSQL or memory). Called as `store_class(url=store_url, data_dir=data_dir)`;
  it must be a `CheckpointStore`.
- `backend_provider_class`: one more backend kind, beside `local` and `e2b` (or instead of
  `e2b`, when its kind is `e2b`). Called as `backend_provider_class(data_dir=data_dir,
  blobs=blob_store)`; it must be a `BackendProvider` of a kind other than `local`. New
  runtimes get it with `default_backend` set to its kind.
- `context_driver_class`: what runs a runtime's kernel (default `KernelContextDriver`).
  Called as `context_driver_class(host=kernel_host, blob_root=blob_root,
  notebook_folder=notebook_folder)`; it must be a `ContextDriver`.

Each part proves itself against `ditto_jupyter.testing.contracts` (one spec per role). A
class that builds something else is refused when the server starts, in one line naming the
trait and what is missing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from traitlets import Type
from traitlets.config import Configurable

from ditto_jupyter.backends.base import BackendProvider
from ditto_jupyter.control.context_driver import ContextDriver
from ditto_jupyter.control.store import CheckpointStore
from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.core.models import SessionRecord
from ditto_jupyter.hosts.kernel_context_driver import KernelContextDriver
from ditto_jupyter.hosts.kernel_host import KernelHost

#: The one backend kind a deployment's provider may not take: the runtime's workspace.
LOCAL_KIND = "local"


class PartRefused(TypeError):
    """A configured class did not build the part its trait names."""


def _refusal(trait: str, cls: type[Any], part: object, protocol: type) -> PartRefused:
    """Why `part`, made by `cls`, is not the `protocol` the trait `trait` asks for."""
    missing = [
        name
        for name in sorted(getattr(protocol, "__protocol_attrs__", None) or dir(protocol))
        if not name.startswith("_") and not hasattr(part, name)
    ]
    lacks = f"; it lacks {', '.join(missing)}" if missing else ""
    return PartRefused(
        f"DittoJupyterApp.{trait}: {cls.__module__}.{cls.__qualname__} is not a "
        f"{protocol.__name__}{lacks}"
    )


class SwappableParts(Configurable):
    """The store, the backend provider and the context driver a deployment may swap."""

    store_class = Type(
        None,
        klass=CheckpointStore,
        allow_none=True,
        config=True,
        help="A checkpoint store class of the deployment's own, called as "
        "store_class(url=store_url, data_dir=data_dir); it must implement CheckpointStore "
        "(ditto_jupyter.testing.contracts.CheckpointStoreContract). Default: the store "
        "store_url names (SQLite in data_dir, PostgreSQL or memory).",
    )
    backend_provider_class = Type(
        None,
        klass=object,  # BackendProvider has a property: checked on the instance
        allow_none=True,
        config=True,
        help="A backend provider of the deployment's own, called as "
        "backend_provider_class(data_dir=data_dir, blobs=blob_store); it must implement "
        "BackendProvider (ditto_jupyter.testing.contracts.BackendContract) and is added "
        "under its kind (any but 'local'; 'e2b' replaces the built-in E2B provider). "
        "Set default_backend to its kind to give it to new runtimes.",
    )
    context_driver_class = Type(
        KernelContextDriver,
        klass=ContextDriver,
        config=True,
        help="What runs a runtime's kernel: called as context_driver_class(host=kernel_host, "
        "blob_root=blob_root, notebook_folder=notebook_folder); it must implement "
        "ContextDriver (ditto_jupyter.testing.contracts.ContextDriverContract).",
    )

    def store_factory(self) -> Callable[[str | None, Path], CheckpointStore] | None:
        """What opens the store (None: the built-in store `store_url` names)."""
        cls: type[Any] | None = self.store_class
        if cls is None:
            return None

        def open_store(url: str | None, data_dir: Path) -> CheckpointStore:
            store = cls(url=url, data_dir=data_dir)
            if not isinstance(store, CheckpointStore):
                raise _refusal("store_class", cls, store, CheckpointStore)
            return store

        return open_store

    def provider_factory(self) -> Callable[[Path, BlobStore], BackendProvider] | None:
        """What makes the deployment's backend provider (None: it has none)."""
        cls: type[Any] | None = self.backend_provider_class
        if cls is None:
            return None

        def make(data_dir: Path, blobs: BlobStore) -> BackendProvider:
            provider = cls(data_dir=data_dir, blobs=blobs)
            if not isinstance(provider, BackendProvider):
                raise _refusal("backend_provider_class", cls, provider, BackendProvider)
            if provider.kind == LOCAL_KIND:
                raise PartRefused(
                    f"DittoJupyterApp.backend_provider_class: {cls.__qualname__}'s kind "
                    f"{LOCAL_KIND!r} is the built-in workspace's; give it a kind of its own"
                )
            return provider

        return make

    def context_driver(
        self,
        host: KernelHost,
        blob_root: Path,
        notebook_folder: Callable[[SessionRecord], Path | None],
    ) -> ContextDriver:
        """The context driver of the server's runtimes, built by `context_driver_class`."""
        cls: type[Any] = self.context_driver_class
        driver = cls(host=host, blob_root=blob_root, notebook_folder=notebook_folder)
        if not isinstance(driver, ContextDriver):
            raise _refusal("context_driver_class", cls, driver, ContextDriver)
        return driver
