"""Persistent checkpoint store: sessions, checkpoints, heads and backend bindings.

`SqlCheckpointStore` keeps them in SQLite by default (one file, WAL) or in PostgreSQL
(`postgresql+psycopg://` URL) through SQLAlchemy Core; `MemoryCheckpointStore` has the same
API and semantics on dicts, for unit tests. Both store models as JSON text
(`model_dump_json` / `model_validate_json`) beside the columns they are queried by.

Semantics shared by both stores:
- `transaction()` makes every call inside the block commit atomically, or not at all when
  the block raises. Nested blocks are savepoints inside the outer transaction: an inner
  block that raises undoes only its own writes; the rest commits with the outer block.
  Outside a block each call is its own transaction. Write transactions are serialized
  (SQLite `BEGIN IMMEDIATE`, a PostgreSQL advisory lock, a lock in memory), so a
  read-modify-write inside one block never loses an update, across processes too.
  Do not `await` inside a block: the write lock is held until it ends.
- References are checked when the outermost transaction commits, so writes may come in
  any order inside a block: a checkpoint, head or binding must name a runtime that is in
  the store, and a head must name a stored checkpoint; otherwise the whole transaction is
  refused with a `ValueError` naming the dangling reference.
- Returned models are fresh copies: changing one never changes the store.

SQLite runs with `synchronous=FULL`: every commit is on disk when it returns, so a
checkpoint the user was told about survives power loss, not only a process crash (with
NORMAL, WAL stays consistent but may lose the last commits). Commits are rare (one per
control operation) and the extra fsync is small beside the blob writes of a checkpoint.
"""

from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

import sqlalchemy as sa
from pydantic import BaseModel, ValidationError
from sqlalchemy import event
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import URL, Connection, Engine, make_url

from ditto_jupyter.core.models import BackendBinding, RuntimeCheckpoint, SessionRecord

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "CheckpointStore",
    "MemoryCheckpointStore",
    "Migration",
    "SchemaVersionError",
    "SqlCheckpointStore",
    "StoreError",
    "open_store",
]

_M = TypeVar("_M", bound=BaseModel)

BUSY_TIMEOUT_MS = 30_000
"""How long a writer waits for another process's write transaction before giving up."""

_PG_WRITE_LOCK = 0x6469_7474_6F00
"""PostgreSQL advisory lock key that serializes write transactions (and migrations)."""


class StoreError(RuntimeError):
    """The store cannot be opened or used (damaged file, closed store, lock timeout)."""


class SchemaVersionError(StoreError):
    """The database was written by a newer ditto-jupyter than this one."""


@runtime_checkable
class CheckpointStore(Protocol):
    """Where runtimes, checkpoints, heads and backend bindings live (runtime_id == session_id)."""

    def transaction(self) -> AbstractContextManager[None]:
        """Make every call inside the block commit atomically, or not at all if it raises."""
        ...

    def insert_session(self, session: SessionRecord) -> None:
        """Add a new runtime; ValueError if one with that id exists."""
        ...

    def put_session(self, session: SessionRecord) -> None:
        """Insert or replace a runtime."""
        ...

    def get_session(self, runtime_id: str) -> SessionRecord | None:
        """The runtime with that id, or None."""
        ...

    def list_sessions(self) -> list[SessionRecord]:
        """Every runtime, by created_at_ms then id."""
        ...

    def put_checkpoint(self, checkpoint: RuntimeCheckpoint) -> None:
        """Insert or replace a checkpoint."""
        ...

    def get_checkpoint(self, checkpoint_id: str) -> RuntimeCheckpoint | None:
        """The checkpoint with that id, or None."""
        ...

    def list_checkpoints(self, runtime_id: str | None = None) -> list[RuntimeCheckpoint]:
        """Checkpoints (of one runtime, or all), oldest first."""
        ...

    def find_checkpoints(
        self, prefix: str, runtime_id: str | None = None
    ) -> list[RuntimeCheckpoint]:
        """Checkpoints whose id starts with `prefix` or whose name is exactly `prefix`."""
        ...

    def get_head(self, runtime_id: str) -> str | None:
        """The current checkpoint id of a runtime, or None."""
        ...

    def set_head(self, runtime_id: str, checkpoint_id: str | None) -> None:
        """Make `checkpoint_id` the runtime's current checkpoint (None clears it)."""
        ...

    def put_binding(self, binding: BackendBinding) -> None:
        """Insert or replace the backend binding of a runtime."""
        ...

    def get_binding(self, runtime_id: str) -> BackendBinding | None:
        """The backend binding of a runtime, or None."""
        ...

    def delete_binding(self, runtime_id: str) -> None:
        """Remove a runtime's backend binding (no error when there is none)."""
        ...

    def list_bindings(self) -> list[BackendBinding]:
        """Every backend binding, by runtime id."""
        ...

    def close(self) -> None:
        """Release connections; later calls raise StoreError."""
        ...


