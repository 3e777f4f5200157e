"""A JSON record kept as a delta against a base record it shares most of its values with.

A checkpoint taken after a cell that changed nothing differs from the one before it by a
few numbers (the run it follows, its time): the store keeps what they share once (a base)
and each checkpoint's differences beside it (`delta`), so a record fits a fraction of a page.

A delta is a JSON object over the base's keys: `[value]` replaces the value, a nested
object is a delta of the nested object. An object whose keys differ from its base's (or
come in another order) is replaced whole, so applying a delta gives back the very record,
key order included, and a delta never needs to remove a key. Values compare by JSON type
too: `1`, `1.0` and `true` are different values, and so are `0.0` and `-0.0`.
"""

from __future__ import annotations

import math
from typing import Any


class DeltaError(ValueError):
    """A delta that does not apply to its base (damaged, or written against another)."""


def same_json(a: object, b: object) -> bool:
    """Whether two JSON values are the same value, type and key order included."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        assert isinstance(b, dict)
        return list(a) == list(b) and all(same_json(a[key], b[key]) for key in a)
    if isinstance(a, list):
        assert isinstance(b, list)
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):  # 0.0 and -0.0 are equal numbers, and different JSON
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    return a == b


def delta(base: dict[str, Any], record: dict[str, Any]) -> dict[str, Any] | None:
    """What turns `base` into `record` (`{}`: nothing); None when their keys differ."""
    if list(base) != list(record):
        return None
    changes: dict[str, Any] = {}
    for key, value in record.items():
        old = base[key]
        if same_json(old, value):
            continue
        nested = delta(old, value) if isinstance(old, dict) and isinstance(value, dict) else None
        changes[key] = nested if nested is not None else [value]
    return changes


def apply_delta(base: dict[str, Any], changes: object) -> dict[str, Any]:
    """`base` with `changes` applied (a new object: `base` is left as it was); DeltaError
    when they do not fit each other."""
    if not isinstance(changes, dict):
        raise DeltaError(f"a delta is a JSON object, not {type(changes).__name__}")
    record = dict(base)
    for key, change in changes.items():
        if key not in base:
            raise DeltaError(f"the delta changes {key!r}, which its base does not hold")
        if isinstance(change, list) and len(change) == 1:
            record[key] = change[0]
        elif isinstance(change, dict) and isinstance(base[key], dict):
            record[key] = apply_delta(base[key], change)
        else:
            raise DeltaError(f"the delta of {key!r} is neither [value] nor a nested delta")
    return record
