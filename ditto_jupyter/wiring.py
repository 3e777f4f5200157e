"""Open a RuntimeService on an embedded data directory (SQLite file + blob store + workspaces).

This is how every front end gets its service: the server extension, the magics with no
server behind them, the CLI in local mode and the tests. The caller always says how the
session context is captured (`context_factory`): the server and the magics pass their kernel
capture (`ditto_jupyter.hosts.kernel_context_driver`, beside this module in the same
layer), the tests a test double.
`check_data_dir` opens the same parts for `ditto doctor`, without a service or a context.

A setting that is wrong (the data directory, the store URL, the object store's URL,
endpoint, secret file or durability) is one `ConfigurationError` naming the setting and
what is wrong with it, found before anything is opened where it can be; the password of a
store URL is never in it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from ditto_jupyter.backends.base import BackendProvider
from ditto_jupyter.backends.local import LocalProvider
from ditto_jupyter.backends.manager import BackendManager
from ditto_jupyter.control.context_driver import ContextDriver
from ditto_jupyter.control.doctor import (
    DoctorReport,
    check_disk,
    check_health,
    check_store,
    unopened_blobs,
    unopened_store,
)
from ditto_jupyter.control.replication import Replication
from ditto_jupyter.control.service import RuntimeService
from ditto_jupyter.control.store import CheckpointStore, StoreError, StoreUnreachable, open_store
from ditto_jupyter.control.store.interface import BUSY_TIMEOUT_MS
from ditto_jupyter.control.store.opening import check_store_url
from ditto_jupyter.core.blobs import BlobError, BlobStore
from ditto_jupyter.core.blobs.replicated_store import ObjectStoreSettings
from ditto_jupyter.core.environment import default_data_dir
from ditto_jupyter.core.errors import ConfigurationError, StorageFull
from ditto_jupyter.core.models import LeaseHolder
from ditto_jupyter.core.private import private_dir

ContextFactory = Callable[[BlobStore], ContextDriver]
#: Opens a store of a deployment's own: (store_url, data_dir) -> the store.
StoreFactory = Callable[[str | None, Path], CheckpointStore]
#: Makes a backend provider of a deployment's own: (data_dir, blob store) -> the provider.
ProviderFactory = Callable[[Path, BlobStore], BackendProvider]


def open_runtime_service(
    data_dir: str | os.PathLike[str] | None = None,
    *,
    context_factory: ContextFactory,
    store_url: str | None = None,
    extra_providers: Mapping[str, BackendProvider] | None = None,
    default_backend: str = "local",
    lease_holder: LeaseHolder | None = None,
    lease_ttl_ms: int | None = None,
    object_store: ObjectStoreSettings | None = None,
    store_factory: StoreFactory | None = None,
    provider_factory: ProviderFactory | None = None,
    store_lock_timeout_ms: int = BUSY_TIMEOUT_MS,
) -> RuntimeService:
    """A RuntimeService over `data_dir` (created if missing), capturing with `context_factory`;
    `lease_holder` and `lease_ttl_ms`: who holds its runtimes' leases, and for how long
    between heartbeats (see `RuntimeService`); with `object_store`, its blob store is
    replicated there (`control.replication`). A deployment's own store (`store_factory`,
    instead of the one `store_url` names) and backend provider (`provider_factory`, added
    under its kind) come from the server's `Type` traits (`server.swappable_parts`).
    `store_lock_timeout_ms` bounds every lock wait of the store `store_url` names.
    A wrong setting is a ConfigurationError naming it (see the module)."""
    root = Path(data_dir) if data_dir is not None else default_data_dir()
    try:
        private_dir(root)
    except OSError as error:
        raise ConfigurationError(
            f"data_dir (DITTO_DATA_DIR) {str(root)!r} cannot be made or used: "
            f"{error.strerror or error}"
        ) from None
    check_store_url(store_url)
    if object_store is not None:
        object_store.check()
    store = (
        store_factory(store_url, root)
        if store_factory
        else _open_store(store_url, root, store_lock_timeout_ms)
    )
    try:
        replication = Replication()
        if object_store is None:
            blobs = BlobStore(root / "blobs")
        else:
            replica = object_store.open(root / "blobs")
            blobs = replica.store
            replication = Replication(replica, durability=object_store.durability)
        providers: dict[str, BackendProvider] = {"local": LocalProvider(root / "workspaces", blobs)}
        providers.update(extra_providers or {})
        if provider_factory is not None:
            own = provider_factory(root, blobs)
            providers[own.kind] = own
        if default_backend not in providers:
            raise ConfigurationError(
                f"default_backend {default_backend!r} is not a backend kind of this server "
                f"({', '.join(sorted(providers))})"
            )
        context = context_factory(blobs)
    except BaseException:
        store.close()
        raise
    return RuntimeService(
        store,
        blobs,
        BackendManager(providers),
        context,
        default_backend=default_backend,
        lease_holder=lease_holder,
        lease_ttl_ms=lease_ttl_ms,
        replication=replication,
    )


def _open_store(
    store_url: str | None, root: Path, lock_timeout_ms: int = BUSY_TIMEOUT_MS
) -> CheckpointStore:
    """The checkpoint store; ConfigurationError naming `store_url` when it cannot be opened
    (a full disk stays StorageFull, a database not reachable StoreUnreachable: no setting
    is wrong, or not yet known to be)."""
    try:
        return open_store(store_url, root, lock_timeout_ms=lock_timeout_ms)
    except (StorageFull, StoreUnreachable):
        raise
    except (StoreError, ValueError) as error:
        setting = "store_url (DITTO_STORE_URL)" if store_url else f"data_dir {str(root)!r}"
        raise ConfigurationError(f"{setting}: {error}") from None


class DataDirError(Exception):
    """`ditto doctor` cannot check this data directory at all (missing, store unopenable)."""


def check_data_dir(
    data_dir: str | os.PathLike[str] | None = None, *, store_url: str | None = None
) -> DoctorReport:
    """`ditto doctor` on a data directory (the server's default when None): see
    `control.doctor`. Creates no store and no secret; DataDirError when there is nothing
    to check."""
    root = Path(data_dir) if data_dir is not None else default_data_dir()
    if not root.is_dir():
        raise DataDirError(f"no data directory at {root}")
    if not store_url and not (root / "ditto.db").is_file():
        raise DataDirError(f"no checkpoint store at {root / 'ditto.db'}")
    try:
        store = open_store(store_url, root)
    except StoreError as error:
        full = check_disk(root)
        if full:  # a full disk is why: say that (no part of it could be checked)
            return DoctorReport(findings=[*full, unopened_store(root, error)])
        raise DataDirError(str(error)) from None
    try:
        try:
            blobs = BlobStore(root / "blobs", create_secret=False)
        except BlobError as error:  # no blob can be checked: report the store alone
            rows, findings = check_store(store)
            blob_finding = unopened_blobs(root / "blobs", error)
            return DoctorReport(
                rows_checked=rows,
                findings=[*check_disk(root), *findings, blob_finding],
                leftovers=store.list_leftovers(),
            )
        backends = BackendManager({"local": LocalProvider(root / "workspaces", blobs)})
        return check_health(store, blobs, backends)
    finally:
        store.close()
