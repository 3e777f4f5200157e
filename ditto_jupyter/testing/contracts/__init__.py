"""Conformance specs: what a store, a backend or a context driver of another make must do.

As LangGraph's checkpointers prove themselves against its conformance package, a part that
implements one of ditto-jupyter's protocols subclasses the spec of each role it plays in
its own tests, with a fixture that yields a fresh implementation; every test of the spec
then runs on it. Our own implementations run the same specs (tests/control,
tests/backends, tests/hosts).

- the checkpoint store (`ditto_jupyter.control.store.interface`): one spec per role,
  `StoreConnectionContract`, `RuntimeRecordsContract`, `CheckpointRecordsContract`,
  `BlobReferencesContract`, `BackendBindingsContract`, `StoreHealthContract`,
  `LeasesContract`, `BucketGenerationsContract`, and `CheckpointStoreContract`, all of
  them; fixture `store`; and `LangGraphRowsContract`, the role of LangGraph's checkpoints
  (`control.store.langgraph_rows`), which a store may play beside them;
- backends (`ditto_jupyter.backends.base`): `BackendContract` (a `BackendProvider` and the
  backends it makes), and the capabilities some backends have, `SnapshotReaderContract`,
  `LiveTreeReaderContract`, `InPlaceRestorerContract`; fixture `provider`;
- context drivers (`ditto_jupyter.control.context_driver`): `ContextDriverContract`;
  fixture `context`, a `ContextHarness` (the driver, its blob store, and a way to run a
  cell in a context, which the protocol itself does not have).

Importing this package imports pytest: the product never does.
"""

from __future__ import annotations

from ditto_jupyter.testing.contracts.backend import BackendContract
from ditto_jupyter.testing.contracts.backend_capabilities import (
    InPlaceRestorerContract,
    LiveTreeReaderContract,
    SnapshotReaderContract,
)
from ditto_jupyter.testing.contracts.context_driver import ContextDriverContract, ContextHarness
from ditto_jupyter.testing.contracts.store import CheckpointStoreContract
from ditto_jupyter.testing.contracts.store_bindings import BackendBindingsContract
from ditto_jupyter.testing.contracts.store_blobs import BlobReferencesContract
from ditto_jupyter.testing.contracts.store_buckets import BucketGenerationsContract
from ditto_jupyter.testing.contracts.store_checkpoints import CheckpointRecordsContract
from ditto_jupyter.testing.contracts.store_connection import StoreConnectionContract
from ditto_jupyter.testing.contracts.store_health import StoreHealthContract
from ditto_jupyter.testing.contracts.store_langgraph import LangGraphRowsContract
from ditto_jupyter.testing.contracts.store_leases import LeasesContract
from ditto_jupyter.testing.contracts.store_runtimes import RuntimeRecordsContract

__all__ = [
    "BackendBindingsContract",
    "BackendContract",
    "BlobReferencesContract",
    "BucketGenerationsContract",
    "CheckpointRecordsContract",
    "CheckpointStoreContract",
    "ContextDriverContract",
    "ContextHarness",
    "InPlaceRestorerContract",
    "LangGraphRowsContract",
    "LeasesContract",
    "LiveTreeReaderContract",
    "RuntimeRecordsContract",
    "SnapshotReaderContract",
    "StoreConnectionContract",
    "StoreHealthContract",
]
