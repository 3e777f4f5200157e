"""The checkpoint store's interface, its errors, and the checks both stores share.

The interface is one small protocol per role (`StoreConnection`, `RuntimeRecords`,
`CheckpointRecords`, `BlobReferences`, `BackendBindings`, `StoreHealth`, `Leases`,
`BucketGenerations`); `CheckpointStore` is their union, what the control plane is given.

Both stores refuse a wrong argument type or an empty id before writing, keep models as JSON
text, and check references when the outermost transaction commits (`Ref`). A stored row
that no longer reads back (`DamagedRecord`) fails only the calls that ask for it by id:
listings skip it and log it, and `damaged_rows()` reports every such row (`ditto doctor`).
A caller that must not miss what a skipped row holds (garbage collection) lists inside
`collecting_damaged_rows()`, which hands it the rows its listings skipped.
"""

from __future__ import annotations

import contextvars
import logging
import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Protocol, TypeVar, runtime_checkable

import orjson
from pydantic import BaseModel, ValidationError

from ditto_jupyter.core.errors import StorageFull, StoreUnavailable
from ditto_jupyter.core.models import (
    BackendBinding,
    Lease,
    LeaseHolder,
    Leftover,
    RuntimeCheckpoint,
    SessionRecord,
)

_M = TypeVar("_M", bound=BaseModel)

BUSY_TIMEOUT_MS = 30_000
"""How long a writer waits for another process's write transaction before giving up."""


class StoreError(StoreUnavailable, RuntimeError):
    """The store cannot be opened or used (damaged file, closed store, lock timeout, a
    database that refuses a statement): 503 `StoreUnavailable` at the REST API."""


class StoreUnreachable(StoreError):
    """No connection to the store's database could be made (PostgreSQL down, or not up
    yet): 503 `StoreUnavailable`; a server starting retries (`store_connect_timeout`)."""


class StoreFull(StorageFull, StoreError):
    """The disk holding the store has no room left: 507 `StorageFull`; nothing was written."""


class SchemaVersionError(StoreError):
    """The database was written by a newer ditto-jupyter than this one."""


class DamagedRecord(StoreError):
    """A stored row that does not read back as its model (written by hand, or by a bug)."""


@dataclass(frozen=True)
class DamagedRow:
    """A row that does not read back: its table, its key, why, and its stored text."""

    table: str  # "sessions", "checkpoints" or "backend_bindings"
    key: str
    reason: str
    text: str


_log = logging.getLogger("ditto_jupyter.store")
_skipped: contextvars.ContextVar[list[DamagedRow] | None] = contextvars.ContextVar(
    "ditto_store_skipped_rows", default=None
)
_TABLES = {"runtime": "sessions", "checkpoint": "checkpoints", "binding": "backend_bindings"}


@contextmanager
def collecting_damaged_rows() -> Iterator[list[DamagedRow]]:
    """The rows that listings inside the block skip as damaged, with their stored text."""
    skipped: list[DamagedRow] = []
    token = _skipped.set(skipped)
    try:
        yield skipped
    finally:
        _skipped.reset(token)


@dataclass(frozen=True)
class PruneCandidates:
    """What a prune of one runtime's automatic checkpoints needs to know, and no more.

    `beyond`: the runtime's automatic checkpoints that are still whole, older than its newest
    `keep` ones, oldest first. `held`: the ids among them that must stay whole all the same
    (a runtime's head, a checkout's source, the parent of another runtime's checkpoint).
    `whole`: how many of the runtime's automatic checkpoints are whole, in all.
    """

    beyond: list[RuntimeCheckpoint]
    held: frozenset[str]
    whole: int


@runtime_checkable
class StoreConnection(Protocol):
    """What every store is: transactions, what the last one wrote, and its end."""

    def transaction(self) -> AbstractContextManager[None]:
        """Make every call inside the block commit atomically, or not at all if it raises."""
        ...

    def last_commit_bytes(self) -> int:
        """What the last write transaction of the caller's context added to the store's
        files in the data directory (an SQLite log's page images; 0 when none are there)."""
        ...

    def close(self) -> None:
        """Release connections; later calls raise StoreError."""
        ...


