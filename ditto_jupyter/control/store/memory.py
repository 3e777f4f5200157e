"""The checkpoint store on dicts: same API and semantics as the SQL store, nothing kept."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ditto_jupyter.control.store.interface import (
    BUSY_TIMEOUT_MS,
    DamagedRow,
    PruneCandidates,
    Ref,
    StoreError,
    blob_ids_of_record,
    damaged_of,
    dangling,
    document_id_of_record,
    kernel_id_of,
    lease_free_for,
    load_model,
    load_rows,
    moved_checkpoint,
    refs_of_binding,
    refs_of_checkpoint,
    refs_of_head,
    require_id,
    require_model,
)
from ditto_jupyter.core.models import (
    BackendBinding,
    Lease,
    LeaseHolder,
    Leftover,
    RuntimeCheckpoint,
    SessionLifecycleStatus,
    SessionRecord,
)

_LIVE = (SessionLifecycleStatus.IDLE.value, SessionLifecycleStatus.BUSY.value)


class _SessionRow(NamedTuple):
    """A runtime's JSON and the columns the SQL store indexes it by."""

    created: int
    data: str
    status: str
    source_runtime_id: str | None
    source_checkpoint_id: str | None
    kernel_id: str | None
    fanout_id: str | None

    @classmethod
    def of(cls, session: SessionRecord) -> _SessionRow:
        return cls(
            session.created_at_ms,
            session.model_dump_json(),
            session.status.value,
            session.source_runtime_id,
            session.source_checkpoint_id,
            kernel_id_of(session),
            session.fanout.id if session.fanout is not None else None,
        )


class _CheckpointRow(NamedTuple):
    """A checkpoint's JSON and the columns the SQL store indexes it by."""

    created: int
    seq: int
    runtime_id: str
    name: str | None
    data: str
    parent: str | None
    automatic: bool
    pruned: bool


@dataclass
class _MemState:
    sessions: dict[str, _SessionRow] = field(default_factory=dict)
    checkpoints: dict[str, _CheckpointRow] = field(default_factory=dict)
    heads: dict[str, str] = field(default_factory=dict)
    bindings: dict[str, str] = field(default_factory=dict)
    leftovers: dict[tuple[str, str], str] = field(default_factory=dict)  # (kind, id) -> json
    seq: int = 0
    leases: dict[tuple[str, str], str] = field(default_factory=dict)  # (kind, key) -> json
    bucket_generations: dict[str, int] = field(default_factory=dict)  # bucket URL -> count

    def copy(self) -> _MemState:
        return _MemState(
            dict(self.sessions),
            dict(self.checkpoints),
            dict(self.heads),
            dict(self.bindings),
            dict(self.leftovers),
            self.seq,
            dict(self.leases),
            dict(self.bucket_generations),
        )


@dataclass
class _MemTxn:
    levels: list[_MemState]
    refs: list[list[Ref]]


