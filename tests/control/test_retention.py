"""Retention (issue 42 section 1) on a real SQLite store, blob store and local workspaces
(the in-memory namespace of tests/fakes stands in for the kernel; tests/server/
test_retention_server.py runs it in a real server with real kernels): the tiers with a
clock of the test's own, the budget that asks for everything, what is never thinned, a
proposal gone stale before the thinning's transaction, and a thinning that fails."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ditto_jupyter.backends.e2b import E2BConfig, E2BProvider
from ditto_jupyter.control import retention as retention_module
from ditto_jupyter.control.retention_policy import cell_spans
from ditto_jupyter.control.service import RuntimeService
from ditto_jupyter.control.store import StoreError
from ditto_jupyter.core.disk_usage import data_dir_bytes
from ditto_jupyter.core.models import AutoCheckpointCell, RuntimeCheckpoint
from ditto_jupyter.wiring import open_runtime_service
from tests.fakes.e2b_cloud import FakeE2BCloud
from tests.fakes.e2b_fixtures import fake_e2b  # noqa: F401
from tests.fakes.fake_context_capture import InMemoryContextCapture

T = TypeVar("T")
HOUR_MS = 3600 * 1000
DAY_MS = 24 * HOUR_MS
NOW = 20_000 * DAY_MS  # a day's (and so an hour's) start: the buckets below are exact


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@pytest.fixture
def service(tmp_path: Path) -> Iterator[RuntimeService]:
    svc = open_runtime_service(tmp_path / "data", context_factory=InMemoryContextCapture)
    svc.retention.clock = lambda: NOW
    svc.retention.gc_grace_seconds = 0
    yield svc
    svc.close_store()


def content(n: int) -> bytes:
    return random.Random(n).randbytes(300_000)  # unique per n, and zstd cannot shrink it


def cell(service: RuntimeService, rid: str, n: int) -> str:
    """A cell that changes a variable and a file, then its automatic checkpoint."""
    assert isinstance(service.context, InMemoryContextCapture)
    service.context.execute(rid, v=n)
    backend = service.backends.get(rid)
    assert backend is not None
    run(backend.write_bytes("data.bin", content(n)))
    automatic = AutoCheckpointCell(execution_count=n, source=f"v = {n}", failed=False)
    return run(service.checkpoint(rid, f"cell-{n}", automatic=automatic)).checkpoint_id


def taken_at(service: RuntimeService, checkpoint_id: str, at_ms: int, **changes: Any) -> None:
    """Write the checkpoint's time (and any other change) through the store."""
    found = service.store.get_checkpoint(checkpoint_id)
    assert found is not None
    service.store.put_checkpoint(found.model_copy(update={"created_at_ms": at_ms, **changes}))


def rows(service: RuntimeService) -> dict[str, RuntimeCheckpoint]:
    return {c.checkpoint_id: c for c in service.store.list_checkpoints()}


def whole(service: RuntimeService) -> set[str]:
    return {cid for cid, c in rows(service).items() if c.context_manifest_id and not c.pruned}


def test_the_tiers_keep_the_last_hour_then_one_an_hour_then_one_a_day(
    service: RuntimeService,
) -> None:
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    ages_h = {1: 24 * 40, 2: 40, 3: 30, 4: 5.5, 5: 1.5, 6: 1.2, 7: 0.9, 8: 0.2}
    ids = {n: cell(service, rid, n) for n in ages_h}
    for n, age in ages_h.items():
        taken_at(service, ids[n], NOW - round(age * HOUR_MS))

    report = run(service.retention.round())

    # cell 5 shares cell 6's hour, cell 2 cell 3's day: the newer stays; cell 1 is 40
    # days old, beyond the last tier; the last hour (7, 8) stays whole, 8 is the head
    assert whole(service) == {ids[n] for n in (3, 4, 6, 7, 8)}
    assert report.rules == ["tiers"] and report.thinned == 3
    (thinned,) = report.runtimes
    assert thinned.runtime_id == rid and thinned.conversation_id == "nb.ipynb"
    assert [(s.first, s.last) for s in thinned.cells] == [(1, 2), (5, 5)]
    assert set(thinned.checkpoint_ids) == {ids[1], ids[2], ids[5]}
    assert len(rows(service)) == 8  # every row stays, as history
    assert report.bytes_before is not None and report.bytes_after is not None
    assert report.bytes_freed == report.bytes_before - report.bytes_after > 3 * 250_000
    assert service.retention.last == report

    again = run(service.retention.round())  # what was kept stays kept
    assert again.thinned == 0 and whole(service) == {ids[n] for n in (3, 4, 6, 7, 8)}
    assert service.retention.last == report  # a round that thinned nothing is no thinning


