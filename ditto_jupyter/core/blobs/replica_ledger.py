"""What this machine knows is in the object store, and what it still has to upload.

The replica's bookkeeping, apart from the catalogue (`index`), which stays the local
store's own. Two facts are kept:

- objects known to be in the bucket: chunks and manifests this server uploaded, found there
  (a create-only put that answered "exists") or fetched. The bucket is the truth; this is a
  cache of it. A fact is recorded only after the bucket confirmed it. Garbage collection
  (`control.bucket_gc`) deletes from a shared bucket, and counts each deletion phase in the
  shared store (the bucket's generation): facts learnt at another generation may be stale,
  so the ledger keeps the generation it learnt them at, and `align` forgets them all when
  the bucket's has moved on (the uploads after it put every object again, create-only).
  A manifest is put only after everything it lists, so a manifest known to be there
  vouches for its whole closure;
- the upload queue: checkpoints recorded but not yet replicated, each with the manifests
  it keeps alive, so an upload cut short by a restart is taken up again.

`ReplicaLedger` is the interface; `SqliteReplicaLedger` keeps it in `replica.db` beside the
catalogue, one file per data directory (the server writes it; a kernel of that server only
reads it, to know which evicted chunks are safe in the bucket). Shared bookkeeping across
servers (a PostgreSQL ledger beside shared reference counts) is another implementation.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Protocol

import orjson

from ditto_jupyter.core.blobs.errors import os_failure, place_of, sqlite_failure
from ditto_jupyter.core.blobs.index import BUSY_TIMEOUT_S, hex_of, key_of
from ditto_jupyter.worker.sqlite_wal import turn_on_wal

#: File name of the ledger inside the blob store's root.
LEDGER_FILE = "replica.db"
#: Ids asked about in one `IN (...)` (well below SQLite's limit of variables).
_BATCH = 500
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS replicated ("
    " kind INTEGER NOT NULL, id BLOB NOT NULL, PRIMARY KEY (kind, id)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS upload_queue ("
    " checkpoint TEXT PRIMARY KEY, manifests TEXT NOT NULL, queued REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS generation ("
    " id INTEGER PRIMARY KEY CHECK (id = 1), generation INTEGER NOT NULL)",
)
_log = logging.getLogger(__name__)


class ObjectKind(IntEnum):
    """What a replicated object is."""

    CHUNK = 1
    MANIFEST = 2


@dataclass(frozen=True)
class QueuedUpload:
    """A checkpoint waiting for upload, and the manifests it keeps alive."""

    checkpoint_id: str
    manifests: list[str]


class ReplicaLedger(Protocol):
    """Which objects are known to be in the bucket, and which manifests wait for upload."""

    def known(self, kind: ObjectKind, ids: Collection[str]) -> set[str]:
        """Those of `ids` known to be in the bucket."""
        ...

    def record(self, kind: ObjectKind, ids: Iterable[str]) -> None:
        """Record that these objects are in the bucket (the bucket said so)."""
        ...

    def align(self, generation: int) -> bool:
        """Forget every object known to be in the bucket unless the facts were learnt at
        the bucket's `generation` (see the module); whether it forgot."""
        ...

    def enqueue(self, checkpoint_id: str, manifest_ids: Iterable[str]) -> None:
        """Queue a checkpoint's manifests for upload (each with everything it lists)."""
        ...

    def queued(self, limit: int) -> list[QueuedUpload]:
        """Up to `limit` queued checkpoints, oldest first."""
        ...

    def dequeue(self, checkpoint_ids: Iterable[str]) -> None:
        """Take checkpoints off the queue (uploaded, or gone from the local store)."""
        ...