@runtime_checkable
class RuntimeRecords(Protocol):
    """The runtimes (runtime_id == session_id): one record each, and the indexed lookups of
    a runtime's checkouts, of the live runtime of a kernel and of a fan-out's children."""

    def insert_session(self, session: SessionRecord) -> None:
        """Add a new runtime; ValueError if one with that id exists."""
        ...

    def put_session(self, session: SessionRecord) -> None:
        """Insert or replace a runtime."""
        ...

    def get_session(self, runtime_id: str) -> SessionRecord | None:
        """The runtime with that id, or None."""
        ...

    def list_sessions(self) -> list[SessionRecord]:
        """Every runtime, by created_at_ms then id."""
        ...

    def checkouts_of(self, runtime_id: str) -> list[SessionRecord]:
        """The runtimes checked out from `runtime_id`'s checkpoints, by created_at_ms then id
        (an index lookup on the source runtime)."""
        ...

    def live_session_with_kernel(self, kernel_id: str) -> SessionRecord | None:
        """The live (idle or busy) runtime whose handle names that kernel id, or None (an
        index lookup; the oldest one should two ever name it)."""
        ...

    def fanout_members(self, fanout_id: str) -> list[SessionRecord]:
        """The children of one fan-out (`SessionRecord.fanout.id`), by created_at_ms then id
        (an index lookup)."""
        ...


@runtime_checkable
class CheckpointRecords(Protocol):
    """The checkpoints and the heads: kept, listed a page at a time, found by id prefix or
    name, and what a prune of automatic checkpoints may thin."""

    def put_checkpoint(self, checkpoint: RuntimeCheckpoint) -> None:
        """Insert or replace a checkpoint; ValueError when it is stored as another
        runtime's (a checkpoint belongs to the runtime that took it)."""
        ...

    def get_checkpoint(self, checkpoint_id: str) -> RuntimeCheckpoint | None:
        """The checkpoint with that id, or None."""
        ...

    def list_checkpoints(self, runtime_id: str | None = None) -> list[RuntimeCheckpoint]:
        """Checkpoints (of one runtime, or all), oldest first."""
        ...

    def find_checkpoints(
        self, prefix: str, runtime_id: str | None = None
    ) -> list[RuntimeCheckpoint]:
        """Checkpoints whose id starts with `prefix` or whose name is exactly `prefix`."""
        ...

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
        ...

    def find_by_id_prefix(
        self, prefix: str, runtime_id: str | None = None, *, limit: int | None = None
    ) -> list[RuntimeCheckpoint]:
        """Checkpoints whose id starts with `prefix` (in one runtime), in id order."""
        ...

    def newest_named(self, name: str, runtime_id: str) -> RuntimeCheckpoint | None:
        """The newest checkpoint of a runtime with exactly that name, or None."""
        ...

    def runtimes_naming(self, name: str, *, limit: int) -> list[str]:
        """Runtimes (by id, at most `limit`) that have a checkpoint with exactly that name."""
        ...

    def prune_candidates(self, runtime_id: str, keep: int) -> PruneCandidates:
        """The runtime's whole automatic checkpoints beyond its newest `keep`, which of them
        are held, and how many are whole (index reads: the cost follows `keep` and what lies
        beyond it, never the runtime's whole history)."""
        ...

    def get_head(self, runtime_id: str) -> str | None:
        """The current checkpoint id of a runtime, or None."""
        ...

    def set_head(self, runtime_id: str, checkpoint_id: str | None) -> None:
        """Make `checkpoint_id` the runtime's current checkpoint (None clears it)."""
        ...


