"""The runtime control plane: `RuntimeService` over a persistent store, blobs and backends.

Front ends (the server extension, the magics, the CLI) call `RuntimeService`; they do not
reimplement it. `ditto_jupyter.wiring.open_runtime_service` opens one on a data directory.

`from ditto_jupyter.control import RuntimeService` imports the service (and with it the SQL
store and SQLAlchemy) when it is asked for, not when a light module of this package is
(`budget_registry`, `context_driver`): a kernel's `%budget` needs neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ditto_jupyter.control.service import RuntimeService

__all__ = ["RuntimeService"]


def __getattr__(name: str) -> Any:
    """`RuntimeService`, imported on first use."""
    if name == "RuntimeService":
        from ditto_jupyter.control.service import RuntimeService

        return RuntimeService
    raise AttributeError(f"module 'ditto_jupyter.control' has no attribute {name!r}")
