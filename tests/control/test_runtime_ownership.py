"""Runtime leases in RuntimeService: two services on one data directory (a real SQLite file)
never operate on each other's live runtimes, and take them over only once their holder is
gone. "Another host" is a holder with another host name, as a server on another machine
sharing a PostgreSQL store would be.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ditto_jupyter.control.ownership import process_alive, process_start, this_process
from ditto_jupyter.control.service import RuntimeService
from ditto_jupyter.core.errors import SessionBusy
from ditto_jupyter.core.models import RUNTIME_LEASE, LeaseHolder, SessionLifecycleStatus
from ditto_jupyter.wiring import open_runtime_service
from tests.fakes.fake_context_capture import InMemoryContextCapture, ctx

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


def open_service(
    data_dir: Path, holder: LeaseHolder | None = None, ttl_ms: int | None = None
) -> RuntimeService:
    return open_runtime_service(
        data_dir,
        context_factory=InMemoryContextCapture,
        lease_holder=holder,
        lease_ttl_ms=ttl_ms,
    )


@pytest.fixture
def first(data_dir: Path) -> Iterator[RuntimeService]:
    service = open_service(data_dir, this_process("http://first:8888/"), ttl_ms=60_000)
    yield service
    service.close_store()


def elsewhere(url: str) -> LeaseHolder:
    """A holder on another host (its process cannot be looked at from here)."""
    return this_process(url).model_copy(update={"host": "another-node", "pid": 4242})


def test_a_live_runtime_is_refused_to_another_service_naming_its_owner(
    first: RuntimeService, data_dir: Path
) -> None:
    rid = run(first.create_runtime("a.ipynb")).runtime_id
    ctx(first).execute(rid, x=1)
    head = run(first.checkpoint(rid)).checkpoint_id
    second = open_service(data_dir, elsewhere("http://second:8888/"), ttl_ms=60_000)
    try:
        refused = [
            lambda: second.checkpoint(rid),
            lambda: second.pause(rid),
            lambda: second.close(rid),
            lambda: second.mark_lost(rid),
            lambda: second.restore(rid, head),
            lambda: second.exec(rid, "true"),
            lambda: second.delete_snapshot(head),
        ]
        for call in refused:
            with pytest.raises(SessionBusy, match=r"live on the Jupyter server at http://first"):
                run(call())
        with pytest.raises(SessionBusy, match="first"):
            run(second.record_restore(rid, head))
        # reads change nothing, and a checkout only reads the source's checkpoint
        assert run(second.get_runtime(rid)).status is SessionLifecycleStatus.IDLE
        child = run(second.checkout(head))
        assert ctx(second).namespace(child.runtime.runtime_id) == {"x": 1}
        lease = second.store.get_lease(RUNTIME_LEASE, child.runtime.runtime_id)
        assert lease is not None and lease.holder.url == "http://second:8888/"
    finally:
        second.close_store()
    # the first service still owns and runs its runtime
    assert run(first.pause(rid)).runtime.status is SessionLifecycleStatus.PAUSED
    assert first.store.get_lease(RUNTIME_LEASE, rid) is None  # a paused runtime has none


def test_a_paused_runtime_goes_to_whoever_resumes_it(first: RuntimeService, data_dir: Path) -> None:
    rid = run(first.create_runtime("a.ipynb")).runtime_id
    ctx(first).execute(rid, x=1)
    run(first.pause(rid))
    second = open_service(data_dir, elsewhere("http://second:8888/"), ttl_ms=60_000)
    try:
        run(second.resume(rid))
        assert ctx(second).namespace(rid) == {"x": 1}
        with pytest.raises(SessionBusy, match="http://second"):
            run(first.checkpoint(rid))
    finally:
        second.close_store()


def test_a_holder_on_another_host_is_gone_only_when_its_lease_ran_out(data_dir: Path) -> None:
    clock = [1_000]
    owner = open_service(data_dir, elsewhere("http://owner/"), ttl_ms=30_000)
    rid = run(owner.create_runtime("a.ipynb")).runtime_id
    taker = open_service(data_dir, this_process("http://taker/"), ttl_ms=30_000)
    try:
        taker.ownership.clock = lambda: clock[0]
        lease = taker.store.get_lease(RUNTIME_LEASE, rid)
        assert lease is not None
        clock[0] = (lease.expires_at_ms or 0) - 1
        assert taker.ownership.lapsed() == []
        with pytest.raises(SessionBusy, match="http://owner"):
            run(taker.mark_lost(rid))
        clock[0] = lease.expires_at_ms or 0
        assert [lapsed.key for lapsed in taker.ownership.lapsed()] == [rid]
        assert run(taker.mark_lost(rid)).status is SessionLifecycleStatus.CLOSED  # empty
        assert taker.store.get_lease(RUNTIME_LEASE, rid) is None
    finally:
        taker.close_store()
        owner.close_store()


def test_a_heartbeat_keeps_the_lease(first: RuntimeService) -> None:
    rid = run(first.create_runtime("a.ipynb")).runtime_id
    before = first.store.get_lease(RUNTIME_LEASE, rid)
    assert before is not None and before.expires_at_ms is not None
    later = before.expires_at_ms + 5
    first.ownership.clock = lambda: later
    assert first.ownership.renew() == 1
    after = first.store.get_lease(RUNTIME_LEASE, rid)
    assert after is not None and (after.expires_at_ms or 0) > (before.expires_at_ms or 0)


def test_a_closed_service_in_this_process_is_gone_at_once(data_dir: Path) -> None:
    owner = open_service(data_dir)  # no expiry: held while its process lives
    rid = run(owner.create_runtime("a.ipynb")).runtime_id
    taker = open_service(data_dir)
    try:
        with pytest.raises(SessionBusy, match=f"pid {os.getpid()}"):
            run(taker.checkpoint(rid))
        owner.close_store()
        assert [lease.key for lease in taker.ownership.lapsed()] == [rid]
        assert run(taker.mark_lost(rid)).status is SessionLifecycleStatus.CLOSED
    finally:
        taker.close_store()


def test_a_dead_process_on_this_host_is_gone_at_once(data_dir: Path) -> None:
    child = os.fork()
    if child == 0:
        os._exit(0)
    os.waitpid(child, 0)
    assert not process_alive(child)
    dead = this_process("http://dead/").model_copy(update={"pid": child})
    owner = open_service(data_dir, dead)  # no expiry: only its process tells
    rid = run(owner.create_runtime("a.ipynb")).runtime_id
    taker = open_service(data_dir)
    try:
        assert [lease.key for lease in taker.ownership.lapsed()] == [rid]
        assert run(taker.mark_lost(rid)).status is SessionLifecycleStatus.CLOSED
    finally:
        taker.close_store()
        owner.close_store()


def test_a_command_counts_as_in_flight(first: RuntimeService) -> None:
    rid = run(first.create_runtime("a.ipynb")).runtime_id

    async def pause_during_a_command() -> None:
        command = asyncio.ensure_future(first.exec(rid, "sleep 1; echo done > out.txt"))
        while not first.has_operation_in_flight(rid):
            await asyncio.sleep(0.01)
        with pytest.raises(SessionBusy, match="running a command"):
            await first.pause(rid)
        result = await command
        assert result.exit_code == 0, result

    run(pause_during_a_command())
    workspace = first.workspace_path(rid)
    assert workspace is not None and (workspace / "out.txt").read_text() == "done\n"
    assert not first.has_operation_in_flight(rid)
    assert run(first.pause(rid)).runtime.status is SessionLifecycleStatus.PAUSED


def test_a_live_process_on_this_host_keeps_its_runtimes_even_when_its_lease_is_late(
    data_dir: Path,
) -> None:
    sleeper = subprocess.Popen(["sleep", "600"])
    try:
        alive = this_process("http://busy/").model_copy(
            update={"pid": sleeper.pid, "pid_start": process_start(sleeper.pid)}
        )
        reused = alive.model_copy(update={"owner_id": "reused", "pid_start": alive.pid_start + 1})
        owner = open_service(data_dir, alive, ttl_ms=1)  # its lease runs out at once
        kept = run(owner.create_runtime("a.ipynb")).runtime_id
        owner.close_store()
        other = open_service(data_dir, reused, ttl_ms=None)  # the same pid, another process
        gone = run(other.create_runtime("b.ipynb")).runtime_id
        other.close_store()
        taker = open_service(data_dir)
        try:
            assert [lease.key for lease in taker.ownership.lapsed()] == [gone]
            with pytest.raises(SessionBusy, match="http://busy"):
                run(taker.mark_lost(kept))
        finally:
            taker.close_store()
    finally:
        sleeper.kill()
        sleeper.wait()
