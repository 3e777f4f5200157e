"""The runtime control plane: `RuntimeService` over a persistent store, blobs and backends.

Front ends (the server extension, the magics, the CLI) call `RuntimeService`; they do not
reimplement it. `ditto_jupyter.wiring.open_runtime_service` opens one on a data directory.
"""

from ditto_jupyter.control.service import RuntimeService

__all__ = ["RuntimeService"]
