"""The whole `CheckpointStore`: every role's spec, and what holds across them.

A store of another make (say, on another database) proves itself by subclassing
`CheckpointStoreContract` in its own tests with a `store` fixture that yields a fresh, empty
store and closes it after::

    import pytest
    from ditto_jupyter.testing.contracts import CheckpointStoreContract

    @pytest.fixture
    def store(tmp_path):
        opened = MyStore(tmp_path / "db")
        yield opened
        opened.close()

    class TestMyStore(CheckpointStoreContract):
        pass

A part that implements some roles only subclasses their specs (`LeasesContract`, ...).
"""

from __future__ import annotations

from typing import Any

import pytest

from ditto_jupyter.control.store.interface import CheckpointStore
from ditto_jupyter.testing.contracts.store_bindings import BackendBindingsContract
from ditto_jupyter.testing.contracts.store_blobs import BlobReferencesContract
from ditto_jupyter.testing.contracts.store_buckets import BucketGenerationsContract
from ditto_jupyter.testing.contracts.store_checkpoints import CheckpointRecordsContract
from ditto_jupyter.testing.contracts.store_connection import StoreConnectionContract
from ditto_jupyter.testing.contracts.store_data import populate
from ditto_jupyter.testing.contracts.store_health import StoreHealthContract
from ditto_jupyter.testing.contracts.store_leases import LeasesContract
from ditto_jupyter.testing.contracts.store_runtimes import RuntimeRecordsContract


class CheckpointStoreContract(
    StoreConnectionContract,
    RuntimeRecordsContract,
    CheckpointRecordsContract,
    BlobReferencesContract,
    BackendBindingsContract,
    StoreHealthContract,
    LeasesContract,
    BucketGenerationsContract,
):
    """Every role of `CheckpointStore`; a subclass provides a `store` fixture: a fresh, empty
    store per test."""

    def test_is_a_checkpoint_store(self, store: CheckpointStore) -> None:
        assert isinstance(store, CheckpointStore)

    def test_wrong_model_type_is_refused(self, store: CheckpointStore) -> None:
        bad: Any = {"session_id": "rt-1"}
        with pytest.raises(TypeError, match="put_session needs a SessionRecord, got dict"):
            store.put_session(bad)
        with pytest.raises(TypeError, match="put_checkpoint needs a RuntimeCheckpoint"):
            store.put_checkpoint(bad)
        with pytest.raises(TypeError, match="put_binding needs a BackendBinding"):
            store.put_binding(bad)
        assert store.list_sessions() == []

    def test_returned_models_are_copies(self, store: CheckpointStore) -> None:
        populate(store)
        loaded = store.get_checkpoint("cp-a1")
        assert loaded is not None
        loaded.metadata["owner"] = "mallory"
        loaded.session.handle_state["kernel_id"] = "k"
        fresh = store.get_checkpoint("cp-a1")
        assert fresh is not None
        assert fresh.metadata["owner"] == "ana"
        assert fresh.session.handle_state == {}
