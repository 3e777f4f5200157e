"""Which runtime control this kernel's magics get: the server's, or the in-process one.

A kernel a Jupyter server with the extension started (`DITTO_SERVER_URL` and
`DITTO_RUNTIME_ID` in its environment) talks to that server's REST API (`server_control`).
Any other kernel (plain IPython, `jupyter console`, nbval) runs the control plane in its
own process (`local_control`: the RuntimeService on the embedded SQLite store). Each is
imported only when it is chosen: a server's kernel never imports the control plane, the
SQL store or SQLAlchemy, so loading the magics stays cheap for every notebook a server
opens.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ditto_jupyter.kernel.runtime_control import Namespace, RuntimeControl


def control_from_environment(
    namespace: Namespace, conversation_id: str, *, notebook_folder: Path | None = None
) -> RuntimeControl:
    """ServerControl when a server started this kernel (or DITTO_SERVER_URL says so).

    Otherwise a LocalControl whose kernels run in `notebook_folder` (default: the cwd).
    """
    from ditto_jupyter.kernel.server_control import server_control_from_environment

    server = server_control_from_environment()
    if server is not None:
        return server
    from ditto_jupyter.kernel.local_control import LocalControl
    from ditto_jupyter.kernel.runtime_control import data_dir_from_environment

    return LocalControl(
        namespace,
        data_dir=data_dir_from_environment(),
        conversation_id=conversation_id,
        notebook_folder=notebook_folder,
    )
