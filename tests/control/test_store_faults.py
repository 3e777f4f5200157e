"""Issue 10 section 3 on a real SQLite file: damaged rows, and delete-snapshot's ordering.

A damaged row is stored the way the probe's request did (metadata nested 200 deep, past
what pydantic reads back), straight into the SQLite file. It must not take down listings,
closes or delete-snapshots of other runtimes, and nothing it may reference may be
collected. delete-snapshot must leave the record and the provider agreeing when the store
write fails (a real SQLite trigger refuses it) and when the provider fails (the fake E2B
cloud answers 500).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import sqlalchemy as sa

from ditto_jupyter.backends.e2b import E2BConfig, E2BProvider
from ditto_jupyter.control.service import RuntimeService
from ditto_jupyter.control.store import DamagedRecord, MemoryCheckpointStore
from ditto_jupyter.core.errors import BackendError
from ditto_jupyter.core.models import SessionRecord
from ditto_jupyter.wiring import open_runtime_service
from tests.fakes.e2b_cloud import ROUTE_DELETE_TEMPLATE, FakeE2BCloud
from tests.fakes.e2b_fixtures import fake_e2b  # noqa: F401
from tests.fakes.fake_context_capture import InMemoryContextCapture
from tests.support.stored_blobs import stored_manifest_ids

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def nested(depth: int) -> dict[str, Any]:
    value: Any = 1
    for _ in range(depth):
        value = {"k": value}
    return dict(value)


def damage(db: Path, table: str, key: str) -> None:
    """Give a stored row metadata nested 200 deep, as the probe's request did."""
    column = "checkpoint_id" if table == "checkpoints" else "runtime_id"
    raw = sqlite3.connect(db)
    (text,) = raw.execute(f"SELECT data FROM {table} WHERE {column} = ?", (key,)).fetchone()
    record = json.loads(text)
    record["metadata"] = nested(200)
    raw.execute(f"UPDATE {table} SET data = ? WHERE {column} = ?", (json.dumps(record), key))
    raw.commit()
    raw.close()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def service(data_dir: Path) -> Iterator[RuntimeService]:
    svc = open_runtime_service(data_dir, context_factory=InMemoryContextCapture)
    yield svc
    svc.close_store()


def manifests_on_disk(data_dir: Path) -> set[str]:
    return stored_manifest_ids(data_dir / "blobs")


