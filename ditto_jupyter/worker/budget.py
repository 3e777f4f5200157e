"""Token budgets that are never overspent: reserve before a provider call, settle after.

A budget admits a call only if its reservation (an upper bound of the whole request's
tokens) fits beside everything already reserved and charged; the check and the
reservation happen in one atomic step. A successful call settles to its actual usage; a
failure or cancellation without usage, and a response with invalid or missing usage,
charge the whole reservation. Usage above the reservation is charged as reported, raises
`BudgetExceededError` and closes admission for good. Nothing charged is ever undone.

`TokenBudget` is the in-process authority (one lock). `SharedTokenBudget`
(`ditto_jupyter.worker.shared_budget`) implements the same `BudgetAuthority` interface
on a SQLite file, so many processes (every kernel of a Jupyter server) draw on one limit.
`budgeted_provider` wraps a provider's `invoke` / `ainvoke` around either.

The reservation estimate must bound the entire request (input, maximum output, protocol
overhead, hidden reasoning). An estimator without that guarantee gives conservative
admission, not a physical hard limit.
"""

from __future__ import annotations

import abc
import asyncio
import dataclasses
import html
import inspect
import itertools
import json
import math
import sys
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, Final, Literal, NamedTuple, NoReturn, Protocol, TypeAlias, cast

__all__ = [
    "EXCEEDED",
    "FAILED",
    "INVALID_USAGE",
    "RELEASED",
    "REPLAYED",
    "SETTLED",
    "UNKNOWN",
    "BudgetAuthority",
    "BudgetError",
    "BudgetExceededError",
    "BudgetRecord",
    "BudgetSnapshot",
    "BudgetedProvider",
    "CallAbortedError",
    "InvalidUsageError",
    "Reservation",
    "Scope",
    "TokenBudget",
    "budgeted_provider",
    "response_usage",
    "usage_snapshot",
    "usage_tokens",
]

RecordStatus: TypeAlias = Literal[
    "settled", "failed", "unknown", "invalid_usage", "exceeded", "released", "replayed"
]
SETTLED: Final = "settled"  # success, actual usage charged
FAILED: Final = "failed"  # the provider raised but reported valid usage: that usage charged
UNKNOWN: Final = "unknown"  # failure or cancellation without usage: whole reservation charged
INVALID_USAGE: Final = "invalid_usage"  # invalid or missing usage: whole reservation charged
EXCEEDED: Final = "exceeded"  # usage above the reservation: actual charge, admission closed
RELEASED: Final = "released"  # provider never called: reservation returned, nothing charged
REPLAYED: Final = "replayed"  # logical cost of a replayed checkpoint node: nothing charged

SETTLE_STATUSES: Final[frozenset[str]] = frozenset({SETTLED, FAILED, UNKNOWN, INVALID_USAGE})
_SETTLE_STATUS: Final[dict[str, RecordStatus]] = {
    SETTLED: SETTLED,
    FAILED: FAILED,
    UNKNOWN: UNKNOWN,
    INVALID_USAGE: INVALID_USAGE,
}
RECORD_STATUSES: Final[frozenset[str]] = SETTLE_STATUSES | {EXCEEDED, RELEASED, REPLAYED}

ScopeValue: TypeAlias = "str | int | float | bool | None"
UsageSource: TypeAlias = Any  # a provider's usage object or mapping, as it gave it


# --------------------------------------------------------------------------- errors


class BudgetError(Exception):
    """Base class of the token budget errors."""


class BudgetExceededError(BudgetError):
    """A reservation did not fit (nothing reserved, provider not called), admission is
    closed, or a call used more than its reservation (charged as reported; admission now
    closed). `record` and `response` are set in the last case."""

    def __init__(
        self,
        message: str,
        *,
        requested: int = 0,
        available: int = 0,
        record: BudgetRecord | None = None,
    ) -> None:
        super().__init__(message)
        self.requested = requested
        self.available = available
        self.record = record
        self.response: Any = None


