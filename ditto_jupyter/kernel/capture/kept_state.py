"""State a library leaves out of its own pickle, kept in a checkpoint's.

A checkpoint brings a value back as it was. Some classes drop attributes in `__getstate__`
for a purpose of their own: joblib's `Memory`, `MemorizedFunc` and `MemorizedResult` set
`timestamp` to None (and a `MemorizedFunc` its `_func_code_id`) so that joblib's hash of
them does not depend on when they were made. A value restored through that pickle differs
from the live one (its timestamp is gone). The pickler reduces these classes as their own
`__reduce_ex__` does, then puts the dropped attributes back into the state; joblib's own
hashing, which pickles through its own pickler, is unchanged.

Each entry of `_KNOWN` names a class by module and name, and the attributes to keep; it is
looked up only when its module is already imported.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ditto_jupyter.kernel.capture.rules import imported_class

Reducer = Callable[[Any], Any]

_JOBLIB_MEMORY = "joblib.memory"
_KNOWN: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (_JOBLIB_MEMORY, "Memory", ("timestamp",)),
    (_JOBLIB_MEMORY, "MemorizedFunc", ("timestamp", "_func_code_id")),
    (_JOBLIB_MEMORY, "MemorizedResult", ("timestamp",)),
)


def _keeping(attributes: tuple[str, ...]) -> Reducer:
    """A reducer: the class's own reduction, with `attributes` as the live object has them."""

    def reduce(obj: Any) -> Any:
        reduced = obj.__reduce_ex__(5)
        live = getattr(obj, "__dict__", None)
        if not (isinstance(reduced, tuple) and len(reduced) > 2 and isinstance(live, dict)):
            return reduced
        state = reduced[2]
        if not isinstance(state, dict):
            return reduced
        state = {**state, **{key: live[key] for key in attributes if key in live}}
        return (*reduced[:2], state, *reduced[3:])

    return reduce


def kept_state_bases() -> list[tuple[type, Reducer]]:
    """The classes (and their subclasses) whose dropped state is kept, whose modules are
    imported, with their reducers."""
    found = ((imported_class(module, name), attributes) for module, name, attributes in _KNOWN)
    return [(cls, _keeping(attributes)) for cls, attributes in found if cls is not None]
