"""The spec of `StoreConnection` (`ditto_jupyter.control.store.interface`).

Transactions: a block commits all of its writes or none, nested blocks are savepoints,
references are checked when the outermost block commits, uncommitted writes are invisible to
other threads, concurrent read-modify-writes lose nothing; a closed store refuses every
call.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from ditto_jupyter.control.store.interface import CheckpointStore, StoreConnection, StoreError
from ditto_jupyter.core.models import (
    SessionLifecycleStatus,
)
from ditto_jupyter.testing.contracts.store_data import (
    binding,
    checkpoint,
    dump_store,
    populate,
    session,
)


class StoreConnectionContract:
    """`StoreConnection`; a subclass provides a `store` fixture: a fresh, empty store per test."""

    def test_implements_the_role(self, store: CheckpointStore) -> None:
        assert isinstance(store, StoreConnection)

    def test_transaction_commits_everything(self, store: CheckpointStore) -> None:
        populate(store)
        dumped = dump_store(store)
        assert [s["session_id"] for s in dumped["sessions"]] == ["rt-a", "rt-b"]
        assert [c["checkpoint_id"] for c in dumped["checkpoints"]] == ["cp-a1", "cp-b1", "cp-a2"]
        assert dumped["heads"] == {"rt-a": "cp-a2", "rt-b": "cp-b1"}
        assert [b["runtime_id"] for b in dumped["bindings"]] == ["rt-a"]

    def test_rollback_leaves_the_store_as_it_was(self, store: CheckpointStore) -> None:
        populate(store)
        before = dump_store(store)
        with pytest.raises(RuntimeError, match="boom"), store.transaction():
            store.insert_session(session("rt-c", 30))
            store.put_session(session("rt-a", 10, status=SessionLifecycleStatus.CLOSED))
            store.put_checkpoint(checkpoint("cp-c1", "rt-c", 500))
            store.put_checkpoint(checkpoint("cp-a1", "rt-a", 100, name="renamed"))
            store.set_head("rt-a", None)
            store.set_head("rt-c", "cp-c1")
            store.put_binding(binding("rt-c"))
            store.delete_binding("rt-a")
            # reads inside the block see its own writes
            assert store.get_head("rt-c") == "cp-c1"
            assert store.get_binding("rt-a") is None
            raise RuntimeError("boom")
        assert dump_store(store) == before

    def test_failed_call_inside_a_block_keeps_earlier_writes(self, store: CheckpointStore) -> None:
        with store.transaction():
            store.insert_session(session("rt-1"))
            with pytest.raises(ValueError, match="already exists"):
                store.insert_session(session("rt-1"))
            store.put_binding(binding("rt-1"))
        assert store.get_session("rt-1") == session("rt-1")
        assert store.get_binding("rt-1") == binding("rt-1")

    def test_nested_blocks_are_savepoints(self, store: CheckpointStore) -> None:
        with store.transaction():
            store.insert_session(session("rt-1"))
            with pytest.raises(KeyError), store.transaction():
                store.insert_session(session("rt-2"))
                store.put_binding(binding("rt-1"))
                raise KeyError("inner fails")
            with store.transaction():
                store.put_checkpoint(checkpoint("cp-1", "rt-1"))
            assert store.get_session("rt-2") is None
        assert [s.session_id for s in store.list_sessions()] == ["rt-1"]
        assert store.get_binding("rt-1") is None
        assert store.get_checkpoint("cp-1") is not None

    def test_outer_failure_undoes_committed_inner_blocks(self, store: CheckpointStore) -> None:
        with pytest.raises(RuntimeError), store.transaction():
            with store.transaction():
                store.insert_session(session("rt-1"))
            raise RuntimeError("outer fails")
        assert store.list_sessions() == []

    def test_references_are_checked_at_commit_in_any_order(self, store: CheckpointStore) -> None:
        with store.transaction():
            store.set_head("rt-1", "cp-1")
            store.put_binding(binding("rt-1"))
            store.put_checkpoint(checkpoint("cp-1", "rt-1"))
            store.insert_session(session("rt-1"))
        assert store.get_head("rt-1") == "cp-1"
        dangling = "names checkpoint 'cp-9', which is not in the store"
        with pytest.raises(ValueError, match=dangling), store.transaction():
            store.insert_session(session("rt-2"))
            store.set_head("rt-2", "cp-9")
        assert store.get_session("rt-2") is None
        # a dangling reference made in a savepoint that rolled back does not count
        with store.transaction():
            with pytest.raises(KeyError), store.transaction():
                store.put_binding(binding("ghost"))
                raise KeyError("undo")
            store.insert_session(session("rt-3"))
        assert store.get_session("rt-3") is not None

    def test_uncommitted_writes_are_invisible_to_other_threads(
        self, store: CheckpointStore
    ) -> None:
        store.insert_session(session("rt-1"))
        seen: dict[str, Any] = {}

        def read() -> None:
            seen["session"] = store.get_session("rt-2")
            seen["head"] = store.get_head("rt-1")

        with store.transaction():
            store.insert_session(session("rt-2"))
            store.put_checkpoint(checkpoint("cp-1", "rt-1"))
            store.set_head("rt-1", "cp-1")
            reader = threading.Thread(target=read)
            reader.start()
            reader.join()
        assert seen == {"session": None, "head": None}
        assert store.get_head("rt-1") == "cp-1"

    def test_concurrent_read_modify_write_loses_nothing(self, store: CheckpointStore) -> None:
        store.insert_session(session("rt-1", metadata={"count": 0}))
        errors: list[BaseException] = []

        def bump(times: int) -> None:
            try:
                for _ in range(times):
                    with store.transaction():
                        current = store.get_session("rt-1")
                        assert current is not None
                        count = current.metadata["count"] + 1
                        store.put_session(current.model_copy(update={"metadata": {"count": count}}))
            except BaseException as exc:  # reported below, so a failure cannot hide
                errors.append(exc)

        threads = [threading.Thread(target=bump, args=(15,)) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        final = store.get_session("rt-1")
        assert final is not None and final.metadata["count"] == 60

    def test_close_refuses_later_calls(self, store: CheckpointStore) -> None:
        store.insert_session(session("rt-1"))
        store.close()
        with pytest.raises(StoreError, match="closed"):
            store.get_session("rt-1")
        with pytest.raises(StoreError, match="closed"):
            store.put_session(session("rt-2"))
        with pytest.raises(StoreError, match="closed"), store.transaction():
            pass

    def test_what_the_last_write_added_is_a_count_of_bytes(self, store: CheckpointStore) -> None:
        populate(store)
        added = store.last_commit_bytes()
        assert isinstance(added, int) and added >= 0
