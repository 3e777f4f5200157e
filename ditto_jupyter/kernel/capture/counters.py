"""Counters that pickling advances, put back, so an unchanged value pickles to the same bytes.

A checkpoint stores a value again when its pickle's bytes change. Some libraries draw from a
counter while pickling: matplotlib's `CallbackRegistry.__getstate__` takes the next callback
id (`next(self._cid_gen)`), so every figure's pickle differed from the last one and every
checkpoint re-saved every figure (hundreds of KB for a cell that changed nothing). The
pickler reduces such objects itself and winds the counter back, so pickling has no side
effect and the bytes repeat; restore is unchanged (the registry resumes from the pickled
id, as before).

Each entry of `_KNOWN` names a class by module and name; it is looked up only when its
module is already imported.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable
from typing import Any

Reducer = Callable[[Any], Any]


def _callback_registry(registry: Any) -> Any:
    reduced = registry.__reduce_ex__(5)
    state = reduced[2] if isinstance(reduced, tuple) and len(reduced) > 2 else None
    drawn = state.get("_cid_gen") if isinstance(state, dict) else None
    if isinstance(drawn, int):
        registry._cid_gen = itertools.count(drawn)  # the id pickling took, given back
    return reduced


_KNOWN: tuple[tuple[str, str, Reducer], ...] = (
    ("matplotlib.cbook", "CallbackRegistry", _callback_registry),
)


def counter_reducers() -> dict[type, Reducer]:
    """Reducers for the counter-advancing classes whose modules are imported (exact types)."""
    found: dict[type, Reducer] = {}
    for module, name, reducer in _KNOWN:
        cls = getattr(sys.modules.get(module), name, None)
        if isinstance(cls, type):
            found[cls] = reducer
    return found