class MemoryCheckpointStore:
    """The checkpoint store on dicts: same API and semantics, nothing persisted.

    Records are kept as JSON text, so what comes back is a fresh copy, exactly as from
    the SQL store. Transactions work on a copy that replaces the committed state only
    when the outermost block succeeds; readers outside a block see committed state only.
    """

    def __init__(self, *, lock_timeout_s: float = BUSY_TIMEOUT_MS / 1000) -> None:
        self._state = _MemState()
        self._lock = threading.Lock()
        self._lock_timeout_s = lock_timeout_s
        self._closed = False
        self._active: contextvars.ContextVar[_MemTxn | None] = contextvars.ContextVar(
            f"ditto_memstore_txn_{id(self)}", default=None
        )

    def __repr__(self) -> str:
        return "MemoryCheckpointStore()"

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("the in-memory checkpoint store is closed")

    def last_commit_bytes(self) -> int:
        """Nothing: this store writes no file."""
        return 0

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Commit everything inside atomically; nested blocks are savepoints."""
        self._check_open()
        active = self._active.get()
        if active is not None:
            active.levels.append(active.levels[-1].copy())
            active.refs.append([])
            try:
                yield
            except BaseException:
                active.levels.pop()
                active.refs.pop()
                raise
            inner_state, inner_refs = active.levels.pop(), active.refs.pop()
            active.levels[-1] = inner_state
            active.refs[-1].extend(inner_refs)
            return
        if not self._lock.acquire(timeout=self._lock_timeout_s):
            raise StoreError(
                f"timed out after {self._lock_timeout_s:g}s waiting for another "
                "transaction on the in-memory checkpoint store"
            )
        try:
            txn = _MemTxn(levels=[self._state.copy()], refs=[[]])
            token = self._active.set(txn)
            try:
                yield
                self._verify_refs(txn.levels[0], txn.refs[0])
                self._state = txn.levels[0]
            finally:
                self._active.reset(token)
        finally:
            self._lock.release()

    def _view(self) -> _MemState:
        self._check_open()
        active = self._active.get()
        return self._state if active is None else active.levels[-1]

    @contextmanager
    def _write(self, refs: Sequence[Ref] = ()) -> Iterator[_MemState]:
        with self.transaction():
            active = self._active.get()
            assert active is not None
            yield active.levels[-1]
            active.refs[-1].extend(refs)

    @staticmethod
    def _verify_refs(state: _MemState, refs: Sequence[Ref]) -> None:
        for ref in refs:
            table: dict[str, Any] = state.sessions if ref.kind == "runtime" else state.checkpoints
            if ref.key not in table:
                raise dangling(ref)

    # ---- sessions -------------------------------------------------------------------

    def insert_session(self, session: SessionRecord) -> None:
        """Add a new runtime; ValueError if one with that id exists."""
        require_model(session, SessionRecord, "insert_session")
        with self._write() as state:
            if session.session_id in state.sessions:
                raise ValueError(f"runtime {session.session_id!r} already exists")
            state.sessions[session.session_id] = _SessionRow.of(session)

    def put_session(self, session: SessionRecord) -> None:
        """Insert or replace a runtime."""
        require_model(session, SessionRecord, "put_session")
        with self._write() as state:
            state.sessions[session.session_id] = _SessionRow.of(session)

    def get_session(self, runtime_id: str) -> SessionRecord | None:
        """The runtime with that id, or None."""
        found = self._view().sessions.get(runtime_id)
        return (
            None
            if found is None
            else load_model(SessionRecord, found.data, f"runtime {runtime_id!r}")
        )

    def _sessions_where(self, keep: Callable[[_SessionRow], bool]) -> list[SessionRecord]:
        rows = sorted(
            (row.created, rid, row.data) for rid, row in self._view().sessions.items() if keep(row)
        )
        return load_rows(SessionRecord, ((rid, data) for _, rid, data in rows), "runtime")

    def list_sessions(self) -> list[SessionRecord]:
        """Every runtime, by created_at_ms then id."""
        return self._sessions_where(lambda _row: True)

    def checkouts_of(self, runtime_id: str) -> list[SessionRecord]:
        """The runtimes checked out from `runtime_id`'s checkpoints, by created_at_ms then id."""
        return self._sessions_where(lambda row: row.source_runtime_id == runtime_id)

    def fanout_members(self, fanout_id: str) -> list[SessionRecord]:
        """The children of one fan-out, by created_at_ms then id."""
        return self._sessions_where(lambda row: row.fanout_id == fanout_id)

    def live_session_with_kernel(self, kernel_id: str) -> SessionRecord | None:
        """The live (idle or busy) runtime whose handle names that kernel id, or None."""
        found = self._sessions_where(lambda row: row.kernel_id == kernel_id and row.status in _LIVE)
        return found[0] if found else None

    # ---- checkpoints ----------------------------------------------------------------

    def put_checkpoint(self, checkpoint: RuntimeCheckpoint) -> None:
        """Insert or replace a checkpoint; its runtime must be in the store at commit, and
        a stored checkpoint stays its runtime's (ValueError)."""
        require_model(checkpoint, RuntimeCheckpoint, "put_checkpoint")
        with self._write(refs_of_checkpoint(checkpoint)) as state:
            old = state.checkpoints.get(checkpoint.checkpoint_id)
            if old is not None and old.runtime_id != checkpoint.runtime_id:
                raise moved_checkpoint(checkpoint, old.runtime_id)
            if old is None:
                state.seq += 1
                seq = state.seq
            else:
                seq = old.seq
            state.checkpoints[checkpoint.checkpoint_id] = _CheckpointRow(
                checkpoint.created_at_ms,
                seq,
                checkpoint.runtime_id,
                checkpoint.name,
                checkpoint.model_dump_json(),
                checkpoint.parent_checkpoint_id,
                checkpoint.automatic is not None,
                checkpoint.pruned,
            )

    def get_checkpoint(self, checkpoint_id: str) -> RuntimeCheckpoint | None:
        """The checkpoint with that id, or None."""
        found = self._view().checkpoints.get(checkpoint_id)
        if found is None:
            return None
        return load_model(RuntimeCheckpoint, found.data, f"checkpoint {checkpoint_id!r}")

    def _select(self, keep: Callable[[str, str, str | None], bool]) -> list[RuntimeCheckpoint]:
        rows = sorted(
            (row.created, row.seq, cid, row.data)
            for cid, row in self._view().checkpoints.items()
            if keep(cid, row.runtime_id, row.name)
        )
        return load_rows(RuntimeCheckpoint, ((cid, data) for _, _, cid, data in rows), "checkpoint")

    def list_checkpoints(self, runtime_id: str | None = None) -> list[RuntimeCheckpoint]:
        """Checkpoints (of one runtime, or all), oldest first."""
        return self._select(lambda _cid, rid, _name: runtime_id is None or rid == runtime_id)

    def find_checkpoints(
        self, prefix: str, runtime_id: str | None = None
    ) -> list[RuntimeCheckpoint]:
        """Checkpoints whose id starts with `prefix` or whose name is exactly `prefix`."""
        require_id(prefix, "a checkpoint id prefix or name")
        return self._select(
            lambda cid, rid, name: (
                (runtime_id is None or rid == runtime_id)
                and (cid.startswith(prefix) or name == prefix)
            )
        )

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
        rows = sorted(
            (row.created, row.seq, cid)
            for cid, row in self._view().checkpoints.items()
            if row.runtime_id == runtime_id
        )
        if newest_first:
            rows.reverse()
        if after is not None:
            position = next((i for i, row in enumerate(rows) if row[2] == after), None)
            if position is None:
                raise ValueError(f"{after!r} is not a checkpoint of runtime {runtime_id!r}")
            rows = rows[position + 1 :]
        return self._load([cid for _, _, cid in rows[:limit]])

    def find_by_id_prefix(
        self, prefix: str, runtime_id: str | None = None, *, limit: int | None = None
    ) -> list[RuntimeCheckpoint]:
        """Checkpoints whose id starts with `prefix` (in one runtime), in id order."""
        require_id(prefix, "a checkpoint id prefix")
        ids = sorted(
            cid
            for cid, row in self._view().checkpoints.items()
            if cid.startswith(prefix) and (runtime_id is None or row.runtime_id == runtime_id)
        )
        return self._load(ids[:limit])

    def newest_named(self, name: str, runtime_id: str) -> RuntimeCheckpoint | None:
        """The newest checkpoint of a runtime with exactly that name, or None."""
        named = self._select(lambda _cid, rid, found: rid == runtime_id and found == name)
        return named[-1] if named else None

    def runtimes_naming(self, name: str, *, limit: int) -> list[str]:
        """Runtimes (by id, at most `limit`) that have a checkpoint with exactly that name."""
        rows = self._view().checkpoints.values()
        return sorted({row.runtime_id for row in rows if row.name == name})[:limit]

    def checkpoints_with_snapshot(self, snapshot_id: str) -> list[RuntimeCheckpoint]:
        """Every checkpoint whose backend ref records that provider snapshot, oldest first."""
        rows = self._view().checkpoints
        return self._select(
            lambda cid, _rid, _name: blob_ids_of_record(rows[cid].data)[1] == snapshot_id
        )

    def referenced_manifests(self, manifest_ids: Sequence[str]) -> set[str]:
        """Which of these blob ids some checkpoint names, as its context manifest, its
        backend snapshot or its notebook document."""
        named = {
            blob
            for row in self._view().checkpoints.values()
            for blob in (*blob_ids_of_record(row.data), document_id_of_record(row.data))
            if blob is not None
        }
        return named.intersection(manifest_ids)

    def prune_candidates(self, runtime_id: str, keep: int) -> PruneCandidates:
        """The runtime's whole automatic checkpoints beyond its newest `keep`, which of them
        are held, and how many are whole."""
        state = self._view()
        whole = sorted(
            (row.created, row.seq, cid)
            for cid, row in state.checkpoints.items()
            if row.runtime_id == runtime_id and row.automatic and not row.pruned
        )
        beyond = [cid for _, _, cid in whole[: max(len(whole) - max(keep, 0), 0)]]
        asked = set(beyond)
        held = asked.intersection(state.heads.values())
        held |= asked.intersection(row.source_checkpoint_id for row in state.sessions.values())
        held |= asked.intersection(
            row.parent for row in state.checkpoints.values() if row.runtime_id != runtime_id
        )
        return PruneCandidates(beyond=self._load(beyond), held=frozenset(held), whole=len(whole))

    def _load(self, checkpoint_ids: list[str]) -> list[RuntimeCheckpoint]:
        rows = self._view().checkpoints
        return load_rows(
            RuntimeCheckpoint, ((cid, rows[cid].data) for cid in checkpoint_ids), "checkpoint"
        )

    # ---- heads ----------------------------------------------------------------------

    def get_head(self, runtime_id: str) -> str | None:
        """The current checkpoint id of a runtime, or None."""
        return self._view().heads.get(runtime_id)

    def set_head(self, runtime_id: str, checkpoint_id: str | None) -> None:
        """Make `checkpoint_id` the runtime's current checkpoint (None clears it)."""
        require_id(runtime_id, "runtime_id")
        if checkpoint_id is None:
            with self._write() as state:
                state.heads.pop(runtime_id, None)
            return
        require_id(checkpoint_id, "checkpoint_id")
        with self._write(refs_of_head(runtime_id, checkpoint_id)) as state:
            state.heads[runtime_id] = checkpoint_id

    # ---- backend bindings -----------------------------------------------------------

    def put_binding(self, binding: BackendBinding) -> None:
        """Insert or replace the backend binding of a runtime."""
        require_model(binding, BackendBinding, "put_binding")
        with self._write(refs_of_binding(binding)) as state:
            state.bindings[binding.runtime_id] = binding.model_dump_json()

    def get_binding(self, runtime_id: str) -> BackendBinding | None:
        """The backend binding of a runtime, or None."""
        found = self._view().bindings.get(runtime_id)
        return (
            None if found is None else load_model(BackendBinding, found, f"binding {runtime_id!r}")
        )

    def delete_binding(self, runtime_id: str) -> None:
        """Remove a runtime's backend binding (no error when there is none)."""
        with self._write() as state:
            state.bindings.pop(runtime_id, None)

    def list_bindings(self) -> list[BackendBinding]:
        """Every backend binding, by runtime id."""
        bindings = self._view().bindings
        return load_rows(
            BackendBinding, ((rid, bindings[rid]) for rid in sorted(bindings)), "binding"
        )

    # ---- leftovers -------------------------------------------------------------------

    def record_leftover(self, leftover: Leftover) -> None:
        """Record a resource a cleanup left behind (replaces one of the same kind and id)."""
        require_model(leftover, Leftover, "record_leftover")
        with self._write() as state:
            state.leftovers[(leftover.kind, leftover.resource_id)] = leftover.model_dump_json()

    def list_leftovers(self) -> list[Leftover]:
        """Every recorded leftover, oldest first."""
        found = [Leftover.model_validate_json(data) for data in self._view().leftovers.values()]
        return sorted(found, key=lambda left: (left.created_at_ms, left.kind, left.resource_id))

    def damaged_rows(self) -> list[DamagedRow]:
        """Every stored row that does not read back as its model (reads each row)."""
        state = self._view()
        sessions = ((rid, row.data) for rid, row in sorted(state.sessions.items()))
        checkpoints = ((cid, row.data) for cid, row in sorted(state.checkpoints.items()))
        return [
            *damaged_of("sessions", SessionRecord, sessions),
            *damaged_of("checkpoints", RuntimeCheckpoint, checkpoints),
            *damaged_of("backend_bindings", BackendBinding, sorted(state.bindings.items())),
        ]

    # ---- leases ----------------------------------------------------------------------

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
        """Take the lease for `holder` when `lease_free_for` allows; the lease as it stands."""
        require_id(kind, "a lease kind")
        require_id(key, "a lease key")
        require_model(holder, LeaseHolder, "acquire_lease")
        with self._write() as state:
            found = state.leases.get((kind, key))
            current = None if found is None else Lease.model_validate_json(found)
            if not lease_free_for(current, holder.owner_id, now_ms, take_from):
                assert current is not None
                return current
            renewal = current is not None and current.holder.owner_id == holder.owner_id
            lease = Lease(
                kind=kind,
                key=key,
                holder=holder,
                acquired_at_ms=current.acquired_at_ms
                if current is not None and renewal
                else now_ms,
                expires_at_ms=None if ttl_ms is None else now_ms + ttl_ms,
            )
            state.leases[(kind, key)] = lease.model_dump_json()
        return lease

    def _update_leases(self, owner_id: str, expires_at_ms: int) -> int:
        with self._write() as state:
            every = [
                (where, Lease.model_validate_json(data)) for where, data in state.leases.items()
            ]
            mine = [(where, lease) for where, lease in every if lease.holder.owner_id == owner_id]
            for where, lease in mine:
                changed = lease.model_copy(update={"expires_at_ms": expires_at_ms})
                state.leases[where] = changed.model_dump_json()
        return len(mine)

    def renew_leases(self, owner_id: str, *, now_ms: int, ttl_ms: int) -> int:
        """Extend every lease `owner_id` holds to `now_ms + ttl_ms`; how many."""
        return self._update_leases(owner_id, now_ms + ttl_ms)

    def release_lease(self, kind: str, key: str, owner_id: str) -> bool:
        """Drop the lease when `owner_id` holds it; whether it did."""
        with self._write() as state:
            found = state.leases.get((kind, key))
            if found is None or Lease.model_validate_json(found).holder.owner_id != owner_id:
                return False
            del state.leases[(kind, key)]
        return True

    def expire_leases(self, owner_id: str, *, now_ms: int) -> int:
        """Make every lease `owner_id` holds run out at `now_ms`; how many."""
        return self._update_leases(owner_id, now_ms)

    def get_lease(self, kind: str, key: str) -> Lease | None:
        """The lease of (`kind`, `key`), or None."""
        found = self._view().leases.get((kind, key))
        return None if found is None else Lease.model_validate_json(found)

    def list_leases(self, kind: str, *, owner_id: str | None = None) -> list[Lease]:
        """The leases of one kind (of one owner), by key."""
        leases = self._view().leases
        found = [Lease.model_validate_json(leases[where]) for where in sorted(leases)]
        return [
            lease
            for lease in found
            if lease.kind == kind and (owner_id is None or lease.holder.owner_id == owner_id)
        ]

    def bucket_generation(self, url: str) -> int:
        """How many deletion phases garbage collection has begun on the bucket `url`."""
        require_id(url, "a bucket URL")
        return self._view().bucket_generations.get(url, 0)

    def advance_bucket_generation(self, url: str) -> int:
        """Count one more deletion phase on the bucket `url`; the new generation."""
        require_id(url, "a bucket URL")
        with self._write() as state:
            generation = state.bucket_generations.get(url, 0) + 1
            state.bucket_generations[url] = generation
        return generation

    def close(self) -> None:
        """Forget nothing, but refuse later calls (mirrors the SQL store)."""
        self._closed = True
