"""Kernel call: a warm kernel from the server's pool learns which runtime it now is.

A pooled kernel starts with the server's variables only (`DITTO_SERVER_URL`, `DITTO_TOKEN`,
`DITTO_DATA_DIR`), in the server's root folder, before anyone knows which runtime it will
serve. When the server hands it to a runtime (checkout, resume) it calls `adopt_runtime`
first, before the restore: everything the kernel would have read from its environment at
start (the runtime id and token the magics and the budget use, the workspace
`ditto_jupyter.workspace()` returns, the data directory) is set, and the kernel moves to
its notebook's folder as a kernel started there would be (`''` on `sys.path` follows the
working directory, IPython's directory history starts there). The magics read the
environment lazily; a runtime control they made before (none, in a kernel nobody ran code
in) is dropped (`this_kernel.adopt`) so the next magic builds it from the new identity.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any

from ditto_jupyter.core.environment import (
    DATA_DIR_ENV,
    RUNTIME_ID_ENV,
    RUNTIME_TOKEN_ENV,
    WORKSPACE_ENV,
)
from ditto_jupyter.core.errors import InvalidRequest
from ditto_jupyter.kernel import this_kernel


def _absolute(name: str, value: object) -> str:
    if not isinstance(value, str) or not os.path.isabs(value):
        raise InvalidRequest(f"{name} {value!r} is not an absolute path")
    return value


def adopt_runtime(
    runtime_id: str,
    runtime_token: str,
    data_dir: str,
    cwd: str,
    workspace: str | None = None,
) -> dict[str, str]:
    """Make this kernel runtime `runtime_id`'s; what it now reports about itself."""
    if not isinstance(runtime_id, str) or not runtime_id:
        raise InvalidRequest("runtime_id must be a non-empty string")
    if not isinstance(runtime_token, str) or not runtime_token:
        raise InvalidRequest("runtime_token must be a non-empty string")
    data_dir = _absolute("data_dir", data_dir)
    cwd = _absolute("cwd", cwd)
    if workspace is not None:
        workspace = _absolute("workspace", workspace)
    if not os.path.isdir(cwd):
        raise InvalidRequest(f"the kernel's folder {cwd} is not a directory")
    os.environ[RUNTIME_ID_ENV] = runtime_id
    os.environ[RUNTIME_TOKEN_ENV] = runtime_token
    os.environ[DATA_DIR_ENV] = data_dir
    if workspace is None:
        os.environ.pop(WORKSPACE_ENV, None)
    else:
        os.environ[WORKSPACE_ENV] = workspace
    _move_to(cwd)
    _reset_magics(Path(cwd))
    return {"runtime_id": runtime_id, "cwd": os.getcwd()}


def _move_to(cwd: str) -> None:
    """chdir, with `sys.path` entries naming the old folder following it."""
    previous = os.getcwd()
    os.chdir(cwd)
    sys.path[:] = [cwd if entry == previous else entry for entry in sys.path]
    importlib.invalidate_caches()  # a finder must not remember the old folder's listing


def _reset_magics(folder: Path) -> None:
    """Point this kernel's control and IPython's directory history at the new folder."""
    this_kernel.adopt(folder)
    shell = _shell()
    if shell is None:
        return
    history = shell.user_ns.get("_dh")
    if isinstance(history, list):
        history[:] = [folder]


def _shell() -> Any:
    if "IPython" not in sys.modules:
        return None
    from IPython import get_ipython

    return get_ipython()