class InvalidUsageError(BudgetError, ValueError):
    """Usage is missing or malformed. Raised by `usage_tokens`, and by a metered call with
    `require_usage=True` after the whole reservation has been charged (`record`,
    `response` set)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.record: BudgetRecord | None = None
        self.response: Any = None


class CallAbortedError(BudgetError):
    """The abort signal was set: before admission (nothing reserved or charged), or during
    an async call (the whole reservation charged, status `unknown`)."""


# --------------------------------------------------------------------------- values


class Scope(Mapping[str, "str | int | float | bool | None"]):
    """Immutable, validated attribution of a call (`run_id`, `branch_id`, `label`, ...):
    string keys, JSON scalar values."""

    __slots__ = ("_items", "_json")
    _items: dict[str, ScopeValue]
    _json: str | None

    def __init__(self, items: Mapping[str, ScopeValue] | None = None) -> None:
        copied: dict[str, ScopeValue] = {}
        if items is not None:
            if not isinstance(items, Mapping):
                raise TypeError(f"scope must be a mapping, not {type(items).__name__}")
            for key, value in items.items():
                if not isinstance(key, str):
                    raise TypeError(f"scope key {key!r} is not a string")
                if value is not None and not isinstance(value, (str, int, float, bool)):
                    raise TypeError(
                        f"scope value {key}={value!r} is not a JSON scalar "
                        f"(str, int, float, bool or None)"
                    )
                if isinstance(value, float) and not math.isfinite(value):
                    raise ValueError(f"scope value {key}={value!r} is not finite")
                copied[key] = value
        object.__setattr__(self, "_items", copied)
        object.__setattr__(self, "_json", None)

    @classmethod
    def of(cls, scope: Mapping[str, ScopeValue] | None) -> Scope:
        """`scope` itself if it is already a Scope, else a validated copy."""
        if scope is None:
            return EMPTY_SCOPE
        return scope if type(scope) is Scope else cls(scope)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Scope is immutable")

    def __getitem__(self, key: str) -> ScopeValue:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._items.items(), key=lambda item: item[0])))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return dict(self._items) == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"Scope({self._items!r})"

    def to_dict(self) -> dict[str, ScopeValue]:
        """A plain dict copy (JSON-able)."""
        return dict(self._items)

    def to_json(self) -> str:
        """Compact JSON text of the scope (computed once: a Scope never changes)."""
        if self._json is None:
            object.__setattr__(
                self, "_json", json.dumps(self._items, separators=(",", ":"), allow_nan=False)
            )
        assert self._json is not None
        return self._json


EMPTY_SCOPE: Final = Scope()


class Reservation(NamedTuple):
    """Tokens held for one admitted call until it is settled or released (an immutable
    handle; a NamedTuple because one is made per call and must be cheap)."""

    id: int
    tokens: int
    scope: Scope
    authority: str  # identifies the budget that issued it


class BudgetRecord(NamedTuple):
    """What one admitted call (or one replayed node) cost: an immutable record.

    `usage` is a plain-data copy of the usage the provider supplied, every field as given
    (cache and details fields included), or None when it supplied none. `charge` is what
    the budget was charged; `replayed_tokens` is the logical cost of a replay, which is
    never charged. A NamedTuple rather than a frozen dataclass: one is made per call, and
    it is three times cheaper to build, which keeps reserve + settle under 5 us."""

    id: int
    status: RecordStatus
    reservation: int
    charge: int
    usage: dict[str, Any] | None
    scope: Scope
    replayed_tokens: int = 0
    detail: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict of the record."""
        return {
            "id": self.id,
            "status": self.status,
            "reservation": self.reservation,
            "charge": self.charge,
            "usage": _plain(self.usage),
            "scope": self.scope.to_dict(),
            "replayed_tokens": self.replayed_tokens,
            "detail": self.detail,
        }


