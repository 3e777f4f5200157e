"""WAL mode turned on when many processes open one SQLite file at once.

`PRAGMA journal_mode = WAL` on a file still in rollback mode reads page 1 in a read
transaction, then asks for the write lock to store the new format. SQLite never waits for a
lock asked from inside a read transaction (waiting could deadlock), so when another process
holds the write lock at that moment (it is switching the same fresh file, or writing it),
the pragma fails at once with "database is locked", whatever `busy_timeout` says. Kernels
and servers starting together open fresh files together, so this happens. Once the other
process commits, the file says WAL and the pragma only reads it: trying again is the cure.
"""

from __future__ import annotations

import logging
import random
import sqlite3
import time

_log = logging.getLogger(__name__)

#: First and longest pause between two tries, in seconds.
FIRST_PAUSE_S = 0.005
LONGEST_PAUSE_S = 0.25


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(exc) or "busy" in str(exc)


def turn_on_wal(connection: sqlite3.Connection, timeout_s: float) -> str:
    """Run `PRAGMA journal_mode = WAL`, trying again while another process holds the lock,
    for up to `timeout_s` seconds; answer the journal mode SQLite reports (lower case)."""
    deadline = time.monotonic() + timeout_s
    pause = FIRST_PAUSE_S
    tries = 0
    while True:
        tries += 1
        try:
            row = connection.execute("PRAGMA journal_mode = WAL").fetchone()
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc) or time.monotonic() + pause > deadline:
                raise
            time.sleep(pause * random.uniform(0.5, 1.5))
            pause = min(pause * 2, LONGEST_PAUSE_S)
            continue
        if tries > 1:
            _log.debug("WAL mode on after %d tries (another process held the lock)", tries)
        return str(row[0]).lower()
