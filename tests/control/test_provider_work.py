"""`provider_work`: provider work first, then the store writes, or the work undone.

On the memory store and the real leftover log: undo steps run newest first when the block
fails before its commit, a failing undo step is recorded and the rest still run, and after
the commit nothing is undone.
"""

from __future__ import annotations

import asyncio

import pytest

from ditto_jupyter.control.leftovers import LeftoverLog, Resource
from ditto_jupyter.control.provider_work import provider_work
from ditto_jupyter.control.store import MemoryCheckpointStore
from ditto_jupyter.core.errors import BackendError
from ditto_jupyter.core.models import SessionRecord

RUNTIME = SessionRecord(session_id="rt", conversation_id="nb.ipynb", sender_id="ana")


def test_a_failed_block_undoes_newest_first_and_records_what_stays() -> None:
    store = MemoryCheckpointStore()
    undone: list[str] = []

    async def undo(name: str) -> None:
        undone.append(name)
        if name == "sandbox":
            raise BackendError("E2B kill failed: 500")

    async def scenario() -> None:
        async with provider_work(store, LeftoverLog(store), "rt") as work:
            work.undo_with("releasing the workspace", lambda: undo("workspace"))
            left = Resource("e2b-sandbox", "sb-1", "rt")
            work.undo_with("killing the sandbox", lambda: undo("sandbox"), left)
            work.undo_with("stopping the kernel", lambda: undo("kernel"))
            with work.commit():
                store.insert_session(
                    SessionRecord(session_id="rt", conversation_id="c", sender_id="s")
                )
                raise BackendError("the store write failed")

    with pytest.raises(BackendError, match="the store write failed"):
        asyncio.run(scenario())
    assert undone == ["kernel", "sandbox", "workspace"]
    assert store.get_session("rt") is None  # the commit did not happen
    [left] = store.list_leftovers()
    assert (left.kind, left.resource_id, left.runtime_id) == ("e2b-sandbox", "sb-1", "rt")
    assert left.reason == "killing the sandbox failed: BackendError: E2B kill failed: 500"


def test_nothing_is_undone_after_the_commit() -> None:
    store = MemoryCheckpointStore()
    undone: list[str] = []

    async def undo() -> None:
        undone.append("backend")

    async def scenario() -> None:
        async with provider_work(store, LeftoverLog(store), "rt") as work:
            work.undo_with("releasing the backend", undo)
            with work.commit():
                store.insert_session(
                    SessionRecord(session_id="rt", conversation_id="c", sender_id="s")
                )
            with pytest.raises(RuntimeError, match="after the store writes were committed"):
                work.undo_with("too late", undo)
            raise BackendError("after the commit")

    with pytest.raises(BackendError, match="after the commit"):
        asyncio.run(scenario())
    assert undone == [] and store.get_session("rt") is not None
