"""A TEST DOUBLE of a full disk under a real SQLite store, for machines where a tmpfs cannot
be mounted (not root): every write statement raises the error SQLite raises on a full disk
(`sqlite3.OperationalError: database or disk is full`, error code SQLITE_FULL), from inside
the driver call, exactly where the real one comes from. Reads go through.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from typing import Any

from sqlalchemy import event

from ditto_jupyter.control.store import SqlCheckpointStore

_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")


def disk_full_error() -> sqlite3.OperationalError:
    """The error SQLite raises when the disk is full, with its error code."""
    error = sqlite3.OperationalError("database or disk is full")
    error.sqlite_errorcode = sqlite3.SQLITE_FULL  # type: ignore[attr-defined]
    error.sqlite_errorname = "SQLITE_FULL"  # type: ignore[attr-defined]
    return error


@contextlib.contextmanager
def disk_full(store: SqlCheckpointStore) -> Iterator[None]:
    """Every write statement of `store` fails as on a full disk, inside the block."""
    engine = store._engine

    def refuse(
        _conn: Any, _cursor: Any, statement: str, _params: Any, _context: Any, _many: bool
    ) -> None:
        if statement.lstrip().upper().startswith(_WRITES):
            raise disk_full_error()

    event.listen(engine, "before_cursor_execute", refuse)
    try:
        yield
    finally:
        event.remove(engine, "before_cursor_execute", refuse)
