"""Every wait for the store's write lock is bounded (issue 40 section 2).

Another connection holds the write lock (SQLite's, in an open write transaction; on
PostgreSQL the store's advisory lock, from outside): a write gives up after the store's
lock timeout with `StoreError` (503 `StoreUnavailable`) in one line naming the bound,
writes nothing, and succeeds once the lock is let go. Reads go on meanwhile.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa

from ditto_jupyter.control.store import SqlCheckpointStore, StoreError
from ditto_jupyter.core.models import SessionRecord

pytest_plugins = ["tests.support.postgres_fixtures"]

#: The store's write lock on PostgreSQL (`sql_database._PG_WRITE_LOCK`).
STORE_LOCK_KEY = 0x6469_7474_6F00
#: A short bound: the tests wait for it to pass, never for a time.
BOUND_MS = 300


def session(runtime_id: str) -> SessionRecord:
    return SessionRecord(session_id=runtime_id, conversation_id="c.ipynb", sender_id="me")


@contextmanager
def held_in_a_transaction(store: SqlCheckpointStore) -> Iterator[None]:
    """Hold the store's write lock in an open write transaction on another thread."""
    taken, let_go = threading.Event(), threading.Event()

    def hold() -> None:
        with store.transaction():
            store.put_session(session("holder"))
            taken.set()
            let_go.wait()

    holder = threading.Thread(target=hold)
    holder.start()
    assert taken.wait(60)
    try:
        yield
    finally:
        let_go.set()
        holder.join()


def refused_then_written(store: SqlCheckpointStore, hold: object) -> None:
    with hold:  # type: ignore[attr-defined]
        with pytest.raises(StoreError) as refused:
            store.put_session(session("waiting"))
        assert store.get_session("waiting") is None  # reads go on, nothing was written
    message = str(refused.value)
    assert "\n" not in message and "write lock" in message and "store_lock_timeout" in message
    store.put_session(session("waiting"))
    assert store.get_session("waiting") is not None


def test_a_held_sqlite_lock_is_waited_for_a_bounded_time(tmp_path: Path) -> None:
    path = tmp_path / "ditto.db"
    holder = SqlCheckpointStore.at_path(path)
    waiting = SqlCheckpointStore(f"sqlite:///{path}", busy_timeout_ms=BOUND_MS)
    try:
        refused_then_written(waiting, held_in_a_transaction(holder))
    finally:
        holder.close()
        waiting.close()


@contextmanager
def advisory_lock_held(url: str) -> Iterator[None]:
    """Hold the store's advisory lock from outside, in an open transaction."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn, conn.begin():
            conn.execute(sa.select(sa.func.pg_advisory_xact_lock(STORE_LOCK_KEY)))
            yield
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_a_held_postgres_lock_is_waited_for_a_bounded_time(postgres_url: str) -> None:
    store = SqlCheckpointStore(postgres_url, busy_timeout_ms=BOUND_MS)
    try:
        refused_then_written(store, advisory_lock_held(postgres_url))
    finally:
        store.close()
