"""A token budget shared by many processes through one SQLite file.

Every kernel of a Jupyter server (or any set of processes on one machine) that opens the
same file and budget name draws on one limit. Each reservation and settlement is one
`BEGIN IMMEDIATE` transaction, so the fit check and the update are atomic across
processes; a CHECK constraint makes the database itself refuse any state where reserved
plus charged exceeds the limit while admission is open. The ledger table holds one row
per reservation (open until settled, then its charge, status, usage and scope) and one row
per replay, so the counters can always be audited against it.

The file may be the control plane's own SQLite store: the tables are named
`token_budget` and `token_budget_ledger` and touch nothing else. WAL journal mode and a
busy timeout let readers and writers of many processes interleave. `synchronous=NORMAL`
(the default) survives any process crash; pass `synchronous="FULL"` to survive power loss
as well, at the cost of an fsync per transaction.

`set_limit` raises or lowers the limit of an existing budget without touching a record.
Lowering it below what is reserved and charged closes admission; raising it again so that
everything fits reopens admission, but only when the lowering is what closed it (an
exceeded reservation or `close()` closes for good).
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, cast

from ditto_jupyter.worker.budget.authority import (
    BudgetAuthority,
    exceeded_message,
    refusal,
    settlement_charge,
)
from ditto_jupyter.worker.budget.errors import BudgetExceededError
from ditto_jupyter.worker.budget.records import (
    EXCEEDED,
    RELEASED,
    REPLAYED,
    SETTLED,
    UNKNOWN,
    BudgetRecord,
    BudgetSnapshot,
    LimitChange,
    RecordStatus,
    Reservation,
    Scope,
    ScopeValue,
    check_count,
)
from ditto_jupyter.worker.budget.usage import UsageSource, usage_snapshot
from ditto_jupyter.worker.sqlite_wal import turn_on_wal

__all__ = ["LimitChange", "SharedTokenBudget", "budget_names"]

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS token_budget (
    name TEXT PRIMARY KEY,
    limit_tokens INTEGER NOT NULL CHECK (limit_tokens >= 0),
    reserved INTEGER NOT NULL DEFAULT 0 CHECK (reserved >= 0),
    charged INTEGER NOT NULL DEFAULT 0 CHECK (charged >= 0),
    replayed INTEGER NOT NULL DEFAULT 0 CHECK (replayed >= 0),
    closed INTEGER NOT NULL DEFAULT 0 CHECK (closed IN (0, 1)),
    closed_reason TEXT,
    settlements INTEGER NOT NULL DEFAULT 0,
    created_at_ms INTEGER NOT NULL,
    limit_closed INTEGER NOT NULL DEFAULT 0 CHECK (limit_closed IN (0, 1)),
    CHECK (closed = 1 OR reserved + charged <= limit_tokens)
);
CREATE TABLE IF NOT EXISTS token_budget_ledger (
    id INTEGER PRIMARY KEY,
    budget TEXT NOT NULL REFERENCES token_budget(name),
    reservation INTEGER NOT NULL CHECK (reservation >= 0),
    charge INTEGER CHECK (charge >= 0),
    replayed INTEGER NOT NULL DEFAULT 0 CHECK (replayed >= 0),
    status TEXT CHECK (status IN (
        'settled', 'failed', 'unknown', 'invalid_usage', 'exceeded', 'released', 'replayed')),
    usage TEXT,
    scope TEXT NOT NULL,
    detail TEXT,
    owner_host TEXT NOT NULL,
    owner_pid INTEGER NOT NULL,
    reserved_at_ms INTEGER NOT NULL,
    settled_at_ms INTEGER,
    seq INTEGER,
    CHECK ((status IS NULL) = (charge IS NULL)),
    CHECK ((status IS NULL) = (seq IS NULL))
);
"""


_SYNCHRONOUS: Final = frozenset({"OFF", "NORMAL", "FULL", "EXTRA"})


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _json(value: object) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"), default=repr)


def budget_names(path: str | os.PathLike[str]) -> list[str]:
    """The names of the budgets in a budget file, sorted; none when the file is missing."""
    if not Path(path).is_file():
        return []
    connection = sqlite3.connect(Path(path), timeout=60.0)
    try:
        return [row[0] for row in connection.execute("SELECT name FROM token_budget ORDER BY name")]
    except sqlite3.OperationalError as error:
        if "no such table" in str(error):  # a SQLite file without budgets
            return []
        raise
    finally:
        connection.close()


