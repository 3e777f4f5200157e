"""WAL mode turns on while another process holds a fresh file's write lock."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ditto_jupyter.worker.sqlite_wal import turn_on_wal


@pytest.fixture
def writer_holding_the_lock(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    """A connection inside a write transaction on a file still in rollback mode, as a
    process switching the same fresh file to WAL is."""
    holder = sqlite3.connect(
        tmp_path / "fresh.sqlite", isolation_level=None, check_same_thread=False
    )
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")
    yield holder
    if holder.in_transaction:
        holder.execute("ROLLBACK")
    holder.close()


def test_the_plain_pragma_fails_at_once_whatever_the_busy_timeout(
    tmp_path: Path, writer_holding_the_lock: sqlite3.Connection
) -> None:
    """The hazard: SQLite does not wait for this lock (the failure CI met with 8 kernels)."""
    opener = sqlite3.connect(tmp_path / "fresh.sqlite", timeout=60, isolation_level=None)
    with pytest.raises(sqlite3.OperationalError, match="database is locked"):
        opener.execute("PRAGMA journal_mode = WAL")


def test_wal_turns_on_once_the_other_process_commits(
    tmp_path: Path, writer_holding_the_lock: sqlite3.Connection
) -> None:
    opener = sqlite3.connect(tmp_path / "fresh.sqlite", timeout=60, isolation_level=None)
    release = threading.Timer(0.3, writer_holding_the_lock.execute, args=("COMMIT",))
    release.start()
    try:
        assert turn_on_wal(opener, timeout_s=60) == "wal"
    finally:
        release.join()
    assert opener.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_lock_held_past_the_timeout_still_fails_with_sqlites_error(
    tmp_path: Path, writer_holding_the_lock: sqlite3.Connection
) -> None:
    opener = sqlite3.connect(tmp_path / "fresh.sqlite", timeout=60, isolation_level=None)
    with pytest.raises(sqlite3.OperationalError, match="database is locked"):
        turn_on_wal(opener, timeout_s=0.2)
    assert opener.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
