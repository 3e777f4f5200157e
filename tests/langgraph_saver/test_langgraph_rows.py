"""The store's role for LangGraph's checkpoints (`LangGraphRowsContract`) on a real SQLite
file and on a real PostgreSQL database, and the schema step that made its tables."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ditto_jupyter.control.store import MemoryCheckpointStore, SqlCheckpointStore
from ditto_jupyter.control.store.interface import CheckpointStore
from ditto_jupyter.control.store.langgraph_rows import langgraph_rows_of
from ditto_jupyter.testing.contracts import LangGraphRowsContract

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
