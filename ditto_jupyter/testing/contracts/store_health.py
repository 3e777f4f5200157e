"""The spec of `StoreHealth` (`ditto_jupyter.control.store.interface`).

What `ditto doctor` reads: leftovers recorded (one per kind and id), listed oldest first,
part of the transaction they were written in; and no damaged row in a store written
through its own API.
"""

from __future__ import annotations

import pytest

from ditto_jupyter.control.store.interface import CheckpointStore, StoreHealth
from ditto_jupyter.core.models import (
    Leftover,
)
from ditto_jupyter.testing.contracts.store_data import populate


class StoreHealthContract:
    """`StoreHealth`; a subclass provides a `store` fixture: a fresh, empty store per test."""

    def test_implements_the_role(self, store: CheckpointStore) -> None:
        assert isinstance(store, StoreHealth)

    def test_leftovers_are_recorded_and_listed(self, store: CheckpointStore) -> None:
        assert store.list_leftovers() == []
        store.record_leftover(
            Leftover(kind="kernel", resource_id="k1", reason="x", created_at_ms=2)
        )
        first = Leftover(
            kind="e2b-sandbox", resource_id="sb", runtime_id="r", reason="kill", created_at_ms=1
        )
        store.record_leftover(first)
        store.record_leftover(
            Leftover(kind="e2b-snapshot", resource_id="sb", reason="404", created_at_ms=3)
        )
        assert [(left.kind, left.created_at_ms) for left in store.list_leftovers()] == [
            ("e2b-sandbox", 1),
            ("kernel", 2),
            ("e2b-snapshot", 3),
        ]
        assert store.list_leftovers()[0] == first
        again = first.model_copy(update={"reason": "kill failed again", "created_at_ms": 4})
        store.record_leftover(again)  # the same kind and id: replaced
        assert store.list_leftovers()[-1] == again and len(store.list_leftovers()) == 3
        with pytest.raises(InterruptedError), store.transaction():
            store.record_leftover(Leftover(kind="kernel", resource_id="k2", reason="y"))
            raise InterruptedError
        assert len(store.list_leftovers()) == 3
        with pytest.raises(TypeError, match="record_leftover needs a Leftover"):
            store.record_leftover({"kind": "kernel"})  # type: ignore[arg-type]

    def test_a_store_written_through_its_api_has_no_damaged_row(
        self, store: CheckpointStore
    ) -> None:
        assert store.damaged_rows() == []
        populate(store)
        assert store.damaged_rows() == []
