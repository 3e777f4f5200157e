"""The SQL schema of the checkpoint store as it is now (`migrations` gets a database there).

These tables are what the queries are written against; they are never created from here
(`create_all`): every database, new or old, reaches this shape through the migration steps,
so a new and a migrated store are the same.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

METADATA = sa.MetaData()
_deferred: dict[str, Any] = {"deferrable": True, "initially": "DEFERRED"}

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
    # A checkout's origin and a live runtime's kernel (schema 3): `checkouts_of` and the
    # lookup of a runtime by its kernel ask these, never every session's record.
    sa.Column("source_runtime_id", sa.Text, nullable=True),
    sa.Column("source_checkpoint_id", sa.Text, nullable=True),
    sa.Column("kernel_id", sa.Text, nullable=True),
    # The runtime's head (schema 11; a table of its own before): a checkpoint rewrites the
    # runtime's row anyway, so its new head costs no page of its own. Only a head that is
    # another runtime's checkpoint is indexed (`head_elsewhere`): a prune asks for those,
    # and reads the pruned runtime's own head off its row.
    sa.Column(
        "head_checkpoint_id",
        sa.Text,
        sa.ForeignKey("checkpoints.checkpoint_id", **_deferred),
        nullable=True,
    ),
    sa.Column("head_elsewhere", sa.Boolean, nullable=False, server_default=sa.false()),
    # The fan-out a checkout child was made by (schema 13): keep-this-branch asks for a
    # fan-out's children; only the rows of fan-out children are indexed.
    sa.Column("fanout_id", sa.Text, nullable=True),
    sa.Index("sessions_by_created", "created_at_ms", "runtime_id"),
    sa.Index("sessions_by_source_runtime", "source_runtime_id", "created_at_ms", "runtime_id"),
    sa.Index("sessions_by_source_checkpoint", "source_checkpoint_id"),
    sa.Index("sessions_by_kernel", "kernel_id"),
    sa.Index(
        "sessions_by_fanout",
        "fanout_id",
        sqlite_where=sa.text("fanout_id IS NOT NULL"),
        postgresql_where=sa.text("fanout_id IS NOT NULL"),
    ),
    sa.Index(
        "sessions_by_foreign_head",
        "head_checkpoint_id",
        sqlite_where=sa.text("head_elsewhere = 1"),
        postgresql_where=sa.text("head_elsewhere"),
    ),
)

# What checkpoints share (schema 11), kept once (`checkpoint_rows`): the session they copied,
# the backend snapshot's ref, the namespace manifest and what it could not keep. The two
# blob ids are columns: garbage collection and delete-snapshot ask them (of the bases a
# checkpoint still uses), never the records.
CHECKPOINT_BASES = sa.Table(
    "checkpoint_bases",
    METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("context_manifest_id", sa.Text, nullable=True),
    sa.Column("backend_snapshot_id", sa.Text, nullable=True),
    sa.Column("data", sa.Text, nullable=False),
    sa.Index("checkpoint_bases_by_context_manifest", "context_manifest_id"),
    sa.Index("checkpoint_bases_by_snapshot", "backend_snapshot_id"),
)

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
    # Its own fields and how it differs from its base (schema 11, `checkpoint_rows`).
    sa.Column("data", sa.Text, nullable=False),
    # The system's own flags (schema 4), out of the user's metadata: a prune reads the
    # runtime's whole automatic checkpoints off `checkpoints_automatic`, which holds no
    # other (schema 10).
    sa.Column("automatic", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("pruned", sa.Boolean, nullable=False, server_default=sa.false()),
    # The notebook document the checkpoint holds (schema 6): kept alive like the others.
    sa.Column("document_manifest_id", sa.Text, nullable=True),
    # Whether the parent is not a checkpoint of the same runtime (schema 10): only those
    # are in the parent index, the one query on it asks for no other.
    sa.Column("parent_elsewhere", sa.Boolean, nullable=False, server_default=sa.false()),
    # What it shares with other checkpoints (schema 11), and so the blobs it keeps alive.
    sa.Column("base_id", sa.Integer, sa.ForeignKey("checkpoint_bases.id"), nullable=False),
    # Each index costs a page image in the log per checkpoint written (schema 10 dropped
    # the one by creation time, and keeps the automatic and parent ones partial; schema 11
    # put the two blob indexes on the bases, where a checkpoint that changed nothing adds
    # no entry).
    sa.Index("checkpoints_by_runtime", "runtime_id", "created_at_ms", "seq"),
    # Names and documents (schema 8): only the checkpoints that have one are indexed.
    sa.Index(
        "checkpoints_by_name",
        "name",
        "runtime_id",
        "created_at_ms",
        "seq",
        sqlite_where=sa.text("name IS NOT NULL"),
        postgresql_where=sa.text("name IS NOT NULL"),
    ),
    sa.Index("checkpoints_by_base", "base_id"),
    sa.Index(
        "checkpoints_by_parent",
        "parent_checkpoint_id",
        sqlite_where=sa.text("parent_elsewhere = 1"),
        postgresql_where=sa.text("parent_elsewhere"),
    ),
    sa.Index(
        "checkpoints_automatic",
        "runtime_id",
        "created_at_ms",
        "seq",
        sqlite_where=sa.text("automatic = 1 AND pruned = 0"),
        postgresql_where=sa.text("automatic AND NOT pruned"),
    ),
    sa.Index(
        "checkpoints_by_document",
        "document_manifest_id",
        sqlite_where=sa.text("document_manifest_id IS NOT NULL"),
        postgresql_where=sa.text("document_manifest_id IS NOT NULL"),
    ),
    # PostgreSQL also has checkpoints_by_id_bytes on (checkpoint_id COLLATE "C"): id-prefix
    # ranges compare bytes there, as SQLite does, whatever the database's locale.
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

# Resources a cleanup could not free (schema 5), for `ditto doctor`. No reference to the
# runtime: the runtime of a failed create was never stored.
LEFTOVERS = sa.Table(
    "leftovers",
    METADATA,
    sa.Column("kind", sa.Text, primary_key=True),
    sa.Column("resource_id", sa.Text, primary_key=True),
    sa.Column("runtime_id", sa.Text, nullable=True),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("created_at_ms", sa.BigInteger, nullable=False),
    sa.Index("leftovers_by_created", "created_at_ms"),
)

# Who holds a live runtime (schema 6): the server that runs it, until `expires_at_ms`
# (NULL: while the holder's process lives). No reference to the runtime: a checkout's
# child is leased before its record is written.
LEASES = sa.Table(
    "leases",
    METADATA,
    sa.Column("kind", sa.Text, primary_key=True),
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("owner_id", sa.Text, nullable=False),
    sa.Column("host", sa.Text, nullable=False),
    sa.Column("boot_id", sa.Text, nullable=False),
    sa.Column("pid", sa.BigInteger, nullable=False),
    sa.Column("pid_start", sa.BigInteger, nullable=False),
    sa.Column("url", sa.Text, nullable=True),
    sa.Column("acquired_at_ms", sa.BigInteger, nullable=False),
    sa.Column("expires_at_ms", sa.BigInteger, nullable=True),
    sa.Index("leases_by_owner", "owner_id"),
)

# How many deletion phases garbage collection has begun on each shared bucket (schema 9):
# a server's replica ledger made at an older generation may name objects gone since.
BUCKET_GENERATIONS = sa.Table(
    "bucket_generations",
    METADATA,
    sa.Column("url", sa.Text, primary_key=True),
    sa.Column("generation", sa.BigInteger, nullable=False),
)


KEY: sa.BindParameter[str] = sa.bindparam("key", type_=sa.Text)
RUNTIME_EXISTS = sa.select(SESSIONS.c.runtime_id).where(SESSIONS.c.runtime_id == KEY)
CHECKPOINT_EXISTS = sa.select(CHECKPOINTS.c.seq).where(CHECKPOINTS.c.checkpoint_id == KEY)
GET_SESSION = sa.select(SESSIONS.c.data).where(SESSIONS.c.runtime_id == KEY)
GET_HEAD = sa.select(SESSIONS.c.head_checkpoint_id).where(SESSIONS.c.runtime_id == KEY)
GET_BINDING = sa.select(BINDINGS.c.data).where(BINDINGS.c.runtime_id == KEY)
