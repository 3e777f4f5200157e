"""The spec of `RuntimeRecords` (`ditto_jupyter.control.store.interface`).

The runtimes: one record per id, inserted once or replaced, listed by creation then id in
code-point order on every backend, and the indexed lookups of a runtime's checkouts and of
the live runtime of a kernel, and the children of a fan-out.
"""

from __future__ import annotations

import pytest

from ditto_jupyter.control.store.interface import CheckpointStore, RuntimeRecords
from ditto_jupyter.core.models import (
    FanOutMember,
    SessionLifecycleStatus,
    SessionRecord,
)
from ditto_jupyter.testing.contracts.store_data import (
    record,
    session,
)


class RuntimeRecordsContract:
    """`RuntimeRecords`; a subclass provides a `store` fixture: a fresh, empty store per test."""

    def test_implements_the_role(self, store: CheckpointStore) -> None:
        assert isinstance(store, RuntimeRecords)

    def test_insert_get_and_refuse_duplicate(self, store: CheckpointStore) -> None:
        original = session("rt-1", metadata={"k": [1, 2]})
        store.insert_session(original)
        assert store.get_session("rt-1") == original
        with pytest.raises(ValueError, match="'rt-1' already exists"):
            store.insert_session(session("rt-1", conversation_id="other"))
        assert store.get_session("rt-1") == original
        assert store.get_session("missing") is None

    def test_put_session_inserts_and_replaces(self, store: CheckpointStore) -> None:
        store.put_session(session("rt-1"))
        busy = session("rt-1", status=SessionLifecycleStatus.BUSY, updated_at_ms=5_000)
        store.put_session(busy)
        assert store.get_session("rt-1") == busy
        assert [s.session_id for s in store.list_sessions()] == ["rt-1"]

    def test_list_sessions_by_created_then_id(self, store: CheckpointStore) -> None:
        for rid, created in [("c", 5), ("b", 1), ("a", 5), ("d", 3), ("B", 5), ("é", 5)]:
            store.insert_session(session(rid, created))
        # ties by code point, on every backend whatever its locale
        assert [s.session_id for s in store.list_sessions()] == ["b", "d", "B", "a", "c", "é"]

    def test_checkouts_of_a_runtime(self, store: CheckpointStore) -> None:
        store.insert_session(record("src", 1))
        store.insert_session(record("src-b", 3, source_runtime_id="src", source_checkpoint_id="c"))
        store.insert_session(record("src-a", 2, source_runtime_id="src"))
        store.insert_session(record("other", 4, source_runtime_id="elsewhere"))
        assert [s.session_id for s in store.checkouts_of("src")] == ["src-a", "src-b"]
        assert store.checkouts_of("src-a") == [] and store.checkouts_of("nobody") == []
        store.put_session(record("src-a", 2))  # a rewrite without the origin drops it
        assert [s.session_id for s in store.checkouts_of("src")] == ["src-b"]

    def test_the_children_of_a_fan_out(self, store: CheckpointStore) -> None:
        def child(rid: str, created: int, fanout: str, index: int) -> SessionRecord:
            member = FanOutMember(id=fanout, index=index, size=2)
            return record(rid, created, source_runtime_id="src", fanout=member)

        store.insert_session(child("b", 1, "fo-1", 1))
        store.insert_session(child("a", 2, "fo-1", 0))
        store.insert_session(child("c", 3, "fo-2", 0))
        store.insert_session(record("d", 4, source_runtime_id="src"))
        assert [s.session_id for s in store.fanout_members("fo-1")] == ["b", "a"]
        found = store.get_session("a")
        assert found is not None and found.fanout == FanOutMember(id="fo-1", index=0, size=2)
        assert store.fanout_members("fo-3") == []
        store.put_session(record("b", 1, source_runtime_id="src"))  # a rewrite drops it
        assert [s.session_id for s in store.fanout_members("fo-1")] == ["a"]

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