# ---- shared helpers -------------------------------------------------------------------


@dataclass(frozen=True)
class _Ref:
    """A reference a write made, checked when the outermost transaction commits."""

    kind: str  # "runtime" or "checkpoint"
    key: str
    holder: str  # what holds the reference, for the error message


def _require(value: object, model: type[BaseModel], method: str) -> None:
    if not isinstance(value, model):
        raise TypeError(f"{method} needs a {model.__name__}, got {type(value).__name__}")


def _require_id(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty string, got {value!r}")
    return value


def _load(model: type[_M], text: str, what: str) -> _M:
    try:
        return model.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the record"
        raise StoreError(f"stored {what} is damaged at {where}: {first['msg']}") from None


def _refs_of_checkpoint(checkpoint: RuntimeCheckpoint) -> list[_Ref]:
    return [
        _Ref(
            "runtime",
            checkpoint.runtime_id,
            f"checkpoint {checkpoint.checkpoint_id!r} names runtime {checkpoint.runtime_id!r}",
        )
    ]


def _refs_of_head(runtime_id: str, checkpoint_id: str) -> list[_Ref]:
    return [
        _Ref("runtime", runtime_id, f"the head of runtime {runtime_id!r}"),
        _Ref(
            "checkpoint",
            checkpoint_id,
            f"the head of runtime {runtime_id!r} names checkpoint {checkpoint_id!r}",
        ),
    ]


def _refs_of_binding(binding: BackendBinding) -> list[_Ref]:
    return [_Ref("runtime", binding.runtime_id, f"a backend binding names {binding.runtime_id!r}")]


def _dangling(ref: _Ref) -> ValueError:
    if ref.holder.startswith("the head of") and ref.kind == "runtime":
        return ValueError(f"{ref.holder} cannot be set: runtime {ref.key!r} is not in the store")
    return ValueError(f"{ref.holder}, which is not in the store")


# ---- schema ---------------------------------------------------------------------------

_metadata = sa.MetaData()

_schema_version = sa.Table(
    "schema_version",
    _metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.CheckConstraint("id = 1", name="schema_version_single_row"),
)

_sessions = sa.Table(
    "sessions",
    _metadata,
    sa.Column("runtime_id", sa.Text, primary_key=True),
    sa.Column("conversation_id", sa.Text, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("created_at_ms", sa.BigInteger, nullable=False),
    sa.Column("updated_at_ms", sa.BigInteger, nullable=False),
    sa.Column("data", sa.Text, nullable=False),
    sa.Index("sessions_by_created", "created_at_ms", "runtime_id"),
)

_deferred: dict[str, Any] = {"deferrable": True, "initially": "DEFERRED"}

_checkpoints = sa.Table(
    "checkpoints",
    _metadata,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("checkpoint_id", sa.Text, nullable=False, unique=True),
    sa.Column(
        "runtime_id",
        sa.Text,
        sa.ForeignKey("sessions.runtime_id", **_deferred),
        nullable=False,
    ),
    sa.Column("parent_checkpoint_id", sa.Text, nullable=True),
    sa.Column("name", sa.Text, nullable=True),
    sa.Column("created_at_ms", sa.BigInteger, nullable=False),
    sa.Column("data", sa.Text, nullable=False),
    sa.Index("checkpoints_by_runtime", "runtime_id", "created_at_ms", "seq"),
    sa.Index("checkpoints_by_created", "created_at_ms", "seq"),
    sa.Index("checkpoints_by_name", "name"),
)

_heads = sa.Table(
    "heads",
    _metadata,
    sa.Column(
        "runtime_id",
        sa.Text,
        sa.ForeignKey("sessions.runtime_id", **_deferred),
        primary_key=True,
    ),
    sa.Column(
        "checkpoint_id",
        sa.Text,
        sa.ForeignKey("checkpoints.checkpoint_id", **_deferred),
        nullable=False,
    ),
)

_bindings = sa.Table(
    "backend_bindings",
    _metadata,
    sa.Column(
        "runtime_id",
        sa.Text,
        sa.ForeignKey("sessions.runtime_id", **_deferred),
        primary_key=True,
    ),
    sa.Column("backend_id", sa.Text, nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("data", sa.Text, nullable=False),
    sa.Index("backend_bindings_by_backend", "backend_id"),
)


_KEY: sa.BindParameter[str] = sa.bindparam("key", type_=sa.Text)
_RUNTIME_EXISTS = sa.select(_sessions.c.runtime_id).where(_sessions.c.runtime_id == _KEY)
_CHECKPOINT_EXISTS = sa.select(_checkpoints.c.seq).where(_checkpoints.c.checkpoint_id == _KEY)
_GET_SESSION = sa.select(_sessions.c.data).where(_sessions.c.runtime_id == _KEY)
_GET_CHECKPOINT = sa.select(_checkpoints.c.data).where(_checkpoints.c.checkpoint_id == _KEY)
_GET_HEAD = sa.select(_heads.c.checkpoint_id).where(_heads.c.runtime_id == _KEY)
_GET_BINDING = sa.select(_bindings.c.data).where(_bindings.c.runtime_id == _KEY)


@dataclass(frozen=True)
class Migration:
    """One schema step: applied once, in order, inside the opening transaction."""

    version: int
    description: str
    apply: Callable[[Connection], None]


def _create_v1(conn: Connection) -> None:
    # Step 1 creates the version-1 tables. Later steps must alter them explicitly (never
    # create_all a changed table), so a database at any version migrates the same way.
    _metadata.create_all(conn, tables=[_sessions, _checkpoints, _heads, _bindings])


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "sessions, checkpoints, heads and backend bindings", _create_v1),
)
SCHEMA_VERSION = MIGRATIONS[-1].version


# ---- SQL store ------------------------------------------------------------------------


@dataclass
class _SqlTxn:
    conn: Connection
    refs: list[list[_Ref]] = field(default_factory=lambda: [[]])


class SqlCheckpointStore:
    """The checkpoint store on SQLite (default, one file, WAL) or PostgreSQL, via SQLAlchemy.

    Opening creates the schema or migrates it to the current version; several processes
    (the server and its kernels) may open the same SQLite file at once.
    """

    def __init__(
        self,
        url: str | URL,
        *,
        migrations: Sequence[Migration] = MIGRATIONS,
        busy_timeout_ms: int = BUSY_TIMEOUT_MS,
    ) -> None:
        try:
            self.url = make_url(url)
        except sa.exc.ArgumentError as exc:
            raise ValueError(f"{url!r} is not a database URL: {exc}") from None
        self.backend = self.url.get_backend_name()
        shown = self.url.render_as_string(hide_password=True)
        self._shown = shown
        if self.backend not in ("sqlite", "postgresql"):
            raise ValueError(f"the checkpoint store supports SQLite and PostgreSQL, not {shown}")
        _check_migrations(migrations)
        self._migrations = tuple(migrations)
        self._closed = False
        self._active: contextvars.ContextVar[_SqlTxn | None] = contextvars.ContextVar(
            f"ditto_store_txn_{id(self)}", default=None
        )
        self.journal_mode: str | None = None
        if self.backend == "sqlite":
            database = self.url.database or ""
            if database in ("", ":memory:") or self.url.query.get("mode") == "memory":
                raise ValueError(
                    f"{shown} is an in-memory SQLite database, which other connections cannot "
                    "see; use MemoryCheckpointStore or a file path"
                )
            self._engine = self._sqlite_engine(busy_timeout_ms)
            self._prepare_statements(sqlite_dialect.insert)
        else:
            self._engine = sa.create_engine(self.url, pool_pre_ping=True)
            self._prepare_statements(pg_dialect.insert)
        try:
            self._migrate()
        except (sa.exc.OperationalError, sa.exc.DatabaseError) as exc:
            self._engine.dispose()
            reason = str(exc.orig) if exc.orig is not None else str(exc)
            raise StoreError(f"cannot open the checkpoint store {shown}: {reason}") from None
        except BaseException:
            self._engine.dispose()
            raise

    @classmethod
    def at_path(cls, path: str | os.PathLike[str]) -> SqlCheckpointStore:
        """The SQLite store in the file `path` (created with its parent folders if missing)."""
        target = Path(path).expanduser().resolve()
        target.parent.mkdir(parents=True, exist_ok=True)
        return cls(URL.create("sqlite", database=str(target)))

    def __repr__(self) -> str:
        return f"SqlCheckpointStore({self._shown!r})"

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
                mode = cursor.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                cursor.execute("PRAGMA synchronous = FULL")
            finally:
                cursor.close()
            self.journal_mode = str(mode).lower()

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
        """A new connection in a new (write-locked when `write`) transaction."""
        with self._engine.connect() as conn:
            conn.execution_options(ditto_write=write)
            with conn.begin():
                if write and self.backend == "postgresql":
                    conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_PG_WRITE_LOCK)))
                yield conn

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Commit everything inside atomically; nested blocks are savepoints."""
        self._check_open()
        active = self._active.get()
        if active is not None:
            active.refs.append([])
            try:
                with active.conn.begin_nested():
                    yield
            except BaseException:
                active.refs.pop()
                raise
            inner = active.refs.pop()
            active.refs[-1].extend(inner)
            return
        with self._begin(write=True) as conn:
            txn = _SqlTxn(conn)
            token = self._active.set(txn)
            try:
                yield
                self._verify_refs(conn, txn.refs[0])
            finally:
                self._active.reset(token)

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
    def _write(self, refs: Sequence[_Ref] = ()) -> Iterator[Connection]:
        with self.transaction():
            active = self._active.get()
            assert active is not None
            yield active.conn
            active.refs[-1].extend(refs)

    def _verify_refs(self, conn: Connection, refs: Sequence[_Ref]) -> None:
        seen: set[tuple[str, str]] = set()
        for ref in refs:
            if (ref.kind, ref.key) in seen:
                continue
            seen.add((ref.kind, ref.key))
            query = _RUNTIME_EXISTS if ref.kind == "runtime" else _CHECKPOINT_EXISTS
            if conn.execute(query, {"key": ref.key}).first() is None:
                raise _dangling(ref)

    # ---- schema migrations ----------------------------------------------------------

    def _stored_version(self, conn: Connection) -> int:
        if not sa.inspect(conn).has_table(_schema_version.name):
            return 0
        version = conn.execute(sa.select(_schema_version.c.version)).scalar_one_or_none()
        return int(version) if version is not None else 0

    def _migrate(self) -> None:
        latest = self._migrations[-1].version
        with self._begin(write=False) as conn:
            current = self._stored_version(conn)
        if current == latest:
            return
        self._refuse_newer(current, latest)
        with self._begin(write=True) as conn:
            _schema_version.create(conn, checkfirst=True)
            current = self._stored_version(conn)  # another process may have migrated
            self._refuse_newer(current, latest)
            for step in self._migrations[current:]:
                step.apply(conn)
            if current == 0:
                conn.execute(sa.insert(_schema_version).values(id=1, version=latest))
            elif current < latest:
                conn.execute(sa.update(_schema_version).values(version=latest))

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

    # ---- sessions -------------------------------------------------------------------

    @staticmethod
    def _session_row(session: SessionRecord) -> dict[str, Any]:
        return {
            "runtime_id": session.session_id,
            "conversation_id": session.conversation_id,
            "status": session.status.value,
            "created_at_ms": session.created_at_ms,
            "updated_at_ms": session.updated_at_ms,
            "data": session.model_dump_json(),
        }

    def insert_session(self, session: SessionRecord) -> None:
        """Add a new runtime; ValueError if one with that id exists."""
        _require(session, SessionRecord, "insert_session")
        with self._write() as conn:
            # rowcount of an INSERT is only kept when asked (psycopg reports -1 otherwise)
            result = conn.execute(
                self._insert_new_session,
                self._session_row(session),
                execution_options={"preserve_rowcount": True},
            )
            if result.rowcount == 0:
                raise ValueError(f"runtime {session.session_id!r} already exists")

    def put_session(self, session: SessionRecord) -> None:
        """Insert or replace a runtime."""
        _require(session, SessionRecord, "put_session")
        with self._write() as conn:
            conn.execute(self._upserts["sessions"], self._session_row(session))

    def get_session(self, runtime_id: str) -> SessionRecord | None:
        """The runtime with that id, or None."""
        with self._read() as conn:
            data = conn.execute(_GET_SESSION, {"key": runtime_id}).scalar_one_or_none()
        return None if data is None else _load(SessionRecord, data, f"runtime {runtime_id!r}")

    def list_sessions(self) -> list[SessionRecord]:
        """Every runtime, by created_at_ms then id."""
        with self._read() as conn:
            rows = conn.execute(
                sa.select(_sessions.c.runtime_id, _sessions.c.data).order_by(
                    _sessions.c.created_at_ms, self._by_codepoint(_sessions.c.runtime_id)
                )
            ).all()
        return [_load(SessionRecord, data, f"runtime {rid!r}") for rid, data in rows]

    # ---- checkpoints ----------------------------------------------------------------

    def put_checkpoint(self, checkpoint: RuntimeCheckpoint) -> None:
        """Insert or replace a checkpoint; its runtime must be in the store at commit."""
        _require(checkpoint, RuntimeCheckpoint, "put_checkpoint")
        row = {
            "checkpoint_id": checkpoint.checkpoint_id,
            "runtime_id": checkpoint.runtime_id,
            "parent_checkpoint_id": checkpoint.parent_checkpoint_id,
            "name": checkpoint.name,
            "created_at_ms": checkpoint.created_at_ms,
            "data": checkpoint.model_dump_json(),
        }
        with self._write(_refs_of_checkpoint(checkpoint)) as conn:
            conn.execute(self._upserts["checkpoints"], row)

    def get_checkpoint(self, checkpoint_id: str) -> RuntimeCheckpoint | None:
        """The checkpoint with that id, or None."""
        with self._read() as conn:
            data = conn.execute(_GET_CHECKPOINT, {"key": checkpoint_id}).scalar_one_or_none()
        if data is None:
            return None
        return _load(RuntimeCheckpoint, data, f"checkpoint {checkpoint_id!r}")

    def _select_checkpoints(self, where: Any) -> list[RuntimeCheckpoint]:
        query = sa.select(_checkpoints.c.checkpoint_id, _checkpoints.c.data)
        if where is not None:
            query = query.where(where)
        query = query.order_by(_checkpoints.c.created_at_ms, _checkpoints.c.seq)
        with self._read() as conn:
            rows = conn.execute(query).all()
        return [_load(RuntimeCheckpoint, data, f"checkpoint {cid!r}") for cid, data in rows]

    def list_checkpoints(self, runtime_id: str | None = None) -> list[RuntimeCheckpoint]:
        """Checkpoints (of one runtime, or all), oldest first."""
        where = None if runtime_id is None else _checkpoints.c.runtime_id == runtime_id
        return self._select_checkpoints(where)

    def find_checkpoints(
        self, prefix: str, runtime_id: str | None = None
    ) -> list[RuntimeCheckpoint]:
        """Checkpoints whose id starts with `prefix` or whose name is exactly `prefix`.

        With `runtime_id`, only that runtime's checkpoints; oldest first. Matching is
        case-sensitive on both SQLite and PostgreSQL (substring compare, not LIKE).
        """
        _require_id(prefix, "a checkpoint id prefix or name")
        col = _checkpoints.c
        where: Any = sa.or_(sa.func.substr(col.checkpoint_id, 1, len(prefix)) == prefix)
        where = sa.or_(where, col.name == prefix)
        if runtime_id is not None:
            where = sa.and_(col.runtime_id == runtime_id, where)
        return self._select_checkpoints(where)

    # ---- heads ----------------------------------------------------------------------

    def get_head(self, runtime_id: str) -> str | None:
        """The current checkpoint id of a runtime, or None."""
        with self._read() as conn:
            head = conn.execute(_GET_HEAD, {"key": runtime_id}).scalar_one_or_none()
        return None if head is None else str(head)

    def set_head(self, runtime_id: str, checkpoint_id: str | None) -> None:
        """Make `checkpoint_id` the runtime's current checkpoint (None clears it)."""
        _require_id(runtime_id, "runtime_id")
        if checkpoint_id is None:
            with self._write() as conn:
                conn.execute(sa.delete(_heads).where(_heads.c.runtime_id == runtime_id))
            return
        _require_id(checkpoint_id, "checkpoint_id")
        row = {"runtime_id": runtime_id, "checkpoint_id": checkpoint_id}
        with self._write(_refs_of_head(runtime_id, checkpoint_id)) as conn:
            conn.execute(self._upserts["heads"], row)

    # ---- backend bindings -----------------------------------------------------------

    def put_binding(self, binding: BackendBinding) -> None:
        """Insert or replace the backend binding of a runtime."""
        _require(binding, BackendBinding, "put_binding")
        row = {
            "runtime_id": binding.runtime_id,
            "backend_id": binding.backend_id,
            "kind": binding.kind,
            "data": binding.model_dump_json(),
        }
        with self._write(_refs_of_binding(binding)) as conn:
            conn.execute(self._upserts["backend_bindings"], row)

    def get_binding(self, runtime_id: str) -> BackendBinding | None:
        """The backend binding of a runtime, or None."""
        with self._read() as conn:
            data = conn.execute(_GET_BINDING, {"key": runtime_id}).scalar_one_or_none()
        return None if data is None else _load(BackendBinding, data, f"binding {runtime_id!r}")

    def delete_binding(self, runtime_id: str) -> None:
        """Remove a runtime's backend binding (no error when there is none)."""
        with self._write() as conn:
            conn.execute(sa.delete(_bindings).where(_bindings.c.runtime_id == runtime_id))

    def list_bindings(self) -> list[BackendBinding]:
        """Every backend binding, by runtime id."""
        with self._read() as conn:
            rows = conn.execute(
                sa.select(_bindings.c.runtime_id, _bindings.c.data).order_by(
                    self._by_codepoint(_bindings.c.runtime_id)
                )
            ).all()
        return [_load(BackendBinding, data, f"binding {rid!r}") for rid, data in rows]

    # ---- misc -----------------------------------------------------------------------

    def _by_codepoint(self, column: sa.ColumnElement[str]) -> sa.ColumnElement[str]:
        """Order text by code point on every backend (PostgreSQL follows its locale)."""
        return column.collate("C") if self.backend == "postgresql" else column

    def _prepare_statements(self, insert: Any) -> None:
        # Built once: SQLAlchemy then reuses their compiled form, and a write costs a
        # parameter bind instead of a statement construction.
        self._insert_new_session = insert(_sessions).on_conflict_do_nothing(
            index_elements=["runtime_id"]
        )
        self._upserts: dict[str, Any] = {}
        for table, key in (
            (_sessions, "runtime_id"),
            (_checkpoints, "checkpoint_id"),
            (_heads, "runtime_id"),
            (_bindings, "runtime_id"),
        ):
            stmt = insert(table)
            updates = {
                col.name: stmt.excluded[col.name]
                for col in table.columns
                if col.name not in (key, "seq")
            }
            self._upserts[table.name] = stmt.on_conflict_do_update(
                index_elements=[key], set_=updates
            )

    def close(self) -> None:
        """Release every connection; later calls raise StoreError."""
        self._closed = True
        self._engine.dispose()