class SqliteReplicaLedger:
    """`ReplicaLedger` in one SQLite file (WAL), with a connection per thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.place = place_of(path.parent)
        self._local = threading.local()
        if not path.exists():
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
            except OSError as exc:
                raise os_failure(exc, self.place, "creating the replica ledger") from None
        with self._write() as conn:
            for statement in _SCHEMA:
                conn.execute(statement)

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            try:
                conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
                turn_on_wal(conn, BUSY_TIMEOUT_S)
                conn.execute("PRAGMA synchronous = NORMAL")
            except sqlite3.DatabaseError as exc:
                raise sqlite_failure(exc, self.place, "opening the replica ledger") from None
            self._local.conn = conn
        return conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        conn = self._connection()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.DatabaseError as exc:
            raise sqlite_failure(exc, self.place, "writing the replica ledger") from None

    def known(self, kind: ObjectKind, ids: Collection[str]) -> set[str]:
        """Those of `ids` known to be in the bucket."""
        wanted = list(dict.fromkeys(ids))
        found: set[str] = set()
        conn = self._connection()
        try:
            for start in range(0, len(wanted), _BATCH):
                keys = [key_of(i) for i in wanted[start : start + _BATCH]]
                marks = ",".join("?" * len(keys))
                rows = conn.execute(
                    f"SELECT id FROM replicated WHERE kind = ? AND id IN ({marks})",
                    (int(kind), *keys),
                ).fetchall()
                found.update(hex_of(key) for (key,) in rows)
        except sqlite3.DatabaseError as exc:
            raise sqlite_failure(exc, self.place, "reading the replica ledger") from None
        return found

    def record(self, kind: ObjectKind, ids: Iterable[str]) -> None:
        """Record that these objects are in the bucket."""
        rows = [(int(kind), key_of(i)) for i in dict.fromkeys(ids)]
        if rows:
            with self._write() as conn:
                conn.executemany("INSERT OR IGNORE INTO replicated (kind, id) VALUES (?, ?)", rows)

    def align(self, generation: int) -> bool:
        """Forget what is known to be in the bucket unless learnt at `generation`."""
        try:  # a read first: the generation rarely moves, and a write waits for others
            row = self._connection().execute("SELECT generation FROM generation").fetchone()
        except sqlite3.DatabaseError as exc:
            raise sqlite_failure(exc, self.place, "reading the replica ledger") from None
        if row is not None and int(row[0]) == generation:
            return False
        with self._write() as conn:
            row = conn.execute("SELECT generation FROM generation WHERE id = 1").fetchone()
            if row is not None and int(row[0]) == generation:
                return False
            conn.execute("DELETE FROM replicated")
            conn.execute(
                "INSERT INTO generation (id, generation) VALUES (1, ?) "
                "ON CONFLICT (id) DO UPDATE SET generation = excluded.generation",
                (generation,),
            )
        if row is not None:
            _log.info(
                "objects were collected from the bucket since this server last wrote to it "
                "(generation %s, now %s): what it knew was there is forgotten",
                row[0],
                generation,
            )
        return True

    def enqueue(self, checkpoint_id: str, manifest_ids: Iterable[str]) -> None:
        """Queue a checkpoint's manifests for upload."""
        manifests = orjson.dumps(list(dict.fromkeys(manifest_ids))).decode()
        with self._write() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO upload_queue (checkpoint, manifests, queued) "
                "VALUES (?, ?, ?)",
                (checkpoint_id, manifests, time.time()),
            )

    def queued(self, limit: int) -> list[QueuedUpload]:
        """Up to `limit` queued checkpoints, oldest first."""
        try:
            rows = (
                self._connection()
                .execute(
                    "SELECT checkpoint, manifests FROM upload_queue "
                    "ORDER BY queued, checkpoint LIMIT ?",
                    (limit,),
                )
                .fetchall()
            )
        except sqlite3.DatabaseError as exc:
            raise sqlite_failure(exc, self.place, "reading the replica ledger") from None
        return [QueuedUpload(str(c), [str(m) for m in orjson.loads(ms)]) for c, ms in rows]

    def dequeue(self, checkpoint_ids: Iterable[str]) -> None:
        """Take checkpoints off the queue."""
        keys = [(c,) for c in dict.fromkeys(checkpoint_ids)]
        if keys:
            with self._write() as conn:
                conn.executemany("DELETE FROM upload_queue WHERE checkpoint = ?", keys)


def open_ledger(root: Path) -> SqliteReplicaLedger | None:
    """The ledger of the blob store in `root`, when it has one (its server replicates)."""
    path = root / LEDGER_FILE
    return SqliteReplicaLedger(path) if path.exists() else None
