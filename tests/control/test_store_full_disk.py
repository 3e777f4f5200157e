"""Issue 22 section 6, the store's side: a full disk answers 507 `StorageFull`, and a failed
operation leaves the store (and the runtime) as it was.

The data directory sits on a real small tmpfs filled to the last byte (as root), and on a
real SQLite file whose writes a test double refuses with SQLite's own full-disk error (any
machine): `close`, a checkpoint and the listing of runtimes never answer 500 there.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ditto_jupyter.control.service import RuntimeService
from ditto_jupyter.control.store import SqlCheckpointStore, StoreError, StoreFull
from ditto_jupyter.core.errors import DittoError, StorageFull, StoreUnavailable
from ditto_jupyter.core.models import SessionLifecycleStatus
from ditto_jupyter.testing.contracts.store_data import checkpoint, dump_store, populate, session
from ditto_jupyter.wiring import open_runtime_service
from tests.fakes.fake_context_capture import InMemoryContextCapture
from tests.fakes.refusing_sqlite import disk_full
from tests.support.small_disk import filled, small_tmpfs

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@dataclass
class FullDisk:
    """Where the data directory is, and how to make its disk full for a block."""

    data_dir: Path
    mount: Path | None  # the tmpfs, or None for the test double

    @contextlib.contextmanager
    def full(self, store: SqlCheckpointStore) -> Iterator[None]:
        if self.mount is None:
            with disk_full(store):
                yield
            return
        db = self.data_dir / "ditto.db"
        with sqlite3.connect(db) as raw:  # an empty WAL: the next commit must grow it
            raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        raw.close()
        with filled(self.mount):
            yield


@pytest.fixture(params=["tmpfs", "double"])
def disk(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[FullDisk]:
    if request.param == "double":
        yield FullDisk(tmp_path / "data", None)
        return
    with small_tmpfs(tmp_path / "small", size_mib=40) as mount:
        yield FullDisk(mount / "data", mount)


def test_a_full_disk_is_storage_full_and_writes_nothing(disk: FullDisk) -> None:
    store = SqlCheckpointStore.at_path(disk.data_dir / "ditto.db")
    try:
        populate(store)
        before = dump_store(store)
        with disk.full(store):
            with pytest.raises(StoreFull) as refused:
                store.put_session(session("rt-new", metadata={"notes": "n" * 200_000}))
            error = refused.value
            assert isinstance(error, StorageFull) and isinstance(error, StoreError)
            assert (error.code, error.http_status) == ("StorageFull", 507)
            assert "is full" in str(error) and "nothing was written" in str(error)
            with pytest.raises(StoreFull), store.transaction():
                big = {"notes": "c" * 200_000}
                store.put_checkpoint(checkpoint("cp-new", "rt-a", 300, metadata=big))
                store.set_head("rt-a", "cp-new")
            assert dump_store(store) == before  # reads still answer, and nothing changed
        store.put_session(session("rt-new"))  # room again: writes go through
        assert store.get_session("rt-new") is not None
    finally:
        store.close()


def test_close_and_checkpoint_on_a_full_disk_keep_everything(disk: FullDisk) -> None:
    service: RuntimeService = open_runtime_service(
        disk.data_dir, context_factory=InMemoryContextCapture
    )
    context = service.context
    assert isinstance(context, InMemoryContextCapture) and isinstance(
        service.store, SqlCheckpointStore
    )
    try:
        rid = run(service.create_runtime("nb.ipynb")).runtime_id
        backend = service.backends.get(rid)
        assert backend is not None
        context.execute(rid, x=1)
        run(service.checkpoint(rid))
        context.execute(rid, x=2)
        run(backend.write_bytes("since-the-head.txt", b"written after the checkpoint"))
        workspace = service.workspace_path(rid)
        assert workspace is not None
        before = dump_store(service.store)
        with disk.full(service.store):
            for discard in (False, True):
                with pytest.raises(DittoError) as refused:
                    run(service.close(rid, discard=discard))
                assert refused.value.http_status == 507, refused.value
                if not discard:
                    assert "discard: true" in str(refused.value)
                assert service.session(rid).status is SessionLifecycleStatus.IDLE
                assert (workspace / "since-the-head.txt").exists()
                assert context.namespace(rid) == {"x": 2}
            with pytest.raises(Exception) as failed:
                run(service.checkpoint(rid))
            # the store refused the checkpoint's records, or the blob store its chunks first
            assert isinstance(failed.value, StorageFull), failed.value
            listed = run(service.list_runtimes())  # a read answers
            assert [r.runtime_id for r in listed.runtimes] == [rid]
            assert dump_store(service.store) == before
        closed = run(service.close(rid))  # room again: the final checkpoint keeps it all
        assert closed.checkpoint_id is not None
        child = run(service.checkout(closed.checkpoint_id)).runtime.runtime_id
        assert context.namespace(child) == {"x": 2}
        kept = service.workspace_path(child)
        assert kept is not None
        assert (kept / "since-the-head.txt").read_bytes() == b"written after the checkpoint"
    finally:
        service.close_store()


def test_anything_else_the_database_refuses_is_store_unavailable(tmp_path: Path) -> None:
    store = SqlCheckpointStore.at_path(tmp_path / "ditto.db")
    try:
        populate(store)
        with sqlite3.connect(tmp_path / "ditto.db") as raw:  # a table gone under the store
            raw.execute("DROP TABLE backend_bindings")
        raw.close()
        with pytest.raises(StoreError) as refused:
            store.list_bindings()
        error = refused.value
        assert isinstance(error, StoreUnavailable) and not isinstance(error, StorageFull)
        assert (error.code, error.http_status) == ("StoreUnavailable", 503)
        assert "cannot read or write the checkpoint store" in str(error)
        assert "no such table: backend_bindings" in str(error)
    finally:
        store.close()
