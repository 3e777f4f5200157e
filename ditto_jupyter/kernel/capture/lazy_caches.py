"""Lazy caches left out of a pickle, so showing a value does not make it look changed.

A checkpoint stores a value again when its pickle's bytes change. Some objects fill a cache
the first time they are shown: a matplotlib colormap builds its lookup table (`_lut`) when
IPython asks for its PNG or HTML form, so a cell that only displays a colormap re-saved it
and every figure drawn with it (tens of KB for a cell that changed nothing). The pickler
leaves such a cache out when it holds exactly what rebuilding it would give, so the value
pickles as it did before it was shown; unpickling rebuilds the cache on first use. A cache
that differs from a rebuild (code that edited `_lut` in place) is pickled as it is.

Each entry of `_KNOWN` names a class by module and name; it is looked up only when its
module is already imported.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np

from ditto_jupyter.kernel.capture.rules import imported_class

Reducer = Callable[[Any], Any]


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


_KNOWN: tuple[tuple[str, str, Reducer], ...] = (("matplotlib.colors", "Colormap", _colormap),)


def cache_bases() -> list[tuple[type, Reducer]]:
    """The classes (and their subclasses) with a lazy cache to leave out, whose modules are
    imported, with their reducers."""
    found = ((imported_class(module, name), reducer) for module, name, reducer in _KNOWN)
    return [(cls, reducer) for cls, reducer in found if cls is not None]
