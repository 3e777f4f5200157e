"""The budget authority: the interface every budget implements, and `TokenBudget`.

`TokenBudget` is the in-process authority (one lock). `SharedTokenBudget`
(`ditto_jupyter.worker.shared_budget`) implements the same interface on a SQLite file.
The helpers below the interface are shared by both, so they refuse and settle alike.
"""

from __future__ import annotations

import abc
import html
import itertools
import threading
import uuid
from collections.abc import Mapping
from typing import Final, NoReturn

from ditto_jupyter.worker.budget.errors import BudgetExceededError
from ditto_jupyter.worker.budget.records import (
    EMPTY_SCOPE,
    EXCEEDED,
    FAILED,
    INVALID_USAGE,
    RELEASED,
    REPLAYED,
    SETTLE_STATUSES,
    SETTLED,
    UNKNOWN,
    BudgetRecord,
    BudgetSnapshot,
    RecordStatus,
    Reservation,
    Scope,
    ScopeValue,
    check_count,
)
from ditto_jupyter.worker.budget.usage import UsageSource, usage_snapshot

_SETTLE_STATUS: Final[dict[str, RecordStatus]] = {
    SETTLED: SETTLED,
    FAILED: FAILED,
    UNKNOWN: UNKNOWN,
    INVALID_USAGE: INVALID_USAGE,
}


class BudgetAuthority(abc.ABC):
    """The admission authority interface shared by `TokenBudget` (one process) and
    `SharedTokenBudget` (many processes over SQLite); `budgeted_provider` takes either."""

    @abc.abstractmethod
    def reserve(self, tokens: int, scope: Mapping[str, ScopeValue] | None = None) -> Reservation:
        """Atomically hold `tokens` for one call, or raise BudgetExceededError (nothing
        held) if admission is closed or they do not fit beside reserved + charged."""

    @abc.abstractmethod
    def settle(
        self,
        reservation: Reservation,
        charge: int | None = None,
        *,
        status: str = SETTLED,
        usage: UsageSource = None,
        detail: str | None = None,
    ) -> BudgetRecord:
        """Turn an open reservation into a charge and a record. `charge=None` charges the
        whole reservation (required for `unknown` and `invalid_usage`). A charge above the
        reservation is recorded with status `exceeded`, closes admission and raises
        BudgetExceededError carrying the record."""

    @abc.abstractmethod
    def release(self, reservation: Reservation, detail: str | None = None) -> BudgetRecord:
        """Return an open reservation uncharged; only for a call whose provider was never
        invoked (status `released`)."""

    @abc.abstractmethod
    def record_replay(
        self,
        tokens: int,
        scope: Mapping[str, ScopeValue] | None = None,
        *,
        usage: UsageSource = None,
        detail: str | None = None,
    ) -> BudgetRecord:
        """Record the logical cost of a node restored from a checkpoint instead of run.
        Adds to `replayed`, never to `charged`; allowed even when admission is closed."""

    @abc.abstractmethod
    def close(self, reason: str = "closed by user") -> None:
        """Close admission for every later call (there is no reopening)."""

    @abc.abstractmethod
    def snapshot(self) -> BudgetSnapshot:
        """A consistent reading of limit, reserved, charged, replayed and closed."""

    @abc.abstractmethod
    def ledger_totals(self) -> tuple[int, int, int]:
        """(open reservations, charges, replayed tokens) summed from the individual
        reservations and records, to audit the counters against."""

    @property
    @abc.abstractmethod
    def records(self) -> list[BudgetRecord]:
        """Every settled, released and replayed record, oldest first."""

    def record_count(self) -> int:
        """How many records `records` holds (cheap: a view polls it to spot new records)."""
        return len(self.records)

    def records_since(self, count: int) -> list[BudgetRecord]:
        """The records after the first `count`, oldest first (a view reads only new ones:
        a record never changes once made)."""
        return self.records[check_count(count, "count") :]

    @property
    def limit(self) -> int:
        """The most tokens this budget will ever admit."""
        return self.snapshot().limit

    @property
    def reserved(self) -> int:
        """Tokens held by calls in flight."""
        return self.snapshot().reserved

    @property
    def charged(self) -> int:
        """Tokens charged so far (only an exceeded reservation can push this past limit)."""
        return self.snapshot().charged

    @property
    def remaining(self) -> int:
        """Tokens still admissible."""
        return self.snapshot().remaining

    @property
    def replayed(self) -> int:
        """Logical tokens of replayed checkpoint nodes (never charged)."""
        return self.snapshot().replayed

    @property
    def closed(self) -> bool:
        """True once admission is closed (a call exceeded its reservation, or close())."""
        return self.snapshot().closed

    def _repr_html_(self) -> str:
        """A small meter for notebooks: used, held and free shares of the limit."""
        snap = self.snapshot()
        limit = max(snap.limit, 1)
        used = min(100.0, 100.0 * snap.charged / limit)
        held = min(100.0 - used, 100.0 * snap.reserved / limit)
        state = f"closed: {html.escape(snap.closed_reason or '')}" if snap.closed else "admitting"
        name = html.escape(type(self).__name__)
        return (
            f'<div class="ditto-token-budget" style="font-family:sans-serif;max-width:32em">'
            f"<b>{name}</b> &mdash; {state}"
            f'<div style="display:flex;height:0.8em;background:#e5e5e5;margin:4px 0">'
            f'<div style="width:{used:.2f}%;background:#d9534f" title="charged"></div>'
            f'<div style="width:{held:.2f}%;background:#f0ad4e" title="reserved"></div></div>'
            f"<table><tr><td>limit</td><td>{snap.limit:,}</td></tr>"
            f"<tr><td>charged</td><td>{snap.charged:,}</td></tr>"
            f"<tr><td>reserved</td><td>{snap.reserved:,}</td></tr>"
            f"<tr><td>remaining</td><td>{snap.remaining:,}</td></tr>"
            f"<tr><td>replayed (not charged)</td><td>{snap.replayed:,}</td></tr></table></div>"
        )

    def __repr__(self) -> str:
        snap = self.snapshot()
        return (
            f"<{type(self).__name__} limit={snap.limit} charged={snap.charged} "
            f"reserved={snap.reserved} remaining={snap.remaining} replayed={snap.replayed}"
            f"{' closed' if snap.closed else ''}>"
        )


