"""One SQL database of the checkpoint store: engine, connections, transactions, migrations.

SQLite (one file, WAL) or PostgreSQL, through SQLAlchemy Core. Write transactions are
serialized (SQLite `BEGIN IMMEDIATE`, a PostgreSQL advisory lock); references are checked
when the outermost one commits. A statement the database refuses is never a bare driver
error: a full disk is `StoreFull` (507 `StorageFull`), anything else `StoreError` (503
`StoreUnavailable`), and the transaction it ran in is rolled back, so the store is as it
was.

Every lock wait is bounded by `lock_timeout_ms` (the server's `store_lock_timeout`):
SQLite's busy timeout, PostgreSQL's `lock_timeout` for the write lock and all a write
transaction waits for. A write lock held longer by another (a server frozen inside a
write, a session a network partition left open) is `StoreError` naming the bound, never
a wait without end: one stuck server never stops the others.

SQLite runs with `synchronous=FULL`: every commit is on disk when it returns, so a
checkpoint the user was told about survives power loss, not only a process crash (with
NORMAL, WAL stays consistent but may lose the last commits). Commits are rare (one per
control operation) and the extra fsync is small beside the blob writes of a checkpoint.
Its log is bounded and checkpointed once idle (`core.sqlite_log`); `last_commit_bytes`
says what the last write transaction of the caller's context appended to it.
"""

from __future__ import annotations

import contextvars
import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import URL, Connection, Engine, make_url

from ditto_jupyter.control.store.interface import (
    BUSY_TIMEOUT_MS,
    Ref,
    SchemaVersionError,
    StoreError,
    StoreFull,
    StoreUnreachable,
    dangling,
)
from ditto_jupyter.control.store.migrations import MIGRATIONS, Migration, check_migrations
from ditto_jupyter.control.store.schema import CHECKPOINT_EXISTS, RUNTIME_EXISTS, VERSION_TABLE
from ditto_jupyter.core.private import private_file
from ditto_jupyter.core.sqlite_log import IDLE_LOGS, LogMeter, bound_log
from ditto_jupyter.worker.sqlite_wal import turn_on_wal

_PG_WRITE_LOCK = 0x6469_7474_6F00
"""PostgreSQL advisory lock key that serializes write transactions (and migrations)."""

#: Page size of a new SQLite store (SQLite's default is 4096; see `_sqlite_engine`).
PAGE_SIZE = 1024

_PG_DISK_FULL = "53100"
"""PostgreSQL's SQLSTATE `disk_full`."""
_PG_LOCK_TIMEOUT = "55P03"
"""PostgreSQL's SQLSTATE `lock_not_available` (`lock_timeout` reached)."""


def lock_timed_out(error: sa.exc.DBAPIError) -> bool:
    """Whether the database gave up waiting for a lock another connection held."""
    orig = error.orig
    if getattr(orig, "sqlstate", None) == _PG_LOCK_TIMEOUT:
        return True
    code = getattr(orig, "sqlite_errorcode", None)
    if isinstance(code, int) and code & 0xFF == sqlite3.SQLITE_BUSY:
        return True
    return "database is locked" in str(orig).lower()


#: What a PostgreSQL server that answers says when it refuses a login (a setting is wrong:
#: the role, its password, the database), unlike one that is down or starting up.
_LOGIN_REFUSALS = (
    "authentication failed",
    "no password supplied",
    "does not exist",
    "no pg_hba.conf entry",
    "permission denied",
)


def login_refused(error: sa.exc.DBAPIError) -> bool:
    """Whether a server answered a connection, refusing the login (SQLSTATE class 28, 3D,
    42: a role, password or database that is wrong), rather than not answering."""
    state = getattr(error.orig, "sqlstate", None)
    if isinstance(state, str) and state[:2] in ("28", "3D", "42"):
        return True
    text = str(error.orig).lower()
    return any(refusal in text for refusal in _LOGIN_REFUSALS)


