"""Workspace files are never lost: RuntimeService on a real SQLite file and real workspaces.

A kernel writes its workspace directly (open(), a background thread), which no backend call
sees. These tests write the same way, straight into the workspace directory. Four ways a
file used to vanish: a checkout child whose cell count matched its parent's, a file written
after the last cell, a lost runtime whose workspace was deleted after a server restart, and
a lost runtime whose workspace directory was already gone (it stayed idle for good). And
close, which now takes a final checkpoint first, or refuses when it cannot.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ditto_jupyter.control.lifecycle import LOST_CHECKPOINT_NAME
from ditto_jupyter.control.service import RuntimeService
from ditto_jupyter.core.errors import BackendError, SessionBusy
from ditto_jupyter.core.models import SessionLifecycleStatus
from ditto_jupyter.wiring import open_runtime_service
from tests.fakes.fake_context_capture import InMemoryContextCapture, ctx

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def service(data_dir: Path) -> Iterator[RuntimeService]:
    svc = open_runtime_service(data_dir, context_factory=InMemoryContextCapture)
    yield svc
    svc.close_store()


def workspace(service: RuntimeService, runtime_id: str) -> Path:
    path = service.workspace_path(runtime_id)
    assert path is not None and path.is_dir()
    return path


def cells(service: RuntimeService, runtime_id: str, count: int) -> None:
    """Run `count` cells in the runtime's context (each bumps its execution count)."""
    for number in range(count):
        ctx(service).execute(runtime_id, last_cell=number)


@pytest.mark.parametrize("child_cells", [1, 2, 3, 4])
def test_a_checkout_child_never_reuses_its_parents_snapshot(
    service: RuntimeService, child_cells: int
) -> None:
    parent = run(service.create_runtime("nb.ipynb")).runtime_id
    cells(service, parent, 2)
    (workspace(service, parent) / "parent.txt").write_text("parent")
    base = run(service.checkpoint(parent)).checkpoint_id

    child = run(service.checkout(base)).runtime.runtime_id
    cells(service, child, child_cells)  # a new kernel: its count restarted at 1
    (workspace(service, child) / "child.txt").write_text("written by the child's kernel")
    own = service.get_checkpoint(run(service.checkpoint(child)).checkpoint_id)
    assert own.backend_ref != service.get_checkpoint(base).backend_ref
    run(service.pause(child))

    run(service.resume(child))
    files = workspace(service, child)
    assert (files / "child.txt").read_text() == "written by the child's kernel"
    assert (files / "parent.txt").read_text() == "parent"


def test_a_file_written_after_the_last_cell_survives_pause(service: RuntimeService) -> None:
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    cells(service, rid, 1)
    first = run(service.checkpoint(rid)).checkpoint_id
    # a background thread started by that cell writes after it finished: no cell ran since,
    # and the next checkpoint has the file all the same (a local workspace is always read)
    (workspace(service, rid) / "late.txt").write_text("from a thread")
    again = run(service.checkpoint(rid)).checkpoint_id  # the same kernel, the same count
    assert service.get_checkpoint(again).backend_ref != service.get_checkpoint(first).backend_ref
    paused = run(service.pause(rid))

    run(service.resume(rid))
    assert (workspace(service, rid) / "late.txt").read_text() == "from a thread"
    assert service.store.get_head(rid) == paused.checkpoint_id


def test_a_lost_runtime_keeps_the_files_changed_since_its_checkpoint(data_dir: Path) -> None:
    first = open_runtime_service(data_dir, context_factory=InMemoryContextCapture)
    with_head = run(first.create_runtime("a.ipynb")).runtime_id
    ctx(first).execute(with_head, v=1)
    head = run(first.checkpoint(with_head)).checkpoint_id
    (workspace(first, with_head) / "after-checkpoint.txt").write_text("unsaved work")
    no_head = run(first.create_runtime("b.ipynb")).runtime_id
    (workspace(first, no_head) / "notes.txt").write_text("never checkpointed")
    empty = run(first.create_runtime("c.ipynb")).runtime_id
    first.close_store()

    # a server restart: a new service over the same data directory; the kernels are gone
    second = open_runtime_service(data_dir, context_factory=InMemoryContextCapture)
    try:
        assert run(second.mark_lost(with_head)).status is SessionLifecycleStatus.PAUSED
        lost = second.get_checkpoint(second.store.get_head(with_head) or "")
        assert (lost.name, lost.parent_checkpoint_id) == (LOST_CHECKPOINT_NAME, head)
        run(second.resume(with_head))
        assert ctx(second).namespace(with_head) == {"v": 1}  # the head's variables
        files = workspace(second, with_head)
        assert (files / "after-checkpoint.txt").read_text() == "unsaved work"

        assert run(second.mark_lost(no_head)).status is SessionLifecycleStatus.PAUSED
        run(second.resume(no_head))
        assert ctx(second).namespace(no_head) == {}
        assert (workspace(second, no_head) / "notes.txt").read_text() == "never checkpointed"

        # nothing to keep: no checkpoint and an empty workspace
        assert run(second.mark_lost(empty)).status is SessionLifecycleStatus.CLOSED
        assert second.store.list_checkpoints(empty) == []
    finally:
        second.close_store()


