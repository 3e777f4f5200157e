"""The checkpoint store on SQL, its smaller tables: backend bindings, leftovers, and the
rows that do not read back as their model (`ditto doctor`).

A mixin of `SqlCheckpointStore` (`sql`), over the same database and the upserts it
prepares once (`_upserts`).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from ditto_jupyter.control.store import sql_records as records
from ditto_jupyter.control.store.interface import (
    DamagedRecord,
    DamagedRow,
    damaged_of,
    load_model,
    load_rows,
    refs_of_binding,
    require_model,
)
from ditto_jupyter.control.store.schema import (
    BINDINGS,
    CHECKPOINTS,
    GET_BINDING,
    LEFTOVERS,
    SESSIONS,
)
from ditto_jupyter.control.store.sql_database import SqlDatabase
from ditto_jupyter.core.models import BackendBinding, Leftover, RuntimeCheckpoint, SessionRecord


class SqlBindingsAndLeftovers(SqlDatabase):
    """Backend bindings, leftovers and damaged rows on SQL."""

    #: Insert-or-replace statements by table name (prepared by `SqlCheckpointStore`).
    _upserts: dict[str, Any]

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

    # ---- leftovers -------------------------------------------------------------------

    def record_leftover(self, leftover: Leftover) -> None:
        """Record a resource a cleanup left behind (replaces one of the same kind and id)."""
        require_model(leftover, Leftover, "record_leftover")
        with self._write() as conn:
            conn.execute(self._upserts["leftovers"], leftover.model_dump())

    def list_leftovers(self) -> list[Leftover]:
        """Every recorded leftover, oldest first."""
        col = LEFTOVERS.c
        query = sa.select(col.kind, col.resource_id, col.runtime_id, col.reason, col.created_at_ms)
        query = query.order_by(
            col.created_at_ms, self._by_codepoint(col.kind), self._by_codepoint(col.resource_id)
        )
        with self._read() as conn:
            rows = conn.execute(query).all()
        return [Leftover(**row._asdict()) for row in rows]

    def damaged_rows(self) -> list[DamagedRow]:
        """Every stored row that does not read back as its model (reads each row)."""
        damaged: list[DamagedRow] = []
        for table, key, model in (
            (SESSIONS, SESSIONS.c.runtime_id, SessionRecord),
            (BINDINGS, BINDINGS.c.runtime_id, BackendBinding),
        ):
            with self._read() as conn:
                rows = conn.execute(sa.select(key, table.c.data).order_by(key)).all()
            damaged += damaged_of(table.name, model, ((str(k), str(d)) for k, d in rows))
        with self._read() as conn:
            rows = conn.execute(records.RECORDS.order_by(CHECKPOINTS.c.checkpoint_id)).all()
        whole: list[tuple[str, str]] = []
        for row in rows:
            try:
                whole.append((str(row.checkpoint_id), records.whole_text(tuple(row))))
            except DamagedRecord as error:
                reason = str(error).partition(" is damaged: ")[2] or str(error)
                damaged.append(
                    DamagedRow(
                        CHECKPOINTS.name, row.checkpoint_id, reason, records.stored_text(tuple(row))
                    )
                )
        damaged += damaged_of(CHECKPOINTS.name, RuntimeCheckpoint, whole)
        return damaged
