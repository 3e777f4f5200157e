"""The kernel's cache of each thread's newest checkpoint (`ditto_jupyter.langgraph.cache`),
without a server: `get_tuple` of the newest is answered without a read of the store once
the store was read for it, and stays what the store holds through every write this kernel
makes (puts, pending writes, a fork from an older checkpoint, writes stored before a
checkpoint) and every deletion that invalidates it (delete_thread, copy_thread's target,
prune, delete_for_runs, a write that failed). Each check compares the cached answer with
a new saver's read of the store, with the cache of its process cleared."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import CheckpointTuple, empty_checkpoint

from ditto_jupyter.core.errors import InvalidRequest
from ditto_jupyter.kernel.local_control import LocalControl
from ditto_jupyter.langgraph import DittoSaver
from ditto_jupyter.langgraph import cache as cache_module


@pytest.fixture
def control(tmp_path: Path) -> Iterator[LocalControl]:
    opened = LocalControl({}, data_dir=tmp_path / "data", notebook_folder=tmp_path)
    yield opened
    opened.shutdown()


def thread(name: str, ns: str = "") -> Any:
    return {"configurable": {"thread_id": name, "checkpoint_ns": ns}}


def put(
    saver: DittoSaver,
    config: Any,
    values: dict[str, Any],
    previous: Any = None,
    *,
    changed: list[str] | None = None,
) -> Any:
    """Put a checkpoint after `previous` (a checkpoint dict) with `values`; the channels in
    `changed` (all by default) get a new version."""
    checkpoint: Any = empty_checkpoint()
    versions = dict(previous["channel_versions"]) if previous is not None else {}
    new: dict[str, Any] = {}
    for channel in changed if changed is not None else list(values):
        new[channel] = saver.get_next_version(versions.get(channel), None)
    versions.update(new)
    checkpoint["channel_versions"] = versions
    checkpoint["channel_values"] = dict(values)
    stored = saver.put(config, checkpoint, {"source": "loop", "step": 1, "parents": {}}, new)
    return stored, checkpoint


def store_view(control: LocalControl, config: Any) -> CheckpointTuple | None:
    """What the store holds, read by a new saver with the process's caches cleared."""
    cache_module._caches.clear()
    return DittoSaver(control=control).get_tuple(config)


def same(found: CheckpointTuple | None, stored: CheckpointTuple | None) -> bool:
    if found is None or stored is None:
        return found is stored
    return (
        found.config == stored.config
        and found.checkpoint == stored.checkpoint
        and found.metadata == stored.metadata
        and found.parent_config == stored.parent_config
        and found.pending_writes == stored.pending_writes
    )


