"""`LangGraphRows` on SQL: the four tables of schema 12 (`schema_langgraph`).

Each write is one transaction of the store (SQLite `BEGIN IMMEDIATE`, PostgreSQL's write
lock), so a checkpoint and the values new in it are stored together or not at all. A
thread is found by (runtime, thread id) and named in the other tables by its integer id,
which keeps their rows short. A checkpoint's values are read with one query on the
(namespace, channel, version) pairs its versions name, its writes with another, in
`writes_sort_key` order (task path, task id, idx).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ditto_jupyter.control.store.interface import require_id
from ditto_jupyter.control.store.langgraph_rows import unique
from ditto_jupyter.control.store.schema_langgraph import BLOBS, CHECKPOINTS, THREADS, WRITES
from ditto_jupyter.control.store.sql_database import SqlDatabase
from ditto_jupyter.control.store.sql_langgraph_queries import (
    CHECKPOINT_COLUMNS as _CHECKPOINT_COLUMNS,
)
from ditto_jupyter.control.store.sql_langgraph_queries import (
    FIND_THREAD as _FIND_THREAD,
)
from ditto_jupyter.control.store.sql_langgraph_queries import (
    HAS_WRITES as _HAS_WRITES,
)
from ditto_jupyter.control.store.sql_langgraph_queries import (
    JOINED as _JOINED,
)
from ditto_jupyter.control.store.sql_langgraph_queries import (
    NEWEST_BY_NAME as _NEWEST_BY_NAME,
)
from ditto_jupyter.control.store.sql_langgraph_queries import (
    ONE_BY_NAME as _ONE_BY_NAME,
)
from ditto_jupyter.control.store.sql_langgraph_queries import (
    STATUS as _STATUS,
)
from ditto_jupyter.control.store.sql_langgraph_queries import (
    VALUES_OF as _VALUES_OF,
)
from ditto_jupyter.control.store.sql_langgraph_queries import (
    WRITES_OF as _WRITES_OF,
)
from ditto_jupyter.control.store.sql_langgraph_queries import (
    B as _B,
)
from ditto_jupyter.control.store.sql_langgraph_queries import (
    C as _C,
)
from ditto_jupyter.control.store.sql_langgraph_queries import (
    T as _T,
)
from ditto_jupyter.control.store.sql_langgraph_queries import (
    W as _W,
)
from ditto_jupyter.control.store.sql_langgraph_queries import (
    batches as _batches,
)
from ditto_jupyter.control.store.sql_langgraph_queries import (
    stored as _stored,
)
from ditto_jupyter.control.store.sql_langgraph_queries import (
    upserts,
)
from ditto_jupyter.control.store.sql_langgraph_queries import (
    value as _value,
)
from ditto_jupyter.control.store.sqlite_langgraph_reads import SqliteLangGraphReads
from ditto_jupyter.core.errors import RuntimeClosed
from ditto_jupyter.core.models.langgraph import (
    LangGraphChannelValue,
    LangGraphCheckpoint,
    LangGraphCursor,
    LangGraphThreadSummary,
    LangGraphTuple,
    LangGraphWrite,
)


class SqlLangGraphRows(SqlDatabase):
    """The LangGraph methods of the SQL checkpoint store (see `langgraph_rows`)."""

    @cached_property
    def _lg_statements(self) -> dict[str, Any]:
        """The upserts, built once per store for its dialect (SQLite or PostgreSQL)."""
        return upserts(self.insert)

    @cached_property
    def _lg_reads(self) -> SqliteLangGraphReads:
        """get_tuple's read on the DB-API, on SQLite (`sqlite_langgraph_reads`)."""
        return SqliteLangGraphReads(self.url.database or "", self.lock_timeout_ms, self._shown)

    def close(self) -> None:
        """Release every connection, the DB-API reads' too (see SqlDatabase.close)."""
        super().close()
        if "_lg_reads" in self.__dict__:
            self._lg_reads.close()

    # ---- threads ----------------------------------------------------------------------

    def _thread_key(self, conn: Connection, runtime_id: str, thread_id: str) -> int | None:
        key = conn.execute(_FIND_THREAD, {"runtime": runtime_id, "thread_id": thread_id}).scalar()
        return int(key) if key is not None else None

    def _writable(self, conn: Connection, runtime_id: str) -> bool:
        """Whether the runtime is in the store; RuntimeClosed when it is closed (its threads
        are kept, read-only). Asked inside each write's transaction."""
        status = conn.execute(_STATUS, {"runtime": runtime_id}).scalar()
        if status == "closed":
            raise RuntimeClosed(
                f"runtime {runtime_id} is closed: its LangGraph threads are read-only"
            )
        return status is not None

    def _new_thread(self, conn: Connection, runtime_id: str, thread_id: str, now_ms: int) -> int:
        """The thread's key, made when it has none (ValueError for an unknown runtime,
        RuntimeClosed for a closed one)."""
        known = self._writable(conn, runtime_id)
        key = self._thread_key(conn, runtime_id, thread_id)
        if key is not None:
            return key
        if not known:
            raise ValueError(
                f"a LangGraph thread names runtime {runtime_id!r}, which is not in the store"
            )
        conn.execute(
            self._lg_statements["thread"],
            {"runtime_id": runtime_id, "thread_id": thread_id, "created_at_ms": now_ms},
        )
        made = self._thread_key(conn, runtime_id, thread_id)
        assert made is not None
        return made

    # ---- writing ----------------------------------------------------------------------

    def put_langgraph_checkpoint(
        self, runtime_id: str, checkpoint: LangGraphCheckpoint, *, now_ms: int
    ) -> bool:
        """Store a checkpoint and its new values in one transaction (see the protocol)."""
        require_id(runtime_id, "a runtime id")
        statements = self._lg_statements
        with self._write() as conn:
            key = self._new_thread(conn, runtime_id, checkpoint.thread_id, now_ms)
            ns = checkpoint.checkpoint_ns
            if checkpoint.values:
                conn.execute(
                    statements["blobs"],
                    [
                        {
                            "thread": key,
                            "checkpoint_ns": ns,
                            "channel": item.channel,
                            "version": item.version,
                            **_stored(item.value),
                        }
                        for item in checkpoint.values
                    ],
                )
            conn.execute(
                statements["checkpoint"],
                {
                    "thread": key,
                    "checkpoint_ns": ns,
                    "checkpoint_id": checkpoint.checkpoint_id,
                    "parent_checkpoint_id": checkpoint.parent_checkpoint_id,
                    "run_id": checkpoint.run_id,
                    "created_at_ms": now_ms,
                    "versions": orjson.dumps(checkpoint.versions).decode(),
                    "metadata": orjson.dumps(checkpoint.metadata).decode(),
                    **_stored(checkpoint.checkpoint),
                },
            )
            where = {"key": key, "ns": ns, "id": checkpoint.checkpoint_id}
            return conn.execute(_HAS_WRITES, where).first() is not None

    def put_langgraph_writes(
        self,
        runtime_id: str,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        writes: Sequence[LangGraphWrite],
        *,
        replace: bool,
        now_ms: int,
    ) -> int:
        """Store a task's pending writes (see the protocol)."""
        require_id(runtime_id, "a runtime id")
        if not writes:
            return 0
        statement = self._lg_statements["writes_replace" if replace else "writes_keep"]
        with self._write() as conn:
            key = self._new_thread(conn, runtime_id, thread_id, now_ms)
            result = conn.execute(
                statement,
                [
                    {
                        "thread": key,
                        "checkpoint_ns": checkpoint_ns,
                        "checkpoint_id": checkpoint_id,
                        "task_id": write.task_id,
                        "idx": write.idx,
                        "task_path": write.task_path,
                        "channel": write.channel,
                        "created_at_ms": now_ms,
                        **_stored(write.value),
                    }
                    for write in writes
                ],
                execution_options={"preserve_rowcount": True},
            )
            return max(result.rowcount, 0)

    # ---- reading ----------------------------------------------------------------------

    def _tuple(self, conn: Connection, row: Any) -> LangGraphTuple:
        versions: dict[str, str] = orjson.loads(row.versions)
        values: list[LangGraphChannelValue] = []
        pairs = sorted(versions.items())
        for batch in _batches(pairs):
            query = conn.execute(
                _VALUES_OF, {"key": row.thread, "ns": row.checkpoint_ns, "pairs": list(batch)}
            )
            values += [
                LangGraphChannelValue(
                    channel=found.channel, version=found.version, value=_value(found)
                )
                for found in query
            ]
        writes = [
            LangGraphWrite(
                task_id=found.task_id,
                task_path=found.task_path,
                idx=int(found.idx),
                channel=found.channel,
                value=_value(found),
            )
            for found in conn.execute(
                _WRITES_OF, {"key": row.thread, "ns": row.checkpoint_ns, "id": row.checkpoint_id}
            )
        ]
        return LangGraphTuple(
            thread_id=row.thread_id,
            checkpoint_ns=row.checkpoint_ns,
            checkpoint_id=row.checkpoint_id,
            parent_checkpoint_id=row.parent_checkpoint_id,
            checkpoint=_value(row),
            metadata=orjson.loads(row.metadata),
            values=values,
            writes=writes,
        )

    def get_langgraph_tuple(
        self, runtime_id: str, thread_id: str, checkpoint_ns: str, checkpoint_id: str | None
    ) -> LangGraphTuple | None:
        """The checkpoint with its values and writes, or None (see the protocol)."""
        require_id(runtime_id, "a runtime id")
        if self.backend == "sqlite" and self._active.get() is None:
            self._check_open()
            return self._lg_reads.get(runtime_id, thread_id, checkpoint_ns, checkpoint_id)
        where = {"runtime": runtime_id, "thread_id": thread_id, "ns": checkpoint_ns}
        with self._read() as conn:
            if checkpoint_id is None:
                row = conn.execute(_NEWEST_BY_NAME, where).first()
            else:
                row = conn.execute(_ONE_BY_NAME, {**where, "id": checkpoint_id}).first()
            return self._tuple(conn, row) if row is not None else None

    def page_langgraph_tuples(
        self,
        runtime_id: str,
        *,
        thread_id: str | None,
        checkpoint_ns: str | None,
        checkpoint_id: str | None,
        before: str | None,
        after: LangGraphCursor | None,
        limit: int,
    ) -> list[LangGraphTuple]:
        """One page of the runtime's checkpoints, newest first (see the protocol)."""
        require_id(runtime_id, "a runtime id")
        query = (
            sa.select(*_CHECKPOINT_COLUMNS).select_from(_JOINED).where(_T.runtime_id == runtime_id)
        )
        if thread_id is not None:
            query = query.where(_T.thread_id == thread_id)
        if checkpoint_ns is not None:
            query = query.where(_C.checkpoint_ns == checkpoint_ns)
        if checkpoint_id is not None:
            query = query.where(_C.checkpoint_id == checkpoint_id)
        if before is not None:
            query = query.where(_C.checkpoint_id < before)
        if after is not None:
            query = query.where(
                sa.tuple_(_C.checkpoint_id, _T.thread_id, _C.checkpoint_ns)
                < sa.tuple_(
                    sa.literal(after.checkpoint_id),
                    sa.literal(after.thread_id),
                    sa.literal(after.checkpoint_ns),
                )
            )
        query = query.order_by(
            _C.checkpoint_id.desc(), _T.thread_id.desc(), _C.checkpoint_ns.desc()
        ).limit(limit)
        with self._read() as conn:
            return [self._tuple(conn, row) for row in conn.execute(query).all()]

    def langgraph_threads(self, runtime_id: str) -> list[LangGraphThreadSummary]:
        """The runtime's threads, by thread id (see the protocol)."""
        query = (
            sa.select(
                _T.thread_id,
                _T.created_at_ms,
                sa.func.count(_C.checkpoint_id),
                sa.func.max(_C.checkpoint_id),
            )
            .select_from(THREADS.outerjoin(CHECKPOINTS, _C.thread == _T.id))
            .where(_T.runtime_id == runtime_id)
            .group_by(_T.id, _T.thread_id, _T.created_at_ms)
            .order_by(_T.thread_id)
        )
        with self._read() as conn:
            return [
                LangGraphThreadSummary(
                    thread_id=thread,
                    checkpoints=int(count),
                    latest_checkpoint_id=latest,
                    created_at_ms=int(created),
                )
                for thread, created, count, latest in conn.execute(query)
            ]

    def langgraph_runtimes_with_threads(self, runtime_ids: Sequence[str]) -> set[str]:
        """Which of these runtimes have a thread (see the protocol)."""
        found: set[str] = set()
        with self._read() as conn:
            for batch in _batches(unique(runtime_ids)):
                query = sa.select(_T.runtime_id).where(_T.runtime_id.in_(batch)).distinct()
                found.update(conn.execute(query).scalars())
        return found

    def langgraph_manifests(self, manifest_ids: Sequence[str]) -> set[str]:
        """Which of these manifests a stored value names (see the protocol)."""
        found: set[str] = set()
        with self._read() as conn:
            for batch in _batches(unique(manifest_ids)):
                for table in (CHECKPOINTS, BLOBS, WRITES):
                    query = sa.select(table.c.manifest_id).where(table.c.manifest_id.in_(batch))
                    found.update(conn.execute(query).scalars())
        return found

    def langgraph_thread_manifests(
        self, runtime_id: str, thread_ids: Sequence[str] | None
    ) -> set[str]:
        """The manifests these threads' values name (see the protocol)."""
        threads = sa.select(_T.id).where(_T.runtime_id == runtime_id)
        if thread_ids is not None:
            threads = threads.where(_T.thread_id.in_(unique(thread_ids)))
        found: set[str] = set()
        with self._read() as conn:
            for table in (CHECKPOINTS, BLOBS, WRITES):
                query = sa.select(table.c.manifest_id).where(
                    table.c.manifest_id.is_not(None), table.c.thread.in_(threads)
                )
                found.update(conn.execute(query).scalars())
        return found

    # ---- deleting and copying -----------------------------------------------------------

    def _drop_thread_rows(self, conn: Connection, key: int) -> int:
        deleted = 0
        for table in (WRITES, BLOBS, CHECKPOINTS):
            result = conn.execute(sa.delete(table).where(table.c.thread == key))
            deleted += max(result.rowcount, 0)
        return deleted

    def delete_langgraph_thread(self, runtime_id: str, thread_id: str) -> int:
        """Delete a thread and everything in it (see the protocol)."""
        require_id(runtime_id, "a runtime id")
        with self._write() as conn:
            self._writable(conn, runtime_id)
            key = self._thread_key(conn, runtime_id, thread_id)
            if key is None:
                return 0
            deleted = self._drop_thread_rows(conn, key)
            conn.execute(sa.delete(THREADS).where(_T.id == key))
            return deleted + 1

    def _drop_orphans(self, conn: Connection, key: int) -> None:
        """Delete the thread's writes whose checkpoint is gone, the values no checkpoint
        names, and the parent of a checkpoint whose parent is gone."""
        kept = sa.select(_C.checkpoint_id).where(
            _C.thread == _W.thread,
            _C.checkpoint_ns == _W.checkpoint_ns,
            _C.checkpoint_id == _W.checkpoint_id,
        )
        conn.execute(sa.delete(WRITES).where(_W.thread == key, ~sa.exists(kept)))
        parent = CHECKPOINTS.alias("parent")
        parent_kept = sa.select(parent.c.checkpoint_id).where(
            parent.c.thread == key,
            parent.c.checkpoint_ns == _C.checkpoint_ns,
            parent.c.checkpoint_id == _C.parent_checkpoint_id,
        )
        conn.execute(
            sa.update(CHECKPOINTS)
            .where(
                _C.thread == key,
                _C.parent_checkpoint_id.is_not(None),
                ~sa.exists(parent_kept),
            )
            .values(parent_checkpoint_id=None)
        )
        named: set[tuple[str, str, str]] = set()
        for ns, versions in conn.execute(
            sa.select(_C.checkpoint_ns, _C.versions).where(_C.thread == key)
        ):
            named.update(
                (ns, channel, version) for channel, version in orjson.loads(versions).items()
            )
        stored = conn.execute(
            sa.select(_B.checkpoint_ns, _B.channel, _B.version).where(_B.thread == key)
        ).all()
        unnamed = [tuple(row) for row in stored if tuple(row) not in named]
        for batch in _batches(unnamed):
            conn.execute(
                sa.delete(BLOBS).where(
                    _B.thread == key,
                    sa.tuple_(_B.checkpoint_ns, _B.channel, _B.version).in_(batch),
                )
            )

    def _delete_checkpoints(
        self, conn: Connection, key: int, ids: Sequence[tuple[str, str]]
    ) -> int:
        deleted = 0
        for batch in _batches(ids):
            result = conn.execute(
                sa.delete(CHECKPOINTS).where(
                    _C.thread == key, sa.tuple_(_C.checkpoint_ns, _C.checkpoint_id).in_(batch)
                )
            )
            deleted += max(result.rowcount, 0)
        return deleted

    def copy_langgraph_thread(
        self,
        source_runtime_id: str,
        source_thread_id: str,
        target_runtime_id: str,
        target_thread_id: str,
        *,
        stored_by_ms: int | None = None,
        now_ms: int,
    ) -> int:
        """Copy a thread into another (see the protocol)."""
        require_id(source_runtime_id, "a runtime id")
        require_id(target_runtime_id, "a runtime id")
        with self._write() as conn:
            source = self._thread_key(conn, source_runtime_id, source_thread_id)
            if source is None:
                return 0
            target = self._thread_key(conn, target_runtime_id, target_thread_id)
            if (
                target is not None
                and conn.execute(
                    sa.select(_C.checkpoint_id).where(_C.thread == target).limit(1)
                ).first()
            ):
                raise ValueError(
                    f"LangGraph thread {target_thread_id!r} has checkpoints already: "
                    "copy into a new thread, or delete it first"
                )
            made = target is None
            target = self._new_thread(conn, target_runtime_id, target_thread_id, now_ms)
            by = sa.true() if stored_by_ms is None else _C.created_at_ms <= stored_by_ms
            checkpoint_columns = [column.name for column in CHECKPOINTS.columns]
            copied = conn.execute(
                sa.insert(CHECKPOINTS).from_select(
                    checkpoint_columns,
                    sa.select(
                        sa.literal(target, sa.Integer),
                        *(CHECKPOINTS.c[name] for name in checkpoint_columns[1:]),
                    ).where(_C.thread == source, by),
                ),
                # psycopg reports an INSERT's rowcount only when asked to keep it
                execution_options={"preserve_rowcount": True},
            ).rowcount
            copied_checkpoint = sa.select(_C.checkpoint_id).where(
                _C.thread == target,
                _C.checkpoint_ns == _W.checkpoint_ns,
                _C.checkpoint_id == _W.checkpoint_id,
            )
            write_by = sa.true() if stored_by_ms is None else _W.created_at_ms <= stored_by_ms
            write_columns = [column.name for column in WRITES.columns]
            conn.execute(
                sa.insert(WRITES).from_select(
                    write_columns,
                    sa.select(
                        sa.literal(target, sa.Integer),
                        *(WRITES.c[name] for name in write_columns[1:]),
                    ).where(_W.thread == source, write_by, sa.exists(copied_checkpoint)),
                )
            )
            blob_columns = [column.name for column in BLOBS.columns]
            conn.execute(
                sa.insert(BLOBS).from_select(
                    blob_columns,
                    sa.select(
                        sa.literal(target, sa.Integer),
                        *(BLOBS.c[name] for name in blob_columns[1:]),
                    ).where(_B.thread == source),
                )
            )
            if stored_by_ms is not None:
                self._drop_orphans(conn, target)
            if copied <= 0 and made:  # nothing was there yet: no thread either
                self._drop_thread_rows(conn, target)
                conn.execute(sa.delete(THREADS).where(_T.id == target))
            return max(copied, 0)

    def prune_langgraph_threads(
        self, runtime_id: str, thread_ids: Sequence[str], *, keep_latest: bool
    ) -> int:
        """Keep each namespace's newest checkpoint, or none (see the protocol)."""
        require_id(runtime_id, "a runtime id")
        deleted = 0
        with self._write() as conn:
            self._writable(conn, runtime_id)
            for thread_id in unique(thread_ids):
                key = self._thread_key(conn, runtime_id, thread_id)
                if key is None:
                    continue
                rows = conn.execute(
                    sa.select(_C.checkpoint_ns, _C.checkpoint_id)
                    .where(_C.thread == key)
                    .order_by(_C.checkpoint_ns, _C.checkpoint_id.desc())
                ).all()
                newest: set[tuple[str, str]] = set()
                seen: set[str] = set()
                for ns, checkpoint_id in rows:
                    if keep_latest and ns not in seen:
                        seen.add(ns)
                        newest.add((ns, checkpoint_id))
                going = [(ns, cid) for ns, cid in rows if (ns, cid) not in newest]
                deleted += self._delete_checkpoints(conn, key, going)
                self._drop_orphans(conn, key)
        return deleted

    def delete_langgraph_runs(self, runtime_id: str, run_ids: Sequence[str]) -> int:
        """Delete the checkpoints of these runs (see the protocol)."""
        require_id(runtime_id, "a runtime id")
        runs = unique(run_ids)
        if not runs:
            return 0
        deleted = 0
        with self._write() as conn:
            self._writable(conn, runtime_id)
            found: dict[int, list[tuple[str, str]]] = {}
            for batch in _batches(runs):
                query = (
                    sa.select(_C.thread, _C.checkpoint_ns, _C.checkpoint_id)
                    .select_from(_JOINED)
                    .where(_T.runtime_id == runtime_id, _C.run_id.in_(batch))
                )
                for key, ns, checkpoint_id in conn.execute(query):
                    found.setdefault(int(key), []).append((ns, checkpoint_id))
            for key, ids in found.items():
                deleted += self._delete_checkpoints(conn, key, ids)
                self._drop_orphans(conn, key)
        return deleted