@runtime_checkable
class BlobReferences(Protocol):
    """Which checkpoints name which blobs: what garbage collection and delete-snapshot ask
    (index lookups, never a read of every record)."""

    def checkpoints_with_snapshot(self, snapshot_id: str) -> list[RuntimeCheckpoint]:
        """Every checkpoint whose backend ref records that provider snapshot, oldest first."""
        ...

    def referenced_manifests(self, manifest_ids: Sequence[str]) -> set[str]:
        """Which of these blob ids some checkpoint names, as its context manifest, its
        backend snapshot or its notebook document."""
        ...


@runtime_checkable
class BackendBindings(Protocol):
    """Which live backend each runtime is bound to."""

    def put_binding(self, binding: BackendBinding) -> None:
        """Insert or replace the backend binding of a runtime."""
        ...

    def get_binding(self, runtime_id: str) -> BackendBinding | None:
        """The backend binding of a runtime, or None."""
        ...

    def delete_binding(self, runtime_id: str) -> None:
        """Remove a runtime's backend binding (no error when there is none)."""
        ...

    def list_bindings(self) -> list[BackendBinding]:
        """Every backend binding, by runtime id."""
        ...


@runtime_checkable
class StoreHealth(Protocol):
    """What `ditto doctor` reads: resources a cleanup left behind, and rows that no longer
    read back."""

    def record_leftover(self, leftover: Leftover) -> None:
        """Record a resource a cleanup left behind (replaces the record of the same kind
        and id)."""
        ...

    def list_leftovers(self) -> list[Leftover]:
        """Every recorded leftover, oldest first (`ditto doctor` lists them)."""
        ...

    def damaged_rows(self) -> list[DamagedRow]:
        """Every stored row that does not read back as its model (reads each row)."""
        ...


@runtime_checkable
class Leases(Protocol):
    """Which process holds a live runtime, and until when (see `lease_free_for`): each lease
    taken in one write transaction, so of two takers exactly one gets it."""

    def acquire_lease(
        self,
        kind: str,
        key: str,
        holder: LeaseHolder,
        *,
        now_ms: int,
        ttl_ms: int | None,
        take_from: str | None = None,
    ) -> Lease:
        """Take the lease of (`kind`, `key`) for `holder` until `now_ms + ttl_ms` (None: no
        expiry), in one write transaction, when `lease_free_for` says it may; the lease as
        it then stands (held by `holder` when it was taken, else by whoever holds it)."""
        ...

    def renew_leases(self, owner_id: str, *, now_ms: int, ttl_ms: int) -> int:
        """Extend every lease `owner_id` holds to `now_ms + ttl_ms` (a heartbeat); how many."""
        ...

    def release_lease(self, kind: str, key: str, owner_id: str) -> bool:
        """Drop the lease when `owner_id` holds it; whether it did."""
        ...

    def expire_leases(self, owner_id: str, *, now_ms: int) -> int:
        """Make every lease `owner_id` holds run out at `now_ms` (its holder stops: anyone may
        take them over); how many."""
        ...

    def get_lease(self, kind: str, key: str) -> Lease | None:
        """The lease of (`kind`, `key`), or None when nobody holds it."""
        ...

    def list_leases(self, kind: str, *, owner_id: str | None = None) -> list[Lease]:
        """The leases of one kind (of one owner: an index lookup), by key."""
        ...


@runtime_checkable
class BucketGenerations(Protocol):
    """The deletion phases garbage collection has begun on each shared bucket
    (`control.bucket_gc`)."""

    def bucket_generation(self, url: str) -> int:
        """How many deletion phases garbage collection has begun on the bucket `url` (0:
        none): a replica ledger made at another generation may name objects gone since."""
        ...

    def advance_bucket_generation(self, url: str) -> int:
        """Count one more deletion phase on the bucket `url`; the new generation."""
        ...


@runtime_checkable
class CheckpointStore(
    StoreConnection,
    RuntimeRecords,
    CheckpointRecords,
    BlobReferences,
    BackendBindings,
    StoreHealth,
    Leases,
    BucketGenerations,
    Protocol,
):
    """Where runtimes, checkpoints, heads and backend bindings live (runtime_id == session_id):
    every role above, as the SQL and memory stores implement them. A part that needs one
    role can ask for that role alone; `ditto_jupyter.testing.contracts` holds a spec per
    role, and `CheckpointStoreContract` all of them."""