# Connections inherited from a parent process: referenced so they are never closed here.
_INHERITED_CONNECTIONS: list[sqlite3.Connection] = []


def _pid_alive(pid: int) -> bool:
    """Whether a process with this id exists on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


class SharedTokenBudget(BudgetAuthority):
    """A TokenBudget whose reservations are atomic across processes, kept in a SQLite file.

    `SharedTokenBudget(path, limit)` creates the budget `name` in the file if it is not
    there yet; `SharedTokenBudget(path)` opens an existing one. Opening an existing budget
    with a different limit is refused (nothing changes). One connection per process,
    shared by its threads under a lock; a forked child opens its own."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        limit: int | None = None,
        *,
        name: str = "default",
        busy_timeout_s: float = 60.0,
        synchronous: str = "NORMAL",
    ) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a file path, not {type(path).__name__}")
        text = os.fspath(path)
        if text in ("", ":memory:") or text.startswith("file::memory:"):
            raise ValueError("a shared budget needs a file path, not an in-memory database")
        if not isinstance(name, str) or not name:
            raise ValueError("budget name must be a non-empty string")
        if limit is not None:
            limit = check_count(limit, "limit")
        if isinstance(busy_timeout_s, bool) or not isinstance(busy_timeout_s, (int, float)):
            raise TypeError("busy_timeout_s must be a number of seconds")
        if busy_timeout_s <= 0:
            raise ValueError(f"busy_timeout_s must be positive, got {busy_timeout_s}")
        mode = synchronous.upper() if isinstance(synchronous, str) else synchronous
        if mode not in _SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {sorted(_SYNCHRONOUS)}, not {mode!r}")
        self.path = Path(text).resolve()
        self.name = name
        self._busy_timeout_s = float(busy_timeout_s)
        self._synchronous = mode
        self._key = f"shared-token-budget:{self.path}:{name}"
        self._host = socket.gethostname()
        self._lock = threading.Lock()
        self._lock_pid = os.getpid()
        self._connection_pid = -1
        self._connection_handle: sqlite3.Connection | None = None
        self._open_budget(limit)

    def _process_lock(self) -> threading.Lock:
        """This process's lock. A forked child gets a fresh one (the parent's may have been
        held by a thread that does not exist in the child) and, on first use, a fresh
        connection; the inherited connection is kept, never used or closed, as SQLite
        requires."""
        pid = os.getpid()
        if self._lock_pid != pid:
            if self._connection_handle is not None:
                _INHERITED_CONNECTIONS.append(self._connection_handle)
            self._connection_handle = None
            self._lock = threading.Lock()
            self._lock_pid = pid
        return self._lock

    # -- connection and transactions

    def _connection(self) -> sqlite3.Connection:
        """This process's connection (lock held); reopened after a fork."""
        pid = os.getpid()
        if self._connection_handle is None or self._connection_pid != pid:
            if self._connection_handle is not None:  # inherited across fork: leave it be
                _INHERITED_CONNECTIONS.append(self._connection_handle)
            connection = sqlite3.connect(
                self.path,
                timeout=self._busy_timeout_s,
                isolation_level=None,  # we issue BEGIN IMMEDIATE / COMMIT ourselves
                check_same_thread=False,  # shared by this process's threads under self._lock
            )
            connection.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_s * 1000)}")
            turn_on_wal(connection, self._busy_timeout_s)
            connection.execute(f"PRAGMA synchronous = {self._synchronous}")
            self._connection_handle = connection
            self._connection_pid = pid
        return self._connection_handle

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken up front so no other process can interleave; any
        exception rolls everything back."""
        with self._process_lock():
            connection = self._connection()
            connection.execute("BEGIN IMMEDIATE")
            try:
                yield connection
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise
            try:
                connection.execute("COMMIT")
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise

    def close_connection(self) -> None:
        """Close this process's connection (reopened on next use)."""
        with self._process_lock():
            if self._connection_handle is not None and self._connection_pid == os.getpid():
                self._connection_handle.close()
            self._connection_handle = None

    def _open_budget(self, limit: int | None) -> None:
        with self._process_lock():
            connection = self._connection()
            try:
                connection.executescript(f"BEGIN IMMEDIATE;{_SCHEMA}COMMIT;")
                columns = {row[1] for row in connection.execute("PRAGMA table_info(token_budget)")}
                if "limit_closed" not in columns:  # a file made before set_limit existed
                    connection.execute(
                        "ALTER TABLE token_budget ADD COLUMN limit_closed INTEGER NOT NULL "
                        "DEFAULT 0 CHECK (limit_closed IN (0, 1))"
                    )
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise
        with self._transaction() as connection:
            row = connection.execute(
                "SELECT limit_tokens FROM token_budget WHERE name = ?", (self.name,)
            ).fetchone()
            if row is None:
                if limit is None:
                    raise ValueError(
                        f"no budget {self.name!r} in {self.path}; pass a limit to create it"
                    )
                connection.execute(
                    "INSERT INTO token_budget (name, limit_tokens, created_at_ms) VALUES (?, ?, ?)",
                    (self.name, limit, _now_ms()),
                )
            elif limit is not None and row[0] != limit:
                raise ValueError(
                    f"budget {self.name!r} in {self.path} already has limit {row[0]}, not {limit}"
                )

    def _snapshot_of(self, connection: sqlite3.Connection) -> BudgetSnapshot:
        row = connection.execute(
            "SELECT limit_tokens, reserved, charged, replayed, closed, closed_reason "
            "FROM token_budget WHERE name = ?",
            (self.name,),
        ).fetchone()
        if row is None:
            raise LookupError(f"budget {self.name!r} vanished from {self.path}")
        return BudgetSnapshot(row[0], row[1], row[2], row[3], bool(row[4]), row[5])

    def _check_owner(self, reservation: Reservation) -> None:
        if not isinstance(reservation, Reservation):
            raise TypeError(f"expected a Reservation, not {type(reservation).__name__}")
        if reservation.authority != self._key:
            raise ValueError(f"reservation {reservation.id} belongs to another budget")

    # -- the authority interface

    def reserve(self, tokens: int, scope: Mapping[str, ScopeValue] | None = None) -> Reservation:
        tokens = check_count(tokens, "reservation", minimum=1)
        frozen = Scope.of(scope)
        scope_json = frozen.to_json()
        with self._transaction() as connection:
            admitted = connection.execute(
                "UPDATE token_budget SET reserved = reserved + ?1 "
                "WHERE name = ?2 AND closed = 0 AND reserved + charged + ?1 <= limit_tokens",
                (tokens, self.name),
            ).rowcount
            if admitted != 1:
                raise refusal(self._snapshot_of(connection), tokens)
            cursor = connection.execute(
                "INSERT INTO token_budget_ledger "
                "(budget, reservation, scope, owner_host, owner_pid, reserved_at_ms) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (self.name, tokens, scope_json, self._host, os.getpid(), _now_ms()),
            )
            ledger_id = cursor.lastrowid
        assert ledger_id is not None
        return Reservation(ledger_id, tokens, frozen, self._key)

    def _finish(
        self,
        connection: sqlite3.Connection,
        reservation: Reservation,
        status: str,
        charge: int,
        usage: dict[str, Any] | None,
        detail: str | None,
    ) -> None:
        """Close the ledger row of an open reservation and move its tokens from reserved
        to charged, in the caller's transaction."""
        closed = connection.execute(
            "UPDATE token_budget_ledger SET status = ?1, charge = ?2, usage = ?3, detail = ?4, "
            "settled_at_ms = ?5, "
            "seq = (SELECT settlements + 1 FROM token_budget WHERE name = ?7) "
            "WHERE id = ?6 AND budget = ?7 AND status IS NULL AND reservation = ?8",
            (
                status,
                charge,
                _json(usage),
                detail,
                _now_ms(),
                reservation.id,
                self.name,
                reservation.tokens,
            ),
        ).rowcount
        if closed != 1:
            row = connection.execute(
                "SELECT reservation, status FROM token_budget_ledger WHERE id = ? AND budget = ?",
                (reservation.id, self.name),
            ).fetchone()
            if row is None or row[1] is not None:
                raise ValueError(f"reservation {reservation.id} is not open (already settled)")
            raise ValueError(
                f"reservation {reservation.id} holds {row[0]} tokens in the ledger, "
                f"not {reservation.tokens}"
            )
        exceeded = status == EXCEEDED
        connection.execute(
            "UPDATE token_budget SET reserved = reserved - ?1, charged = charged + ?2, "
            "settlements = settlements + 1, "
            "closed_reason = CASE WHEN ?3 AND closed = 0 THEN ?4 ELSE closed_reason END, "
            "limit_closed = CASE WHEN ?3 THEN 0 ELSE limit_closed END, "
            "closed = CASE WHEN ?3 THEN 1 ELSE closed END WHERE name = ?5",
            (
                reservation.tokens,
                charge,
                exceeded,
                f"reservation {reservation.id} exceeded" if exceeded else None,
                self.name,
            ),
        )

    def settle(
        self,
        reservation: Reservation,
        charge: int | None = None,
        *,
        status: str = SETTLED,
        usage: UsageSource = None,
        detail: str | None = None,
    ) -> BudgetRecord:
        self._check_owner(reservation)
        amount = settlement_charge(reservation, charge, status)
        exceeded = amount > reservation.tokens
        final = cast(RecordStatus, EXCEEDED if exceeded else status)
        snapshot = usage_snapshot(usage)
        with self._transaction() as connection:
            self._finish(connection, reservation, final, amount, snapshot, detail)
        record = BudgetRecord(
            reservation.id,
            final,
            reservation.tokens,
            amount,
            snapshot,
            reservation.scope,
            0,
            detail,
        )
        if exceeded:
            raise BudgetExceededError(
                exceeded_message(reservation, amount),
                requested=amount,
                available=reservation.tokens,
                record=record,
            )
        return record

    def release(self, reservation: Reservation, detail: str | None = None) -> BudgetRecord:
        self._check_owner(reservation)
        with self._transaction() as connection:
            self._finish(connection, reservation, RELEASED, 0, None, detail)
        return BudgetRecord(
            reservation.id, RELEASED, reservation.tokens, 0, None, reservation.scope, 0, detail
        )

    def record_replay(
        self,
        tokens: int,
        scope: Mapping[str, ScopeValue] | None = None,
        *,
        usage: UsageSource = None,
        detail: str | None = None,
    ) -> BudgetRecord:
        tokens = check_count(tokens, "replayed tokens")
        frozen = Scope.of(scope)
        snapshot = usage_snapshot(usage)
        now = _now_ms()
        with self._transaction() as connection:
            connection.execute(
                "UPDATE token_budget SET replayed = replayed + ?, settlements = settlements + 1 "
                "WHERE name = ?",
                (tokens, self.name),
            )
            seq = connection.execute(  # no RETURNING: SQLite before 3.35 is still common
                "SELECT settlements FROM token_budget WHERE name = ?", (self.name,)
            ).fetchone()[0]
            cursor = connection.execute(
                "INSERT INTO token_budget_ledger (budget, reservation, charge, replayed, status, "
                "usage, scope, detail, owner_host, owner_pid, reserved_at_ms, settled_at_ms, seq) "
                "VALUES (?, 0, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    self.name,
                    tokens,
                    REPLAYED,
                    _json(snapshot),
                    frozen.to_json(),
                    detail,
                    self._host,
                    os.getpid(),
                    now,
                    now,
                    seq,
                ),
            )
            ledger_id = cursor.lastrowid
        assert ledger_id is not None
        return BudgetRecord(ledger_id, REPLAYED, 0, 0, snapshot, frozen, tokens, detail)

    def close(self, reason: str = "closed by user") -> None:
        if not isinstance(reason, str):
            raise TypeError("close reason must be a string")
        with self._transaction() as connection:
            connection.execute(
                "UPDATE token_budget SET closed = 1, limit_closed = 0, "
                "closed_reason = CASE WHEN closed = 0 OR limit_closed = 1 THEN ? "
                "ELSE closed_reason END WHERE name = ?",
                (reason, self.name),
            )

    def set_limit(self, limit: int) -> LimitChange:
        """Raise or lower the limit; every record and counter stays as it is.

        A limit below reserved + charged closes admission; a later limit that fits them
        reopens it only if a lowering closed it."""
        limit = check_count(limit, "limit")
        with self._transaction() as connection:
            before = self._snapshot_of(connection)
            used = before.reserved + before.charged
            if limit < used:
                reason = f"limit lowered to {limit}, below the {used} tokens reserved and charged"
                connection.execute(
                    "UPDATE token_budget SET limit_tokens = ?1, closed = 1, "
                    "closed_reason = CASE WHEN closed = 0 OR limit_closed = 1 THEN ?2 "
                    "ELSE closed_reason END, "
                    "limit_closed = CASE WHEN closed = 0 OR limit_closed = 1 THEN 1 ELSE 0 END "
                    "WHERE name = ?3",
                    (limit, reason, self.name),
                )
            else:
                connection.execute(
                    "UPDATE token_budget SET limit_tokens = ?1, "
                    "closed = CASE WHEN limit_closed = 1 THEN 0 ELSE closed END, "
                    "closed_reason = CASE WHEN limit_closed = 1 THEN NULL ELSE closed_reason END, "
                    "limit_closed = 0 WHERE name = ?2",
                    (limit, self.name),
                )
            return LimitChange(before, self._snapshot_of(connection))

    def snapshot(self) -> BudgetSnapshot:
        with self._process_lock():
            return self._snapshot_of(self._connection())

    def record_count(self) -> int:
        with self._process_lock():
            row = (
                self._connection()
                .execute("SELECT settlements FROM token_budget WHERE name = ?", (self.name,))
                .fetchone()
            )
        return int(row[0])

    def ledger_totals(self) -> tuple[int, int, int]:
        with self._process_lock():
            row = (
                self._connection()
                .execute(
                    "SELECT COALESCE(SUM(CASE WHEN status IS NULL THEN reservation END), 0), "
                    "COALESCE(SUM(charge), 0), COALESCE(SUM(replayed), 0) "
                    "FROM token_budget_ledger WHERE budget = ?",
                    (self.name,),
                )
                .fetchone()
            )
        return int(row[0]), int(row[1]), int(row[2])

    @property
    def records(self) -> list[BudgetRecord]:
        return self.records_since(0)

    def records_since(self, count: int) -> list[BudgetRecord]:
        # Records are numbered 1, 2, ... by `seq` as they are made, and never change.
        count = check_count(count, "count")
        with self._process_lock():
            rows = (
                self._connection()
                .execute(
                    "SELECT id, status, reservation, charge, usage, scope, replayed, detail FROM "
                    "token_budget_ledger WHERE budget = ? AND status IS NOT NULL AND seq > ? "
                    "ORDER BY seq",
                    (self.name, count),
                )
                .fetchall()
            )
        return [
            BudgetRecord._make(
                (*row[:4], row[4] and json.loads(row[4]), Scope(json.loads(row[5])), *row[6:])
            )  # usage is NULL (None) or JSON text
            for row in rows
        ]

    def open_reservations(self) -> list[tuple[int, int, str, int]]:
        """Reservations still held: (ledger id, tokens, owner host, owner pid)."""
        with self._process_lock():
            rows = (
                self._connection()
                .execute(
                    "SELECT id, reservation, owner_host, owner_pid FROM token_budget_ledger "
                    "WHERE budget = ? AND status IS NULL ORDER BY id",
                    (self.name,),
                )
                .fetchall()
            )
        return [(row[0], row[1], row[2], row[3]) for row in rows]

    def recover_abandoned(self) -> list[BudgetRecord]:
        """Charge, as `unknown`, the open reservations of processes on this machine that
        exited without settling (their provider call may have run). Reservations of live
        processes and of other machines are left alone."""
        recovered: list[BudgetRecord] = []
        for ledger_id, tokens, host, pid in self.open_reservations():
            if host != self._host or pid == os.getpid() or _pid_alive(pid):
                continue
            reservation = Reservation(ledger_id, tokens, Scope(), self._key)
            detail = f"owner process {pid} exited before settling"
            try:
                with self._transaction() as connection:
                    self._finish(connection, reservation, UNKNOWN, tokens, None, detail)
                    scope_row = connection.execute(
                        "SELECT scope FROM token_budget_ledger WHERE id = ?", (ledger_id,)
                    ).fetchone()
            except ValueError:
                continue  # settled meanwhile by someone else
            scope = Scope(json.loads(scope_row[0]))
            recovered.append(
                BudgetRecord(ledger_id, UNKNOWN, tokens, tokens, None, scope, 0, detail)
            )
        return recovered

    def __reduce__(self) -> Any:
        """Pickling (to a spawned process, say) reopens the same file and budget there."""
        return (_reopen, (str(self.path), self.name, self._busy_timeout_s, self._synchronous))


def _reopen(path: str, name: str, busy_timeout_s: float, synchronous: str) -> SharedTokenBudget:
    """Unpickle a SharedTokenBudget by reopening the same file and budget."""
    return SharedTokenBudget(
        path, name=name, busy_timeout_s=busy_timeout_s, synchronous=synchronous
    )
