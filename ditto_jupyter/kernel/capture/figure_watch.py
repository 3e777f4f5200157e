"""Which matplotlib figures changed since a capture, without pickling them to find out.

Every matplotlib setter marks its artist stale, and the mark travels up to the figure
(`Artist.stale`, through the axes to the figure's `stale_callback`). A figure a capture
pickled is watched: its `stale_callback` is wrapped (`kernel_hooks`), so each change since
stamps the figure with a serial, whatever drew it (a cell, pyplot's current-figure
functions, an event callback). Drawing clears `stale` but never the stamp, and the wrapper
calls pyplot's own callback as before.

A figure counts as changed since a mark when it was stamped after it, when it is not
watched (never captured here, or restored: unpickling makes a new figure), when its
callback is no longer the wrapper (something replaced it), or when one of its artists is
animated (an animated artist does not pass its changes up). What no setter shows (a list
of the figure's changed in place, an array an artist holds written into) is the change
journal's to see: the names a cell uses, and pyplot's current figure around every cell.
"""

from __future__ import annotations

import itertools
import sys
import weakref
from typing import Any

from ditto_jupyter.kernel.capture import kernel_hooks

_serials = itertools.count(1)
_last = 0
#: figure -> the wrapper installed as its stale_callback
_wrappers: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
#: figure -> serial of its last change
_stamps: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def now() -> int:
    """The serial of the last change seen (a capture's mark)."""
    return _last


def _stamp(figure: Any) -> None:
    global _last
    _last = next(_serials)
    _stamps[figure] = _last


def watch(figure: Any) -> None:
    """Stamp `figure` at its every change from now on (idempotent)."""
    wrapper = _wrappers.get(figure)
    if wrapper is not None and getattr(figure, "stale_callback", None) is wrapper:
        return
    # watched from here: what came before, the capture saw
    _wrappers[figure] = kernel_hooks.wrap_stale_callback(figure, _stamp)


def changed_since(figure: Any, mark: int) -> bool:
    """Whether `figure` may have changed since `mark` (see the module docstring)."""
    wrapper = _wrappers.get(figure)
    if wrapper is None or getattr(figure, "stale_callback", None) is not wrapper:
        return True
    return _stamps.get(figure, 0) > mark


def figure_types() -> tuple[type, ...]:
    """matplotlib's figure classes (empty until matplotlib.figure is imported)."""
    module = sys.modules.get("matplotlib.figure")
    found = tuple(
        cls
        for cls in (getattr(module, "Figure", None), getattr(module, "SubFigure", None))
        if isinstance(cls, type)
    )
    return found


def root_figure(figure: Any) -> Any:
    """The top-level figure of a (sub)figure: the one pyplot and the stale mark reach."""
    seen = 0
    while seen < 64:
        parent = getattr(figure, "_parent", None)
        if parent is None or parent is figure:
            return figure
        figure, seen = parent, seen + 1
    return figure