def lease_free_for(
    current: Lease | None, owner_id: str, now_ms: int, take_from: str | None
) -> bool:
    """Whether `owner_id` may take a lease whose current state is `current`: nobody holds
    it, `owner_id` does already (a renewal), it ran out by `now_ms`, or it is held by
    `take_from`, an owner the caller found gone (its process died on this host)."""
    if current is None or current.expired(now_ms):
        return True
    return current.holder.owner_id == owner_id or (
        take_from is not None and current.holder.owner_id == take_from
    )


@dataclass(frozen=True)
class Ref:
    """A reference a write made, checked when the outermost transaction commits."""

    kind: str  # "runtime" or "checkpoint"
    key: str
    holder: str  # what holds the reference, for the error message


def require_model(value: object, model: type[BaseModel], method: str) -> None:
    """TypeError unless `value` is a `model` (the argument of `method`)."""
    if not isinstance(value, model):
        raise TypeError(f"{method} needs a {model.__name__}, got {type(value).__name__}")


def require_id(value: object, what: str) -> str:
    """`value` if it is a non-empty string, else ValueError naming `what`."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty string, got {value!r}")
    return value


def load_model(model: type[_M], text: str, what: str) -> _M:
    """A stored model read back from its JSON text (DamagedRecord naming `what` if damaged)."""
    try:
        return model.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the record"
        raise DamagedRecord(
            f"stored {what} is damaged at {where}: {first['msg']}; run `ditto doctor`"
        ) from None


def load_rows(model: type[_M], rows: Iterable[tuple[str, str]], what: str) -> list[_M]:
    """The `(key, text)` rows of `what`s read back as `model`; a damaged row is skipped,
    logged and handed to `collecting_damaged_rows`, so one bad row never takes a listing
    down (`damaged_rows()` names them all)."""
    loaded: list[_M] = []
    for key, text in rows:
        try:
            loaded.append(load_model(model, text, f"{what} {key!r}"))
        except DamagedRecord as error:
            skip_damaged(what, key, error, text)
    return loaded


def skip_damaged(what: str, key: str, error: DamagedRecord, text: str) -> None:
    """Leave a damaged row of a `what` out of a listing: logged, and handed to
    `collecting_damaged_rows` with its stored text."""
    _log.warning("ditto: skipped in a listing: %s", error)
    skipped = _skipped.get()
    if skipped is not None:
        skipped.append(DamagedRow(_TABLES[what], key, str(error), text))


def damaged_of(
    table: str, model: type[BaseModel], rows: Iterable[tuple[str, str]]
) -> list[DamagedRow]:
    """The rows of `table` that do not read back as `model`."""
    damaged: list[DamagedRow] = []
    for key, text in rows:
        try:
            model.model_validate_json(text)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "the record"
            damaged.append(DamagedRow(table, key, f"at {where}: {first['msg']}", text))
    return damaged


def kernel_id_of(session: SessionRecord) -> str | None:
    """The kernel id a session's handle names (its indexed `kernel_id`), if any."""
    kernel = session.handle_state.get("kernel_id")
    return kernel if isinstance(kernel, str) and kernel else None


def blob_ids(checkpoint: RuntimeCheckpoint) -> tuple[str | None, str | None]:
    """The context manifest and the backend snapshot a checkpoint names (its blob columns)."""
    ref = checkpoint.backend_ref
    return checkpoint.context_manifest_id, ref.provider_snapshot_id if ref is not None else None


_CONTEXT = re.compile(rb'"context_manifest_id"\s*:\s*"([^"\\]+)"')
_SNAPSHOT = re.compile(rb'"provider_snapshot_id"\s*:\s*"([^"\\]+)"')


