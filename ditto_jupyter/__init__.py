"""ditto-jupyter: git-like control over live Jupyter runtimes.

The package root re-exports the worker API (portable state, BranchStore, token budgets,
graphs and loops): `from ditto_jupyter import BranchStore`. It is also the IPython extension
(`%load_ext ditto_jupyter`), the Jupyter server extension (enabled by the
`jupyter_server_config.d` file shipped with the package) and, through the built
`labextension/` folder, the JupyterLab extension (the Runtimes side panel).
`workspace()` tells code in a kernel where its runtime's workspace is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ditto_jupyter.worker.branch_store import Branch, BranchStore
from ditto_jupyter.worker.budget import BudgetExceededError, TokenBudget, budgeted_provider
from ditto_jupyter.worker.errors import (
    BranchClosedError,
    BranchConflictError,
    StateDigestError,
    StateError,
    StateScopeError,
    StateValidationError,
    StateVersionError,
)
from ditto_jupyter.worker.graph import Graph, GraphCheckpointOptions, UncertainCheckpointError
from ditto_jupyter.worker.loop import LoopCheckpointOptions
from ditto_jupyter.worker.runtime import Runtime
from ditto_jupyter.worker.shared_budget import SharedTokenBudget
from ditto_jupyter.worker.state import checkpoint_state, restore_state

__version__ = "0.1.0"

__all__ = [
    "Branch",
    "BranchClosedError",
    "BranchConflictError",
    "BranchStore",
    "BudgetExceededError",
    "Graph",
    "GraphCheckpointOptions",
    "LoopCheckpointOptions",
    "Runtime",
    "SharedTokenBudget",
    "StateDigestError",
    "StateError",
    "StateScopeError",
    "StateValidationError",
    "StateVersionError",
    "TokenBudget",
    "UncertainCheckpointError",
    "budgeted_provider",
    "checkpoint_state",
    "restore_state",
    "runtime_budget",
    "workspace",
]


def workspace() -> Path:
    """The local workspace directory of this kernel's runtime (also `$DITTO_WORKSPACE`).

    Checkpoints hold the kernel's variables and this directory, and `%%sandbox` runs in
    it. The kernel itself runs in its notebook's folder, which checkpoints do not hold.
    """
    from ditto_jupyter.kernel.workspace import workspace as find

    return find()


def load_ipython_extension(shell: Any) -> None:
    """`%load_ext ditto_jupyter`: register the magics, `%budget` showing TokenBudgetView."""
    from ditto_jupyter.kernel.magics import load_ipython_extension as load

    load(shell, budget_view=_token_budget_view)


def _token_budget_view(budget: SharedTokenBudget, title: str) -> Any:
    """The view `%budget` shows (ipywidgets is imported only when one is made)."""
    from ditto_jupyter.widgets import TokenBudgetView

    return TokenBudgetView(budget, title=title)


def runtime_budget(runtime_id: str | None = None) -> SharedTokenBudget:
    """The shared token budget this kernel's runtime counts against, for `budgeted_provider`.

    Set it with `%budget LIMIT`. A checkout counts against its source's budget unless it
    was given its own (`%budget LIMIT --own`). With `runtime_id`, that runtime's budget.
    Raises `RuntimeBudgetNotSet` (a LookupError) when there is none.
    """
    from ditto_jupyter.kernel.runtime_budget import current_runtime_budget

    return current_runtime_budget(runtime_id)


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    """The server extension lives in `ditto_jupyter.server`."""
    from ditto_jupyter.server import _jupyter_server_extension_points as points

    return points()


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """The JupyterLab extension (the Runtimes side panel), built into `labextension/`."""
    return [{"src": "labextension", "dest": "ditto-jupyter"}]