def _check_migrations(migrations: Sequence[Migration]) -> None:
    versions = [m.version for m in migrations]
    if not versions or versions != list(range(1, len(versions) + 1)):
        raise ValueError(f"migrations must be numbered 1, 2, ... in order, got {versions}")


# ---- memory store ---------------------------------------------------------------------


@dataclass
class _MemState:
    sessions: dict[str, tuple[int, str]] = field(default_factory=dict)  # id -> (created, json)
    checkpoints: dict[str, tuple[int, int, str, str | None, str]] = field(default_factory=dict)
    # checkpoint id -> (created_at_ms, seq, runtime_id, name, json)
    heads: dict[str, str] = field(default_factory=dict)
    bindings: dict[str, str] = field(default_factory=dict)
    seq: int = 0

    def copy(self) -> _MemState:
        return _MemState(
            dict(self.sessions),
            dict(self.checkpoints),
            dict(self.heads),
            dict(self.bindings),
            self.seq,
        )


@dataclass
class _MemTxn:
    levels: list[_MemState]
    refs: list[list[_Ref]]


class MemoryCheckpointStore:
    """The checkpoint store on dicts: same API and semantics, nothing persisted.

    Records are kept as JSON text, so what comes back is a fresh copy, exactly as from
    the SQL store. Transactions work on a copy that replaces the committed state only
    when the outermost block succeeds; readers outside a block see committed state only.
    """

    def __init__(self, *, lock_timeout_s: float = BUSY_TIMEOUT_MS / 1000) -> None:
        self._state = _MemState()
        self._lock = threading.Lock()
        self._lock_timeout_s = lock_timeout_s
        self._closed = False
        self._active: contextvars.ContextVar[_MemTxn | None] = contextvars.ContextVar(
            f"ditto_memstore_txn_{id(self)}", default=None
        )

    def __repr__(self) -> str:
        return "MemoryCheckpointStore()"

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("the in-memory checkpoint store is closed")

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Commit everything inside atomically; nested blocks are savepoints."""
        self._check_open()
        active = self._active.get()
        if active is not None:
            active.levels.append(active.levels[-1].copy())
            active.refs.append([])
            try:
                yield
            except BaseException:
                active.levels.pop()
                active.refs.pop()
                raise
            inner_state, inner_refs = active.levels.pop(), active.refs.pop()
            active.levels[-1] = inner_state
            active.refs[-1].extend(inner_refs)
            return
        if not self._lock.acquire(timeout=self._lock_timeout_s):
            raise StoreError(
                f"timed out after {self._lock_timeout_s:g}s waiting for another "
                "transaction on the in-memory checkpoint store"
            )
        try:
            txn = _MemTxn(levels=[self._state.copy()], refs=[[]])
            token = self._active.set(txn)
            try:
                yield
                self._verify_refs(txn.levels[0], txn.refs[0])
                self._state = txn.levels[0]
            finally:
                self._active.reset(token)
        finally:
            self._lock.release()

    def _view(self) -> _MemState:
        self._check_open()
        active = self._active.get()
        return self._state if active is None else active.levels[-1]

    @contextmanager
    def _write(self, refs: Sequence[_Ref] = ()) -> Iterator[_MemState]:
        with self.transaction():
            active = self._active.get()
            assert active is not None
            yield active.levels[-1]
            active.refs[-1].extend(refs)

    @staticmethod
    def _verify_refs(state: _MemState, refs: Sequence[_Ref]) -> None:
        for ref in refs:
            table: dict[str, Any] = state.sessions if ref.kind == "runtime" else state.checkpoints
            if ref.key not in table:
                raise _dangling(ref)

    # ---- sessions -------------------------------------------------------------------

    def insert_session(self, session: SessionRecord) -> None:
        """Add a new runtime; ValueError if one with that id exists."""
        _require(session, SessionRecord, "insert_session")
        with self._write() as state:
            if session.session_id in state.sessions:
                raise ValueError(f"runtime {session.session_id!r} already exists")
            state.sessions[session.session_id] = (session.created_at_ms, session.model_dump_json())

    def put_session(self, session: SessionRecord) -> None:
        """Insert or replace a runtime."""
        _require(session, SessionRecord, "put_session")
        with self._write() as state:
            state.sessions[session.session_id] = (session.created_at_ms, session.model_dump_json())

    def get_session(self, runtime_id: str) -> SessionRecord | None:
        """The runtime with that id, or None."""
        found = self._view().sessions.get(runtime_id)
        return None if found is None else _load(SessionRecord, found[1], f"runtime {runtime_id!r}")

    def list_sessions(self) -> list[SessionRecord]:
        """Every runtime, by created_at_ms then id."""
        rows = sorted(
            (created, rid, data) for rid, (created, data) in self._view().sessions.items()
        )
        return [_load(SessionRecord, data, f"runtime {rid!r}") for _, rid, data in rows]

    # ---- checkpoints ----------------------------------------------------------------

    def put_checkpoint(self, checkpoint: RuntimeCheckpoint) -> None:
        """Insert or replace a checkpoint; its runtime must be in the store at commit."""
        _require(checkpoint, RuntimeCheckpoint, "put_checkpoint")
        with self._write(_refs_of_checkpoint(checkpoint)) as state:
            old = state.checkpoints.get(checkpoint.checkpoint_id)
            if old is None:
                state.seq += 1
                seq = state.seq
            else:
                seq = old[1]
            state.checkpoints[checkpoint.checkpoint_id] = (
                checkpoint.created_at_ms,
                seq,
                checkpoint.runtime_id,
                checkpoint.name,
                checkpoint.model_dump_json(),
            )

    def get_checkpoint(self, checkpoint_id: str) -> RuntimeCheckpoint | None:
        """The checkpoint with that id, or None."""
        found = self._view().checkpoints.get(checkpoint_id)
        if found is None:
            return None
        return _load(RuntimeCheckpoint, found[4], f"checkpoint {checkpoint_id!r}")

    def _select(self, keep: Callable[[str, str, str | None], bool]) -> list[RuntimeCheckpoint]:
        rows = sorted(
            (created, seq, cid, data)
            for cid, (created, seq, rid, name, data) in self._view().checkpoints.items()
            if keep(cid, rid, name)
        )
        return [_load(RuntimeCheckpoint, data, f"checkpoint {cid!r}") for _, _, cid, data in rows]

    def list_checkpoints(self, runtime_id: str | None = None) -> list[RuntimeCheckpoint]:
        """Checkpoints (of one runtime, or all), oldest first."""
        return self._select(lambda _cid, rid, _name: runtime_id is None or rid == runtime_id)

    def find_checkpoints(
        self, prefix: str, runtime_id: str | None = None
    ) -> list[RuntimeCheckpoint]:
        """Checkpoints whose id starts with `prefix` or whose name is exactly `prefix`."""
        _require_id(prefix, "a checkpoint id prefix or name")
        return self._select(
            lambda cid, rid, name: (
                (runtime_id is None or rid == runtime_id)
                and (cid.startswith(prefix) or name == prefix)
            )
        )

    # ---- heads ----------------------------------------------------------------------

    def get_head(self, runtime_id: str) -> str | None:
        """The current checkpoint id of a runtime, or None."""
        return self._view().heads.get(runtime_id)

    def set_head(self, runtime_id: str, checkpoint_id: str | None) -> None:
        """Make `checkpoint_id` the runtime's current checkpoint (None clears it)."""
        _require_id(runtime_id, "runtime_id")
        if checkpoint_id is None:
            with self._write() as state:
                state.heads.pop(runtime_id, None)
            return
        _require_id(checkpoint_id, "checkpoint_id")
        with self._write(_refs_of_head(runtime_id, checkpoint_id)) as state:
            state.heads[runtime_id] = checkpoint_id

    # ---- backend bindings -----------------------------------------------------------

    def put_binding(self, binding: BackendBinding) -> None:
        """Insert or replace the backend binding of a runtime."""
        _require(binding, BackendBinding, "put_binding")
        with self._write(_refs_of_binding(binding)) as state:
            state.bindings[binding.runtime_id] = binding.model_dump_json()

    def get_binding(self, runtime_id: str) -> BackendBinding | None:
        """The backend binding of a runtime, or None."""
        found = self._view().bindings.get(runtime_id)
        return None if found is None else _load(BackendBinding, found, f"binding {runtime_id!r}")

    def delete_binding(self, runtime_id: str) -> None:
        """Remove a runtime's backend binding (no error when there is none)."""
        with self._write() as state:
            state.bindings.pop(runtime_id, None)

    def list_bindings(self) -> list[BackendBinding]:
        """Every backend binding, by runtime id."""
        bindings = self._view().bindings
        return [
            _load(BackendBinding, bindings[rid], f"binding {rid!r}") for rid in sorted(bindings)
        ]

    def close(self) -> None:
        """Forget nothing, but refuse later calls (mirrors the SQL store)."""
        self._closed = True


# ---- opening --------------------------------------------------------------------------


def open_store(url_or_path: str | None, data_dir: Path) -> CheckpointStore:
    """Open the store a configuration names.

    None or "" -> the SQLite file `data_dir/ditto.db`; "memory://" -> a MemoryCheckpointStore;
    anything with "://" -> a SQLAlchemy URL (sqlite:///..., postgresql+psycopg://...);
    otherwise a SQLite file path, relative paths taken from `data_dir`.
    """
    if not url_or_path:
        return SqlCheckpointStore.at_path(Path(data_dir) / "ditto.db")
    if url_or_path == "memory://":
        return MemoryCheckpointStore()
    if "://" in url_or_path:
        return SqlCheckpointStore(url_or_path)
    path = Path(url_or_path).expanduser()
    return SqlCheckpointStore.at_path(path if path.is_absolute() else Path(data_dir) / path)
