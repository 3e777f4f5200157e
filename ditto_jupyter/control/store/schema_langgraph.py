"""The SQL tables of LangGraph's checkpoints as they are now (schema 12,
`migration_langgraph` creates them): what `sql_langgraph` queries are written against.
Never created from here."""

from __future__ import annotations

import sqlalchemy as sa

LANGGRAPH_METADATA = sa.MetaData()

THREADS = sa.Table(
    "langgraph_threads",
    LANGGRAPH_METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("runtime_id", sa.Text, nullable=False),
    sa.Column("thread_id", sa.Text, nullable=False),
    sa.Column("created_at_ms", sa.BigInteger, nullable=False),
    sa.UniqueConstraint("runtime_id", "thread_id"),
)

CHECKPOINTS = sa.Table(
    "langgraph_checkpoints",
    LANGGRAPH_METADATA,
    sa.Column("thread", sa.Integer, primary_key=True),
    sa.Column("checkpoint_ns", sa.Text, primary_key=True),
    sa.Column("checkpoint_id", sa.Text, primary_key=True),
    sa.Column("parent_checkpoint_id", sa.Text, nullable=True),
    sa.Column("run_id", sa.Text, nullable=True),
    sa.Column("created_at_ms", sa.BigInteger, nullable=False),
    sa.Column("type", sa.Text, nullable=False),
    sa.Column("data", sa.LargeBinary, nullable=True),
    sa.Column("manifest_id", sa.Text, nullable=True),
    sa.Column("versions", sa.Text, nullable=False),
    sa.Column("metadata", sa.Text, nullable=False),
)

BLOBS = sa.Table(
    "langgraph_blobs",
    LANGGRAPH_METADATA,
    sa.Column("thread", sa.Integer, primary_key=True),
    sa.Column("checkpoint_ns", sa.Text, primary_key=True),
    sa.Column("channel", sa.Text, primary_key=True),
    sa.Column("version", sa.Text, primary_key=True),
    sa.Column("type", sa.Text, nullable=False),
    sa.Column("data", sa.LargeBinary, nullable=True),
    sa.Column("manifest_id", sa.Text, nullable=True),
)

WRITES = sa.Table(
    "langgraph_writes",
    LANGGRAPH_METADATA,
    sa.Column("thread", sa.Integer, primary_key=True),
    sa.Column("checkpoint_ns", sa.Text, primary_key=True),
    sa.Column("checkpoint_id", sa.Text, primary_key=True),
    sa.Column("task_id", sa.Text, primary_key=True),
    sa.Column("idx", sa.Integer, primary_key=True),
    sa.Column("task_path", sa.Text, nullable=False),
    sa.Column("channel", sa.Text, nullable=False),
    sa.Column("type", sa.Text, nullable=False),
    sa.Column("data", sa.LargeBinary, nullable=True),
    sa.Column("manifest_id", sa.Text, nullable=True),
    sa.Column("created_at_ms", sa.BigInteger, nullable=False),
)