def settlement_charge(reservation: Reservation, charge: int | None, status: str) -> int:
    """Validate a settlement and return the charge it makes (shared by the authorities)."""
    if status not in SETTLE_STATUSES:
        raise ValueError(
            f"settle status must be one of {', '.join(sorted(SETTLE_STATUSES))}, not {status!r}"
        )
    if charge is None:
        return reservation.tokens
    charge = check_count(charge, "charge")
    if status in (UNKNOWN, INVALID_USAGE) and charge != reservation.tokens:
        raise ValueError(
            f"status {status!r} charges the whole reservation ({reservation.tokens}), not {charge}"
        )
    return charge


def exceeded_message(reservation: Reservation, charge: int) -> str:
    """The message of a BudgetExceededError for usage above its reservation."""
    return (
        f"call used {charge} tokens, more than its reservation of {reservation.tokens}; "
        f"the charge is recorded and admission is closed"
    )


def refusal(snapshot: BudgetSnapshot, tokens: int) -> BudgetExceededError:
    """The BudgetExceededError for a reservation that is not admitted."""
    if snapshot.closed:
        message = f"budget admission is closed ({snapshot.closed_reason}); {tokens} tokens refused"
    else:
        message = (
            f"reservation of {tokens} tokens does not fit: {snapshot.remaining} of "
            f"{snapshot.limit} remain ({snapshot.charged} charged, {snapshot.reserved} reserved)"
        )
    return BudgetExceededError(message, requested=tokens, available=snapshot.remaining)


