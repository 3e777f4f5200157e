"""What a user relies on beyond the conformance suite, without a server: a large value
goes to the runtime's blob store (not into a database row) and reads back; garbage
collection keeps it while a checkpoint names it, and frees it once the thread is deleted;
a manifest that is not a LangGraph value of the runtime is refused, leaving the store as
it was; a real graph resumes from its thread in a new saver."""

from __future__ import annotations

import operator
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph

from ditto_jupyter.core.errors import InvalidRequest, RuntimeClosed
from ditto_jupyter.core.models.langgraph import LangGraphCheckpoint, LangGraphValue
from ditto_jupyter.kernel.local_control import LocalControl
from ditto_jupyter.langgraph import DittoSaver


@pytest.fixture
def control(tmp_path: Path) -> Iterator[LocalControl]:
    opened = LocalControl({}, data_dir=tmp_path / "data", notebook_folder=tmp_path)
    yield opened
    opened.shutdown()


def put_value(saver: DittoSaver, thread: str, value: Any) -> dict[str, Any]:
    config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    checkpoint: Any = {
        "v": 1,
        "id": "1f000000-0000-6000-8000-000000000001",
        "ts": "2026-01-01T00:00:00+00:00",
        "channel_values": {"big": value},
        "channel_versions": {"big": 1},
        "versions_seen": {},
        "updated_channels": None,
    }
    stored: dict[str, Any] = saver.put(
        config, checkpoint, {"source": "input", "step": -1}, {"big": 1}
    )
    return stored


def test_a_large_value_lives_in_the_blob_store_and_gc_keeps_it(control: LocalControl) -> None:
    saver = DittoSaver(control=control)
    big = bytes(range(256)) * 4096  # 1 MiB
    stored = put_value(saver, "t", big)
    row = control.service.langgraph.get(control.runtime_id, "t", "", None)
    assert row is not None and row.values[0].value.manifest_id is not None
    assert row.values[0].value.data == b""

    control.service.gc(grace_seconds=0)
    found = saver.get_tuple(stored)
    assert found is not None and found.checkpoint["channel_values"]["big"] == big

    manifest = row.values[0].value.manifest_id
    saver.delete_thread("t")
    control.service.gc(grace_seconds=0)
    assert not control.service.blobs.has_manifest(manifest)


def test_a_manifest_of_another_kind_is_refused(control: LocalControl) -> None:
    blobs = control.service.blobs
    stored = blobs.put_bytes(b"not a langgraph value")
    manifest, _ = blobs.put_manifest({"kind": "workspace", "chunks": stored.chunks})
    checkpoint = LangGraphCheckpoint(
        thread_id="t",
        checkpoint_id="01",
        checkpoint=LangGraphValue(type="msgpack", manifest_id=manifest),
        versions={},
        metadata={},
    )
    with pytest.raises(InvalidRequest, match="not a LangGraph value"):
        control.service.langgraph.put(control.runtime_id, checkpoint)
    assert control.service.langgraph.threads(control.runtime_id).threads == []


class State(TypedDict):
    n: int
    seen: Annotated[list[int], operator.add]


def step(state: State) -> dict[str, Any]:
    return {"n": state["n"] + 1, "seen": [state["n"]]}


def test_a_graph_goes_on_from_its_thread_with_a_new_saver(control: LocalControl) -> None:
    builder = StateGraph(State)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    plan: Any = {"configurable": {"thread_id": "plan"}}
    builder.compile(checkpointer=DittoSaver(control=control)).invoke({"n": 0, "seen": []}, plan)

    again = builder.compile(checkpointer=DittoSaver(control=control))
    assert again.get_state(plan).values == {"n": 1, "seen": [0]}
    again.invoke({"n": 5, "seen": []}, plan)
    assert again.get_state(plan).values == {"n": 6, "seen": [0, 5]}
    history = list(again.get_state_history(plan))
    assert [snapshot.values.get("n") for snapshot in history][:2] == [6, 5]


def test_a_closed_runtimes_threads_refuse_writes(control: LocalControl) -> None:
    """Its threads are kept, read-only: each write says the runtime is closed, in one line,
    and the store stays as it was."""
    saver = DittoSaver(control=control)
    stored = put_value(saver, "t", b"kept")
    control._run(control.service.close(control.runtime_id, discard=True))
    writes: list[Any] = [
        lambda: put_value(saver, "t2", b"new"),
        lambda: saver.put_writes(stored, [("big", 1)], "task"),
        lambda: saver.delete_thread("t"),
        lambda: saver.copy_thread("t", "t3"),
        lambda: saver.prune(["t"], strategy="delete"),
        lambda: saver.delete_for_runs(["run"]),
    ]
    for write in writes:
        with pytest.raises(RuntimeClosed) as refused:
            write()
        assert "closed" in str(refused.value) and "\n" not in str(refused.value)
    threads = control.service.langgraph.threads(control.runtime_id).threads
    assert [(item.thread_id, item.checkpoints) for item in threads] == [("t", 1)]
    found = DittoSaver(control=control).get_tuple(stored)
    assert found is not None and found.checkpoint["channel_values"]["big"] == b"kept"
    assert found.pending_writes == []
