"""The store's role for LangGraph's checkpoints (`LangGraphRowsContract`) on a real SQLite
file and on a real PostgreSQL database, and the schema step that made its tables."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ditto_jupyter.control.store import MemoryCheckpointStore, SqlCheckpointStore
from ditto_jupyter.control.store.interface import CheckpointStore
from ditto_jupyter.control.store.langgraph_rows import langgraph_rows_of
from ditto_jupyter.testing.contracts import LangGraphRowsContract
from ditto_jupyter.testing.contracts.store_langgraph import lg_checkpoint, runtime, write

pytest_plugins = ["tests.support.postgres_fixtures"]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[CheckpointStore]:
    opened = SqlCheckpointStore.at_path(tmp_path / "ditto.db")
    yield opened
    opened.close()


class TestLangGraphRowsOnSqlite(LangGraphRowsContract):
    """The spec on the embedded store."""


@pytest.mark.postgres
class TestLangGraphRowsOnPostgres(LangGraphRowsContract):
    """The spec on PostgreSQL, the store of deployments."""

    @pytest.fixture
    def store(self, postgres_url: str) -> Iterator[CheckpointStore]:
        opened = SqlCheckpointStore(postgres_url)
        yield opened
        opened.close()


def test_the_memory_store_keeps_no_langgraph_threads() -> None:
    assert langgraph_rows_of(MemoryCheckpointStore()) is None


def test_on_sqlite_get_tuple_reads_on_the_db_api_as_the_store_would(
    store: CheckpointStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside a transaction, SQLite's get_tuple reads on a DB-API connection of its own
    (no pool checkout): the same answer as the store's read inside a transaction."""
    assert isinstance(store, SqlCheckpointStore)
    store.insert_session(runtime("rt-a"))
    store.put_langgraph_checkpoint(
        "rt-a",
        lg_checkpoint("t", "01", versions={"a": "1", "b": "1"}, new={"a": b"a1", "b": b"b1"}),
        now_ms=1,
    )
    store.put_langgraph_checkpoint(
        "rt-a",
        lg_checkpoint(
            "t", "02", parent="01", versions={"a": "2", "b": "1", "c": "9"}, new={"a": b""}
        ),
        now_ms=2,
    )
    store.put_langgraph_writes(
        "rt-a",
        "t",
        "",
        "02",
        [write("z", 1, b"z1", path="p2"), write("y", 0, b"y0", path="p1")],
        replace=False,
        now_ms=3,
    )
    with store.transaction():  # the SQLAlchemy read, in the write transaction
        expected = [store.get_langgraph_tuple("rt-a", "t", "", cid) for cid in (None, "01", "09")]
    monkeypatch.setattr(store._engine, "connect", lambda: pytest.fail("a pooled connection"))
    found = [store.get_langgraph_tuple("rt-a", "t", "", cid) for cid in (None, "01", "09")]

    def key(item: Any) -> Any:
        if item is None:
            return None
        return item.model_dump() | {"values": sorted(v.model_dump_json() for v in item.values)}

    assert [key(item) for item in found] == [key(item) for item in expected]
    assert found[0] is not None and [w.task_id for w in found[0].writes] == ["y", "z"]
    assert store.get_langgraph_tuple("rt-a", "other", "", None) is None
