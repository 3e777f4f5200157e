"""RuntimeService.prune_automatic on a real SQLite store, blob store and local workspaces
(the in-memory namespace of tests/fakes stands in for the kernel): which automatic
checkpoints are thinned, which stay whole, and that a thinned one is never restored."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ditto_jupyter.control.service import RuntimeService
from ditto_jupyter.core.errors import InvalidRequest
from ditto_jupyter.core.models import AutoCheckpointCell
from ditto_jupyter.wiring import open_runtime_service
from tests.fakes.fake_context_capture import InMemoryContextCapture

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@pytest.fixture
def service(tmp_path: Path) -> Iterator[RuntimeService]:
    svc = open_runtime_service(tmp_path / "data", context_factory=InMemoryContextCapture)
    yield svc
    svc.close_store()


def content(n: int) -> bytes:
    return bytes((n * 7 + i) % 251 for i in range(256)) * 1200  # 300 KiB, unique per n


def cell(service: RuntimeService, rid: str, n: int) -> str:
    """Stand-in for a cell that changes a variable and a file, then its autocheckpoint."""
    assert isinstance(service.context, InMemoryContextCapture)
    service.context.execute(rid, v=n)
    backend = service.backends.get(rid)
    assert backend is not None
    run(backend.write_bytes("data.bin", content(n)))
    automatic = AutoCheckpointCell(execution_count=n, source=f"v = {n}", failed=False)
    return run(service.checkpoint(rid, f"cell-{n}", automatic=automatic)).checkpoint_id


def test_prune_thins_old_automatic_ones_and_holds_heads_and_sources(
    service: RuntimeService,
) -> None:
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    ids = {1: cell(service, rid, 1)}
    named = run(service.checkpoint(rid, "named")).checkpoint_id  # clean: shares cell-1's files
    for n in range(2, 7):
        ids[n] = cell(service, rid, n)
    child = run(service.checkout(ids[2])).runtime.runtime_id  # cell-2 is a checkout source
    run(service.restore(rid, ids[3]))  # cell-3 is the head now

    result = run(service.prune_automatic(rid, 2))
    assert result.pruned == [ids[1], ids[4]]
    assert result.held == [ids[2], ids[3]]
    assert (result.keep, result.whole) == (2, 4)

    rows = {c.checkpoint_id: c for c in service.store.list_checkpoints(rid)}
    assert set(rows) == {*ids.values(), named}  # every row stays
    for n in (1, 4):
        thinned = rows[ids[n]]
        assert thinned.context_manifest_id is None and thinned.pruned
        assert thinned.automatic is not None and thinned.automatic.source == f"v = {n}"
        assert thinned.backend_ref is not None and not thinned.backend_ref.provider_snapshot_id
        assert thinned.metadata == {}  # the user's metadata is never the system's
    for n in (2, 3, 5, 6):
        assert rows[ids[n]].context_manifest_id and not rows[ids[n]].pruned
    assert rows[named].context_manifest_id and rows[named].metadata == {}

    # the named checkpoint shared cell-1's workspace snapshot: it still checks out whole
    report = service.gc(grace_seconds=0)
    assert report.freed_chunks >= 1  # cell-4's own file, which nothing else holds
    branch = run(service.checkout(named)).runtime.runtime_id
    workspace = service.workspace_path(branch)
    assert workspace is not None and (workspace / "data.bin").read_bytes() == content(1)
    assert service.store.get_head(child) == ids[2]

    # a thinned checkpoint is refused before anything changes
    for attempt in (
        lambda: run(service.restore(rid, ids[4])),
        lambda: run(service.checkout(ids[4])),
        lambda: run(service.record_restore(rid, ids[1])),
    ):
        with pytest.raises(InvalidRequest, match="pruned by %autocheckpoint"):
            attempt()
    assert service.store.get_head(rid) == ids[3]

    again = run(service.prune_automatic(rid, 2))
    assert (again.pruned, again.whole) == ([], 4)


@pytest.mark.parametrize("keep", [0, -1, True])
def test_prune_refuses_a_bad_keep(service: RuntimeService, keep: Any) -> None:
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    cell(service, rid, 1)
    with pytest.raises(InvalidRequest, match="keep must be a whole number of at least 1"):
        run(service.prune_automatic(rid, keep))
    assert not any(c.pruned for c in service.store.list_checkpoints(rid))


def test_user_metadata_decides_nothing(service: RuntimeService) -> None:
    """Issue 22 section 7: a checkpoint on request whose metadata has an `autocheckpoint`
    key is never pruned, and one whose metadata says `"pruned": true` still restores."""
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    posing = {"autocheckpoint": {"execution_count": 1, "source": "v = 1", "failed": False}}
    service.context.execute(rid, v=0)  # type: ignore[attr-defined]
    named = run(service.checkpoint(rid, "cell-1", posing)).checkpoint_id
    claims_pruned = run(service.checkpoint(rid, "mine", {"pruned": True})).checkpoint_id
    for n in range(2, 6):
        cell(service, rid, n)

    result = run(service.prune_automatic(rid, 1))
    assert named not in result.pruned and claims_pruned not in result.pruned
    assert len(result.pruned) == 3 and result.whole == 1
    for checkpoint_id in (named, claims_pruned):
        kept = service.get_checkpoint(checkpoint_id)
        assert kept.context_manifest_id is not None and not kept.pruned
        assert kept.automatic is None
    assert service.get_checkpoint(named).metadata == posing  # the user's, untouched
    checkpoint, _ = run(service.restore(rid, claims_pruned))  # not refused "was pruned"
    assert checkpoint.checkpoint_id == claims_pruned
    assert service.context.namespace(rid) == {"v": 0}  # type: ignore[attr-defined]
