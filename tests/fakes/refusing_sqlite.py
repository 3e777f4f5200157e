"""A TEST DOUBLE of a database that refuses writes, under a real SQLite store: every write
statement raises the error SQLite itself raises, from inside the driver call, exactly where
the real one comes from; reads go through.

`disk_full(store)` is a full disk (`sqlite3.OperationalError: database or disk is full`,
SQLITE_FULL), for machines where a tmpfs cannot be mounted (not root);
`refusing_writes(store, locked_error())` is a database held by someone else past the busy
timeout (SQLITE_BUSY), without waiting that timeout out.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from typing import Any

from sqlalchemy import event

from ditto_jupyter.control.store import SqlCheckpointStore

_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")


def _sqlite_error(message: str, code: int, name: str) -> sqlite3.OperationalError:
    error = sqlite3.OperationalError(message)
    error.sqlite_errorcode = code  # type: ignore[attr-defined]
    error.sqlite_errorname = name  # type: ignore[attr-defined]
    return error


def disk_full_error() -> sqlite3.OperationalError:
    """The error SQLite raises when the disk is full, with its error code."""
    return _sqlite_error("database or disk is full", sqlite3.SQLITE_FULL, "SQLITE_FULL")


def locked_error() -> sqlite3.OperationalError:
    """The error SQLite raises when another connection holds the database too long."""
    return _sqlite_error("database is locked", sqlite3.SQLITE_BUSY, "SQLITE_BUSY")


@contextlib.contextmanager
def refusing_writes(store: SqlCheckpointStore, error: sqlite3.Error) -> Iterator[None]:
    """Every write statement of `store` raises `error` inside the block."""
    engine = store._engine

    def refuse(
        _conn: Any, _cursor: Any, statement: str, _params: Any, _context: Any, _many: bool
    ) -> None:
        if statement.lstrip().upper().startswith(_WRITES):
            raise error

    event.listen(engine, "before_cursor_execute", refuse)
    try:
        yield
    finally:
        event.remove(engine, "before_cursor_execute", refuse)


def disk_full(store: SqlCheckpointStore) -> contextlib.AbstractContextManager[None]:
    """Every write statement of `store` fails as on a full disk, inside the block."""
    return refusing_writes(store, disk_full_error())
