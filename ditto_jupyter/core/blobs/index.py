"""The blob store's catalogue: one SQLite file with the small objects and every reference.

`objects.db` (WAL) under the blob store's root holds two tables:

    chunks(digest, refs, touched, size, data)
        every stored chunk. `data` is its stored form (codec tag + payload) when it is
        small; NULL when the chunk storage keeps it (`chunks/ab/<hex>` on local disk).
        `refs` counts the manifests that list it. `size` is its stored size.
    manifests(id, refs, touched, unchecked, document)
        every manifest, its signed JSON document inline. `refs` counts the manifests that
        list it under "manifests". `unchecked` is 1 until the control plane vouched that a
        checkpoint references it, and again when such a reference went away.

`touched` is when the object was last written or reused (Unix seconds), for the grace
period. Two partial indexes are what make collection cost follow the garbage: unreferenced
chunks by `touched`, unchecked manifests by id. Ids are stored as their 32 raw bytes.

Several processes share the file (the server and its kernels). Every thread gets its own
connection. Writes are short `BEGIN IMMEDIATE` transactions; commits do not fsync
(`synchronous=NORMAL`) unless the caller asks for a durable one, which also makes every
earlier commit durable (they precede it in the same log). The log is bounded and
checkpointed once idle (`core.sqlite_log`); `last_write_bytes` says what this thread's last
write transaction appended to it, for the "written" figures.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ditto_jupyter.core.blobs.errors import BlobError, os_failure, place_of, sqlite_failure
from ditto_jupyter.core.sqlite_log import IDLE_LOGS, LogMeter, bound_log
from ditto_jupyter.worker.sqlite_wal import turn_on_wal

#: File name of the object index inside the blob store's root.
INDEX_FILE = "objects.db"
#: Seconds a writer waits for another process's write transaction before giving up.
BUSY_TIMEOUT_S = 30.0
#: Chunks whose stored form is smaller than this live inline in the index, not in a file
#: of their own: a file costs a 4 KiB block and an inode, a row some 50 bytes.
SMALL_OBJECT_LIMIT = 64 * 1024
#: A reused chunk or manifest gets a fresh `touched` only when its own is older than this:
#: a tenth of the default grace period (`store.GRACE_SECONDS`), so what a capture reuses
#: stays well inside the grace, and a capture that reuses everything writes no page.
TOUCH_REFRESH_SECONDS = 60.0
_SCHEMA_VERSION = 1
_log = logging.getLogger(__name__)

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS chunks (
        digest BLOB PRIMARY KEY,
        refs INTEGER NOT NULL DEFAULT 0,
        touched REAL NOT NULL,
        size INTEGER NOT NULL,
        data BLOB
    )""",
    "CREATE INDEX IF NOT EXISTS chunks_unreferenced ON chunks (touched) WHERE refs = 0",
    """CREATE TABLE IF NOT EXISTS manifests (
        id BLOB PRIMARY KEY,
        refs INTEGER NOT NULL DEFAULT 0,
        touched REAL NOT NULL,
        unchecked INTEGER NOT NULL DEFAULT 1,
        document BLOB NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS manifests_unchecked ON manifests (id) WHERE unchecked = 1",
)


def key_of(hex_id: str) -> bytes:
    """The stored form of a 64-hex-digit id."""
    return bytes.fromhex(hex_id)


def hex_of(key: bytes) -> str:
    """The 64-hex-digit id of a stored key."""
    return key.hex()


class ObjectIndex:
    """The SQLite file of one blob store, with a connection per thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.place = place_of(path.parent)
        self._local = threading.local()
        if not path.exists():  # private from the first byte; SQLite gives -wal/-shm its mode
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
            except OSError as exc:
                raise os_failure(exc, self.place, "creating the blob index") from None
        self._create_schema()

    def _create_schema(self) -> None:
        conn = self.connection()
        try:
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")  # only takes on a new file
            turn_on_wal(conn, BUSY_TIMEOUT_S)
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > _SCHEMA_VERSION:
                raise BlobError(
                    f"the blob index {self.path} has version {version}, newer than the "
                    f"{_SCHEMA_VERSION} this ditto-jupyter understands; upgrade ditto-jupyter"
                )
            if version < _SCHEMA_VERSION:
                with self.write() as writing:
                    for statement in _SCHEMA:
                        writing.execute(statement)
                    writing.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")
        except sqlite3.DatabaseError as exc:
            raise sqlite_failure(exc, self.place, f"opening {self.path}") from None

    def connection(self) -> sqlite3.Connection:
        """This thread's connection (opened on first use), in autocommit mode."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            try:
                conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
                conn.execute("PRAGMA synchronous = NORMAL")
                bound_log(conn)
            except sqlite3.DatabaseError as exc:
                raise sqlite_failure(
                    exc, self.place, f"opening the blob index {self.path}"
                ) from None
            self._local.conn = conn
        return conn

    @contextmanager
    def write(self, *, durable: bool = False) -> Iterator[sqlite3.Connection]:
        """One write transaction; `durable` commits with an fsync (and so every earlier one).

        Afterwards `last_write_bytes` is what it appended to the log (0 when it changed
        nothing: a transaction that writes no page writes nothing)."""
        conn = self.connection()
        meter = LogMeter(self.path)
        self._local.written = 0
        try:
            if durable:
                conn.execute("PRAGMA synchronous = FULL")
            conn.execute("BEGIN IMMEDIATE")
            meter.start()
        except sqlite3.DatabaseError as exc:
            raise sqlite_failure(exc, self.place, "writing the blob index") from None
        try:
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.DatabaseError as exc:
            raise sqlite_failure(exc, self.place, "writing the blob index") from None
        finally:
            if durable:
                conn.execute("PRAGMA synchronous = NORMAL")
        written = meter.stop()
        self._local.written = written
        if written:
            IDLE_LOGS.wrote(self.path)

    def last_write_bytes(self) -> int:
        """The bytes this thread's last write transaction appended to the log."""
        return int(getattr(self._local, "written", 0))

    def read(self, sql: str, parameters: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        """Every row of one query, read outside any write transaction."""
        try:
            return self.connection().execute(sql, parameters).fetchall()
        except sqlite3.DatabaseError as exc:
            raise sqlite_failure(exc, self.place, "reading the blob index") from None

    def return_free_pages(self, batch: int = 256) -> None:
        """Give the file's free pages back to the file system (after a collection), `batch`
        pages per transaction so that writers never wait long."""
        conn = self.connection()
        try:
            free = conn.execute("PRAGMA freelist_count").fetchone()[0]
            while free > 0:
                conn.execute(f"PRAGMA incremental_vacuum({int(batch)})").fetchall()
                left = conn.execute("PRAGMA freelist_count").fetchone()[0]
                if left >= free:  # not an incremental-vacuum file: nothing to give back
                    return
                free = left
        except sqlite3.OperationalError as exc:  # busy: the next collection tries again
            _log.info("left the free pages of %s for the next collection: %s", self.path, exc)
            return