def test_a_damaged_row_is_skipped_by_listings_and_reported(
    service: RuntimeService, data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bad = run(service.create_runtime("bad.ipynb")).runtime_id
    good = run(service.create_runtime("good.ipynb")).runtime_id
    lost = run(service.create_runtime("lost.ipynb")).runtime_id
    broken = run(service.checkpoint(bad, "broken")).checkpoint_id
    kept = run(service.checkpoint(bad, "kept")).checkpoint_id
    good_cp = run(service.checkpoint(good)).checkpoint_id
    damage(data_dir / "ditto.db", "checkpoints", broken)
    damage(data_dir / "ditto.db", "sessions", lost)

    with caplog.at_level(logging.WARNING, logger="ditto_jupyter.store"):
        listed = [r.runtime_id for r in run(service.list_runtimes()).runtimes]
    assert listed == [bad, good]
    assert f"runtime {lost!r} is damaged" in caplog.text
    assert [c.checkpoint_id for c in run(service.list_checkpoints(bad)).checkpoints] == [kept]
    assert [c.checkpoint_id for c in run(service.list_checkpoints(good)).checkpoints] == [good_cp]
    assert service.resolve_checkpoint("kept", bad).checkpoint_id == kept
    with pytest.raises(DamagedRecord, match=f"stored checkpoint '{broken}' is damaged"):
        service.get_checkpoint(broken)
    damaged = service.store.damaged_rows()
    assert [(row.table, row.key) for row in damaged] == [
        ("sessions", lost),
        ("checkpoints", broken),
    ]
    assert all("recursion limit" in row.reason for row in damaged)


def test_other_runtimes_close_and_delete_snapshots_and_gc_keeps_the_damaged_rows_blobs(
    service: RuntimeService, data_dir: Path
) -> None:
    bad = run(service.create_runtime("bad.ipynb")).runtime_id
    good = run(service.create_runtime("good.ipynb")).runtime_id
    ctx = service.context
    assert isinstance(ctx, InMemoryContextCapture)
    ctx.execute(bad, secret="kept")
    broken = service.store.get_checkpoint(run(service.checkpoint(bad)).checkpoint_id)
    assert broken is not None and broken.backend_ref is not None
    good_cp = run(service.checkpoint(good)).checkpoint_id
    damage(data_dir / "ditto.db", "checkpoints", broken.checkpoint_id)

    result = run(service.delete_snapshot(good_cp))
    assert (result.deleted, result.already_deleted) == (True, False)
    assert run(service.close(good)).runtime.status.value == "closed"
    service.gc(grace_seconds=0)
    on_disk = manifests_on_disk(data_dir)
    assert broken.context_manifest_id in on_disk
    assert broken.backend_ref.provider_snapshot_id in on_disk


def test_the_memory_store_skips_and_reports_damaged_rows_too() -> None:
    store = MemoryCheckpointStore()
    for rid in ("a", "b"):
        store.insert_session(SessionRecord(session_id=rid, conversation_id="c", sender_id="s"))
    row = store._state.sessions["a"]
    record = json.loads(row.data)
    record["metadata"] = nested(200)
    store._state.sessions["a"] = row._replace(data=json.dumps(record))
    assert [s.session_id for s in store.list_sessions()] == ["b"]
    assert [(row.table, row.key) for row in store.damaged_rows()] == [("sessions", "a")]


# ---- delete-snapshot: the store records the deletion first -------------------------------


def refuse_checkpoint_updates(db: Path) -> None:
    """A real store made to fail: SQLite refuses every later write to a checkpoint row."""
    raw = sqlite3.connect(db)
    raw.execute(
        "CREATE TRIGGER refuse_updates BEFORE UPDATE ON checkpoints "
        "BEGIN SELECT RAISE(ABORT, 'the disk refused the write'); END"
    )
    raw.commit()
    raw.close()


def test_a_failed_store_write_leaves_the_snapshot_and_its_record(
    service: RuntimeService, data_dir: Path
) -> None:
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    cid = run(service.checkpoint(rid)).checkpoint_id
    ref = service.get_checkpoint(cid).backend_ref
    assert ref is not None and ref.provider_snapshot_id
    refuse_checkpoint_updates(data_dir / "ditto.db")
    with pytest.raises(sa.exc.IntegrityError, match="the disk refused the write"):
        run(service.delete_snapshot(cid))
    summary = run(service.list_checkpoints(rid)).checkpoints[0]
    assert summary.has_provider_snapshot is True
    assert ref.provider_snapshot_id in manifests_on_disk(data_dir)  # the provider agrees
    assert run(service.checkout(cid)).runtime.status.value == "idle"


def test_a_failed_provider_delete_gives_the_records_their_snapshot_back(
    tmp_path: Path,
    fake_e2b: FakeE2BCloud,  # noqa: F811
) -> None:
    service = open_runtime_service(
        tmp_path / "data",
        context_factory=InMemoryContextCapture,
        extra_providers={"e2b": E2BProvider(E2BConfig(retries=0))},
        default_backend="e2b",
    )
    try:
        rid = run(service.create_runtime("nb.ipynb")).runtime_id
        first = run(service.checkpoint(rid)).checkpoint_id
        second = run(service.checkpoint(rid)).checkpoint_id  # clean: shares the snapshot
        ref = service.get_checkpoint(first).backend_ref
        assert ref is not None and ref.provider_snapshot_id
        assert service.get_checkpoint(second).backend_ref == ref
        fake_e2b.fail_next(ROUTE_DELETE_TEMPLATE, 500)
        with pytest.raises(BackendError):
            run(service.delete_snapshot(first))
        assert ref.provider_snapshot_id in fake_e2b.snapshot_ids()
        rows = run(service.list_checkpoints(rid)).checkpoints
        assert [c.has_provider_snapshot for c in rows] == [True, True]
        result = run(service.delete_snapshot(first))  # and once the provider answers:
        assert result.deleted is True
        assert ref.provider_snapshot_id not in fake_e2b.snapshot_ids()
        rows = run(service.list_checkpoints(rid)).checkpoints
        assert [c.has_provider_snapshot for c in rows] == [False, False]
        run(service.close(rid))
    finally:
        service.close_store()
