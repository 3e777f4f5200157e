"""Notebook widgets: `BranchStoreView` and `TokenBudgetView` over the worker API, and
`CheckpointTree` over the runtime control (its view is in the JupyterLab extension).

Both are compositions of ipywidgets 8's own controls (HTML, buttons, boxes), not anywidget:
they need no front-end code of their own, so they render wherever ipywidgets does
(JupyterLab ships its widget manager) and their buttons call Python directly. Each keeps
itself current by polling what it shows on a timer in a daemon thread (`polling`), so it
moves while a cell runs and when another process charges a shared budget. Each one's
`text/plain` is a one-line summary of what it shows.
"""

from __future__ import annotations

from ditto_jupyter.widgets.branch_store_view import BranchStoreView
from ditto_jupyter.widgets.checkpoint_tree import CheckpointTree
from ditto_jupyter.widgets.token_budget_view import TokenBudgetView

__all__ = ["BranchStoreView", "CheckpointTree", "TokenBudgetView"]