@dataclasses.dataclass(frozen=True, slots=True)
class BudgetSnapshot:
    """A consistent reading of a budget's counters."""

    limit: int
    reserved: int
    charged: int
    replayed: int
    closed: bool
    closed_reason: str | None

    @property
    def remaining(self) -> int:
        """Tokens still admissible: limit minus reserved minus charged (never below 0)."""
        return max(0, self.limit - self.reserved - self.charged)


# --------------------------------------------------------------------------- validation


def check_count(value: object, what: str, *, minimum: int = 0) -> int:
    """`value` as a token count: an int (not a bool) of at least `minimum`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an integer, not {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{what} must be at least {minimum}, got {value}")
    return value


# --------------------------------------------------------------------------- usage


_CHAT_FIELDS: Final = ("prompt_tokens", "completion_tokens")
_INPUT_OUTPUT_FIELDS: Final = (
    "input_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "output_tokens",
)


def _field_reader(usage: UsageSource) -> Callable[[str], object]:
    """A reader of `usage[name]` for mappings, `usage.name` for objects (None if absent)."""
    if type(usage) is dict or isinstance(usage, Mapping):
        getter: Callable[[str], object] = usage.get
        return getter
    return lambda name: getattr(usage, name, None)


def _token_field(read: Callable[[str], object], name: str) -> int | None:
    """A counter of the usage as an int, None when absent; InvalidUsageError if malformed."""
    value = read(name)
    if value is None:
        return None
    if type(value) is int and value >= 0:
        return value
    if isinstance(value, bool):
        raise InvalidUsageError(f"usage {name} is a bool, not a token count")
    if isinstance(value, int):
        tokens = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        tokens = int(value)
    else:
        raise InvalidUsageError(f"usage {name}={value!r} is not a whole number of tokens")
    if tokens < 0:
        raise InvalidUsageError(f"usage {name}={tokens} is negative")
    return tokens


def usage_tokens(usage: UsageSource) -> int:
    """Total tokens to charge for a provider's usage, read from attributes or dict keys.

    OpenAI chat: `prompt_tokens + completion_tokens` (cached and reasoning tokens are
    already inside them; `*_tokens_details` are subsets and not added). OpenAI Responses:
    `input_tokens + output_tokens`. Anthropic: uncached `input_tokens` +
    `cache_creation_input_tokens` + `cache_read_input_tokens` + `output_tokens` (None
    cache fields count 0). When `total_tokens` is also given the larger of it and the sum
    is charged, so an inconsistent report never lowers the charge. Raises
    InvalidUsageError naming what is missing or wrong."""
    try:
        return _usage_tokens(usage)
    except InvalidUsageError:
        raise
    except Exception as exc:  # a usage object whose attributes fail to read
        raise InvalidUsageError(f"usage could not be read: {_describe(exc)}") from exc


def _usage_tokens(usage: UsageSource) -> int:
    if usage is None:
        raise InvalidUsageError("usage is missing")
    if isinstance(usage, (str, bytes, int, float, bool)):
        raise InvalidUsageError(f"usage is a {type(usage).__name__}, not a usage object")
    read = _field_reader(usage)
    total = _token_field(read, "total_tokens")
    chat: int | None = None
    for name in _CHAT_FIELDS:
        value = _token_field(read, name)
        if value is not None:
            chat = (chat or 0) + value
    io: int | None = None
    for name in _INPUT_OUTPUT_FIELDS:  # always validated; counted only without chat fields
        value = _token_field(read, name)
        if value is not None:
            io = (io or 0) + value
    summed = chat if chat is not None else io
    if summed is None and total is None:
        raise InvalidUsageError(
            "usage has no token counts (expected prompt_tokens/completion_tokens, "
            "input_tokens/output_tokens or total_tokens)"
        )
    return max(summed or 0, total or 0)


def response_usage(response: object) -> UsageSource:
    """The usage of a provider response: `response.usage` or `response["usage"]`; None if
    it has none."""
    if type(response) is dict or isinstance(response, Mapping):
        return response.get("usage")
    return getattr(response, "usage", None)


_SCALARS: Final = (str, bool, int, type(None))


def _plain(value: object, depth: int = 0) -> Any:
    """A JSON-able plain-data copy of a usage value (mappings, objects, sequences)."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is dict and depth <= 8:
        items: dict[Any, Any] = value  # type: ignore[assignment]
        return {
            str(key): item if type(item) in _SCALARS else _plain(item, depth + 1)
            for key, item in items.items()
        }
    if isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if depth > 8:
        return repr(value)
    if isinstance(value, Mapping):
        return {str(key): _plain(item, depth + 1) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item, depth + 1) for item in value]
    dump = getattr(value, "model_dump", None)  # pydantic models (OpenAI, Anthropic SDKs)
    if callable(dump):
        try:
            dumped = dump()
        except Exception:  # a model_dump that fails is not usage we can copy
            dumped = None
        if isinstance(dumped, Mapping):
            return _plain(dumped, depth + 1)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            field.name: _plain(getattr(value, field.name), depth + 1)
            for field in dataclasses.fields(value)
        }
    attributes = getattr(value, "__dict__", None)
    if isinstance(attributes, dict):
        return {
            key: _plain(item, depth + 1)
            for key, item in attributes.items()
            if not key.startswith("_")
        }
    return repr(value)


