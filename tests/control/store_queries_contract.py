"""The store contract for the indexed queries and the leftovers (part of `StoreContract`).

`StoreContract` (test_store.py) inherits these, so they run on SQLite, memory and
PostgreSQL: what a prune needs (`prune_candidates`), a runtime's checkouts, the live
runtime of a kernel, and the leftovers table.
"""

from __future__ import annotations

from typing import Any

import pytest

from ditto_jupyter.control.store import CheckpointStore
from ditto_jupyter.core.models import (
    AutoCheckpointCell,
    Leftover,
    RuntimeCheckpoint,
    SessionLifecycleStatus,
    SessionRecord,
)


def record(rid: str, created: int = 1_000, **changes: Any) -> SessionRecord:
    """A session record with fixed timestamps."""
    fields: dict[str, Any] = {
        "session_id": rid,
        "conversation_id": f"{rid}.ipynb",
        "sender_id": "ana",
        "created_at_ms": created,
        "updated_at_ms": created,
    }
    return SessionRecord(**{**fields, **changes})


def taken(
    cid: str, rid: str, created: int, *, automatic: bool = False, **changes: Any
) -> RuntimeCheckpoint:
    """A checkpoint of `rid`; `automatic` as %autocheckpoint takes them (cell `created`)."""
    cell = AutoCheckpointCell(execution_count=created, source=f"v = {created}")
    fields: dict[str, Any] = {
        "checkpoint_id": cid,
        "runtime_id": rid,
        "parent_checkpoint_id": None,
        "session": record(rid),
        "context_manifest_id": "a" * 64,
        "created_at_ms": created,
        "name": f"cell-{created}" if automatic else None,
        "automatic": cell if automatic else None,
    }
    return RuntimeCheckpoint(**{**fields, **changes})


class IndexedQueriesContract:
    """The indexed queries and the leftovers; subclasses provide the `store` fixture."""

    def test_checkouts_of_a_runtime(self, store: CheckpointStore) -> None:
        store.insert_session(record("src", 1))
        store.insert_session(record("src-b", 3, source_runtime_id="src", source_checkpoint_id="c"))
        store.insert_session(record("src-a", 2, source_runtime_id="src"))
        store.insert_session(record("other", 4, source_runtime_id="elsewhere"))
        assert [s.session_id for s in store.checkouts_of("src")] == ["src-a", "src-b"]
        assert store.checkouts_of("src-a") == [] and store.checkouts_of("nobody") == []
        store.put_session(record("src-a", 2))  # a rewrite without the origin drops it
        assert [s.session_id for s in store.checkouts_of("src")] == ["src-b"]

    def test_the_live_runtime_of_a_kernel(self, store: CheckpointStore) -> None:
        store.insert_session(record("a", 1, handle_state={"kernel_id": "k1"}))
        paused = SessionLifecycleStatus.PAUSED
        store.insert_session(record("b", 2, status=paused, handle_state={"kernel_id": "k2"}))
        busy = SessionLifecycleStatus.BUSY
        store.insert_session(record("c", 3, status=busy, handle_state={"kernel_id": "k3"}))
        store.insert_session(record("d", 4, handle_state={"kernel_id": 5}))  # not an id
        found = store.live_session_with_kernel("k1")
        assert found is not None and found.session_id == "a"
        found = store.live_session_with_kernel("k3")
        assert found is not None and found.session_id == "c"
        assert store.live_session_with_kernel("k2") is None  # paused: not live
        assert store.live_session_with_kernel("k9") is None
        store.put_session(record("a", 1, handle_state={"kernel_id": "k4"}))  # a new kernel
        assert store.live_session_with_kernel("k1") is None
        found = store.live_session_with_kernel("k4")
        assert found is not None and found.session_id == "a"

    def test_prune_candidates_are_the_old_whole_automatic_ones(
        self, store: CheckpointStore
    ) -> None:
        for rid, created in (("r", 1), ("o", 2), ("q", 3)):
            store.insert_session(record(rid, created))
        store.put_session(record("o", 2, source_runtime_id="r", source_checkpoint_id="a1"))
        for n in range(1, 7):
            store.put_checkpoint(taken(f"a{n}", "r", 100 + n, automatic=True))
        store.put_checkpoint(taken("named", "r", 100, name="cell-100"))  # on request
        store.put_checkpoint(taken("gone", "r", 99, automatic=True, pruned=True))
        store.put_checkpoint(taken("q1", "q", 200, parent_checkpoint_id="a3"))  # a branch
        store.set_head("r", "a2")
        store.put_checkpoint(taken("auto-of-q", "q", 201, automatic=True))

        found = store.prune_candidates("r", 2)
        assert [c.checkpoint_id for c in found.beyond] == ["a1", "a2", "a3", "a4"]
        assert found.held == {"a1", "a2", "a3"}  # a source, the head, a parent of q's
        assert found.whole == 6
        assert found.beyond[0] == store.get_checkpoint("a1")  # whole records
        assert store.prune_candidates("r", 6).beyond == []
        assert store.prune_candidates("r", 60).whole == 6

        store.put_checkpoint(taken("a4", "r", 104, automatic=True, pruned=True))  # thinned
        found = store.prune_candidates("r", 2)
        assert [c.checkpoint_id for c in found.beyond] == ["a1", "a2", "a3"]
        assert found.whole == 5
        assert [c.checkpoint_id for c in store.prune_candidates("q", 0).beyond] == ["auto-of-q"]

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