def blob_ids_of_record(data: str) -> tuple[str | None, str | None]:
    """The context manifest and backend snapshot a stored checkpoint record names.

    A record that is not JSON any more is searched for the two fields as text: a damaged
    row keeps what it names alive rather than losing it to garbage collection.
    """
    raw = data.encode("utf-8", "surrogatepass")
    try:
        record = orjson.loads(raw)
    except orjson.JSONDecodeError:
        record = None
    if isinstance(record, dict):
        context = record.get("context_manifest_id")
        ref = record.get("backend_ref")
        snapshot = ref.get("provider_snapshot_id") if isinstance(ref, dict) else None
        return (
            context if isinstance(context, str) else None,
            snapshot if isinstance(snapshot, str) else None,
        )
    context_match, snapshot_match = _CONTEXT.search(raw), _SNAPSHOT.search(raw)
    return (
        context_match.group(1).decode() if context_match else None,
        snapshot_match.group(1).decode() if snapshot_match else None,
    )


_DOCUMENT = re.compile(rb'"document"\s*:\s*\{[^{}]*"manifest_id"\s*:\s*"([^"\\]+)"')


def document_id_of_record(data: str) -> str | None:
    """The notebook-document manifest a stored checkpoint record names (a damaged record
    is searched as text, as `blob_ids_of_record` does)."""
    raw = data.encode("utf-8", "surrogatepass")
    try:
        record = orjson.loads(raw)
    except orjson.JSONDecodeError:
        match = _DOCUMENT.search(raw)
        return match.group(1).decode() if match else None
    document = record.get("document") if isinstance(record, dict) else None
    found = document.get("manifest_id") if isinstance(document, dict) else None
    return found if isinstance(found, str) else None


def prefix_end(prefix: str) -> str | None:
    """The least string above every string that starts with `prefix` (None: no such string).

    `id >= prefix AND id < prefix_end(prefix)` is an index range holding exactly the ids
    that start with `prefix`, in code-point order (SQLite's, and PostgreSQL's "C").
    """
    for cut in range(len(prefix) - 1, -1, -1):
        point = ord(prefix[cut]) + 1
        if 0xD800 <= point <= 0xDFFF:  # surrogates are not text: skip past them
            point = 0xE000
        if point <= 0x10FFFF:
            return prefix[:cut] + chr(point)
    return None


def refs_of_checkpoint(checkpoint: RuntimeCheckpoint) -> list[Ref]:
    """What a stored checkpoint refers to: its runtime."""
    return [
        Ref(
            "runtime",
            checkpoint.runtime_id,
            f"checkpoint {checkpoint.checkpoint_id!r} names runtime {checkpoint.runtime_id!r}",
        )
    ]


def moved_checkpoint(checkpoint: RuntimeCheckpoint, stored_runtime_id: str) -> ValueError:
    """The error that refuses to move a stored checkpoint to another runtime: a checkpoint
    belongs to the runtime that took it (what a prune may thin is decided from that)."""
    return ValueError(
        f"checkpoint {checkpoint.checkpoint_id!r} belongs to runtime {stored_runtime_id!r}; "
        f"it cannot be stored as runtime {checkpoint.runtime_id!r}'s"
    )


def refs_of_head(runtime_id: str, checkpoint_id: str) -> list[Ref]:
    """What a head refers to: its runtime and its checkpoint."""
    return [
        Ref("runtime", runtime_id, f"the head of runtime {runtime_id!r}"),
        Ref(
            "checkpoint",
            checkpoint_id,
            f"the head of runtime {runtime_id!r} names checkpoint {checkpoint_id!r}",
        ),
    ]


def refs_of_binding(binding: BackendBinding) -> list[Ref]:
    """What a backend binding refers to: its runtime."""
    return [Ref("runtime", binding.runtime_id, f"a backend binding names {binding.runtime_id!r}")]


def dangling(ref: Ref) -> ValueError:
    """The error that refuses a transaction leaving `ref` pointing at nothing."""
    if ref.holder.startswith("the head of") and ref.kind == "runtime":
        return ValueError(f"{ref.holder} cannot be set: runtime {ref.key!r} is not in the store")
    return ValueError(f"{ref.holder}, which is not in the store")
