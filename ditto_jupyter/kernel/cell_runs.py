"""How many cells this kernel has run, with or without history.

IPython's execution count moves only for cells run with `store_history` (what JupyterLab
sends); nbval and some clients run cells without it, so two captures can report the same
count with a cell run between them. This counter moves for every cell IPython runs (its
`pre_run_cell` event), so a capture's run mark changes whenever a cell ran.
"""

from __future__ import annotations

from typing import Any

from ditto_jupyter.kernel.capture import kernel_hooks

_COUNTS: dict[int, list[int]] = {}


def cells_run(shell: Any) -> int | None:
    """The cells `shell` has run since this process first asked (counting starts then);
    None when it is no IPython shell with events."""
    events = getattr(shell, "events", None)
    if events is None or not hasattr(events, "register"):
        return None
    count = _COUNTS.get(id(shell))
    if count is None:
        count = [0]
        _COUNTS[id(shell)] = count

        def _one_more(_info: object) -> None:
            count[0] += 1

        kernel_hooks.register_event(shell, "pre_run_cell", _one_more)
        kernel_hooks.on_removal("the cell counter", lambda: _COUNTS.pop(id(shell), None))
    return count[0]
