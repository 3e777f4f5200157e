"""pyplot's figures as part of a checkpoint: which are open, under which numbers, which is current.

pyplot holds figures that no variable does (`plt.plot`, `plt.figure(2)`, `plt.hist`). A
capture of a namespace that uses pyplot (an IPython shell's namespace, or one that holds the
`matplotlib.pyplot` module) marks its manifest `"pyplot": true` and, when figures are open,
records them as one more value under the reserved name `PYPLOT_FIGURES`: a list of
`(number, figure)` in pyplot's order, the current figure last. That value is grouped with the
variables like any other, so `fig is plt.gcf()` survives a restore.

Restoring a manifest marked so leaves pyplot holding exactly the checkpoint's figures, under
their numbers, with the same current figure; figures opened since are closed. (Unpickling a
figure registers it with pyplot under the next free number and makes it current: that is
matplotlib's own `Figure.__setstate__`; `show_only` renumbers and reorders afterwards.) When
the figures could not be kept or loaded, pyplot is left as it was before the restore. A
manifest without the mark (older checkpoints, namespaces that do not use pyplot) leaves
pyplot as unpickling left it, as before.
"""

from __future__ import annotations

import sys
from typing import Any

from ditto_jupyter.kernel.capture.rules import ipython_shell

#: The name the open figures are recorded under: not an identifier, so no variable has it.
PYPLOT_FIGURES = "<pyplot figures>"
#: The manifest key that says the capture recorded pyplot's state.
MANIFEST_KEY = "pyplot"

Managers = list[tuple[int, Any]]


def owns_pyplot(namespace: dict[str, object]) -> bool:
    """Whether pyplot's state belongs to this namespace's checkpoints."""
    if ipython_shell(namespace) is not None:
        return True
    pyplot = sys.modules.get("matplotlib.pyplot")
    return pyplot is not None and any(value is pyplot for value in namespace.values())


def _figure_registry() -> Any:
    """matplotlib's `Gcf` (pyplot's figure managers), if pyplot is imported."""
    if "matplotlib.pyplot" not in sys.modules:
        return None
    helpers = sys.modules.get("matplotlib._pylab_helpers")
    return getattr(helpers, "Gcf", None)


def open_figures() -> list[tuple[int, Any]]:
    """pyplot's open figures as `(number, figure)`, the current one last."""
    registry = _figure_registry()
    if registry is None:
        return []
    return [(int(num), manager.canvas.figure) for num, manager in registry.figs.items()]


def managers() -> Managers:
    """pyplot's figure managers as `(number, manager)`, the current one last."""
    registry = _figure_registry()
    return [] if registry is None else list(registry.figs.items())


def _keep(wanted: Managers) -> None:
    """Make pyplot hold exactly these managers, numbered and ordered so; close the rest."""
    registry = _figure_registry()
    if registry is None:
        return
    kept = {id(manager) for _, manager in wanted}
    for manager in list(registry.figs.values()):
        if id(manager) not in kept:
            registry.destroy(manager)
    registry.figs.clear()
    for num, manager in wanted:
        manager.num = num
        registry._set_new_active_manager(manager)  # sets the figure's number, makes it current


def show_only(figures: list[tuple[int, Any]]) -> None:
    """Make pyplot hold exactly `figures` (restored ones), under their numbers, the last one
    current; every other figure is closed."""
    wanted: Managers = []
    for num, figure in figures:
        manager = figure.canvas.manager
        if manager is None:  # a figure unpickled without pyplot's mark: give it a manager
            pyplot: Any = sys.modules["matplotlib.pyplot"]
            manager = pyplot._get_backend_mod().new_figure_manager_given_figure(num, figure)
        wanted.append((num, manager))
    _keep(wanted)


def put_back(before: Managers) -> None:
    """Return pyplot to the managers it had before a restore (closing any added since)."""
    _keep(before)
