"""The pickler's reducers for single library classes, each keeping a checkpoint's bytes or
its values true where the class's own pickling would not.

A checkpoint stores a value again when its pickle's bytes change, and brings it back as it
was. Three kinds of class need a reducer of the pickler's own:

- *counters* (`counter_reducers`): some libraries draw from a counter while pickling.
  matplotlib's `CallbackRegistry.__getstate__` takes the next callback id
  (`next(self._cid_gen)`), so every figure's pickle differed from the last one and every
  checkpoint re-saved every figure. The reducer winds the counter back, so pickling has no
  side effect and the bytes repeat; restore is unchanged (the registry resumes from the
  pickled id, as before).
- *lazy caches* (`cache_bases`): some objects fill a cache the first time they are shown.
  A matplotlib colormap builds its lookup table (`_lut`) when IPython asks for its PNG or
  HTML form, so a cell that only displayed a colormap re-saved it and every figure drawn
  with it. The reducer leaves such a cache out when it holds exactly what rebuilding it
  would give; unpickling rebuilds it on first use. A cache that differs from a rebuild
  (code that edited `_lut` in place) is pickled as it is.
- *kept state* (`kept_state_bases`): some classes drop attributes in `__getstate__` for a
  purpose of their own. joblib's `Memory`, `MemorizedFunc` and `MemorizedResult` set
  `timestamp` to None (and a `MemorizedFunc` its `_func_code_id`) so that joblib's hash of
  them does not depend on when they were made. The reducer puts the dropped attributes
  back into the state; joblib's own hashing, through its own pickler, is unchanged.

Each table names a class by module and name; it is looked up only when its module is
already imported. (These were the modules `counters`, `lazy_caches` and `kept_state`: the
package keeps those names importable, `capture.__init__`.)
"""

from __future__ import annotations

import copy
import itertools
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from ditto_jupyter.kernel.capture.rules import imported_class

Reducer = Callable[[Any], Any]


# ---- counters pickling advances, wound back -------------------------------------------


def _callback_registry(registry: Any) -> Any:
    reduced = registry.__reduce_ex__(5)
    state = reduced[2] if isinstance(reduced, tuple) and len(reduced) > 2 else None
    drawn = state.get("_cid_gen") if isinstance(state, dict) else None
    if isinstance(drawn, int):
        registry._cid_gen = itertools.count(drawn)  # the id pickling took, given back
    return reduced


_COUNTERS: tuple[tuple[str, str, Reducer], ...] = (
    ("matplotlib.cbook", "CallbackRegistry", _callback_registry),
)


def counter_reducers() -> dict[type, Reducer]:
    """Reducers for the counter-advancing classes whose modules are imported (exact types)."""
    found: dict[type, Reducer] = {}
    for module, name, reducer in _COUNTERS:
        cls = getattr(sys.modules.get(module), name, None)
        if isinstance(cls, type):
            found[cls] = reducer
    return found


# ---- lazy caches left out ---------------------------------------------------------------


def _colormap(colormap: Any) -> Any:
    reduced = colormap.__reduce_ex__(5)
    state = reduced[2] if isinstance(reduced, tuple) and len(reduced) > 2 else None
    if not isinstance(state, dict) or not state.get("_isinit"):
        return reduced
    table: Any = state.get("_lut")
    rebuilt = copy.copy(colormap)
    rebuilt._isinit = False
    rebuilt._lut = None
    try:
        rebuilt._init()
        same = np.array_equal(rebuilt._lut, table, equal_nan=True)
    except Exception:  # a colormap that cannot rebuild its table keeps it
        return reduced
    if not same:
        return reduced
    state = {key: value for key, value in state.items() if key != "_lut"}  # as before `_init`
    state["_isinit"] = False
    return (*reduced[:2], state, *reduced[3:])


_LAZY_CACHES: tuple[tuple[str, str, Reducer], ...] = (("matplotlib.colors", "Colormap", _colormap),)


def cache_bases() -> list[tuple[type, Reducer]]:
    """The classes (and their subclasses) with a lazy cache to leave out, whose modules are
    imported, with their reducers."""
    found = ((imported_class(module, name), reducer) for module, name, reducer in _LAZY_CACHES)
    return [(cls, reducer) for cls, reducer in found if cls is not None]


# ---- state a library leaves out of its pickle, kept -------------------------------------

_JOBLIB_MEMORY = "joblib.memory"
_KEPT_STATE: tuple[tuple[str, str, tuple[str, ...]], ...] = (
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
    found = ((imported_class(module, name), attributes) for module, name, attributes in _KEPT_STATE)
    return [(cls, _keeping(attributes)) for cls, attributes in found if cls is not None]
