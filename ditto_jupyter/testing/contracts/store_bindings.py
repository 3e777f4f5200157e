"""The spec of `BackendBindings` (`ditto_jupyter.control.store.interface`).

The backend binding of each runtime: put, replaced, deleted (twice is fine), listed by
runtime id, and refused when it names a runtime the store does not hold.
"""

from __future__ import annotations

import pytest

from ditto_jupyter.control.store.interface import BackendBindings, CheckpointStore
from ditto_jupyter.testing.contracts.store_data import (
    binding,
    session,
)


class BackendBindingsContract:
    """`BackendBindings`; a subclass provides a `store` fixture: a fresh, empty store per test."""

    def test_implements_the_role(self, store: CheckpointStore) -> None:
        assert isinstance(store, BackendBindings)

    def test_bindings(self, store: CheckpointStore) -> None:
        store.insert_session(session("rt-2"))
        store.insert_session(session("rt-1"))
        store.put_binding(binding("rt-2"))
        store.put_binding(binding("rt-1"))
        assert store.get_binding("rt-1") == binding("rt-1")
        assert [b.runtime_id for b in store.list_bindings()] == ["rt-1", "rt-2"]
        store.put_binding(binding("rt-1", "be-other"))
        assert store.get_binding("rt-1") == binding("rt-1", "be-other")
        store.delete_binding("rt-1")
        assert store.get_binding("rt-1") is None
        store.delete_binding("rt-1")  # idempotent
        store.delete_binding("never-bound")
        assert store.list_bindings() == [binding("rt-2")]
        with pytest.raises(ValueError, match="a backend binding names 'ghost', which is not"):
            store.put_binding(binding("ghost"))
        assert store.get_binding("ghost") is None
