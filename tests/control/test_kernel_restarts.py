"""A kernel restarted outside the control plane (Jupyter's restarter revives it under the
same id) is a new process: nothing is reused on its run mark, and its runtime is recorded
as lost while it stays live (RuntimeService on a real SQLite file and real workspaces, the
test double of a kernel; tests/server/test_kernel_restarted.py does it with real ones).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ditto_jupyter.control.lifecycle import LOST_CHECKPOINT_NAME
from ditto_jupyter.control.service import RuntimeService
from ditto_jupyter.core.models import SessionLifecycleStatus
from ditto_jupyter.wiring import open_runtime_service
from tests.fakes.fake_context_capture import InMemoryContextCapture, ctx

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@pytest.fixture
def service(tmp_path: Path) -> Iterator[RuntimeService]:
    svc = open_runtime_service(tmp_path / "data", context_factory=InMemoryContextCapture)
    yield svc
    svc.close_store()


def restart(service: RuntimeService, runtime_id: str) -> None:
    """What Jupyter's restarter does: a new process under the same handle, count from 0."""
    ctx(service).processes[runtime_id] = "restarted"
    ctx(service).execution_counts[runtime_id] = 0
    ctx(service).namespaces[runtime_id] = {}


def workspace(service: RuntimeService, runtime_id: str) -> Path:
    path = service.workspace_path(runtime_id)
    assert path is not None
    return path


def test_a_restarted_kernel_never_reuses_the_snapshot(service: RuntimeService) -> None:
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    for number in range(4):
        ctx(service).execute(rid, cell=number)
    first = run(service.checkpoint(rid)).checkpoint_id
    # a new process under the same id, which runs cells up to the same count
    restart(service, rid)
    (workspace(service, rid) / "after-restart.txt").write_text("written by the revived kernel")
    for number in range(4):
        ctx(service).execute(rid, cell=number)
    again = run(service.checkpoint(rid)).checkpoint_id
    assert service.get_checkpoint(again).backend_ref != service.get_checkpoint(first).backend_ref
    child = run(service.checkout(again)).runtime.runtime_id
    assert (
        workspace(service, child) / "after-restart.txt"
    ).read_text() == "written by the revived kernel"


def test_a_restarted_runtime_keeps_its_files_and_offers_the_heads_variables(
    service: RuntimeService,
) -> None:
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    ctx(service).execute(rid, x=1)
    head = run(service.checkpoint(rid)).checkpoint_id
    (workspace(service, rid) / "since.txt").write_text("written after the checkpoint")
    handle = service.session(rid).handle_state
    restart(service, rid)

    offered = run(service.mark_restarted(rid, handle=handle))

    assert offered is not None
    assert (offered.name, offered.parent_checkpoint_id) == (LOST_CHECKPOINT_NAME, head)
    assert service.store.get_head(rid) == offered.checkpoint_id
    assert run(service.get_runtime(rid)).status is SessionLifecycleStatus.IDLE  # live
    assert ctx(service).namespace(rid) == {}  # the restarted kernel is empty
    run(service.restore(rid, offered.checkpoint_id))
    assert ctx(service).namespace(rid) == {"x": 1}  # the head's variables, offered back
    child = run(service.checkout(offered.checkpoint_id)).runtime.runtime_id
    assert (workspace(service, child) / "since.txt").read_text() == "written after the checkpoint"


def test_a_runtime_resumed_since_is_left_alone(service: RuntimeService) -> None:
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    old = service.session(rid).handle_state
    run(service.pause(rid))
    run(service.resume(rid))
    assert run(service.mark_restarted(rid, handle=old)) is None
    assert run(service.mark_lost(rid, handle=old)).status is SessionLifecycleStatus.IDLE