def disk_is_full(error: sa.exc.DBAPIError) -> bool:
    """Whether the database refused a statement because its disk has no room left."""
    orig = error.orig
    code = getattr(orig, "sqlite_errorcode", None)
    if isinstance(code, int) and code & 0xFF == sqlite3.SQLITE_FULL:
        return True
    if getattr(orig, "sqlstate", None) == _PG_DISK_FULL:
        return True
    text = str(orig).lower()
    return "database or disk is full" in text or "no space left on device" in text


@dataclass
class _SqlTxn:
    conn: Connection
    refs: list[list[Ref]] = field(default_factory=lambda: [[]])
    #: Per savepoint level: what the store noted for later in the transaction (`note`).
    notes: list[dict[object, object]] = field(default_factory=lambda: [{}])


class SqlDatabase:
    """A checkpoint store's database: its engine, transactions and schema version.

    Opening creates the schema or migrates it to the current version; several processes
    (the server and its kernels) may open the same SQLite file at once. `insert` is the
    dialect's INSERT, for the upserts of the store built on it.
    """

    insert: Callable[..., Any]

    def __init__(
        self,
        url: str | URL,
        *,
        migrations: Sequence[Migration] = MIGRATIONS,
        busy_timeout_ms: int = BUSY_TIMEOUT_MS,
    ) -> None:
        if busy_timeout_ms < 1:
            raise ValueError(f"a store's lock timeout must be at least 1 ms, not {busy_timeout_ms}")
        #: How long any lock wait lasts at most (ms) before the store answers StoreError.
        self.lock_timeout_ms = int(busy_timeout_ms)
        try:
            self.url = make_url(url)
        except sa.exc.ArgumentError as exc:
            raise ValueError(f"{url!r} is not a database URL: {exc}") from None
        self.backend = self.url.get_backend_name()
        shown = self.url.render_as_string(hide_password=True)
        self._shown = shown
        if self.backend not in ("sqlite", "postgresql"):
            raise ValueError(f"the checkpoint store supports SQLite and PostgreSQL, not {shown}")
        check_migrations(migrations)
        self._migrations = tuple(migrations)
        self._closed = False
        self._active: contextvars.ContextVar[_SqlTxn | None] = contextvars.ContextVar(
            f"ditto_store_txn_{id(self)}", default=None
        )
        self.journal_mode: str | None = None
        self._committed_bytes: contextvars.ContextVar[int] = contextvars.ContextVar(
            f"ditto_store_logged_{id(self)}", default=0
        )
        self._log_file: Path | None = None  # the SQLite file whose log is counted
        if self.backend == "sqlite":
            database = self.url.database or ""
            if database in ("", ":memory:") or self.url.query.get("mode") == "memory":
                raise ValueError(
                    f"{shown} is an in-memory SQLite database, which other connections cannot "
                    "see; use MemoryCheckpointStore or a file path"
                )
            self._engine = self._sqlite_engine(busy_timeout_ms)
            self.insert = sqlite_dialect.insert
        else:
            self._engine = sa.create_engine(self.url, pool_pre_ping=True)
            self.insert = pg_dialect.insert
        self._opening = True
        try:
            self._migrate()
        except BaseException:
            self._engine.dispose()
            raise
        self._opening = False

    @classmethod
    def at_path(
        cls, path: str | os.PathLike[str], *, busy_timeout_ms: int = BUSY_TIMEOUT_MS
    ) -> Self:
        """The SQLite store in the file `path` (created 0600, with its parent folders, if
        missing; a looser file and its -wal and -shm are made 0600)."""
        target = Path(path).expanduser().resolve()
        target.parent.mkdir(parents=True, exist_ok=True)
        private_file(target)
        return cls(URL.create("sqlite", database=str(target)), busy_timeout_ms=busy_timeout_ms)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._shown!r})"

    # ---- connections and transactions -----------------------------------------------

    def _sqlite_engine(self, busy_timeout_ms: int) -> Engine:
        engine = sa.create_engine(self.url)

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            # SQLAlchemy, not the sqlite3 module, emits BEGIN (see _on_begin).
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            try:
                cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
                cursor.execute("PRAGMA foreign_keys = ON")
                # A new file only (before WAL is on): a checkpoint's commit writes a page
                # image per B-tree it touches (the record, its indexes, the head, the
                # runtime), so small pages keep its log to ~14 KiB where 4 KiB pages made ~50.
                cursor.execute(f"PRAGMA page_size = {PAGE_SIZE}")
                mode = turn_on_wal(dbapi_connection, busy_timeout_ms / 1000)
                cursor.execute("PRAGMA synchronous = FULL")
                bound_log(dbapi_connection)
            finally:
                cursor.close()
            self.journal_mode = str(mode).lower()
            if self.journal_mode == "wal":
                self._log_file = Path(self.url.database or "").resolve()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            write = conn.get_execution_options().get("ditto_write", False)
            conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

        return engine

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"the checkpoint store {self._shown} is closed")

    @contextmanager
    def _begin(self, write: bool) -> Iterator[Connection]:
        """A new connection in a new (write-locked when `write`) transaction.

        What the database refuses, in the block or at its commit, is rolled back and raised
        as `StoreFull` or `StoreError` (see `_refusal`).
        """
        try:
            connection = self._engine.connect()
        except sa.exc.DBAPIError as exc:
            raise self._refusal(exc, connecting=True) from exc
        try:
            with connection as conn:
                conn.execution_options(ditto_write=write)
                with conn.begin():
                    if write and self.backend == "postgresql":
                        # every lock wait of the transaction bounded, the write lock's first
                        conn.exec_driver_sql(f"SET LOCAL lock_timeout = {self.lock_timeout_ms}")
                        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_PG_WRITE_LOCK)))
                    yield conn
        except (sa.exc.IntegrityError, sa.exc.ProgrammingError):
            raise  # a statement of ours is wrong: a bug, not a store that is unavailable
        except sa.exc.DBAPIError as exc:
            raise self._refusal(exc) from exc

    def _refusal(self, exc: sa.exc.DBAPIError, *, connecting: bool = False) -> StoreError:
        """The store error for a statement the database refused: StoreFull for a full disk,
        StoreUnreachable for a PostgreSQL server no connection could be made to (down, or
        starting up; one that refused the login is a StoreError: a setting is wrong)."""
        reason = str(exc.orig) if exc.orig is not None else str(exc)
        reason = reason.strip().splitlines()[0] if reason.strip() else type(exc).__name__
        verb = "open" if self._opening else "read or write"
        if disk_is_full(exc):
            return StoreFull(
                f"the disk holding the checkpoint store {self._shown} is full ({reason}); "
                "nothing was written: free some space and try again"
            )
        if lock_timed_out(exc):
            return StoreError(
                f"the checkpoint store {self._shown} is busy: another connection held its "
                f"write lock for over {self.lock_timeout_ms / 1000:g} s (store_lock_timeout; a "
                "server frozen inside a write?); nothing was written, try again"
            )
        if connecting and self.backend == "postgresql" and not login_refused(exc):
            return StoreUnreachable(f"cannot reach the checkpoint store {self._shown}: {reason}")
        return StoreError(f"cannot {verb} the checkpoint store {self._shown}: {reason}")

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Commit everything inside atomically; nested blocks are savepoints."""
        self._check_open()
        active = self._active.get()
        if active is not None:
            active.refs.append([])
            active.notes.append({})
            try:
                with active.conn.begin_nested():
                    yield
            except BaseException:
                active.refs.pop()
                active.notes.pop()
                raise
            inner, noted = active.refs.pop(), active.notes.pop()
            active.refs[-1].extend(inner)
            active.notes[-1].update(noted)
            return
        meter: LogMeter | None = None
        with self._begin(write=True) as conn:
            if self._log_file is not None:  # set when the first connection opened
                meter = LogMeter(self._log_file)
                meter.start()
            txn = _SqlTxn(conn)
            token = self._active.set(txn)
            try:
                yield
                self._verify_refs(conn, txn.refs[0])
            finally:
                self._active.reset(token)
        written = meter.stop() if meter is not None else 0
        self._committed_bytes.set(written)
        if meter is not None and written:
            IDLE_LOGS.wrote(meter.database)

    def last_commit_bytes(self) -> int:
        """What the last write transaction of this context appended to the database's log
        (SQLite; 0 on PostgreSQL, whose log is not in the data directory)."""
        return self._committed_bytes.get()

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        self._check_open()
        active = self._active.get()
        if active is not None:
            yield active.conn
            return
        with self._begin(write=False) as conn:
            yield conn

    @contextmanager
    def _write(self, refs: Sequence[Ref] = ()) -> Iterator[Connection]:
        with self.transaction():
            active = self._active.get()
            assert active is not None
            yield active.conn
            active.refs[-1].extend(refs)

    def _note(self, key: object, value: object) -> None:
        """Remember `value` under `key` until the transaction ends (forgotten with the
        savepoint that noted it, when that rolls back)."""
        active = self._active.get()
        assert active is not None, "notes are taken inside a write transaction"
        active.notes[-1][key] = value

    def _noted(self, key: object) -> tuple[bool, object]:
        """Whether something is noted under `key` in this transaction, and the latest."""
        active = self._active.get()
        for level in reversed(active.notes if active is not None else []):
            if key in level:
                return True, level[key]
        return False, None

    def _verify_refs(self, conn: Connection, refs: Sequence[Ref]) -> None:
        seen: set[tuple[str, str]] = set()
        for ref in refs:
            if (ref.kind, ref.key) in seen:
                continue
            seen.add((ref.kind, ref.key))
            query = RUNTIME_EXISTS if ref.kind == "runtime" else CHECKPOINT_EXISTS
            if conn.execute(query, {"key": ref.key}).first() is None:
                raise dangling(ref)

    # ---- schema migrations ----------------------------------------------------------

    def _stored_version(self, conn: Connection) -> int:
        if not sa.inspect(conn).has_table(VERSION_TABLE.name):
            return 0
        version = conn.execute(sa.select(VERSION_TABLE.c.version)).scalar_one_or_none()
        return int(version) if version is not None else 0

    def _migrate(self) -> None:
        latest = self._migrations[-1].version
        with self._begin(write=False) as conn:
            current = self._stored_version(conn)
        if current == latest:
            return
        self._refuse_newer(current, latest)
        with self._begin(write=True) as conn:
            VERSION_TABLE.create(conn, checkfirst=True)
            current = self._stored_version(conn)  # another process may have migrated
            self._refuse_newer(current, latest)
            for step in self._migrations[current:]:
                step.apply(conn)
            if current == 0:
                conn.execute(sa.insert(VERSION_TABLE).values(id=1, version=latest))
            elif current < latest:
                conn.execute(sa.update(VERSION_TABLE).values(version=latest))

    def _refuse_newer(self, current: int, latest: int) -> None:
        if current > latest:
            raise SchemaVersionError(
                f"the checkpoint store {self._shown} has schema version {current}, newer than "
                f"the {latest} this ditto-jupyter understands; upgrade ditto-jupyter to open it"
            )

    def schema_version(self) -> int:
        """The schema version recorded in the database."""
        with self._read() as conn:
            return self._stored_version(conn)

    def _by_codepoint(self, column: sa.ColumnElement[str]) -> sa.ColumnElement[str]:
        """Order text by code point on every backend (PostgreSQL follows its locale)."""
        return column.collate("C") if self.backend == "postgresql" else column

    def close(self) -> None:
        """Release every connection; later calls raise StoreError."""
        self._closed = True
        self._engine.dispose()
        if self._log_file is not None:
            IDLE_LOGS.forget(self._log_file)
