"""The Jupyter server extension of ditto-jupyter (REST API, events, kernel host).

Kept import-light: the extension app is imported only when the server loads it.
"""

from __future__ import annotations

from typing import Any


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    """Tell jupyter_server which ExtensionApp this package provides."""
    from ditto_jupyter.server.app import DittoJupyterApp

    return [{"module": "ditto_jupyter.server.app", "app": DittoJupyterApp}]
