"""Persistent checkpoint store: sessions, checkpoints, heads and backend bindings.

`SqlCheckpointStore` keeps them in SQLite by default (one file, WAL) or in PostgreSQL
(`postgresql+psycopg://` URL) through SQLAlchemy Core; `MemoryCheckpointStore` has the same
API and semantics on dicts, for unit tests. Both store models as JSON text
(`model_dump_json` / `model_validate_json`) beside the columns they are queried by.

Semantics shared by both stores:
- `transaction()` makes every call inside the block commit atomically, or not at all when
  the block raises. Nested blocks are savepoints inside the outer transaction: an inner
  block that raises undoes only its own writes; the rest commits with the outer block.
  Outside a block each call is its own transaction. Write transactions are serialized
  (SQLite `BEGIN IMMEDIATE`, a PostgreSQL advisory lock, a lock in memory), so a
  read-modify-write inside one block never loses an update, across processes too.
  Do not `await` inside a block: the write lock is held until it ends.
- References are checked when the outermost transaction commits, so writes may come in
  any order inside a block: a checkpoint, head or binding must name a runtime that is in
  the store, and a head must name a stored checkpoint; otherwise the whole transaction is
  refused with a `ValueError` naming the dangling reference.
- Returned models are fresh copies: changing one never changes the store.

SQLite runs with `synchronous=FULL`: every commit is on disk when it returns, so a
checkpoint the user was told about survives power loss, not only a process crash (with
NORMAL, WAL stays consistent but may lose the last commits). Commits are rare (one per
control operation) and the extra fsync is small beside the blob writes of a checkpoint.

Every lookup is served by an index: an id prefix is a range on the checkpoint ids, a name
an index of its own; one runtime's checkpoints are read a page at a time; the blob ids
each checkpoint names are columns (of the base it shares with checkpoints alike, on SQL:
`checkpoint_rows`), so garbage collection and delete-snapshot ask the index instead of
reading every record; a prune reads the runtime's whole automatic
checkpoints beyond the newest N off an index of their own, and a runtime's checkouts and
the runtime of a kernel are index lookups too.

A statement the database refuses raises `StoreFull` (a full disk: 507 `StorageFull`) or
`StoreError` (503 `StoreUnavailable`), never a driver error, and leaves the store as it
was. The store also records leftovers: resources a cleanup could not free, for
`ditto doctor`; and leases: which process holds a live runtime, and until when (taken in
one write transaction, so of two servers taking one lease exactly one gets it).

The store's interface is a set of role protocols (`StoreConnection`, `RuntimeRecords`,
`CheckpointRecords`, `BlobReferences`, `BackendBindings`, `StoreHealth`, `Leases`,
`BucketGenerations`); `CheckpointStore` is their union. A store of another make proves
itself against `ditto_jupyter.testing.contracts`, one spec per role.

Modules: `interface` (the role protocols and `CheckpointStore`, errors, shared checks),
`schema` (the SQL tables as they are now), `migrations` (the steps that get any database there),
`sql_database` (`SqlDatabase`: engine, connections, transactions, errors, migrating),
`sql_leases` (the leases on it), `sql` (`SqlCheckpointStore`, the records on it),
`checkpoint_rows` and `record_delta` (how it cuts a checkpoint into rows), `sql_records`
(how it reads them back), `memory`
(`MemoryCheckpointStore`), `opening` (`open_store`).
"""

from __future__ import annotations

from ditto_jupyter.control.store.interface import (
    BackendBindings,
    BlobReferences,
    BucketGenerations,
    CheckpointRecords,
    CheckpointStore,
    DamagedRecord,
    DamagedRow,
    Leases,
    PruneCandidates,
    RuntimeRecords,
    SchemaVersionError,
    StoreConnection,
    StoreError,
    StoreFull,
    StoreHealth,
    StoreUnreachable,
    collecting_damaged_rows,
)
from ditto_jupyter.control.store.memory import MemoryCheckpointStore
from ditto_jupyter.control.store.migrations import MIGRATIONS, SCHEMA_VERSION, Migration
from ditto_jupyter.control.store.opening import open_store
from ditto_jupyter.control.store.sql import SqlCheckpointStore

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "BackendBindings",
    "BlobReferences",
    "BucketGenerations",
    "CheckpointRecords",
    "CheckpointStore",
    "DamagedRecord",
    "DamagedRow",
    "Leases",
    "MemoryCheckpointStore",
    "Migration",
    "PruneCandidates",
    "RuntimeRecords",
    "SchemaVersionError",
    "SqlCheckpointStore",
    "StoreConnection",
    "StoreError",
    "StoreFull",
    "StoreHealth",
    "StoreUnreachable",
    "collecting_damaged_rows",
    "open_store",
]
