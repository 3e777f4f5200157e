"""The spec of `LangGraphRows` (`ditto_jupyter.control.store.langgraph_rows`).

LangGraph's checkpoints of each runtime: a checkpoint and its new values stored together,
read back with the values its versions name and its writes in `writes_sort_key` order; the
newest of a namespace; listings newest first, a page at a time; threads deleted, copied
(as of a time, for a checkout), pruned; runs deleted; and every call within one runtime,
so the same thread id in two runtimes names two threads. A subclass provides a `store`
fixture: a fresh, empty store that plays the role.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ditto_jupyter.control.store.interface import CheckpointStore
from ditto_jupyter.control.store.langgraph_rows import LangGraphRows
from ditto_jupyter.core.errors import RuntimeClosed
from ditto_jupyter.core.models import SessionLifecycleStatus
from ditto_jupyter.core.models.langgraph import (
    LangGraphChannelValue,
    LangGraphCheckpoint,
    LangGraphCursor,
    LangGraphValue,
    LangGraphWrite,
)
from ditto_jupyter.testing.contracts.store_data import runtime

MANIFEST = "f" * 64


def value(data: bytes, type_: str = "bytes") -> LangGraphValue:
    return LangGraphValue(type=type_, data=data)


def lg_checkpoint(
    thread: str,
    checkpoint_id: str,
    *,
    ns: str = "",
    parent: str | None = None,
    versions: dict[str, str] | None = None,
    new: dict[str, bytes] | None = None,
    **metadata: Any,
) -> LangGraphCheckpoint:
    """A LangGraph checkpoint naming `versions`, with the values in `new` (channel ->
    bytes, at the version `versions` gives it)."""
    versions = versions or {}
    return LangGraphCheckpoint(
        thread_id=thread,
        checkpoint_ns=ns,
        checkpoint_id=checkpoint_id,
        parent_checkpoint_id=parent,
        checkpoint=value(f"body-{checkpoint_id}".encode()),
        versions=versions,
        metadata={"step": 0, **metadata},
        values=[
            LangGraphChannelValue(channel=channel, version=versions[channel], value=value(data))
            for channel, data in (new or {}).items()
        ],
    )


def write(
    task: str, idx: int, data: bytes, *, path: str = "", channel: str = "ch"
) -> LangGraphWrite:
    return LangGraphWrite(task_id=task, task_path=path, idx=idx, channel=channel, value=value(data))


class LangGraphRowsContract:
    """`LangGraphRows`; a subclass provides a `store` fixture: a fresh, empty store."""

    @pytest.fixture
    def rows(self, store: CheckpointStore) -> LangGraphRows:
        assert isinstance(store, LangGraphRows)
        store.insert_session(runtime("rt-a"))
        store.insert_session(runtime("rt-b"))
        return store

    def test_implements_the_role(self, store: CheckpointStore) -> None:
        assert isinstance(store, LangGraphRows)

    def test_a_checkpoint_reads_back_with_the_values_its_versions_name(
        self, rows: LangGraphRows
    ) -> None:
        rows.put_langgraph_checkpoint(
            "rt-a",
            lg_checkpoint("t", "01", versions={"a": "1", "b": "1"}, new={"a": b"a1", "b": b"b1"}),
            now_ms=10,
        )
        rows.put_langgraph_checkpoint(
            "rt-a",
            lg_checkpoint("t", "02", parent="01", versions={"a": "2", "b": "1"}, new={"a": b"a2"}),
            now_ms=20,
        )
        second = rows.get_langgraph_tuple("rt-a", "t", "", "02")
        assert second is not None
        assert second.parent_checkpoint_id == "01"
        assert second.checkpoint.data == b"body-02"
        assert {v.channel: v.value.data for v in second.values} == {"a": b"a2", "b": b"b1"}
        first = rows.get_langgraph_tuple("rt-a", "t", "", "01")
        assert first is not None
        assert {v.channel: v.value.data for v in first.values} == {"a": b"a1", "b": b"b1"}
        newest = rows.get_langgraph_tuple("rt-a", "t", "", None)
        assert newest is not None and newest.checkpoint_id == "02"
        assert rows.get_langgraph_tuple("rt-a", "t", "", "03") is None
        assert rows.get_langgraph_tuple("rt-a", "t", "other-ns", None) is None

    def test_a_version_names_one_value(self, rows: LangGraphRows) -> None:
        rows.put_langgraph_checkpoint(
            "rt-a", lg_checkpoint("t", "01", versions={"a": "1"}, new={"a": b"first"}), now_ms=1
        )
        rows.put_langgraph_checkpoint(
            "rt-a", lg_checkpoint("t", "02", versions={"a": "1"}, new={"a": b"again"}), now_ms=2
        )
        found = rows.get_langgraph_tuple("rt-a", "t", "", "02")
        assert found is not None and found.values[0].value.data == b"first"

    def test_a_thread_of_an_unknown_runtime_is_refused(self, rows: LangGraphRows) -> None:
        with pytest.raises(ValueError, match="rt-zz"):
            rows.put_langgraph_checkpoint("rt-zz", lg_checkpoint("t", "01"), now_ms=1)
        assert rows.langgraph_threads("rt-zz") == []

    def test_runtimes_keep_threads_of_the_same_id_apart(self, rows: LangGraphRows) -> None:
        rows.put_langgraph_checkpoint("rt-a", lg_checkpoint("t", "01", note="a"), now_ms=1)
        assert rows.get_langgraph_tuple("rt-b", "t", "", None) is None
        rows.put_langgraph_checkpoint("rt-b", lg_checkpoint("t", "01", note="b"), now_ms=1)
        a, b = (rows.get_langgraph_tuple(rt, "t", "", None) for rt in ("rt-a", "rt-b"))
        assert a is not None and a.metadata["note"] == "a"
        assert b is not None and b.metadata["note"] == "b"
        assert rows.delete_langgraph_thread("rt-b", "t") > 0
        assert rows.get_langgraph_tuple("rt-a", "t", "", None) is not None
        assert rows.langgraph_runtimes_with_threads(["rt-a", "rt-b"]) == {"rt-a"}

    def test_writes_sort_and_are_kept_or_replaced(self, rows: LangGraphRows) -> None:
        rows.put_langgraph_checkpoint("rt-a", lg_checkpoint("t", "01"), now_ms=1)
        rows.put_langgraph_writes(
            "rt-a",
            "t",
            "",
            "01",
            [write("task-b", 0, b"b0", path="1"), write("task-a", 1, b"a1", path="1")],
            replace=False,
            now_ms=2,
        )
        rows.put_langgraph_writes(
            "rt-a", "t", "", "01", [write("task-z", 0, b"z0", path="0")], replace=False, now_ms=3
        )
        rows.put_langgraph_writes(
            "rt-a", "t", "", "01", [write("task-z", 0, b"kept?", path="0")], replace=False, now_ms=4
        )
        found = rows.get_langgraph_tuple("rt-a", "t", "", "01")
        assert found is not None
        assert [(w.task_id, w.value.data) for w in found.writes] == [
            ("task-z", b"z0"),
            ("task-a", b"a1"),
            ("task-b", b"b0"),
        ]
        rows.put_langgraph_writes(
            "rt-a", "t", "", "01", [write("task-z", 0, b"new", path="0")], replace=True, now_ms=5
        )
        found = rows.get_langgraph_tuple("rt-a", "t", "", "01")
        assert found is not None and found.writes[0].value.data == b"new"

    def test_pages_go_newest_first_across_threads_and_namespaces(self, rows: LangGraphRows) -> None:
        for thread, ns, cid in [("t1", "", "01"), ("t2", "", "02"), ("t1", "sub", "03")]:
            rows.put_langgraph_checkpoint("rt-a", lg_checkpoint(thread, cid, ns=ns), now_ms=1)
        rows.put_langgraph_checkpoint("rt-b", lg_checkpoint("t1", "09"), now_ms=1)

        def page(**narrow: Any) -> list[str]:
            arguments: dict[str, Any] = {
                "thread_id": None,
                "checkpoint_ns": None,
                "checkpoint_id": None,
                "before": None,
                "after": None,
                "limit": 10,
                **narrow,
            }
            return [t.checkpoint_id for t in rows.page_langgraph_tuples("rt-a", **arguments)]

        assert page() == ["03", "02", "01"]
        assert page(thread_id="t1") == ["03", "01"]
        assert page(thread_id="t1", checkpoint_ns="") == ["01"]
        assert page(before="03") == ["02", "01"]
        assert page(limit=2) == ["03", "02"]
        cursor = LangGraphCursor(checkpoint_id="02", thread_id="t2", checkpoint_ns="")
        assert page(after=cursor) == ["01"]
        assert page(checkpoint_id="02") == ["02"]

    def test_a_copy_holds_what_was_stored_by_then(self, rows: LangGraphRows) -> None:
        rows.put_langgraph_checkpoint(
            "rt-a", lg_checkpoint("t", "01", versions={"a": "1"}, new={"a": b"a1"}), now_ms=10
        )
        rows.put_langgraph_writes(
            "rt-a", "t", "", "01", [write("task", 0, b"w-then")], replace=False, now_ms=15
        )
        rows.put_langgraph_checkpoint(
            "rt-a",
            lg_checkpoint("t", "02", parent="01", versions={"a": "2"}, new={"a": b"a2"}),
            now_ms=30,
        )
        rows.put_langgraph_writes(
            "rt-a", "t", "", "01", [write("late", 0, b"w-later")], replace=False, now_ms=31
        )
        copied = rows.copy_langgraph_thread("rt-a", "t", "rt-b", "t", stored_by_ms=20, now_ms=40)
        assert copied == 1
        child = rows.get_langgraph_tuple("rt-b", "t", "", None)
        assert child is not None and child.checkpoint_id == "01"
        assert [v.value.data for v in child.values] == [b"a1"]
        assert [w.value.data for w in child.writes] == [b"w-then"]
        # the child goes on apart from its source
        rows.put_langgraph_checkpoint(
            "rt-b",
            lg_checkpoint("t", "03", parent="01", versions={"a": "3"}, new={"a": b"b3"}),
            now_ms=50,
        )
        source = rows.get_langgraph_tuple("rt-a", "t", "", None)
        assert source is not None and source.checkpoint_id == "02"
        # nothing stored by then: no thread
        assert (
            rows.copy_langgraph_thread("rt-a", "t", "rt-b", "early", stored_by_ms=5, now_ms=60) == 0
        )
        assert [t.thread_id for t in rows.langgraph_threads("rt-b")] == ["t"]

    def test_a_whole_copy_and_its_refusal_into_a_thread_in_use(self, rows: LangGraphRows) -> None:
        rows.put_langgraph_checkpoint(
            "rt-a", lg_checkpoint("src", "01", versions={"a": "1"}, new={"a": b"a1"}), now_ms=1
        )
        rows.put_langgraph_checkpoint("rt-a", lg_checkpoint("src", "02", parent="01"), now_ms=2)
        assert rows.copy_langgraph_thread("rt-a", "src", "rt-a", "dst", now_ms=3) == 2
        assert rows.copy_langgraph_thread("rt-a", "nothing", "rt-a", "dst2", now_ms=3) == 0
        with pytest.raises(ValueError, match="dst"):
            rows.copy_langgraph_thread("rt-a", "src", "rt-a", "dst", now_ms=4)
        summary = {
            t.thread_id: (t.checkpoints, t.latest_checkpoint_id)
            for t in rows.langgraph_threads("rt-a")
        }
        assert summary == {"dst": (2, "02"), "src": (2, "02")}

    def test_keep_latest_keeps_each_namespaces_newest_and_what_it_names(
        self, rows: LangGraphRows
    ) -> None:
        rows.put_langgraph_checkpoint(
            "rt-a", lg_checkpoint("t", "01", versions={"a": "1"}, new={"a": b"a1"}), now_ms=1
        )
        rows.put_langgraph_checkpoint(
            "rt-a",
            lg_checkpoint("t", "02", parent="01", versions={"a": "2"}, new={"a": b"a2"}),
            now_ms=2,
        )
        rows.put_langgraph_checkpoint("rt-a", lg_checkpoint("t", "03", ns="sub"), now_ms=3)
        rows.put_langgraph_writes(
            "rt-a", "t", "", "01", [write("x", 0, b"w1")], replace=False, now_ms=4
        )
        rows.put_langgraph_writes(
            "rt-a", "t", "", "02", [write("x", 0, b"w2")], replace=False, now_ms=4
        )
        assert rows.prune_langgraph_threads("rt-a", ["t", "unknown"], keep_latest=True) == 1
        kept = rows.get_langgraph_tuple("rt-a", "t", "", None)
        assert kept is not None and kept.checkpoint_id == "02"
        assert kept.parent_checkpoint_id is None  # its parent is gone
        assert [w.value.data for w in kept.writes] == [b"w2"]
        assert [v.value.data for v in kept.values] == [b"a2"]
        assert rows.get_langgraph_tuple("rt-a", "t", "sub", None) is not None
        assert rows.prune_langgraph_threads("rt-a", ["t"], keep_latest=False) == 2
        assert rows.get_langgraph_tuple("rt-a", "t", "", None) is None

    def test_runs_are_deleted_within_the_runtime(self, rows: LangGraphRows) -> None:
        rows.put_langgraph_checkpoint("rt-a", lg_checkpoint("t", "01", run_id="r1"), now_ms=1)
        rows.put_langgraph_checkpoint("rt-a", lg_checkpoint("t", "02", run_id="r2"), now_ms=2)
        rows.put_langgraph_checkpoint("rt-b", lg_checkpoint("t", "01", run_id="r1"), now_ms=1)
        assert rows.delete_langgraph_runs("rt-a", ["r1", "r-none"]) == 1
        left = rows.get_langgraph_tuple("rt-a", "t", "", None)
        assert left is not None and left.checkpoint_id == "02"
        assert rows.get_langgraph_tuple("rt-a", "t", "", "01") is None
        assert rows.get_langgraph_tuple("rt-b", "t", "", "01") is not None

    def test_the_manifests_values_name_are_found(self, rows: LangGraphRows) -> None:
        checkpoint = lg_checkpoint("t", "01").model_copy(
            update={"checkpoint": LangGraphValue(type="bytes", manifest_id=MANIFEST)}
        )
        rows.put_langgraph_checkpoint("rt-a", checkpoint, now_ms=1)
        found = rows.get_langgraph_tuple("rt-a", "t", "", "01")
        assert found is not None and found.checkpoint.manifest_id == MANIFEST
        assert rows.langgraph_manifests([MANIFEST, "0" * 64]) == {MANIFEST}
        assert rows.langgraph_thread_manifests("rt-a", ["t"]) == {MANIFEST}
        assert rows.langgraph_thread_manifests("rt-a", None) == {MANIFEST}
        assert rows.langgraph_thread_manifests("rt-a", ["other"]) == set()
        assert rows.langgraph_thread_manifests("rt-b", None) == set()
        rows.delete_langgraph_thread("rt-a", "t")
        assert rows.langgraph_manifests([MANIFEST]) == set()

    def test_a_put_says_whether_its_checkpoint_had_writes(self, rows: LangGraphRows) -> None:
        assert rows.put_langgraph_checkpoint("rt-a", lg_checkpoint("t", "01"), now_ms=1) is False
        rows.put_langgraph_writes(
            "rt-a", "t", "", "02", [write("task", 0, b"early")], replace=False, now_ms=2
        )
        assert rows.put_langgraph_checkpoint("rt-a", lg_checkpoint("t", "02"), now_ms=3) is True

    def test_a_closed_runtimes_threads_refuse_writes(
        self, rows: LangGraphRows, store: CheckpointStore
    ) -> None:
        rows.put_langgraph_checkpoint("rt-a", lg_checkpoint("t", "01", run_id="r1"), now_ms=1)
        store.put_session(runtime("rt-a", status=SessionLifecycleStatus.CLOSED))
        refused: list[Callable[[], object]] = [
            lambda: rows.put_langgraph_checkpoint("rt-a", lg_checkpoint("t", "02"), now_ms=2),
            lambda: rows.put_langgraph_writes(
                "rt-a", "t", "", "01", [write("task", 0, b"x")], replace=False, now_ms=2
            ),
            lambda: rows.delete_langgraph_thread("rt-a", "t"),
            lambda: rows.copy_langgraph_thread("rt-a", "t", "rt-a", "u", now_ms=2),
            lambda: rows.prune_langgraph_threads("rt-a", ["t"], keep_latest=False),
            lambda: rows.delete_langgraph_runs("rt-a", ["r1"]),
        ]
        for write_to in refused:
            with pytest.raises(RuntimeClosed, match="closed"):
                write_to()
        found = rows.get_langgraph_tuple("rt-a", "t", "", None)
        assert found is not None and found.checkpoint_id == "01" and found.writes == []
        assert [thread.thread_id for thread in rows.langgraph_threads("rt-a")] == ["t"]
