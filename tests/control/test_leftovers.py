"""No silent failure (issue 21 section 5): a cleanup that fails is logged, the resource it
leaves behind is recorded in the store, and `ditto doctor` lists it.

Real RuntimeService, real SQLite store and blob store; the E2B backends run on the fake E2B
cloud (tests/fakes), told to refuse a snapshot deletion or a sandbox kill; the in-memory
context double stands in for a kernel that would not stop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ditto_jupyter.backends.base import ResourceLeftBehind
from ditto_jupyter.backends.e2b import E2BConfig, E2BProvider
from ditto_jupyter.cli import main
from ditto_jupyter.client import EXIT_OK
from ditto_jupyter.control.service import RuntimeService
from ditto_jupyter.core.models import AutoCheckpointCell, SessionLifecycleStatus
from ditto_jupyter.wiring import check_data_dir, open_runtime_service
from tests.fakes.e2b_cloud import (
    ROUTE_DELETE_TEMPLATE,
    ROUTE_FS_MAKE_DIR,
    ROUTE_KILL_SANDBOX,
    FakeE2BCloud,
)
from tests.fakes.e2b_fixtures import fake_e2b  # noqa: F401
from tests.fakes.fake_context_capture import InMemoryContextCapture

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def open_service(data_dir: Path, *, e2b: bool = False) -> RuntimeService:
    providers = {"e2b": E2BProvider(E2BConfig(retries=0))} if e2b else None
    return open_runtime_service(
        data_dir,
        context_factory=InMemoryContextCapture,
        extra_providers=providers,
        default_backend="e2b" if e2b else "local",
    )


def doctor_lines(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """What `ditto doctor` prints about leftovers (it exits 0: they are not damage)."""
    capsys.readouterr()
    assert main(["doctor", "--data-dir", str(data_dir)]) == EXIT_OK
    return [
        line for line in capsys.readouterr().out.splitlines() if line.startswith("left behind ")
    ]


def test_a_snapshot_e2b_would_not_delete_is_recorded(
    fake_e2b: FakeE2BCloud,  # noqa: F811
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = tmp_path / "data"
    service = open_service(data, e2b=True)
    try:
        rid = run(service.create_runtime("nb.ipynb")).runtime_id
        backend = service.backends.get(rid)
        assert backend is not None
        for n in (1, 2, 3):  # each cell changes the sandbox: a snapshot of its own
            run(backend.write_bytes("model.txt", f"v{n}".encode()))
            cell = AutoCheckpointCell(execution_count=n, source=f"v = {n}")
            run(service.checkpoint(rid, f"cell-{n}", automatic=cell))
        old = [c.backend_ref for c in service.store.list_checkpoints(rid)[:2]]
        snapshots = [ref.provider_snapshot_id for ref in old if ref is not None]
        assert len(snapshots) == 2
        fake_e2b.fail_next(ROUTE_DELETE_TEMPLATE, 500, times=2)
        with caplog.at_level(logging.WARNING, logger="ditto_jupyter.control"):
            pruned = run(service.prune_automatic(rid, 1))  # the prune itself goes through
        assert len(pruned.pruned) == 2 and pruned.whole == 1
        assert set(snapshots) <= set(fake_e2b.snapshot_ids())  # still at E2B, and paid for
        left = service.leftovers()
        assert [(x.kind, x.resource_id, x.runtime_id) for x in left] == [
            ("e2b-snapshot", snapshot, rid) for snapshot in snapshots
        ]
        assert all("E2B deletion of snapshot" in x.reason for x in left)
        logged = [r.getMessage() for r in caplog.records if "left behind" in r.getMessage()]
        assert len(logged) == 2 and all("ditto doctor" in line for line in logged)
    finally:
        service.close_store()
    assert [x.resource_id for x in check_data_dir(data).leftovers] == snapshots
    lines = doctor_lines(data, capsys)
    assert [line.split()[3] for line in lines] == snapshots
    assert all(f"e2b-snapshot {s} of runtime {rid}" in " ".join(lines) for s in snapshots)


def test_a_sandbox_e2b_would_not_kill_is_recorded(
    fake_e2b: FakeE2BCloud,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = tmp_path / "data"
    service = open_service(data, e2b=True)
    try:
        rid = run(service.create_runtime("nb.ipynb")).runtime_id
        backend = service.backends.get(rid)
        assert backend is not None
        sandbox = backend.backend_id
        fake_e2b.fail_next(ROUTE_KILL_SANDBOX, 500)
        closed = run(service.close(rid))  # recorded as closed; the sandbox stays
        assert closed.runtime.status is SessionLifecycleStatus.CLOSED
        assert not closed.backend_released and closed.checkpoint_id is not None
        assert sandbox in fake_e2b.running_sandbox_ids()
        # a sandbox whose setup failed, then its kill too: no runtime, but a record
        fake_e2b.fail_next(ROUTE_FS_MAKE_DIR, 500)
        fake_e2b.fail_next(ROUTE_KILL_SANDBOX, 500)
        with pytest.raises(ResourceLeftBehind, match="could not be killed either"):
            run(service.create_runtime("other.ipynb", runtime_id="rt-failed"))
        assert service.find_session("rt-failed") is None
        left = {(x.kind, x.runtime_id): x.resource_id for x in service.leftovers()}
        assert left[("e2b-sandbox", rid)] == sandbox
        stray = left[("e2b-sandbox", "rt-failed")]
        assert stray in fake_e2b.running_sandbox_ids() and stray != sandbox
    finally:
        service.close_store()
    assert len(doctor_lines(data, capsys)) == 2


def test_a_kernel_that_would_not_stop_is_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    service = open_service(data)
    context = service.context
    assert isinstance(context, InMemoryContextCapture)
    try:
        closing, lost = (run(service.create_runtime(f"{n}.ipynb")).runtime_id for n in "ab")
        context.refuse_stop.update({closing, lost})
        closed = run(service.close(closing))
        assert closed.runtime.status is SessionLifecycleStatus.CLOSED
        assert closing in context.namespaces  # the kernel lives on: a leftover
        run(service.checkpoint(lost))
        marked = run(service.mark_lost(lost))
        assert marked.status is SessionLifecycleStatus.PAUSED
        left = [(x.kind, x.resource_id, x.runtime_id) for x in service.leftovers()]
        assert left == [("kernel", closing, closing), ("kernel", lost, lost)]
        assert "would not stop" in service.leftovers()[0].reason
    finally:
        service.close_store()
    lines = doctor_lines(data, capsys)
    assert len(lines) == 2 and lines[0].startswith(f"left behind kernel {closing} of runtime ")