def usage_snapshot(usage: UsageSource) -> dict[str, Any] | None:
    """The supplied usage as a plain dict, every field kept as given; None if no usage.
    A value that is not a mapping or object is kept under the key `value`."""
    if usage is None:
        return None
    try:
        plain = _plain(usage)
    except Exception:  # an object that fails to read: keep what it was, not its fields
        return {"value": f"<unreadable {type(usage).__name__}>"}
    if isinstance(plain, dict):
        return plain
    return {"value": plain}


# --------------------------------------------------------------------------- authorities


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


# --------------------------------------------------------------------------- provider wrapper


class AbortSignal(Protocol):
    """Anything with `is_set()`: a threading.Event, an asyncio.Event, ..."""

    def is_set(self) -> bool: ...


Estimator: TypeAlias = "int | Callable[[Any], int]"


def _accepts_signal(function: Callable[..., Any] | None) -> bool:
    """Whether `function` takes a `signal` keyword, so an abort signal can be forwarded."""
    if function is None:
        return False
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False
    parameter = parameters.get("signal")
    return parameter is not None and parameter.kind in (
        inspect.Parameter.KEYWORD_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    )


def _cancel_requested(task: asyncio.Task[Any] | None) -> bool:
    """True if `task` has a pending cancellation request (Python 3.11+)."""
    cancelling = getattr(task, "cancelling", None)
    return bool(cancelling()) if cancelling is not None else False


def _describe(exc: BaseException) -> str:
    text = str(exc)
    name = type(exc).__name__
    return f"{name}: {text[:200]}" if text else name


