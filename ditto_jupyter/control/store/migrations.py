"""The checkpoint store's schema migrations: numbered steps, applied once and in order.

Each step is frozen: it says what that version changed, in DDL of its own, and never reads
the current table definitions (`schema`), so a database at any version migrates the same
way as one created today. Step 1 creates the tables of the first release; step 2 adds what
issue 15 needs (blob columns, name and blob indexes, byte-ordered id ranges on PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ditto_jupyter.control.store.interface import blob_ids_of_record


@dataclass(frozen=True)
class Migration:
    """One schema step: applied once, in order, inside the opening transaction."""

    version: int
    description: str
    apply: Callable[[Connection], None]


# ---- step 1: the tables of the first release (a frozen copy; never edit) -------------------

_V1 = sa.MetaData()
_deferred: dict[str, Any] = {"deferrable": True, "initially": "DEFERRED"}

sa.Table(
    "sessions",
    _V1,
    sa.Column("runtime_id", sa.Text, primary_key=True),
    sa.Column("conversation_id", sa.Text, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("created_at_ms", sa.BigInteger, nullable=False),
    sa.Column("updated_at_ms", sa.BigInteger, nullable=False),
    sa.Column("data", sa.Text, nullable=False),
    sa.Index("sessions_by_created", "created_at_ms", "runtime_id"),
)
sa.Table(
    "checkpoints",
    _V1,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("checkpoint_id", sa.Text, nullable=False, unique=True),
    sa.Column(
        "runtime_id", sa.Text, sa.ForeignKey("sessions.runtime_id", **_deferred), nullable=False
    ),
    sa.Column("parent_checkpoint_id", sa.Text, nullable=True),
    sa.Column("name", sa.Text, nullable=True),
    sa.Column("created_at_ms", sa.BigInteger, nullable=False),
    sa.Column("data", sa.Text, nullable=False),
    sa.Index("checkpoints_by_runtime", "runtime_id", "created_at_ms", "seq"),
    sa.Index("checkpoints_by_created", "created_at_ms", "seq"),
    sa.Index("checkpoints_by_name", "name"),
)
sa.Table(
    "heads",
    _V1,
    sa.Column(
        "runtime_id", sa.Text, sa.ForeignKey("sessions.runtime_id", **_deferred), primary_key=True
    ),
    sa.Column(
        "checkpoint_id",
        sa.Text,
        sa.ForeignKey("checkpoints.checkpoint_id", **_deferred),
        nullable=False,
    ),
)
sa.Table(
    "backend_bindings",
    _V1,
    sa.Column(
        "runtime_id", sa.Text, sa.ForeignKey("sessions.runtime_id", **_deferred), primary_key=True
    ),
    sa.Column("backend_id", sa.Text, nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("data", sa.Text, nullable=False),
    sa.Index("backend_bindings_by_backend", "backend_id"),
)


def _create_v1(conn: Connection) -> None:
    _V1.create_all(conn)


# ---- step 2: blob columns and indexes (issue 15) ------------------------------------------

_BACKFILL_BATCH = 1000


def _index_blobs_and_names_v2(conn: Connection) -> None:
    conn.exec_driver_sql("ALTER TABLE checkpoints ADD COLUMN context_manifest_id TEXT")
    conn.exec_driver_sql("ALTER TABLE checkpoints ADD COLUMN backend_snapshot_id TEXT")
    select = sa.text(
        "SELECT seq, data FROM checkpoints WHERE seq > :after ORDER BY seq LIMIT :batch"
    )
    update = sa.text(
        "UPDATE checkpoints SET context_manifest_id = :context, backend_snapshot_id = :snapshot "
        "WHERE seq = :seq"
    )
    after = 0
    while rows := conn.execute(select, {"after": after, "batch": _BACKFILL_BATCH}).all():
        updates = []
        for seq, data in rows:
            context, snapshot = blob_ids_of_record(data)
            updates.append({"seq": seq, "context": context, "snapshot": snapshot})
        conn.execute(update, updates)
        after = rows[-1][0]
    conn.exec_driver_sql(
        "CREATE INDEX checkpoints_by_context_manifest ON checkpoints (context_manifest_id)"
    )
    conn.exec_driver_sql(
        "CREATE INDEX checkpoints_by_snapshot ON checkpoints (backend_snapshot_id)"
    )
    conn.exec_driver_sql("DROP INDEX checkpoints_by_name")
    conn.exec_driver_sql(
        "CREATE INDEX checkpoints_by_name ON checkpoints (name, runtime_id, created_at_ms, seq)"
    )
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(
            'CREATE INDEX checkpoints_by_id_bytes ON checkpoints (checkpoint_id COLLATE "C")'
        )


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "sessions, checkpoints, heads and backend bindings", _create_v1),
    Migration(
        2, "blob columns; indexes for names, blobs and id prefixes", _index_blobs_and_names_v2
    ),
)
SCHEMA_VERSION = MIGRATIONS[-1].version


def check_migrations(migrations: Sequence[Migration]) -> None:
    """ValueError unless the migrations are numbered 1, 2, ... in order."""
    versions = [m.version for m in migrations]
    if not versions or versions != list(range(1, len(versions) + 1)):
        raise ValueError(f"migrations must be numbered 1, 2, ... in order, got {versions}")