def test_a_budget_that_asks_for_everything_thins_nothing_it_must_keep(
    service: RuntimeService,
) -> None:
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    ids = {n: cell(service, rid, n) for n in range(1, 4)}
    named = run(service.checkpoint(rid, "named")).checkpoint_id
    ids.update({n: cell(service, rid, n) for n in range(4, 12)})
    child = run(service.checkout(ids[2])).runtime.runtime_id  # cell-2: a checkout source
    backend = service.backends.get(rid)
    assert backend is not None
    run(backend.write_bytes("notes.txt", b"written since"))
    run(service.restore(rid, ids[5]))  # before-restore keeps the files; cell-5 is the head
    (before,) = [c for c in rows(service).values() if c.name == "before-restore"]
    # automatic ones under the names a user or the system gives: never thinned
    taken_at(service, ids[6], NOW - DAY_MS, name="lost")
    taken_at(service, ids[7], NOW - DAY_MS, name="idle-pause")
    taken_at(service, ids[8], NOW - DAY_MS, name="before-undo")
    taken_at(service, ids[9], NOW - DAY_MS, name="my-model")
    data = service.retention.data_dir
    on_disk = data_dir_bytes(data)

    service.retention.budget_bytes = 1  # asks for everything
    report = run(service.retention.round())

    assert report.rules == ["tiers", "budget"] and report.over_budget
    kept = {named, before.checkpoint_id, ids[2], ids[5], *(ids[n] for n in (6, 7, 8, 9))}
    kept.add(service.store.get_head(child) or "")
    # cells 1, 3 and 4; the newest two (10, 11) stay whole, so the last cell can be undone
    kept |= {ids[10], ids[11]}
    assert whole(service) == kept
    assert report.thinned == 3
    assert [(s.first, s.last) for s in report.runtimes[0].cells] == [(1, 1), (3, 4)]
    # the files of cells 1 and 4 went (cell 3's is `named`'s too), less what the thinning's
    # own writes added to the databases' logs
    assert data_dir_bytes(data) < on_disk - 300_000
    # what is kept still restores
    checkpoint, _ = run(service.restore(rid, named))
    assert checkpoint.checkpoint_id == named


def test_a_proposal_gone_stale_is_read_again_inside_the_transaction(
    service: RuntimeService,
) -> None:
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    ids = {n: cell(service, rid, n) for n in range(1, 5)}
    for n in range(1, 4):
        taken_at(service, ids[n], NOW - 40 * DAY_MS + n)  # beyond every tier
    listed = service.store.whole_automatic

    def listed_then_branched(*, before_ms: int) -> list[RuntimeCheckpoint]:
        found = listed(before_ms=before_ms)
        # meanwhile: cell-1 becomes the head of another runtime (restored there), and
        # cell-2 is renamed by hand
        other = run(service.create_runtime("other.ipynb")).runtime_id
        service.store.set_head(other, ids[1])
        taken_at(service, ids[2], NOW - 40 * DAY_MS, name="keep-me")
        return found

    service.store.whole_automatic = listed_then_branched  # type: ignore[method-assign]
    report = run(service.retention.round())

    assert report.thinned == 1 and report.runtimes[0].checkpoint_ids == [ids[3]]
    assert whole(service) == {ids[1], ids[2], ids[4]}


def test_a_failed_thinning_leaves_the_store_as_it_was(
    service: RuntimeService, caplog: pytest.LogCaptureFixture
) -> None:
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    ids = {n: cell(service, rid, n) for n in range(1, 5)}
    for n in range(1, 4):
        taken_at(service, ids[n], NOW - 40 * DAY_MS + n)
    before = rows(service)
    put = service.store.put_checkpoint
    calls: list[str] = []

    def put_then_fail(checkpoint: RuntimeCheckpoint) -> None:
        calls.append(checkpoint.checkpoint_id)
        if len(calls) == 2:  # the second thinned row of the transaction
            raise StoreError("the disk went away")
        put(checkpoint)

    service.store.put_checkpoint = put_then_fail  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING), pytest.raises(StoreError, match="went away"):
        run(service.retention.round())
    service.store.put_checkpoint = put  # type: ignore[method-assign]

    assert rows(service) == before  # the first thinned row rolled back with the rest
    last = service.retention.last
    assert last is not None and last.error == "StoreError: the disk went away"
    assert last.thinned == 0
    assert "ditto: retention failed" in caplog.text and "the disk went away" in caplog.text
    report = run(service.retention.round())  # the next round thins them
    assert report.thinned == 3 and whole(service) == {ids[4]}


