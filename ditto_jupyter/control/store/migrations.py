"""The checkpoint store's schema migrations: numbered steps, applied once and in order.

Each step is frozen: it says what that version changed, in DDL of its own, and never reads
the current table definitions (`schema`), so a database at any version migrates the same
way as one created today. Step 1 creates the tables of the first release; step 2 adds what
issue 15 needs (blob columns, name and blob indexes, byte-ordered id ranges on PostgreSQL);
step 3 indexes a session's checkout origin and kernel, heads by checkpoint and checkpoints
by parent; step 4 moves the system's `autocheckpoint` and `pruned` flags out of the users'
metadata into columns and fields of their own; step 5 adds the table of leftovers; step 6
the table of leases, where every runtime live at the time gets a lease that has already run
out (no server of this version runs it yet), so the first server to look may take it over.
Step 7 adds the column of a checkpoint's notebook document (no checkpoint held one before).
Step 8 keeps in the name and document indexes only the checkpoints that have one (every
query on them asks for a value), so an unnamed checkpoint without a document writes
neither index.
Step 9 adds the table of bucket generations: how many times a collector has deleted from
each shared bucket (a replica ledger older than that forgets what it knew was there).
Step 10 narrows what a checkpoint writes (issue 25 section 2: a page image per index in the
log): the index by creation time goes (only the full listing ordered by it, and that reads
every row anyway), the automatic index keeps only whole automatic checkpoints, and the
parent index only checkpoints whose parent is another runtime's (the one query on it asks
for those), marked by a new column, `parent_elsewhere`.
Step 11 keeps once what checkpoints share (issue 25 section 2: a record of ~1.6 KB took
an overflow page and a leaf of its own): a table of checkpoint bases (the session, backend
ref, namespace manifest and what it could not keep, with the two blob ids and their
indexes), and in each checkpoint row its own fields and its delta from its base, never what
its columns hold. A checkpoint shares its parent's base when it names the same blobs and
differs by a short delta. A record that does not read back as its columns say is kept whole
(its own JSON wins over the rest when read). The heads move into the runtimes' rows, only
those naming another runtime's checkpoint indexed. SQLite, which had no DROP COLUMN before
3.35, gets the checkpoints table made anew; PostgreSQL alters it in place.
Step 11 is `migration_shared_bases`; step 12 adds the tables of LangGraph's checkpoints
(`migration_langgraph`).
Step 13 adds the column of the fan-out a checkout child was made by (issue 44 §3), indexed
where set; no record held a fan-out before, so there is nothing to backfill.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ditto_jupyter.control.store.interface import blob_ids_of_record
from ditto_jupyter.control.store.migration_langgraph import create_langgraph_tables_v12
from ditto_jupyter.control.store.migration_records import BACKFILL_BATCH, json_object
from ditto_jupyter.control.store.migration_shared_bases import share_bases_v11


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
    while rows := conn.execute(select, {"after": after, "batch": BACKFILL_BATCH}).all():
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


# ---- step 3: checkout origins, kernels, heads and parents indexed ---------------------------


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _index_lineage_and_kernels_v3(conn: Connection) -> None:
    for column in ("source_runtime_id", "source_checkpoint_id", "kernel_id"):
        conn.exec_driver_sql(f"ALTER TABLE sessions ADD COLUMN {column} TEXT")
    select = sa.text(
        "SELECT runtime_id, data FROM sessions WHERE runtime_id > :after "
        "ORDER BY runtime_id LIMIT :batch"
    )
    update = sa.text(
        "UPDATE sessions SET source_runtime_id = :runtime, source_checkpoint_id = :checkpoint, "
        "kernel_id = :kernel WHERE runtime_id = :key"
    )
    after = ""
    while rows := conn.execute(select, {"after": after, "batch": BACKFILL_BATCH}).all():
        updates = []
        for key, data in rows:
            record = json_object(data) or {}
            handle = record.get("handle_state")
            kernel = handle.get("kernel_id") if isinstance(handle, dict) else None
            updates.append(
                {
                    "key": key,
                    "runtime": _text(record.get("source_runtime_id")),
                    "checkpoint": _text(record.get("source_checkpoint_id")),
                    "kernel": _text(kernel),
                }
            )
        conn.execute(update, updates)
        after = rows[-1][0]
    conn.exec_driver_sql(
        "CREATE INDEX sessions_by_source_runtime ON sessions "
        "(source_runtime_id, created_at_ms, runtime_id)"
    )
    conn.exec_driver_sql(
        "CREATE INDEX sessions_by_source_checkpoint ON sessions (source_checkpoint_id)"
    )
    conn.exec_driver_sql("CREATE INDEX sessions_by_kernel ON sessions (kernel_id)")
    conn.exec_driver_sql("CREATE INDEX heads_by_checkpoint ON heads (checkpoint_id)")
    conn.exec_driver_sql("CREATE INDEX checkpoints_by_parent ON checkpoints (parent_checkpoint_id)")


# ---- step 4: the system's flags out of the users' metadata ---------------------------------

#: What the first releases kept in a checkpoint's metadata (frozen copies of those names).
_AUTOCHECKPOINT_KEY_V3 = "autocheckpoint"
_PRUNED_KEY_V3 = "pruned"
_CELL_NAME_PREFIX_V3 = "cell-"
_MAX_CELL_SOURCE_V4 = 64 * 1024


def system_flags_out_of_metadata(record: dict[str, Any]) -> dict[str, Any] | None:
    """The checkpoint record with `%autocheckpoint`'s flags moved out of its metadata, or
    None when it holds none of the system's.

    Only what `%autocheckpoint` itself wrote moves: a checkpoint named `cell-<n>` whose
    `autocheckpoint` value is exactly the cell record (`execution_count` n, `source`,
    `failed`). It is `pruned` when its metadata says so and a prune dropped its variables
    (no namespace manifest left). Anything else stays in the metadata as the user's own.
    """
    metadata = record.get("metadata")
    auto = metadata.get(_AUTOCHECKPOINT_KEY_V3) if isinstance(metadata, dict) else None
    if not isinstance(metadata, dict) or not isinstance(auto, dict):
        return None
    count, source, failed = auto.get("execution_count"), auto.get("source"), auto.get("failed")
    if (
        set(auto) != {"execution_count", "source", "failed"}
        or isinstance(count, bool)
        or not isinstance(count, int)
        or count < 0
        or not isinstance(source, str)
        or not isinstance(failed, bool)
        or record.get("name") != f"{_CELL_NAME_PREFIX_V3}{count}"
    ):
        return None
    kept = {k: v for k, v in metadata.items() if k != _AUTOCHECKPOINT_KEY_V3}
    pruned = kept.get(_PRUNED_KEY_V3) is True and record.get("context_manifest_id") is None
    if pruned:
        del kept[_PRUNED_KEY_V3]
    cell = {"execution_count": count, "source": source[:_MAX_CELL_SOURCE_V4], "failed": failed}
    return {**record, "metadata": kept, "automatic": cell, "pruned": pruned}


def _move_system_flags_v4(conn: Connection) -> None:
    for column in ("automatic", "pruned"):
        conn.exec_driver_sql(
            f"ALTER TABLE checkpoints ADD COLUMN {column} BOOLEAN NOT NULL DEFAULT FALSE"
        )
    select = sa.text(
        "SELECT seq, data FROM checkpoints WHERE seq > :after ORDER BY seq LIMIT :batch"
    )
    update = sa.text(
        "UPDATE checkpoints SET data = :data, automatic = :automatic, pruned = :pruned "
        "WHERE seq = :seq"
    ).bindparams(
        sa.bindparam("automatic", type_=sa.Boolean), sa.bindparam("pruned", type_=sa.Boolean)
    )
    after = 0
    while rows := conn.execute(select, {"after": after, "batch": BACKFILL_BATCH}).all():
        updates = []
        for seq, data in rows:
            record = json_object(data)
            moved = system_flags_out_of_metadata(record) if record is not None else None
            if moved is None:
                continue
            try:
                text = orjson.dumps(moved).decode()
            except TypeError:  # not JSON orjson writes back (a lone surrogate): left as it is
                continue
            updates.append({"seq": seq, "data": text, "automatic": True, "pruned": moved["pruned"]})
        if updates:
            conn.execute(update, updates)
        after = rows[-1][0]
    conn.exec_driver_sql(
        "CREATE INDEX checkpoints_automatic ON checkpoints "
        "(runtime_id, automatic, pruned, created_at_ms, seq)"
    )


# ---- step 5: leftovers ----------------------------------------------------------------------


def _create_leftovers_v5(conn: Connection) -> None:
    conn.exec_driver_sql(
        "CREATE TABLE leftovers (kind TEXT NOT NULL, resource_id TEXT NOT NULL, "
        "runtime_id TEXT, reason TEXT NOT NULL, created_at_ms BIGINT NOT NULL, "
        "PRIMARY KEY (kind, resource_id))"
    )
    conn.exec_driver_sql("CREATE INDEX leftovers_by_created ON leftovers (created_at_ms)")


# ---- step 6: leases -------------------------------------------------------------------------

#: The holder of the leases step 6 gives the runtimes live before leases existed.
_BEFORE_LEASES_OWNER_V6 = "before-leases"


def _create_leases_v6(conn: Connection) -> None:
    conn.exec_driver_sql(
        "CREATE TABLE leases (kind TEXT NOT NULL, key TEXT NOT NULL, owner_id TEXT NOT NULL, "
        "host TEXT NOT NULL, boot_id TEXT NOT NULL, pid BIGINT NOT NULL, "
        "pid_start BIGINT NOT NULL, url TEXT, acquired_at_ms BIGINT NOT NULL, "
        "expires_at_ms BIGINT, PRIMARY KEY (kind, key))"
    )
    conn.exec_driver_sql("CREATE INDEX leases_by_owner ON leases (owner_id)")
    conn.execute(
        sa.text(
            "INSERT INTO leases (kind, key, owner_id, host, boot_id, pid, pid_start, url, "
            "acquired_at_ms, expires_at_ms) SELECT 'runtime', runtime_id, :owner, '', '', 0, 0, "
            "NULL, 0, 0 FROM sessions WHERE status IN ('idle', 'busy')"
        ),
        {"owner": _BEFORE_LEASES_OWNER_V6},
    )


# ---- step 7: a checkpoint's notebook document ----------------------------------------------


def _add_document_column_v7(conn: Connection) -> None:
    conn.exec_driver_sql("ALTER TABLE checkpoints ADD COLUMN document_manifest_id TEXT")
    conn.exec_driver_sql(
        "CREATE INDEX checkpoints_by_document ON checkpoints (document_manifest_id)"
    )


# ---- step 8: names and documents indexed where there is one ---------------------------------


def _partial_name_and_document_indexes_v8(conn: Connection) -> None:
    conn.exec_driver_sql("DROP INDEX checkpoints_by_name")
    conn.exec_driver_sql(
        "CREATE INDEX checkpoints_by_name ON checkpoints (name, runtime_id, created_at_ms, seq) "
        "WHERE name IS NOT NULL"
    )
    conn.exec_driver_sql("DROP INDEX checkpoints_by_document")
    conn.exec_driver_sql(
        "CREATE INDEX checkpoints_by_document ON checkpoints (document_manifest_id) "
        "WHERE document_manifest_id IS NOT NULL"
    )


# ---- step 9: bucket generations ------------------------------------------------------------


def _create_bucket_generations_v9(conn: Connection) -> None:
    conn.exec_driver_sql(
        "CREATE TABLE bucket_generations (url TEXT PRIMARY KEY, generation BIGINT NOT NULL)"
    )


# ---- step 10: fewer index pages per checkpoint ------------------------------------------------


def _narrow_checkpoint_indexes_v10(conn: Connection) -> None:
    conn.exec_driver_sql(
        "ALTER TABLE checkpoints ADD COLUMN parent_elsewhere BOOLEAN NOT NULL DEFAULT FALSE"
    )
    # A parent that is not a checkpoint of the same runtime (another's, or gone) counts as
    # elsewhere: the index then holds every checkpoint the query could be asking about.
    conn.exec_driver_sql(
        "UPDATE checkpoints SET parent_elsewhere = TRUE WHERE parent_checkpoint_id IS NOT NULL "
        "AND NOT EXISTS (SELECT 1 FROM checkpoints AS parent "
        "WHERE parent.checkpoint_id = checkpoints.parent_checkpoint_id "
        "AND parent.runtime_id = checkpoints.runtime_id)"
    )
    # The predicates are written as each dialect renders the queries' own terms, which is
    # what lets the planner use a partial index (SQLite matches the terms as written).
    sqlite = conn.dialect.name == "sqlite"
    elsewhere = "parent_elsewhere = 1" if sqlite else "parent_elsewhere"
    whole = "automatic = 1 AND pruned = 0" if sqlite else "automatic AND NOT pruned"
    conn.exec_driver_sql("DROP INDEX checkpoints_by_created")
    conn.exec_driver_sql("DROP INDEX checkpoints_by_parent")
    conn.exec_driver_sql(
        f"CREATE INDEX checkpoints_by_parent ON checkpoints (parent_checkpoint_id) "
        f"WHERE {elsewhere}"
    )
    conn.exec_driver_sql("DROP INDEX checkpoints_automatic")
    conn.exec_driver_sql(
        "CREATE INDEX checkpoints_automatic ON checkpoints (runtime_id, created_at_ms, seq) "
        f"WHERE {whole}"
    )


# ---- step 13: the fan-out of a checkout child ------------------------------------------------


def _add_fanout_column_v13(conn: Connection) -> None:
    conn.exec_driver_sql("ALTER TABLE sessions ADD COLUMN fanout_id TEXT")
    conn.exec_driver_sql(
        "CREATE INDEX sessions_by_fanout ON sessions (fanout_id) WHERE fanout_id IS NOT NULL"
    )


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "sessions, checkpoints, heads and backend bindings", _create_v1),
    Migration(
        2, "blob columns; indexes for names, blobs and id prefixes", _index_blobs_and_names_v2
    ),
    Migration(
        3,
        "checkout origins and kernels of sessions; heads and parents indexed",
        _index_lineage_and_kernels_v3,
    ),
    Migration(4, "automatic and pruned flags out of user metadata", _move_system_flags_v4),
    Migration(5, "leftovers: resources a cleanup could not free", _create_leftovers_v5),
    Migration(6, "leases: which server holds a live runtime", _create_leases_v6),
    Migration(7, "the notebook document of a checkpoint", _add_document_column_v7),
    Migration(
        8,
        "name and document indexes only where a checkpoint has one",
        _partial_name_and_document_indexes_v8,
    ),
    Migration(9, "bucket generations: deletions from a bucket", _create_bucket_generations_v9),
    Migration(
        10,
        "fewer index pages per checkpoint: no creation-time index, partial automatic and "
        "parent indexes",
        _narrow_checkpoint_indexes_v10,
    ),
    Migration(
        11,
        "what checkpoints share kept once (checkpoint bases); heads in the runtimes' rows",
        share_bases_v11,
    ),
    Migration(
        12,
        "LangGraph's checkpoints: threads of a runtime, checkpoints, channel values, writes",
        create_langgraph_tables_v12,
    ),
    Migration(13, "the fan-out a checkout child was made by", _add_fanout_column_v13),
)
SCHEMA_VERSION = MIGRATIONS[-1].version


def check_migrations(migrations: Sequence[Migration]) -> None:
    """ValueError unless the migrations are numbered 1, 2, ... in order."""
    versions = [m.version for m in migrations]
    if not versions or versions != list(range(1, len(versions) + 1)):
        raise ValueError(f"migrations must be numbered 1, 2, ... in order, got {versions}")