def test_a_lost_runtime_whose_workspace_is_gone_still_ends_paused_or_closed(
    data_dir: Path,
) -> None:
    first = open_runtime_service(data_dir, context_factory=InMemoryContextCapture)
    with_head = run(first.create_runtime("a.ipynb")).runtime_id
    ctx(first).execute(with_head, v=1)
    head = run(first.checkpoint(with_head)).checkpoint_id
    without = run(first.create_runtime("b.ipynb")).runtime_id
    gone = [workspace(first, with_head), workspace(first, without)]
    first.close_store()
    for folder in gone:
        shutil.rmtree(folder)

    second = open_runtime_service(data_dir, context_factory=InMemoryContextCapture)
    try:
        assert run(second.mark_lost(with_head)).status is SessionLifecycleStatus.PAUSED
        assert run(second.mark_lost(without)).status is SessionLifecycleStatus.CLOSED
        assert second.store.get_head(with_head) == head
        assert second.store.get_binding(with_head) is None
        assert second.store.get_binding(without) is None
        run(second.resume(with_head))  # from the head's own snapshot
        assert ctx(second).namespace(with_head) == {"v": 1}
    finally:
        second.close_store()


def test_a_workspace_that_cannot_be_snapshotted_is_not_deleted(
    service: RuntimeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    ctx(service).execute(rid, v=1)
    run(service.checkpoint(rid))
    folder = workspace(service, rid)
    (folder / "precious.txt").write_text("not in any snapshot")

    async def broken_snapshot(**_: Any) -> Any:
        raise OSError("disk full")

    monkeypatch.setattr(service.backends, "checkpoint_backend", broken_snapshot)
    assert run(service.mark_lost(rid)).status is SessionLifecycleStatus.PAUSED
    assert (folder / "precious.txt").read_text() == "not in any snapshot"
    assert service.backends.get(rid) is None  # let go of, not deleted


# ---- close keeps what changed since the head (issue 22 section 8) ------------------------


def test_close_takes_a_final_checkpoint_of_variables_and_files(service: RuntimeService) -> None:
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    ctx(service).execute(rid, x=1)
    head = run(service.checkpoint(rid)).checkpoint_id
    ctx(service).execute(rid, x=2)  # a cell and a file since the head
    (workspace(service, rid) / "late.txt").write_text("written after the checkpoint")
    closed = run(service.close(rid))
    assert closed.runtime.status is SessionLifecycleStatus.CLOSED and closed.backend_released
    final = service.get_checkpoint(closed.checkpoint_id or "")
    assert (final.name, final.parent_checkpoint_id) == ("close", head)
    assert service.store.get_head(rid) == final.checkpoint_id
    child = run(service.checkout(final.checkpoint_id)).runtime.runtime_id
    assert ctx(service).namespace(child) == {"x": 2}
    assert (workspace(service, child) / "late.txt").read_text() == "written after the checkpoint"


def test_close_with_discard_takes_none(service: RuntimeService) -> None:
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    head = run(service.checkpoint(rid)).checkpoint_id
    (workspace(service, rid) / "late.txt").write_text("given up")
    closed = run(service.close(rid, discard=True))
    assert closed.checkpoint_id is None and service.store.get_head(rid) == head
    assert [c.checkpoint_id for c in service.store.list_checkpoints(rid)] == [head]


def test_a_final_checkpoint_that_fails_refuses_the_close(service: RuntimeService) -> None:
    """A busy kernel, a dead one: close deletes nothing and says how to close anyway."""
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    (workspace(service, rid) / "late.txt").write_text("not in any checkpoint")
    ctx(service).busy.add(rid)
    with pytest.raises(SessionBusy, match=r"was not closed: .*busy.* discard: true"):
        run(service.close(rid))
    ctx(service).busy.clear()
    del ctx(service).namespaces[rid]  # the kernel died: its variables cannot be captured
    with pytest.raises(BackendError, match=r"was not closed: .*no live context.* discard: true"):
        run(service.close(rid))
    assert service.session(rid).status is SessionLifecycleStatus.IDLE
    assert (workspace(service, rid) / "late.txt").exists()
    assert service.store.list_checkpoints(rid) == []
    closed = run(service.close(rid, discard=True))  # the caller said so
    assert closed.runtime.status is SessionLifecycleStatus.CLOSED
