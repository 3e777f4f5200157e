"""What a budget holds and records: statuses, scopes, reservations, records, snapshots."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator, Mapping
from typing import Any, Final, Literal, NamedTuple, TypeAlias

from ditto_jupyter.worker.budget.usage import plain_usage

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

ScopeValue: TypeAlias = "str | int | float | bool | None"


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
            "usage": plain_usage(self.usage),
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


class LimitChange(NamedTuple):
    """What `SharedTokenBudget.set_limit` did: the budget before and after."""

    before: BudgetSnapshot
    after: BudgetSnapshot

    @property
    def closed_admission(self) -> bool:
        """True when this change closed admission (the new limit is below what is used)."""
        return self.after.closed and not self.before.closed

    @property
    def reopened_admission(self) -> bool:
        """True when this change reopened admission that an earlier lowering closed."""
        return self.before.closed and not self.after.closed


def check_count(value: object, what: str, *, minimum: int = 0) -> int:
    """`value` as a token count: an int (not a bool) of at least `minimum`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an integer, not {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{what} must be at least {minimum}, got {value}")
    return value
