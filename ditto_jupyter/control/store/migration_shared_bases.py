"""Schema step 11: what checkpoints share kept once; heads in the runtimes' rows.

A frozen step, as every step in `migrations` (issue 25 section 2: a record of ~1.6 KB took
an overflow page and a leaf of its own). It adds a table of checkpoint bases (the session,
backend ref, namespace manifest and what it could not keep, with the two blob ids and their
indexes), and keeps in each checkpoint row its own fields and its delta from its base. A
checkpoint shares its parent's base when it names the same blobs and differs by a short
delta; a record that does not read back as its columns say is kept whole. The heads move
into the runtimes' rows. SQLite, which had no DROP COLUMN before 3.35, gets the checkpoints
table made anew; PostgreSQL alters it in place.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import pydantic_core
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ditto_jupyter.control.store.interface import blob_ids_of_record
from ditto_jupyter.control.store.migration_records import BACKFILL_BATCH, json_object
from ditto_jupyter.control.store.record_delta import delta, same_json

#: How schema 11 cuts a checkpoint record (frozen copies of `checkpoint_rows`' lists).
_COLUMN_FIELDS_V11 = (
    "checkpoint_id",
    "runtime_id",
    "parent_checkpoint_id",
    "name",
    "created_at_ms",
    "pruned",
)
_SHARED_FIELDS_V11 = ("session", "backend_ref", "context_manifest_id", "unrestorable")
_OWN_DEFAULTS_V11: dict[str, Any] = {
    "bytes_written": 0,
    "metadata": {},
    "automatic": None,
    "replication": None,
    "document": None,
}
#: What a record without these keys read back as (their defaults).
_MISSING_MEANS_V11: dict[str, Any] = {
    "name": None,
    "pruned": False,
    "backend_ref": None,
    "context_manifest_id": None,
    "unrestorable": [],
}
_DELTA_KEY_V11 = "delta"
_MAX_DELTA_V11 = 512
#: Recent bases (and the bases of recent checkpoints) a migrated checkpoint may share.
_RECENT_V11 = 4096


def _cut_record_v11(
    columns: dict[str, Any], data: str, blobs: tuple[str | None, str | None]
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """A schema 10 record as its shared part and its own fields off their defaults; None
    when it is not a record that reads back as its columns say (it is kept whole)."""
    record = _record_v11(data)
    known = {*_COLUMN_FIELDS_V11, *_SHARED_FIELDS_V11, *_OWN_DEFAULTS_V11}
    if record is None or not set(record) <= known:
        return None
    record = {**_MISSING_MEANS_V11, **record}  # what a record read without them holds
    if not all(
        name in record and same_json(record[name], columns[name]) for name in _COLUMN_FIELDS_V11
    ) or not all(name in record for name in _SHARED_FIELDS_V11):
        return None
    ref = record["backend_ref"]
    named = (
        record["context_manifest_id"],
        ref.get("provider_snapshot_id") if isinstance(ref, dict) else None,
    )
    if named != blobs:
        return None
    shared = {name: record[name] for name in _SHARED_FIELDS_V11}
    own = {
        name: value
        for name, value in record.items()
        if name in _OWN_DEFAULTS_V11 and not same_json(value, _OWN_DEFAULTS_V11[name])
    }
    return shared, own


class _BasesV11:
    """The bases of the checkpoints migrated so far: a checkpoint shares its parent's when
    it names the same blobs and differs from it by a short delta (as `put_checkpoint`
    decides), remembered for the recent ones; new bases get ids counted up from 1."""

    def __init__(self) -> None:
        self.next_id = 1
        self.new: list[dict[str, Any]] = []
        self._of_checkpoint: OrderedDict[str, int] = OrderedDict()
        self._bases: OrderedDict[int, tuple[tuple[str | None, str | None], dict[str, Any]]]
        self._bases = OrderedDict()

    def choose(
        self,
        checkpoint_id: str,
        parent: str | None,
        blobs: tuple[str | None, str | None],
        shared: dict[str, Any] | None,
    ) -> tuple[int, dict[str, Any]]:
        """The base of one checkpoint (`shared` None: a record kept whole, with a base of
        its own holding only its blob ids) and its delta against it."""
        found = self._of_checkpoint.get(parent) if parent is not None else None
        base = self._bases.get(found) if found is not None else None
        if shared is not None and found is not None and base is not None and base[0] == blobs:
            changes = delta(base[1], shared)
            if changes is not None and len(_text_v11(changes)) <= _MAX_DELTA_V11:
                self._remember(checkpoint_id, found, None)
                return found, changes
        base_id = self.next_id
        self.next_id += 1
        kept = shared if shared is not None else {}
        self.new.append(
            {
                "id": base_id,
                "context": blobs[0],
                "snapshot": blobs[1],
                "data": _text_v11(kept),
            }
        )
        self._remember(checkpoint_id, base_id, (blobs, kept) if shared is not None else None)
        return base_id, {}

    def _remember(
        self,
        checkpoint_id: str,
        base_id: int,
        base: tuple[tuple[str | None, str | None], dict[str, Any]] | None,
    ) -> None:
        self._of_checkpoint[checkpoint_id] = base_id
        if len(self._of_checkpoint) > _RECENT_V11:
            self._of_checkpoint.popitem(last=False)
        if base is not None:
            self._bases[base_id] = base
            if len(self._bases) > _RECENT_V11:
                self._bases.popitem(last=False)
        elif base_id in self._bases:
            self._bases.move_to_end(base_id)


def _text_v11(value: object) -> str:
    """JSON as pydantic writes records (an integer of any size included)."""
    return pydantic_core.to_json(value).decode()


def _record_v11(data: str) -> dict[str, Any] | None:
    """A stored record as a dict, exactly (orjson reads an integer past 64 bits as a
    float), or None when it is not a JSON object that can be written back."""
    try:
        record = pydantic_core.from_json(data)
        _text_v11(record)
    except (ValueError, pydantic_core.PydanticSerializationError):
        return None
    return record if isinstance(record, dict) else None


def _own_text_v11(own: dict[str, Any], changes: dict[str, Any]) -> str:
    return _text_v11({**own, _DELTA_KEY_V11: changes} if changes else own)


def share_bases_v11(conn: Connection) -> None:
    sqlite = conn.dialect.name == "sqlite"
    heads = conn.execute(sa.text("SELECT runtime_id, checkpoint_id FROM heads")).all()
    conn.exec_driver_sql("DROP TABLE heads")
    conn.exec_driver_sql(
        "CREATE TABLE checkpoint_bases ("
        + ("id INTEGER PRIMARY KEY" if sqlite else "id BIGSERIAL PRIMARY KEY")
        + ", context_manifest_id TEXT, backend_snapshot_id TEXT, data TEXT NOT NULL)"
    )
    if sqlite:  # no DROP COLUMN before SQLite 3.35: the table is made anew, rows copied
        conn.exec_driver_sql(
            "CREATE TABLE checkpoints_v11 (seq INTEGER NOT NULL, checkpoint_id TEXT NOT NULL, "
            "runtime_id TEXT NOT NULL, parent_checkpoint_id TEXT, name TEXT, "
            "created_at_ms BIGINT NOT NULL, data TEXT NOT NULL, "
            "automatic BOOLEAN NOT NULL DEFAULT FALSE, pruned BOOLEAN NOT NULL DEFAULT FALSE, "
            "document_manifest_id TEXT, parent_elsewhere BOOLEAN NOT NULL DEFAULT FALSE, "
            "base_id INTEGER NOT NULL, PRIMARY KEY (seq), UNIQUE (checkpoint_id), "
            "FOREIGN KEY (runtime_id) REFERENCES sessions (runtime_id) "
            "DEFERRABLE INITIALLY DEFERRED, "
            "FOREIGN KEY (base_id) REFERENCES checkpoint_bases (id))"
        )
        write = sa.text(
            "INSERT INTO checkpoints_v11 (seq, checkpoint_id, runtime_id, parent_checkpoint_id, "
            "name, created_at_ms, data, automatic, pruned, document_manifest_id, "
            "parent_elsewhere, base_id) VALUES (:seq, :checkpoint_id, :runtime_id, "
            ":parent_checkpoint_id, :name, :created_at_ms, :data, :automatic, :pruned, "
            ":document_manifest_id, :parent_elsewhere, :base_id)"
        ).bindparams(
            *(
                sa.bindparam(flag, type_=sa.Boolean)
                for flag in ("automatic", "pruned", "parent_elsewhere")
            )
        )
    else:
        conn.exec_driver_sql("ALTER TABLE checkpoints ADD COLUMN base_id BIGINT")
        write = sa.text("UPDATE checkpoints SET data = :data, base_id = :base_id WHERE seq = :seq")
    select = sa.text(
        "SELECT seq, checkpoint_id, runtime_id, parent_checkpoint_id, name, created_at_ms, "
        "data, automatic, pruned, document_manifest_id, parent_elsewhere, "
        "context_manifest_id, backend_snapshot_id FROM checkpoints WHERE seq > :after "
        "ORDER BY seq LIMIT :batch"
    ).columns(**{flag: sa.Boolean for flag in ("automatic", "pruned", "parent_elsewhere")})
    add_bases = sa.text(
        "INSERT INTO checkpoint_bases (id, context_manifest_id, backend_snapshot_id, data) "
        "VALUES (:id, :context, :snapshot, :data)"
    )
    bases = _BasesV11()
    after = 0
    while rows := conn.execute(select, {"after": after, "batch": BACKFILL_BATCH}).all():
        writes = []
        for row in rows:
            found = row._asdict()
            blobs = (found.pop("context_manifest_id"), found.pop("backend_snapshot_id"))
            if json_object(found["data"]) is not None:  # what the record says it holds
                blobs = blob_ids_of_record(found["data"])
            cut = _cut_record_v11(found, found["data"], blobs)
            base_id, changes = bases.choose(
                found["checkpoint_id"],
                found["parent_checkpoint_id"],
                blobs,
                cut[0] if cut is not None else None,
            )
            data = _own_text_v11(cut[1], changes) if cut is not None else found["data"]
            writes.append({**found, "data": data, "base_id": base_id})
        if bases.new:
            conn.execute(add_bases, bases.new)
            bases.new = []
        conn.execute(write, writes)
        after = rows[-1][0]
    if sqlite:
        conn.exec_driver_sql("DROP TABLE checkpoints")
        conn.exec_driver_sql("ALTER TABLE checkpoints_v11 RENAME TO checkpoints")
        for statement in (
            "CREATE INDEX checkpoints_by_runtime ON checkpoints (runtime_id, created_at_ms, seq)",
            "CREATE INDEX checkpoints_by_name ON checkpoints (name, runtime_id, created_at_ms, "
            "seq) WHERE name IS NOT NULL",
            "CREATE INDEX checkpoints_by_parent ON checkpoints (parent_checkpoint_id) "
            "WHERE parent_elsewhere = 1",
            "CREATE INDEX checkpoints_automatic ON checkpoints (runtime_id, created_at_ms, seq) "
            "WHERE automatic = 1 AND pruned = 0",
            "CREATE INDEX checkpoints_by_document ON checkpoints (document_manifest_id) "
            "WHERE document_manifest_id IS NOT NULL",
        ):
            conn.exec_driver_sql(statement)
    else:
        # The rows' deferred reference checks run now: PostgreSQL alters no table that
        # has them pending.
        conn.exec_driver_sql("SET CONSTRAINTS ALL IMMEDIATE")
        conn.exec_driver_sql(
            "SELECT setval(pg_get_serial_sequence('checkpoint_bases', 'id'), "
            "(SELECT coalesce(max(id), 0) + 1 FROM checkpoint_bases), false)"
        )
        conn.exec_driver_sql("ALTER TABLE checkpoints ALTER COLUMN base_id SET NOT NULL")
        conn.exec_driver_sql(
            "ALTER TABLE checkpoints ADD FOREIGN KEY (base_id) REFERENCES checkpoint_bases (id)"
        )
        conn.exec_driver_sql(
            "ALTER TABLE checkpoints DROP COLUMN context_manifest_id, "
            "DROP COLUMN backend_snapshot_id"
        )
    conn.exec_driver_sql("CREATE INDEX checkpoints_by_base ON checkpoints (base_id)")
    conn.exec_driver_sql(
        "CREATE INDEX checkpoint_bases_by_context_manifest ON checkpoint_bases "
        "(context_manifest_id)"
    )
    conn.exec_driver_sql(
        "CREATE INDEX checkpoint_bases_by_snapshot ON checkpoint_bases (backend_snapshot_id)"
    )
    # The heads, into the runtimes' rows (added once the table they refer to is in place).
    conn.exec_driver_sql(
        "ALTER TABLE sessions ADD COLUMN head_checkpoint_id TEXT "
        "REFERENCES checkpoints (checkpoint_id) DEFERRABLE INITIALLY DEFERRED"
    )
    conn.exec_driver_sql(
        "ALTER TABLE sessions ADD COLUMN head_elsewhere BOOLEAN NOT NULL DEFAULT FALSE"
    )
    if heads:
        conn.execute(
            sa.text("UPDATE sessions SET head_checkpoint_id = :head WHERE runtime_id = :runtime"),
            [{"runtime": runtime, "head": head} for runtime, head in heads],
        )
    conn.exec_driver_sql(
        "UPDATE sessions SET head_elsewhere = TRUE WHERE head_checkpoint_id IS NOT NULL "
        "AND NOT EXISTS (SELECT 1 FROM checkpoints WHERE checkpoints.checkpoint_id = "
        "sessions.head_checkpoint_id AND checkpoints.runtime_id = sessions.runtime_id)"
    )
    elsewhere = "head_elsewhere = 1" if sqlite else "head_elsewhere"
    conn.exec_driver_sql(
        f"CREATE INDEX sessions_by_foreign_head ON sessions (head_checkpoint_id) WHERE {elsewhere}"
    )
