"""ditto-jupyter: git-like control over live Jupyter runtimes.

The package root is the Jupyter product:
- `workspace()`: where code in a kernel finds its runtime's workspace;
- `runtime_budget()`: the shared token budget this kernel's runtime counts against;
- the IPython extension (`%load_ext ditto_jupyter`: the magics), the Jupyter server
  extension (enabled by the `jupyter_server_config.d` file shipped with the package) and,
  through the built `labextension/` folder, the JupyterLab extension (the Runtimes side
  panel).

The worker API (portable state, BranchStore, token budgets, graphs and loops) lives in
`ditto_jupyter.worker`. The root re-exported it before: `from ditto_jupyter import Runtime`
still works for this release, with a DeprecationWarning naming the new import.

Importing the root imports nothing else: a kernel loading the magics pays only for what it
uses (the kernel and server packages are imported when IPython or the server loads them).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ditto_jupyter.worker.shared_budget import SharedTokenBudget

__version__ = "0.1.0"

__all__ = [
    "load_ipython_extension",
    "runtime_budget",
    "unload_ipython_extension",
    "workspace",
]

#: The worker names the root re-exported before `ditto_jupyter.worker` was their home.
MOVED_TO_WORKER = frozenset(
    {
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
    }
)


def __getattr__(name: str) -> Any:
    """The worker names at their old place, for one release, with a DeprecationWarning."""
    if name not in MOVED_TO_WORKER:
        raise AttributeError(f"module 'ditto_jupyter' has no attribute {name!r}")
    warnings.warn(
        f"`from ditto_jupyter import {name}` is deprecated and goes in the next release: "
        f"use `from ditto_jupyter.worker import {name}`",
        DeprecationWarning,
        stacklevel=2,
    )
    from ditto_jupyter import worker

    return getattr(worker, name)


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


def unload_ipython_extension(shell: Any) -> None:
    """`%unload_ext ditto_jupyter`: the magics go, automatic checkpoints stop (what they
    recorded stays), and every hook of ours comes out of the kernel."""
    from ditto_jupyter.kernel.unload import unload_ipython_extension as unload

    unload(shell)


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
