"""The SQL schema of the checkpoint store, and its migrations."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

METADATA = sa.MetaData()

VERSION_TABLE = sa.Table(
    "schema_version",
    METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.CheckConstraint("id = 1", name="schema_version_single_row"),
)

SESSIONS = sa.Table(
    "sessions",
    METADATA,
    sa.Column("runtime_id", sa.Text, primary_key=True),
    sa.Column("conversation_id", sa.Text, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("created_at_ms", sa.BigInteger, nullable=False),
    sa.Column("updated_at_ms", sa.BigInteger, nullable=False),
    sa.Column("data", sa.Text, nullable=False),
    sa.Index("sessions_by_created", "created_at_ms", "runtime_id"),
)

_deferred: dict[str, Any] = {"deferrable": True, "initially": "DEFERRED"}

CHECKPOINTS = sa.Table(
    "checkpoints",
    METADATA,
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

HEADS = sa.Table(
    "heads",
    METADATA,
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

BINDINGS = sa.Table(
    "backend_bindings",
    METADATA,
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


KEY: sa.BindParameter[str] = sa.bindparam("key", type_=sa.Text)
RUNTIME_EXISTS = sa.select(SESSIONS.c.runtime_id).where(SESSIONS.c.runtime_id == KEY)
CHECKPOINT_EXISTS = sa.select(CHECKPOINTS.c.seq).where(CHECKPOINTS.c.checkpoint_id == KEY)
GET_SESSION = sa.select(SESSIONS.c.data).where(SESSIONS.c.runtime_id == KEY)
GET_CHECKPOINT = sa.select(CHECKPOINTS.c.data).where(CHECKPOINTS.c.checkpoint_id == KEY)
GET_HEAD = sa.select(HEADS.c.checkpoint_id).where(HEADS.c.runtime_id == KEY)
GET_BINDING = sa.select(BINDINGS.c.data).where(BINDINGS.c.runtime_id == KEY)


@dataclass(frozen=True)
class Migration:
    """One schema step: applied once, in order, inside the opening transaction."""

    version: int
    description: str
    apply: Callable[[Connection], None]


def _create_v1(conn: Connection) -> None:
    # Step 1 creates the version-1 tables. Later steps must alter them explicitly (never
    # create_all a changed table), so a database at any version migrates the same way.
    METADATA.create_all(conn, tables=[SESSIONS, CHECKPOINTS, HEADS, BINDINGS])


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "sessions, checkpoints, heads and backend bindings", _create_v1),
)
SCHEMA_VERSION = MIGRATIONS[-1].version


def check_migrations(migrations: Sequence[Migration]) -> None:
    """ValueError unless the migrations are numbered 1, 2, ... in order."""
    versions = [m.version for m in migrations]
    if not versions or versions != list(range(1, len(versions) + 1)):
        raise ValueError(f"migrations must be numbered 1, 2, ... in order, got {versions}")
