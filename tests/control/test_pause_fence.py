"""A pause never stops a context that ran a cell since its capture (RuntimeService on a real
SQLite file and real workspaces, the test double of a kernel; tests/server/test_pause_races.py
does it with real kernels).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ditto_jupyter.control.service import RuntimeService
from ditto_jupyter.core.errors import SessionBusy
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


def test_a_cell_during_the_pause_cancels_it(service: RuntimeService) -> None:
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    ctx(service).execute(rid, x=1)
    before = run(service.checkpoint(rid)).checkpoint_id
    ctx(service).during_capture[rid] = {"x": 2}

    with pytest.raises(SessionBusy, match="ran a cell while it was being paused"):
        run(service.pause(rid))

    assert ctx(service).namespace(rid) == {"x": 2}  # the cell ran and the kernel runs on
    assert run(service.get_runtime(rid)).status is SessionLifecycleStatus.IDLE
    assert service.store.get_head(rid) == before  # nothing recorded
    assert [c.checkpoint_id for c in service.store.list_checkpoints(rid)] == [before]
    assert rid not in ctx(service).sealed
    paused = run(service.pause(rid))  # tried again later: it pauses with the cell's work
    run(service.resume(rid))
    assert ctx(service).namespace(rid) == {"x": 2}
    assert service.store.get_head(rid) == paused.checkpoint_id


def test_a_pause_seals_the_context_before_it_stops_it(service: RuntimeService) -> None:
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    seen: list[bool] = []
    stop = ctx(service).stop

    async def stop_and_look(session: Any) -> None:
        seen.append(session.session_id in ctx(service).sealed)
        await stop(session)

    ctx(service).stop = stop_and_look  # type: ignore[method-assign]
    run(service.pause(rid))
    assert seen == [True]