class TokenBudget(BudgetAuthority):
    """One process's token budget: reservations are atomic under one lock, so threads and
    tasks sharing it never overspend. Separate instances (and processes) do not share a
    limit: use SharedTokenBudget for that."""

    def __init__(self, limit: int) -> None:
        self._limit = check_count(limit, "limit")
        self._lock = threading.Lock()
        self._reserved = 0
        self._charged = 0
        self._replayed = 0
        self._closed_reason: str | None = None
        self._open: dict[int, Reservation] = {}
        self._records: list[BudgetRecord] = []
        self._ids = itertools.count(1)
        self._key = f"token-budget:{uuid.uuid4().hex}"

    def reserve(self, tokens: int, scope: Mapping[str, ScopeValue] | None = None) -> Reservation:
        if type(tokens) is not int or tokens < 1:
            tokens = check_count(tokens, "reservation", minimum=1)
        frozen = EMPTY_SCOPE if scope is None else Scope.of(scope)
        with self._lock:
            if (
                self._closed_reason is not None
                or self._reserved + self._charged + tokens > self._limit
            ):
                raise refusal(self._snapshot_locked(), tokens)
            reservation = Reservation(next(self._ids), tokens, frozen, self._key)
            self._open[reservation.id] = reservation
            self._reserved += tokens
        return reservation

    def _refuse_pop(self, reservation: Reservation, popped: Reservation | None) -> NoReturn:
        """Put back what a pop took (lock held) and raise naming why `reservation` is not
        open: nothing changes."""
        if popped is not None:
            self._open[popped.id] = popped
        raise ValueError(self._not_open(reservation))

    def _not_open(self, reservation: Reservation) -> str:
        if reservation.authority != self._key:
            return f"reservation {reservation.id} belongs to another budget"
        return f"reservation {reservation.id} is not open (already settled)"

    def _take(self, reservation: Reservation) -> None:
        """Remove an open reservation (lock held), or raise naming why it is not open."""
        if self._open.get(reservation.id) is not reservation:
            if reservation.authority != self._key:
                raise ValueError(f"reservation {reservation.id} belongs to another budget")
            raise ValueError(f"reservation {reservation.id} is not open (already settled)")
        del self._open[reservation.id]
        self._reserved -= reservation.tokens

    def settle(
        self,
        reservation: Reservation,
        charge: int | None = None,
        *,
        status: str = SETTLED,
        usage: UsageSource = None,
        detail: str | None = None,
    ) -> BudgetRecord:
        if type(charge) is int and charge >= 0 and status == SETTLED:
            amount = charge  # the common case, validated inline
        else:
            amount = settlement_charge(reservation, charge, status)
        exceeded = amount > reservation.tokens
        record = BudgetRecord(
            reservation.id,
            EXCEEDED if exceeded else _SETTLE_STATUS[status],
            reservation.tokens,
            amount,
            usage_snapshot(usage),
            reservation.scope,
            0,
            detail,
        )
        with self._lock:
            popped = self._open.pop(reservation.id, None)
            if popped is not reservation:
                self._refuse_pop(reservation, popped)
            self._reserved -= reservation.tokens
            self._charged += amount
            self._records.append(record)
            if exceeded and self._closed_reason is None:
                self._closed_reason = f"reservation {reservation.id} exceeded"
        if exceeded:
            raise BudgetExceededError(
                exceeded_message(reservation, amount),
                requested=amount,
                available=reservation.tokens,
                record=record,
            )
        return record

    def release(self, reservation: Reservation, detail: str | None = None) -> BudgetRecord:
        with self._lock:
            self._take(reservation)
            record = BudgetRecord(
                reservation.id,
                RELEASED,
                reservation.tokens,
                0,
                None,
                reservation.scope,
                0,
                detail,
            )
            self._records.append(record)
        return record

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
        with self._lock:
            record = BudgetRecord(next(self._ids), REPLAYED, 0, 0, snapshot, frozen, tokens, detail)
            self._replayed += tokens
            self._records.append(record)
        return record

    def close(self, reason: str = "closed by user") -> None:
        if not isinstance(reason, str):
            raise TypeError("close reason must be a string")
        with self._lock:
            if self._closed_reason is None:
                self._closed_reason = reason

    def _snapshot_locked(self) -> BudgetSnapshot:
        return BudgetSnapshot(
            self._limit,
            self._reserved,
            self._charged,
            self._replayed,
            self._closed_reason is not None,
            self._closed_reason,
        )

    def snapshot(self) -> BudgetSnapshot:
        with self._lock:
            return self._snapshot_locked()

    def ledger_totals(self) -> tuple[int, int, int]:
        with self._lock:
            held = sum(reservation.tokens for reservation in self._open.values())
            charged = sum(record.charge for record in self._records)
            replayed = sum(record.replayed_tokens for record in self._records)
        return held, charged, replayed

    @property
    def records(self) -> list[BudgetRecord]:
        with self._lock:
            return list(self._records)

    def record_count(self) -> int:
        return len(self._records)

    def records_since(self, count: int) -> list[BudgetRecord]:
        count = check_count(count, "count")
        with self._lock:
            return self._records[count:]

    # Direct reads: cheaper than a snapshot, and each is one consistent int.
    @property
    def limit(self) -> int:
        return self._limit

    @property
    def reserved(self) -> int:
        return self._reserved

    @property
    def charged(self) -> int:
        return self._charged

    @property
    def replayed(self) -> int:
        return self._replayed

    @property
    def closed(self) -> bool:
        return self._closed_reason is not None