def test_keep_is_a_rule_of_the_same_retention(
    service: RuntimeService, caplog: pytest.LogCaptureFixture
) -> None:
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    ids = [cell(service, rid, n) for n in range(1, 6)]
    seen: list[Any] = []
    service.retention.listeners.append(seen.append)
    with caplog.at_level(logging.INFO, logger="ditto_jupyter.control.retention"):
        result = run(service.prune_automatic(rid, 2))
    assert result.pruned == ids[:3] and result.whole == 2
    last = service.retention.last
    assert last is not None and seen == [last]
    assert last.rules == ["keep"] and last.thinned == 3
    assert [(s.first, s.last) for s in last.runtimes[0].cells] == [(1, 3)]
    (line,) = [r.getMessage() for r in caplog.records if "retention" in r.getMessage()]
    assert (
        line
        == f"ditto: retention (keep) thinned 3 automatic checkpoint(s) (runtime {rid}: cells 1-3)"
    )


def test_cell_spans_are_runs_of_execution_counts() -> None:
    def auto(n: int) -> Any:
        return type("C", (), {"automatic": AutoCheckpointCell(execution_count=n)})()

    assert cell_spans([auto(n) for n in (9, 3, 4, 5, 12, 11)]) == [(3, 5), (9, 9), (11, 12)]
    assert cell_spans([]) == []


def test_a_round_never_holds_the_slot_a_cells_checkpoint_needs(service: RuntimeService) -> None:
    """A round thins without the runtime's operation slot (its transaction decides), so a
    cell's automatic checkpoint arriving meanwhile is never refused SessionBusy; a runtime
    with an operation in flight is left for the next round."""
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    ids = {n: cell(service, rid, n) for n in range(1, 4)}
    taken_at(service, ids[1], NOW - 40 * DAY_MS)
    held_among = service.store.held_among
    slot_taken: list[bool] = []

    def spy(runtime_id: str, checkpoint_ids: Any) -> set[str]:
        slot_taken.append(service.guard.in_flight(runtime_id))
        return held_among(runtime_id, checkpoint_ids)

    service.store.held_among = spy  # type: ignore[method-assign]

    async def during_an_operation() -> Any:
        async with service.guard.operation(rid):
            return await service.retention.round()

    busy = run(during_an_operation())
    assert busy.busy == [rid] and busy.thinned == 0 and slot_taken == []
    report = run(service.retention.round())
    assert report.thinned == 1 and slot_taken == [False]


def test_a_round_deletes_the_e2b_snapshots_no_checkpoint_names_any_more(
    fake_e2b: FakeE2BCloud,  # noqa: F811
    tmp_path: Path,
) -> None:
    providers = {"e2b": E2BProvider(E2BConfig(retries=0))}
    service = open_runtime_service(
        tmp_path / "e2b-data",
        context_factory=InMemoryContextCapture,
        extra_providers=providers,
        default_backend="e2b",
    )
    service.retention.clock = lambda: NOW
    try:
        rid = run(service.create_runtime("nb.ipynb")).runtime_id
        backend = service.backends.get(rid)
        assert backend is not None
        ids = []
        for n in (1, 2, 3):  # each cell changes the sandbox: a snapshot of its own
            run(backend.write_bytes("model.txt", f"v{n}".encode()))
            automatic = AutoCheckpointCell(execution_count=n, source=f"v = {n}")
            ids.append(run(service.checkpoint(rid, f"cell-{n}", automatic=automatic)).checkpoint_id)
        snapshots = [service.store.get_checkpoint(cid).backend_ref for cid in ids[:2]]  # type: ignore[union-attr]
        for cid in ids[:2]:
            taken_at(service, cid, NOW - 40 * DAY_MS)
        report = run(service.retention.round())
        assert report.thinned == 2
        gone = {ref.provider_snapshot_id for ref in snapshots if ref is not None}
        assert len(gone) == 2 and not gone & set(fake_e2b.snapshot_ids())
        assert service.leftovers() == []
    finally:
        service.close_store()


def test_many_checkpoints_are_thinned_a_batch_a_transaction(
    service: RuntimeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long history (after an upgrade, a month of cells) never holds the store's write
    lock for one long transaction: `THIN_BATCH` checkpoints a transaction."""
    monkeypatch.setattr(retention_module, "THIN_BATCH", 2)
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    ids = [cell(service, rid, n) for n in range(1, 7)]
    for n, cid in enumerate(ids[:5]):
        taken_at(service, cid, NOW - 40 * DAY_MS + n)
    transaction = service.store.transaction
    opened: list[int] = []

    def counted() -> Any:
        opened.append(1)
        return transaction()

    service.store.transaction = counted  # type: ignore[method-assign]
    report = run(service.retention.round())
    assert report.thinned == 5 and len(report.runtimes) == 1
    assert [(s.first, s.last) for s in report.runtimes[0].cells] == [(1, 5)]
    assert len(opened) >= 3  # 2 + 2 + 1