class BudgetedProvider:
    """A provider whose every `invoke` / `ainvoke` is admitted by a budget, then settled.

    Only `invoke` and `ainvoke` are metered; streaming is deliberately not wrapped (call
    the non-streaming invoke), and no other attribute of the provider is forwarded, so
    nothing can bypass the budget by accident."""

    def __init__(
        self,
        provider: object,
        budget: BudgetAuthority,
        *,
        reserve_tokens: Estimator,
        scope: Mapping[str, ScopeValue] | None = None,
        require_usage: bool = False,
        usage_of: Callable[[Any], UsageSource] | None = None,
    ) -> None:
        if not isinstance(budget, BudgetAuthority):
            raise TypeError(
                f"budget must be a TokenBudget or SharedTokenBudget, not {type(budget).__name__}"
            )
        if callable(reserve_tokens):
            self._estimate: Callable[[Any], int] = reserve_tokens
        else:
            fixed = check_count(reserve_tokens, "reserve_tokens", minimum=1)
            self._estimate = lambda _request: fixed
        if not isinstance(require_usage, bool):
            raise TypeError("require_usage must be a bool")
        sync_call = getattr(provider, "invoke", None)
        async_call = getattr(provider, "ainvoke", None)
        if sync_call is None and async_call is None and callable(provider):
            sync_call = provider
        if sync_call is not None and not callable(sync_call):
            raise TypeError("provider.invoke is not callable")
        if async_call is not None and not callable(async_call):
            raise TypeError("provider.ainvoke is not callable")
        if sync_call is not None and inspect.iscoroutinefunction(sync_call):
            async_call = async_call or sync_call
            sync_call = None
        if sync_call is None and async_call is None:
            raise TypeError(
                f"provider {type(provider).__name__} has neither invoke(request) nor "
                f"ainvoke(request) and is not callable"
            )
        self.provider = provider
        self.budget = budget
        self.scope = Scope.of(scope)
        self.require_usage = require_usage
        self._usage_of = usage_of or response_usage
        self._sync: Callable[..., Any] | None = sync_call
        self._async: Callable[..., Any] | None = async_call
        self._sync_signal = _accepts_signal(sync_call)
        self._async_signal = _accepts_signal(async_call)

    def __repr__(self) -> str:
        return f"<BudgetedProvider {type(self.provider).__name__} scope={self.scope.to_dict()}>"

    # -- admission

    def _admit(self, request: Any, signal: AbortSignal | None) -> Reservation:
        """Check the abort signal, estimate, reserve. Raises before anything is held."""
        if signal is not None and signal.is_set():
            raise CallAbortedError("abort signal was set before admission; nothing charged")
        tokens = check_count(self._estimate(request), "reserve_tokens(request)", minimum=1)
        return self.budget.reserve(tokens, self.scope)

    # -- settlement

    def _settle_response(self, reservation: Reservation, response: Any) -> Any:
        usage: UsageSource = None
        try:
            usage = self._usage_of(response)
            tokens = usage_tokens(usage)
        except Exception as exc:  # even a failing usage_of must not leak the reservation
            problem = (
                exc
                if isinstance(exc, InvalidUsageError)
                else InvalidUsageError(f"usage could not be read: {_describe(exc)}")
            )
            record = self.budget.settle(
                reservation, status=INVALID_USAGE, usage=usage, detail=str(problem)
            )
            if self.require_usage:
                error = InvalidUsageError(
                    f"{problem}; the whole reservation of {reservation.tokens} tokens was "
                    f"charged and require_usage rejects the response"
                )
                error.record = record
                error.response = response
                raise error from None
            return response
        try:
            self.budget.settle(reservation, tokens, status=SETTLED, usage=usage)
        except BudgetExceededError as exceeded:
            exceeded.response = response
            raise
        return response

    def _settle_failure(self, reservation: Reservation, exc: BaseException) -> None:
        """Charge a failed or cancelled call: its reported usage if the exception carries
        valid usage (`exc.usage`), else the whole reservation as `unknown`."""
        usage = getattr(exc, "usage", None)
        if usage is not None:
            try:
                tokens = usage_tokens(usage)
            except InvalidUsageError:
                pass
            else:
                self.budget.settle(
                    reservation, tokens, status=FAILED, usage=usage, detail=_describe(exc)
                )
                return
        self.budget.settle(reservation, status=UNKNOWN, usage=usage, detail=_describe(exc))

    # -- calls

    def invoke(self, request: Any, *, signal: AbortSignal | None = None) -> Any:
        """Admit, call `provider.invoke(request)`, settle. A KeyboardInterrupt or any
        failure without usage charges the whole reservation (`unknown`) and is re-raised.
        `signal` is checked before admission and forwarded if the provider accepts it."""
        if self._sync is None:
            raise TypeError("provider is async only; use `await metered.ainvoke(request)`")
        reservation = self._admit(request, signal)
        try:
            if self._sync_signal and signal is not None:
                response = self._sync(request, signal=signal)
            else:
                response = self._sync(request)
        except BaseException as exc:
            self._settle_failure(reservation, exc)
            raise
        if type(response) is not dict and inspect.isawaitable(response):
            if inspect.iscoroutine(response):
                response.close()  # never started: the provider did no work
            self.budget.release(reservation, detail="provider.invoke returned an awaitable")
            raise TypeError(
                "provider.invoke returned an awaitable; use `await metered.ainvoke(request)`"
            )
        return self._settle_response(reservation, response)

    async def ainvoke(self, request: Any, *, signal: AbortSignal | None = None) -> Any:
        """Admit, await the provider (`ainvoke`, an async `invoke`, or a sync `invoke` in a
        worker thread), settle. A task already cancelled or a signal already set is not
        admitted. Cancellation during the call charges the whole reservation (`unknown`)
        and re-raises. An asyncio.Event signal set during the call cancels it the same way
        and raises CallAbortedError."""
        if signal is not None and signal.is_set():
            raise CallAbortedError("abort signal was set before admission; nothing charged")
        task = asyncio.current_task()
        if sys.version_info < (3, 11):  # pragma: no cover - no Task.cancelling() before 3.11
            await asyncio.sleep(0)  # let a pending cancellation surface before admission
        elif _cancel_requested(task):
            raise asyncio.CancelledError("task was cancelled before admission; nothing charged")
        reservation = self._admit(request, signal)
        try:
            response = await self._call_async(request, signal)
        except BaseException as exc:
            self._settle_failure(reservation, exc)
            raise
        return self._settle_response(reservation, response)

    def _start_async(self, request: Any, signal: AbortSignal | None) -> Awaitable[Any]:
        if self._async is not None:
            if self._async_signal and signal is not None:
                return cast(Awaitable[Any], self._async(request, signal=signal))
            return cast(Awaitable[Any], self._async(request))
        assert self._sync is not None
        if self._sync_signal and signal is not None:
            return asyncio.to_thread(self._sync, request, signal=signal)
        return asyncio.to_thread(self._sync, request)

    async def _call_async(self, request: Any, signal: AbortSignal | None) -> Any:
        waiter_factory = getattr(signal, "wait", None)
        if signal is None or not inspect.iscoroutinefunction(waiter_factory):
            response = await self._start_async(request, signal)
            if inspect.isawaitable(response):  # a sync invoke that returned a coroutine
                response = await response
            return response
        call = asyncio.ensure_future(self._start_async(request, signal))
        waiter = asyncio.ensure_future(cast(Callable[[], Awaitable[Any]], waiter_factory)())
        try:
            await asyncio.wait({call, waiter}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            call.cancel()
            raise
        finally:
            waiter.cancel()
        if not call.done():
            call.cancel()
            try:
                await call
            except asyncio.CancelledError:
                if _cancel_requested(asyncio.current_task()):
                    raise  # this task itself was cancelled meanwhile
            if call.cancelled():
                raise CallAbortedError("abort signal was set during the call")
        response = call.result()
        if inspect.isawaitable(response):
            response = await response
        return response


def budgeted_provider(
    provider: object,
    budget: BudgetAuthority,
    *,
    reserve_tokens: Estimator,
    scope: Mapping[str, ScopeValue] | None = None,
    require_usage: bool = False,
    usage_of: Callable[[Any], UsageSource] | None = None,
) -> BudgetedProvider:
    """Wrap `provider` (an object with `invoke(request)` and/or `ainvoke(request)`, or a
    plain callable) so every call reserves `reserve_tokens(request)` (or a fixed int) on
    `budget` first and settles its actual usage after. `scope` is recorded on every
    record; `require_usage` rejects responses whose usage is invalid or missing (after
    charging the reservation); `usage_of(response)` overrides where usage is read from
    (default: `response.usage` or `response["usage"]`)."""
    return BudgetedProvider(
        provider,
        budget,
        reserve_tokens=reserve_tokens,
        scope=scope,
        require_usage=require_usage,
        usage_of=usage_of,
    )
