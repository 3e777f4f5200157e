"""The checkpoint store on SQL (`SqlDatabase`): runtimes, checkpoints and heads (with the
bindings, leftovers and damaged rows of `sql_bindings`, the leases of `sql_leases`, and
LangGraph's rows of `sql_langgraph`).

Every lookup is an index lookup (see `schema`); models are kept as JSON text beside the
columns they are queried by, a checkpoint as its columns, a base it shares with checkpoints
alike and its own part (`checkpoint_rows`). A runtime's head is a column of its row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection

from ditto_jupyter.control.store import sql_records as records
from ditto_jupyter.control.store.checkpoint_rows import (
    CheckpointParts,
    delta_against,
    own_text,
    parts_of,
)
from ditto_jupyter.control.store.interface import (
    BUSY_TIMEOUT_MS,
    PruneCandidates,
    kernel_id_of,
    load_model,
    load_rows,
    moved_checkpoint,
    prefix_end,
    refs_of_checkpoint,
    refs_of_head,
    require_id,
    require_model,
)
from ditto_jupyter.control.store.migrations import MIGRATIONS, Migration
from ditto_jupyter.control.store.schema import (
    BINDINGS,
    CHECKPOINT_BASES,
    CHECKPOINTS,
    GET_HEAD,
    GET_SESSION,
    KEY,
    LEFTOVERS,
    SESSIONS,
)
from ditto_jupyter.control.store.sql_bindings import SqlBindingsAndLeftovers
from ditto_jupyter.control.store.sql_langgraph import SqlLangGraphRows
from ditto_jupyter.control.store.sql_leases import SqlLeases
from ditto_jupyter.core.models import (
    RuntimeCheckpoint,
    SessionLifecycleStatus,
    SessionRecord,
)

_LIVE = (SessionLifecycleStatus.IDLE.value, SessionLifecycleStatus.BUSY.value)

_HELD_BATCH = 500
"""Checkpoint ids asked about in one `IN (...)` (well below every database's limit)."""

_BASES = CHECKPOINT_BASES.c
# Built once: SQLAlchemy then reuses their compiled form (a statement built per call costs
# more than the lookup it runs).
_BASE: sa.BindParameter[int] = sa.bindparam("base", type_=sa.Integer)
_STORED = sa.select(CHECKPOINTS.c.runtime_id, CHECKPOINTS.c.base_id).where(
    CHECKPOINTS.c.checkpoint_id == KEY
)
_GET_BASE = sa.select(_BASES.context_manifest_id, _BASES.backend_snapshot_id, _BASES.data).where(
    _BASES.id == _BASE
)
_ADD_BASE = sa.insert(CHECKPOINT_BASES)
_BASE_USED = sa.select(CHECKPOINTS.c.seq).where(CHECKPOINTS.c.base_id == _BASE).limit(1)
_DROP_BASE = sa.delete(CHECKPOINT_BASES).where(_BASES.id == _BASE)
_SET_HEAD = (
    sa.update(SESSIONS)
    .where(SESSIONS.c.runtime_id == sa.bindparam("runtime", type_=sa.Text))
    .values(
        head_checkpoint_id=sa.bindparam("head", type_=sa.Text),
        head_elsewhere=sa.bindparam("elsewhere", type_=sa.Boolean),
    )
)


class SqlCheckpointStore(SqlBindingsAndLeftovers, SqlLangGraphRows, SqlLeases):
    """The checkpoint store on SQLite (default, one file, WAL) or PostgreSQL, via SQLAlchemy."""

    def __init__(
        self,
        url: str | URL,
        *,
        migrations: Sequence[Migration] = MIGRATIONS,
        busy_timeout_ms: int = BUSY_TIMEOUT_MS,
    ) -> None:
        super().__init__(url, migrations=migrations, busy_timeout_ms=busy_timeout_ms)
        self._prepare_statements(self.insert)

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
            "source_runtime_id": session.source_runtime_id,
            "source_checkpoint_id": session.source_checkpoint_id,
            "kernel_id": kernel_id_of(session),
            "fanout_id": session.fanout.id if session.fanout is not None else None,
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
            self._set_intended_head(conn, session.session_id)

    def put_session(self, session: SessionRecord) -> None:
        """Insert or replace a runtime.

        An existing row gets only the columns that changed: a column named in an UPDATE
        rewrites every index on it, even to the same value, and a checkpoint replaces its
        runtime's record each time (a page image per index in the log)."""
        require_model(session, SessionRecord, "put_session")
        row = self._session_row(session)
        col = SESSIONS.c
        with self._write() as conn:
            stored = (
                conn.execute(
                    sa.select(*(col[name] for name in row)).where(
                        col.runtime_id == session.session_id
                    )
                )
                .mappings()
                .first()
            )
            if stored is None:
                conn.execute(self._upserts["sessions"], row)
                self._set_intended_head(conn, session.session_id)
                return
            changed = {name: value for name, value in row.items() if stored[name] != value}
            if changed:
                conn.execute(
                    sa.update(SESSIONS)
                    .where(col.runtime_id == session.session_id)
                    .values(**changed)
                )

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

    def checkouts_of(self, runtime_id: str) -> list[SessionRecord]:
        """The runtimes checked out from `runtime_id`'s checkpoints, by created_at_ms then id."""
        col = SESSIONS.c
        with self._read() as conn:
            rows = conn.execute(
                sa.select(col.runtime_id, col.data)
                .where(col.source_runtime_id == runtime_id)
                .order_by(col.created_at_ms, self._by_codepoint(col.runtime_id))
            ).all()
        return load_rows(SessionRecord, rows, "runtime")

    def fanout_members(self, fanout_id: str) -> list[SessionRecord]:
        """The children of one fan-out, by created_at_ms then id."""
        col = SESSIONS.c
        with self._read() as conn:
            rows = conn.execute(
                sa.select(col.runtime_id, col.data)
                .where(col.fanout_id == fanout_id)
                .order_by(col.created_at_ms, self._by_codepoint(col.runtime_id))
            ).all()
        return load_rows(SessionRecord, rows, "runtime")

    def live_session_with_kernel(self, kernel_id: str) -> SessionRecord | None:
        """The live (idle or busy) runtime whose handle names that kernel id, or None."""
        col = SESSIONS.c
        with self._read() as conn:
            rows = conn.execute(
                sa.select(col.runtime_id, col.data)
                .where(col.kernel_id == kernel_id, col.status.in_(_LIVE))
                .order_by(col.created_at_ms, self._by_codepoint(col.runtime_id))
                .limit(1)
            ).all()
        found = load_rows(SessionRecord, rows, "runtime")
        return found[0] if found else None

    # ---- checkpoints ----------------------------------------------------------------

    def put_checkpoint(self, checkpoint: RuntimeCheckpoint) -> None:
        """Insert or replace a checkpoint; its runtime must be in the store at commit, and
        a stored checkpoint stays its runtime's (ValueError).

        It shares the base of its stored self or of its parent when it names the same blobs
        and differs from it by a short delta (a checkpoint after a cell that changed
        nothing); otherwise it gets a base of its own. A base no checkpoint uses any more
        is deleted."""
        require_model(checkpoint, RuntimeCheckpoint, "put_checkpoint")
        parts = parts_of(checkpoint)
        with self._write(refs_of_checkpoint(checkpoint)) as conn:
            stored = conn.execute(_STORED, {"key": checkpoint.checkpoint_id}).first()
            if stored is not None and stored.runtime_id != checkpoint.runtime_id:
                raise moved_checkpoint(checkpoint, str(stored.runtime_id))
            parent = None
            if checkpoint.parent_checkpoint_id is not None:
                parent = conn.execute(_STORED, {"key": checkpoint.parent_checkpoint_id}).first()
            shared_with = [found.base_id for found in (stored, parent) if found is not None]
            base_id, changes = self._base_for(conn, parts, shared_with)
            row = {
                "checkpoint_id": checkpoint.checkpoint_id,
                "runtime_id": checkpoint.runtime_id,
                "parent_checkpoint_id": checkpoint.parent_checkpoint_id,
                "name": checkpoint.name,
                "created_at_ms": checkpoint.created_at_ms,
                "data": own_text(parts.own, changes),
                "automatic": checkpoint.automatic is not None,
                "pruned": checkpoint.pruned,
                "document_manifest_id": checkpoint.document_manifest_id,
                # Only a parent that is not one of the same runtime's checkpoints (another
                # runtime's, or not stored) is in `checkpoints_by_parent`.
                "parent_elsewhere": checkpoint.parent_checkpoint_id is not None
                and (parent is None or parent.runtime_id != checkpoint.runtime_id),
                "base_id": base_id,
            }
            conn.execute(self._upserts["checkpoints"], row)
            if stored is not None and stored.base_id != base_id:
                self._drop_if_unused(conn, stored.base_id)

    @staticmethod
    def _base_for(
        conn: Connection, parts: CheckpointParts, candidates: Sequence[int]
    ) -> tuple[int, dict[str, Any]]:
        """The base a checkpoint is kept against, and its delta from it: the candidate
        naming the same blobs with the shortest delta worth keeping, else a new base."""
        blobs = (parts.context_manifest_id, parts.backend_snapshot_id)
        best: tuple[int, dict[str, Any]] | None = None
        for base_id in dict.fromkeys(candidates):
            found = conn.execute(_GET_BASE, {"base": base_id}).first()
            if found is None or (found.context_manifest_id, found.backend_snapshot_id) != blobs:
                continue
            changes = delta_against(found.data, parts.shared)
            if changes is not None and (
                best is None or len(own_text({}, changes)) < len(own_text({}, best[1]))
            ):
                best = (base_id, changes)
        if best is not None:
            return best
        made = conn.execute(
            _ADD_BASE,
            {
                "context_manifest_id": parts.context_manifest_id,
                "backend_snapshot_id": parts.backend_snapshot_id,
                "data": own_text(parts.shared, {}),
            },
        )
        key = made.inserted_primary_key
        assert key is not None
        return int(key[0]), {}

    @staticmethod
    def _drop_if_unused(conn: Connection, base_id: int) -> None:
        """Delete a base that no checkpoint uses (the last one moved to another)."""
        if conn.execute(_BASE_USED, {"base": base_id}).first() is None:
            conn.execute(_DROP_BASE, {"base": base_id})

    def get_checkpoint(self, checkpoint_id: str) -> RuntimeCheckpoint | None:
        """The checkpoint with that id, or None."""
        with self._read() as conn:
            row = conn.execute(records.GET_RECORD, {"key": checkpoint_id}).first()
        if row is None:
            return None
        text = records.whole_text(tuple(row))
        return load_model(RuntimeCheckpoint, text, f"checkpoint {checkpoint_id!r}")

    def list_checkpoints(self, runtime_id: str | None = None) -> list[RuntimeCheckpoint]:
        """Checkpoints (of one runtime, or all), oldest first.

        All of them are read in insertion order and sorted here by creation time (a stable
        sort keeps that order among equal times): no index by creation time is kept, as
        every checkpoint would write a page of it, and this listing reads every row anyway."""
        if runtime_id is not None:
            return self._load_checkpoints(records.OF_RUNTIME, {"runtime": runtime_id})
        listed = self._load_checkpoints(records.RECORDS.order_by(CHECKPOINTS.c.seq), {})
        return sorted(listed, key=lambda checkpoint: checkpoint.created_at_ms)

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
        shape = self._prefix_shape(prefix, runtime_id)
        where = records.id_prefix(**shape)
        seqs = sa.union(sa.select(col.seq).where(where), sa.select(col.seq).where(named))
        query = records.RECORDS.where(col.seq.in_(seqs.scalar_subquery()))
        values = self._prefix_values(prefix, runtime_id, None)
        return self._load_checkpoints(query.order_by(col.created_at_ms, col.seq), values)

    def _prefix_shape(self, prefix: str, runtime_id: str | None) -> dict[str, bool]:
        """Which statement of `sql_records.id_prefix` selects ids starting with `prefix`."""
        return {
            "postgresql": self.backend == "postgresql",
            "bounded": prefix_end(prefix) is not None,
            "in_runtime": runtime_id is not None,
            "short": len(prefix) < 3,
        }

    @staticmethod
    def _prefix_values(prefix: str, runtime_id: str | None, limit: int | None) -> dict[str, Any]:
        """What that statement binds."""
        return {
            "prefix": prefix,
            "length": len(prefix),
            "end": prefix_end(prefix),
            "runtime": runtime_id,
            "limit": limit,
        }

    def find_by_id_prefix(
        self, prefix: str, runtime_id: str | None = None, *, limit: int | None = None
    ) -> list[RuntimeCheckpoint]:
        """Checkpoints whose id starts with `prefix` (in one runtime), in id order."""
        require_id(prefix, "a checkpoint id prefix")
        shape = self._prefix_shape(prefix, runtime_id)
        query = records.by_id_prefix(**shape, limited=limit is not None)
        return self._load_checkpoints(query, self._prefix_values(prefix, runtime_id, limit))

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
        values: dict[str, Any] = {"runtime": runtime_id, "limit": limit}
        with self._read() as conn:
            if after is not None:
                anchor = conn.execute(records.PAGE_ANCHOR, {"key": after, **values}).first()
                if anchor is None:
                    raise ValueError(f"{after!r} is not a checkpoint of runtime {runtime_id!r}")
                values.update(created=anchor[0], seq=anchor[1])
            query = records.page(
                newest_first=newest_first, after=after is not None, limited=limit is not None
            )
            rows = conn.execute(query, values).all()
        return records.checkpoints_of(rows)

    def newest_named(self, name: str, runtime_id: str) -> RuntimeCheckpoint | None:
        """The newest checkpoint of a runtime with exactly that name, or None."""
        found = self._load_checkpoints(records.NEWEST_NAMED, {"key": name, "runtime": runtime_id})
        return found[0] if found else None

    def runtimes_naming(self, name: str, *, limit: int) -> list[str]:
        """Runtimes (by id, at most `limit`) that have a checkpoint with exactly that name."""
        with self._read() as conn:
            found = conn.execute(records.RUNTIMES_NAMING, {"key": name, "limit": limit})
            return [str(rid) for (rid,) in found]

    def checkpoints_with_snapshot(self, snapshot_id: str) -> list[RuntimeCheckpoint]:
        """Every checkpoint whose backend ref records that provider snapshot, oldest first."""
        return self._load_checkpoints(records.WITH_SNAPSHOT, {"key": snapshot_id})

    def referenced_manifests(self, manifest_ids: Sequence[str]) -> set[str]:
        """Which of these blob ids some checkpoint names, as its context manifest, its
        backend snapshot (the base it uses holds them) or its notebook document."""
        ids = list(dict.fromkeys(manifest_ids))
        if not ids:
            return set()
        # A base goes with its last user (in that user's transaction): each one names
        # what some checkpoint names, and were one left over, it would keep blobs, never
        # free them.
        document = CHECKPOINTS.c.document_manifest_id
        queries = [
            sa.select(column).where(column.in_(ids)).distinct()
            for column in (_BASES.context_manifest_id, _BASES.backend_snapshot_id)
        ]
        queries.append(sa.select(document).where(document.in_(ids)).distinct())
        found: set[str] = set()
        with self._read() as conn:
            for query in queries:
                found.update(str(value) for (value,) in conn.execute(query))
        return found

    def prune_candidates(self, runtime_id: str, keep: int) -> PruneCandidates:
        """The runtime's whole automatic checkpoints beyond its newest `keep`, which of them
        are held, and how many are whole: ranges on `checkpoints_automatic`, and the ids
        beyond looked up in the heads, the checkout origins and the parents."""
        col = CHECKPOINTS.c
        whole = sa.and_(col.runtime_id == runtime_id, col.automatic, sa.not_(col.pruned))
        newest_first = records.RECORDS.where(whole)
        newest_first = newest_first.order_by(col.created_at_ms.desc(), col.seq.desc())
        with self._read() as conn:
            count = conn.execute(sa.select(sa.func.count()).where(whole)).scalar_one()
            rows = conn.execute(newest_first.offset(max(keep, 0))).all()
            ids = [str(row.checkpoint_id) for row in rows]
            held: set[str] = set()
            for start in range(0, len(ids), _HELD_BATCH):
                batch = ids[start : start + _HELD_BATCH]
                held.update(
                    str(cid) for (cid,) in conn.execute(self._held_among(batch, runtime_id))
                )
        beyond = records.checkpoints_of(rows[::-1])
        return PruneCandidates(beyond=beyond, held=frozenset(held), whole=int(count))

    @staticmethod
    def _held_among(ids: list[str], runtime_id: str) -> Any:
        """Which of these checkpoints of `runtime_id` are a head (its own, off its row;
        another runtime's, off the index of heads elsewhere), a checkout's source, or the
        parent of another runtime's checkpoint (each an index lookup)."""
        cps, sessions = CHECKPOINTS.c, SESSIONS.c
        return sa.union(
            sa.select(sessions.head_checkpoint_id).where(
                sessions.runtime_id == runtime_id, sessions.head_checkpoint_id.in_(ids)
            ),
            sa.select(sessions.head_checkpoint_id).where(
                sessions.head_elsewhere, sessions.head_checkpoint_id.in_(ids)
            ),
            sa.select(sessions.source_checkpoint_id).where(sessions.source_checkpoint_id.in_(ids)),
            sa.select(cps.parent_checkpoint_id).where(
                cps.parent_elsewhere,
                cps.parent_checkpoint_id.in_(ids),
                cps.runtime_id != runtime_id,
            ),
        )

    def _load_checkpoints(self, query: Any, values: dict[str, Any]) -> list[RuntimeCheckpoint]:
        """The checkpoints a statement of `sql_records` selects, with these values bound."""
        with self._read() as conn:
            rows = conn.execute(query, values).all()
        return records.checkpoints_of(rows)

    # ---- heads ----------------------------------------------------------------------

    def get_head(self, runtime_id: str) -> str | None:
        """The current checkpoint id of a runtime, or None."""
        with self._read() as conn:
            head = conn.execute(GET_HEAD, {"key": runtime_id}).scalar_one_or_none()
        return None if head is None else str(head)

    def set_head(self, runtime_id: str, checkpoint_id: str | None) -> None:
        """Make `checkpoint_id` the runtime's current checkpoint (None clears it).

        The head is a column of the runtime's row; one set before the row is inserted, in
        the same transaction, is noted and given to the row when it is."""
        require_id(runtime_id, "runtime_id")
        refs = []
        if checkpoint_id is not None:
            require_id(checkpoint_id, "checkpoint_id")
            refs = refs_of_head(runtime_id, checkpoint_id)
        with self._write(refs) as conn:
            self._note(("head", runtime_id), checkpoint_id)
            self._write_head(conn, runtime_id, checkpoint_id)

    def _set_intended_head(self, conn: Connection, runtime_id: str) -> None:
        """Give a runtime's new row the head set for it earlier in the transaction."""
        noted, head = self._noted(("head", runtime_id))
        if noted and isinstance(head, str):
            self._write_head(conn, runtime_id, head)

    @staticmethod
    def _write_head(conn: Connection, runtime_id: str, checkpoint_id: str | None) -> None:
        """Write the head into the runtime's row (none there: nothing written), marked
        `head_elsewhere` unless it is one of the runtime's own checkpoints (a checkpoint
        not stored yet counts as another's: it is in the index, where a prune finds it)."""
        elsewhere = False
        if checkpoint_id is not None:
            owner = conn.execute(_STORED, {"key": checkpoint_id}).first()
            elsewhere = owner is None or owner.runtime_id != runtime_id
        conn.execute(
            _SET_HEAD, {"runtime": runtime_id, "head": checkpoint_id, "elsewhere": elsewhere}
        )

    def _prepare_statements(self, insert: Any) -> None:
        # Built once: SQLAlchemy then reuses their compiled form, and a write costs a
        # parameter bind instead of a statement construction.
        self._insert_new_session = insert(SESSIONS).on_conflict_do_nothing(
            index_elements=["runtime_id"]
        )
        self._upserts: dict[str, Any] = {}
        # A runtime's row is replaced around its head, which only `set_head` writes.
        kept = ("seq", "head_checkpoint_id", "head_elsewhere")
        for table, keys in (
            (SESSIONS, ("runtime_id",)),
            (CHECKPOINTS, ("checkpoint_id",)),
            (BINDINGS, ("runtime_id",)),
            (LEFTOVERS, ("kind", "resource_id")),
        ):
            stmt = insert(table)
            updates = {
                col.name: stmt.excluded[col.name]
                for col in table.columns
                if col.name not in (*keys, *kept)
            }
            self._upserts[table.name] = stmt.on_conflict_do_update(
                index_elements=list(keys), set_=updates
            )
