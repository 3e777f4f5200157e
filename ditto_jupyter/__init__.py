"""ditto-jupyter: git-like control over live Jupyter runtimes.

The package root re-exports the worker API (portable state, BranchStore, token budgets,
graphs and loops), like the seed library's root export.
"""

from __future__ import annotations

__version__ = "0.1.0"
