"""Which open figures pyplot handed to the code of a cell.

Code reaches a figure that no variable of the cell names through pyplot's registry of
figure managers: `plt.gcf()`, `plt.gca()`, `plt.title()`, `plt.figure(3)`, and the libraries
that draw on the current figure (`df.plot()`, seaborn) all ask
`matplotlib._pylab_helpers.Gcf.get_active()` or `Gcf.get_fig_manager(num)`. Both are
wrapped, once (`kernel_hooks`), so that while a cell runs each figure they return is noted
(`FigureAccess.start` / `stop`). What such code changes through a setter, matplotlib's stale
marks show anyway (`figure_watch`); what it changes in place (an artist's array written
into, a figure's list appended to) only this shows.

Calls from ditto's own code are not the cell's and are not noted. Where the wrappers were
not in place for the whole cell (pyplot imported during it), `stop` answers None: the
journal then counts pyplot's current figure before and after the cell as reached, as it
always did.
"""

from __future__ import annotations

import sys
from typing import Any

from ditto_jupyter.kernel.capture import kernel_hooks

_OWN_PREFIX = "ditto_jupyter."


class FigureAccess:
    """The figures pyplot handed out during the cell that runs now."""

    def __init__(self) -> None:
        self.recording = False
        self.whole_cell = False
        self.handed: list[Any] = []

    def start(self) -> None:
        """A cell starts: note from here (the wrappers are put in if pyplot is loaded)."""
        self.handed = []
        self.whole_cell = _install(self)
        self.recording = True

    def stop(self) -> list[Any] | None:
        """The cell ended: the figures handed out during it (None: not known)."""
        self.recording = False
        handed, self.handed = self.handed, []
        return handed if self.whole_cell else None

    def note(self, manager: Any) -> None:
        """A manager was handed out: note its figure while a cell runs."""
        if not self.recording or manager is None:
            return
        # note <- _tell <- the Gcf wrapper (kernel_hooks) <- the caller
        caller = sys._getframe(3).f_globals.get("__name__", "")
        if isinstance(caller, str) and caller.startswith(_OWN_PREFIX):
            return
        figure = getattr(getattr(manager, "canvas", None), "figure", None)
        if figure is not None:
            self.handed.append(figure)


def _install(access: FigureAccess) -> bool:
    """Wrap Gcf's two accessors to tell `access` (once per process, `kernel_hooks`; later
    journals take over the telling); whether they are in place."""
    _listeners[:] = [access]
    return kernel_hooks.wrap_pyplot_accessors(_tell)


def _tell(manager: Any) -> None:
    for listener in _listeners:
        listener.note(manager)


#: The access the wrappers tell (the shell's journal's; one shell per kernel).
_listeners: list[FigureAccess] = []