def test_the_newest_is_answered_without_reading_the_store(
    control: LocalControl, monkeypatch: pytest.MonkeyPatch
) -> None:
    saver = DittoSaver(control=control)
    stored, first = put(saver, thread("t"), {"a": 1, "context": "c" * 4096})
    assert saver.get_tuple(thread("t")) is not None  # the store is read once
    stored, _ = put(saver, stored, {"a": 2, "context": "c" * 4096}, first, changed=["a"])
    saver.put_writes(stored, [("a", 3)], "task-1")

    def no_read(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the store was read")

    monkeypatch.setattr(control.service.langgraph, "get", no_read)
    found = saver.get_tuple(thread("t"))
    assert found is not None
    assert found.checkpoint["channel_values"] == {"a": 2, "context": "c" * 4096}
    assert found.pending_writes == [("task-1", "a", 3)]
    assert DittoSaver(control=control).get_tuple(stored) is not None  # shared by savers
    monkeypatch.undo()
    assert same(found, store_view(control, thread("t")))


def test_puts_and_writes_keep_it_what_the_store_holds(control: LocalControl) -> None:
    saver = DittoSaver(control=control)
    assert saver.get_tuple(thread("t")) is None  # known empty from here on
    config, checkpoint = put(saver, thread("t"), {"a": 1, "b": [1]})
    assert same(saver.get_tuple(thread("t")), store_view(control, thread("t")))
    for step in range(2, 5):
        config, checkpoint = put(saver, config, {"a": step, "b": [1]}, checkpoint, changed=["a"])
        saver.put_writes(config, [("a", step * 10), ("b", [step])], "task-b", "path-2")
        saver.put_writes(config, [("a", step * 100)], "task-a", "path-1")
        saver.put_writes(config, [("a", -1)], "task-a", "path-1")  # kept: no replace
        cached = saver.get_tuple(thread("t"))
        assert same(cached, store_view(control, thread("t")))
        assert cached is not None and cached.pending_writes[0] == ("task-a", "a", step * 100)
    # a special write replaces what the task wrote
    saver.put_writes(config, [("__error__", "boom")], "task-a", "path-1")
    saver.put_writes(config, [("__error__", "again")], "task-a", "path-1")
    assert same(saver.get_tuple(thread("t")), store_view(control, thread("t")))
    # an older checkpoint asked by id, and another namespace
    put(saver, thread("t", "sub"), {"x": 1})
    assert same(saver.get_tuple(thread("t", "sub")), store_view(control, thread("t", "sub")))


def test_a_fork_and_writes_before_a_checkpoint_leave_no_stale_answer(
    control: LocalControl,
) -> None:
    saver = DittoSaver(control=control)
    first_config, first = put(saver, thread("t"), {"a": 1, "b": 1})
    saver.get_tuple(thread("t"))
    second_config, _ = put(saver, first_config, {"a": 2, "b": 1}, first, changed=["a"])
    # a fork from the first checkpoint: its versions are not the newest's
    fork: Any = empty_checkpoint()
    fork["channel_versions"] = {"a": first["channel_versions"]["a"], "b": "x.fork"}
    fork["channel_values"] = {"a": 1, "b": 9}
    saver.put(first_config, fork, {"source": "fork", "step": 2, "parents": {}}, {"b": "x.fork"})
    assert same(saver.get_tuple(thread("t")), store_view(control, thread("t")))

    # writes stored for a checkpoint before it is: its put must not hide them
    saver.get_tuple(thread("t"))
    ahead: Any = empty_checkpoint()
    ahead["channel_versions"] = dict(fork["channel_versions"])
    ahead["channel_values"] = {"a": 1, "b": 9}
    ahead_config = {"configurable": {**thread("t")["configurable"], "checkpoint_id": ahead["id"]}}
    saver.put_writes(ahead_config, [("a", "early")], "task-0")
    cache_module._caches.clear()
    fresh = DittoSaver(control=control)
    fresh.get_tuple(thread("t"))  # the store read again: the writes are not the newest's
    fresh.put(second_config, ahead, {"source": "loop", "step": 3, "parents": {}}, {})
    found = fresh.get_tuple(thread("t"))
    assert found is not None and found.pending_writes == [("task-0", "a", "early")]
    assert same(found, store_view(control, thread("t")))


def test_deletions_forget_what_they_change(control: LocalControl) -> None:
    saver = DittoSaver(control=control)
    config, checkpoint = put(saver, thread("t"), {"a": 1})
    put(saver, config, {"a": 2}, checkpoint)
    saver.get_tuple(thread("t"))
    saver.delete_thread("t")
    assert saver.get_tuple(thread("t")) is None

    config, checkpoint = put(saver, thread("src"), {"a": 1})
    assert saver.get_tuple(thread("dst")) is None  # known empty
    saver.copy_thread("src", "dst")
    copied = saver.get_tuple(thread("dst"))
    assert copied is not None and copied.checkpoint["channel_values"] == {"a": 1}

    put(saver, config, {"a": 2}, checkpoint)
    saver.get_tuple(thread("src"))
    saver.prune(["src"], strategy="delete")
    assert saver.get_tuple(thread("src")) is None

    run: Any = {"configurable": {**thread("r")["configurable"]}}
    checkpoint = empty_checkpoint()
    saver.put(run, checkpoint, {"source": "loop", "step": 1, "run_id": "run-1"}, {})  # type: ignore[typeddict-unknown-key]
    saver.get_tuple(thread("r"))
    saver.delete_for_runs(["run-1"])
    assert saver.get_tuple(thread("r")) is None
    assert same(saver.get_tuple(thread("dst")), store_view(control, thread("dst")))


def test_a_failed_write_forgets_the_thread(control: LocalControl) -> None:
    saver = DittoSaver(control=control)
    put(saver, thread("t"), {"a": 1})
    saver.get_tuple(thread("t"))
    with pytest.raises(InvalidRequest):
        saver.copy_thread("t", "t")
    bad: Any = empty_checkpoint()
    bad["channel_versions"] = {"a": "2"}
    bad["channel_values"] = {"a": 2}
    with pytest.raises(Exception):  # noqa: B017 - any refusal: a thread id over the limit
        saver.put(
            {"configurable": {"thread_id": "t" * 2000, "checkpoint_ns": ""}},
            bad,
            {"source": "loop", "step": 2, "parents": {}},
            {"a": "2"},
        )
    assert same(saver.get_tuple(thread("t")), store_view(control, thread("t")))
