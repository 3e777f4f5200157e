"""The checkpoint store on SQLite (one file, WAL) or PostgreSQL, through SQLAlchemy Core.

SQLite runs with `synchronous=FULL`: every commit is on disk when it returns, so a
checkpoint the user was told about survives power loss, not only a process crash (with
NORMAL, WAL stays consistent but may lose the last commits). Commits are rare (one per
control operation) and the extra fsync is small beside the blob writes of a checkpoint.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import URL, Connection, Engine, make_url

from ditto_jupyter.control.store.interface import (
    BUSY_TIMEOUT_MS,
    DamagedRow,
    Ref,
    SchemaVersionError,
    StoreError,
    blob_ids,
    damaged_of,
    dangling,
    load_model,
    load_rows,
    prefix_end,
    refs_of_binding,
    refs_of_checkpoint,
    refs_of_head,
    require_id,
    require_model,
)
from ditto_jupyter.control.store.migrations import MIGRATIONS, Migration, check_migrations
from ditto_jupyter.control.store.schema import (
    BINDINGS,
    CHECKPOINT_EXISTS,
    CHECKPOINTS,
    GET_BINDING,
    GET_CHECKPOINT,
    GET_HEAD,
    GET_SESSION,
    HEADS,
    RUNTIME_EXISTS,
    SESSIONS,
    VERSION_TABLE,
)
from ditto_jupyter.core.models import BackendBinding, RuntimeCheckpoint, SessionRecord
from ditto_jupyter.core.private import private_file

_PG_WRITE_LOCK = 0x6469_7474_6F00
"""PostgreSQL advisory lock key that serializes write transactions (and migrations)."""


@dataclass
class _SqlTxn:
    conn: Connection
    refs: list[list[Ref]] = field(default_factory=lambda: [[]])


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
        check_migrations(migrations)
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
        """The SQLite store in the file `path` (created 0600, with its parent folders, if
        missing; a looser file and its -wal and -shm are made 0600)."""
        target = Path(path).expanduser().resolve()
        target.parent.mkdir(parents=True, exist_ok=True)
        private_file(target)
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
    def _write(self, refs: Sequence[Ref] = ()) -> Iterator[Connection]:
        with self.transaction():
            active = self._active.get()
            assert active is not None
            yield active.conn
            active.refs[-1].extend(refs)

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
        require_model(session, SessionRecord, "insert_session")
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
        require_model(session, SessionRecord, "put_session")
        with self._write() as conn:
            conn.execute(self._upserts["sessions"], self._session_row(session))

    def get_session(self, runtime_id: str) -> SessionRecord | None:
        """The runtime with that id, or None."""
        with self._read() as conn:
            data = conn.execute(GET_SESSION, {"key": runtime_id}).scalar_one_or_none()
        return None if data is None else load_model(SessionRecord, data, f"runtime {runtime_id!r}")

    def list_sessions(self) -> list[SessionRecord]:
        """Every runtime, by created_at_ms then id."""
        with self._read() as conn:
            rows = conn.execute(
                sa.select(SESSIONS.c.runtime_id, SESSIONS.c.data).order_by(
                    SESSIONS.c.created_at_ms, self._by_codepoint(SESSIONS.c.runtime_id)
                )
            ).all()
        return load_rows(SessionRecord, rows, "runtime")

    # ---- checkpoints ----------------------------------------------------------------

    def put_checkpoint(self, checkpoint: RuntimeCheckpoint) -> None:
        """Insert or replace a checkpoint; its runtime must be in the store at commit."""
        require_model(checkpoint, RuntimeCheckpoint, "put_checkpoint")
        context_manifest_id, backend_snapshot_id = blob_ids(checkpoint)
        row = {
            "checkpoint_id": checkpoint.checkpoint_id,
            "runtime_id": checkpoint.runtime_id,
            "parent_checkpoint_id": checkpoint.parent_checkpoint_id,
            "name": checkpoint.name,
            "created_at_ms": checkpoint.created_at_ms,
            "data": checkpoint.model_dump_json(),
            "context_manifest_id": context_manifest_id,
            "backend_snapshot_id": backend_snapshot_id,
        }
        with self._write(refs_of_checkpoint(checkpoint)) as conn:
            conn.execute(self._upserts["checkpoints"], row)

    def get_checkpoint(self, checkpoint_id: str) -> RuntimeCheckpoint | None:
        """The checkpoint with that id, or None."""
        with self._read() as conn:
            data = conn.execute(GET_CHECKPOINT, {"key": checkpoint_id}).scalar_one_or_none()
        if data is None:
            return None
        return load_model(RuntimeCheckpoint, data, f"checkpoint {checkpoint_id!r}")

    def _select_checkpoints(self, where: Any) -> list[RuntimeCheckpoint]:
        query = sa.select(CHECKPOINTS.c.checkpoint_id, CHECKPOINTS.c.data)
        if where is not None:
            query = query.where(where)
        query = query.order_by(CHECKPOINTS.c.created_at_ms, CHECKPOINTS.c.seq)
        return self._load_checkpoints(query)

    def list_checkpoints(self, runtime_id: str | None = None) -> list[RuntimeCheckpoint]:
        """Checkpoints (of one runtime, or all), oldest first."""
        where = None if runtime_id is None else CHECKPOINTS.c.runtime_id == runtime_id
        return self._select_checkpoints(where)

    def find_checkpoints(
        self, prefix: str, runtime_id: str | None = None
    ) -> list[RuntimeCheckpoint]:
        """Checkpoints whose id starts with `prefix` or whose name is exactly `prefix`.

        With `runtime_id`, only that runtime's checkpoints; oldest first. Matching is
        case-sensitive on both SQLite and PostgreSQL; both halves are index lookups.
        """
        require_id(prefix, "a checkpoint id prefix or name")
        col = CHECKPOINTS.c
        named = col.name == prefix
        if runtime_id is not None:
            named = sa.and_(named, col.runtime_id == runtime_id)
        by_name = sa.select(col.seq).where(named)
        by_id = sa.select(col.seq).where(self._id_prefix(prefix, runtime_id))
        return self._select_checkpoints(col.seq.in_(sa.union(by_id, by_name).scalar_subquery()))

    def _id_prefix(self, prefix: str, runtime_id: str | None) -> Any:
        """Ids starting with `prefix`: a range on the id index, then the exact check."""
        col = CHECKPOINTS.c
        ident: Any = (
            col.checkpoint_id.collate("C") if self.backend == "postgresql" else col.checkpoint_id
        )
        where = [ident >= prefix, sa.func.substr(col.checkpoint_id, 1, len(prefix)) == prefix]
        end = prefix_end(prefix)
        if end is not None:
            where.append(ident < end)
        if runtime_id is not None:
            # From 3 characters on the id range is the narrower one (1/4096 of the ids);
            # `runtime_id || ''` keeps the planner from walking the runtime's index instead.
            runtime = col.runtime_id + "" if len(prefix) >= 3 else col.runtime_id
            where.append(runtime == runtime_id)
        return sa.and_(*where)

    def find_by_id_prefix(
        self, prefix: str, runtime_id: str | None = None, *, limit: int | None = None
    ) -> list[RuntimeCheckpoint]:
        """Checkpoints whose id starts with `prefix` (in one runtime), in id order."""
        require_id(prefix, "a checkpoint id prefix")
        col = CHECKPOINTS.c
        query = sa.select(col.checkpoint_id, col.data).where(self._id_prefix(prefix, runtime_id))
        query = query.order_by(self._by_codepoint(col.checkpoint_id)).limit(limit)
        return self._load_checkpoints(query)

    def page_checkpoints(
        self,
        runtime_id: str,
        *,
        limit: int | None = None,
        after: str | None = None,
        newest_first: bool = False,
    ) -> list[RuntimeCheckpoint]:
        """One runtime's checkpoints, oldest (or newest) first, from just after the checkpoint
        `after` (ValueError when it is not one of the runtime's), at most `limit`."""
        col = CHECKPOINTS.c
        order = (col.created_at_ms, col.seq)
        query = sa.select(col.checkpoint_id, col.data).where(col.runtime_id == runtime_id)
        with self._read() as conn:
            if after is not None:
                anchor = conn.execute(
                    sa.select(*order).where(
                        col.checkpoint_id == after, col.runtime_id == runtime_id
                    )
                ).first()
                if anchor is None:
                    raise ValueError(f"{after!r} is not a checkpoint of runtime {runtime_id!r}")
                key, mark = sa.tuple_(*order), sa.tuple_(*anchor)
                query = query.where(key < mark if newest_first else key > mark)
            query = query.order_by(*(c.desc() if newest_first else c for c in order))
            rows = conn.execute(query.limit(limit)).all()
        return self._checkpoints_of(rows)

    def newest_named(self, name: str, runtime_id: str) -> RuntimeCheckpoint | None:
        """The newest checkpoint of a runtime with exactly that name, or None."""
        col = CHECKPOINTS.c
        query = (
            sa.select(col.checkpoint_id, col.data)
            .where(col.name == name, col.runtime_id == runtime_id)
            .order_by(col.created_at_ms.desc(), col.seq.desc())
            .limit(1)
        )
        found = self._load_checkpoints(query)
        return found[0] if found else None

    def runtimes_naming(self, name: str, *, limit: int) -> list[str]:
        """Runtimes (by id, at most `limit`) that have a checkpoint with exactly that name."""
        col = CHECKPOINTS.c
        query = (
            sa.select(col.runtime_id)
            .where(col.name == name)
            .group_by(col.runtime_id)
            .order_by(col.runtime_id)
            .limit(limit)
        )
        with self._read() as conn:
            return [str(rid) for (rid,) in conn.execute(query)]

    def checkpoints_with_snapshot(self, snapshot_id: str) -> list[RuntimeCheckpoint]:
        """Every checkpoint whose backend ref records that provider snapshot, oldest first."""
        return self._select_checkpoints(CHECKPOINTS.c.backend_snapshot_id == snapshot_id)

    def referenced_manifests(self, manifest_ids: Sequence[str]) -> set[str]:
        """Which of these blob ids some checkpoint names, as its context manifest or as its
        backend snapshot."""
        ids = list(dict.fromkeys(manifest_ids))
        if not ids:
            return set()
        col = CHECKPOINTS.c
        found: set[str] = set()
        with self._read() as conn:
            for column in (col.context_manifest_id, col.backend_snapshot_id):
                query = sa.select(column).where(column.in_(ids)).distinct()
                found.update(str(value) for (value,) in conn.execute(query))
        return found

    def _load_checkpoints(self, query: Any) -> list[RuntimeCheckpoint]:
        """The checkpoints a query of (checkpoint_id, data) rows selects."""
        with self._read() as conn:
            rows = conn.execute(query).all()
        return self._checkpoints_of(rows)

    @staticmethod
    def _checkpoints_of(rows: Sequence[Any]) -> list[RuntimeCheckpoint]:
        return load_rows(RuntimeCheckpoint, rows, "checkpoint")

    # ---- heads ----------------------------------------------------------------------

    def get_head(self, runtime_id: str) -> str | None:
        """The current checkpoint id of a runtime, or None."""
        with self._read() as conn:
            head = conn.execute(GET_HEAD, {"key": runtime_id}).scalar_one_or_none()
        return None if head is None else str(head)

    def set_head(self, runtime_id: str, checkpoint_id: str | None) -> None:
        """Make `checkpoint_id` the runtime's current checkpoint (None clears it)."""
        require_id(runtime_id, "runtime_id")
        if checkpoint_id is None:
            with self._write() as conn:
                conn.execute(sa.delete(HEADS).where(HEADS.c.runtime_id == runtime_id))
            return
        require_id(checkpoint_id, "checkpoint_id")
        row = {"runtime_id": runtime_id, "checkpoint_id": checkpoint_id}
        with self._write(refs_of_head(runtime_id, checkpoint_id)) as conn:
            conn.execute(self._upserts["heads"], row)

    # ---- backend bindings -----------------------------------------------------------

    def put_binding(self, binding: BackendBinding) -> None:
        """Insert or replace the backend binding of a runtime."""
        require_model(binding, BackendBinding, "put_binding")
        row = {
            "runtime_id": binding.runtime_id,
            "backend_id": binding.backend_id,
            "kind": binding.kind,
            "data": binding.model_dump_json(),
        }
        with self._write(refs_of_binding(binding)) as conn:
            conn.execute(self._upserts["backend_bindings"], row)

    def get_binding(self, runtime_id: str) -> BackendBinding | None:
        """The backend binding of a runtime, or None."""
        with self._read() as conn:
            data = conn.execute(GET_BINDING, {"key": runtime_id}).scalar_one_or_none()
        return None if data is None else load_model(BackendBinding, data, f"binding {runtime_id!r}")

    def delete_binding(self, runtime_id: str) -> None:
        """Remove a runtime's backend binding (no error when there is none)."""
        with self._write() as conn:
            conn.execute(sa.delete(BINDINGS).where(BINDINGS.c.runtime_id == runtime_id))

    def list_bindings(self) -> list[BackendBinding]:
        """Every backend binding, by runtime id."""
        with self._read() as conn:
            rows = conn.execute(
                sa.select(BINDINGS.c.runtime_id, BINDINGS.c.data).order_by(
                    self._by_codepoint(BINDINGS.c.runtime_id)
                )
            ).all()
        return load_rows(BackendBinding, rows, "binding")

    def damaged_rows(self) -> list[DamagedRow]:
        """Every stored row that does not read back as its model (reads each row)."""
        damaged: list[DamagedRow] = []
        for table, key, model in (
            (SESSIONS, SESSIONS.c.runtime_id, SessionRecord),
            (CHECKPOINTS, CHECKPOINTS.c.checkpoint_id, RuntimeCheckpoint),
            (BINDINGS, BINDINGS.c.runtime_id, BackendBinding),
        ):
            with self._read() as conn:
                rows = conn.execute(sa.select(key, table.c.data).order_by(key)).all()
            damaged += damaged_of(table.name, model, ((str(k), str(d)) for k, d in rows))
        return damaged

    # ---- misc -----------------------------------------------------------------------

    def _by_codepoint(self, column: sa.ColumnElement[str]) -> sa.ColumnElement[str]:
        """Order text by code point on every backend (PostgreSQL follows its locale)."""
        return column.collate("C") if self.backend == "postgresql" else column

    def _prepare_statements(self, insert: Any) -> None:
        # Built once: SQLAlchemy then reuses their compiled form, and a write costs a
        # parameter bind instead of a statement construction.
        self._insert_new_session = insert(SESSIONS).on_conflict_do_nothing(
            index_elements=["runtime_id"]
        )
        self._upserts: dict[str, Any] = {}
        for table, key in (
            (SESSIONS, "runtime_id"),
            (CHECKPOINTS, "checkpoint_id"),
            (HEADS, "runtime_id"),
            (BINDINGS, "runtime_id"),
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
