"""Where the runtime's workspace is, for code running in one of its kernels.

Every kernel of a runtime runs in its notebook's folder. The workspace, which checkpoints
version and `%%sandbox` runs in, is a separate directory: the kernel finds it in its
environment (`DITTO_WORKSPACE`, set when the kernel starts or when its runtime is
registered) or, when that is missing (a kernel JupyterLab restarted), asks its control
plane and remembers the answer in the environment.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ditto_jupyter.core.errors import InvalidRequest

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from ditto_jupyter.kernel.runtime_control import RuntimeControl

#: The environment variable holding the runtime's local workspace directory.
WORKSPACE_ENV = "DITTO_WORKSPACE"


def workspace_env(path: Path | None) -> dict[str, str]:
    """The variables a kernel of a runtime with this workspace gets (none without one)."""
    return {WORKSPACE_ENV: str(path)} if path is not None else {}


def without_workspace(environ: dict[str, str]) -> dict[str, str]:
    """`environ` without an inherited workspace (a kernel must never get another's)."""
    return {name: value for name, value in environ.items() if name != WORKSPACE_ENV}


def set_workspace_env(path: str) -> bool:
    """Kernel call: record the runtime's workspace in this kernel's environment."""
    if not isinstance(path, str) or not os.path.isabs(path):
        raise InvalidRequest(f"the workspace path {path!r} is not an absolute path")
    os.environ[WORKSPACE_ENV] = path
    return True


def prepare_kernel(workspace: str | None = None) -> bool:
    """Kernel call when the server registers a kernel it did not start: load the capture
    code (so the first checkpoint does not pay for it) and record the runtime's workspace.

    One call, not two: while a call of the server is queued behind a user's cell, the
    server counts the kernel as idle.
    """
    importlib.import_module("ditto_jupyter.kernel.capture")
    if workspace is not None:
        set_workspace_env(workspace)
    return True


def workspace() -> Path:
    """The local workspace directory of this kernel's runtime.

    It is what checkpoints version and where `%%sandbox` runs; the kernel itself runs in
    its notebook's folder, which checkpoints do not hold. Raises a DittoError with a
    one-line reason when the kernel has no runtime, or its runtime's files live in an E2B
    sandbox.
    """
    value = os.environ.get(WORKSPACE_ENV)
    if value:
        return Path(value)
    path = _control().workspace_path()
    os.environ[WORKSPACE_ENV] = str(path)
    return path


def _control() -> RuntimeControl:
    """The runtime control of this kernel: its magics', or the server's from the env."""
    from ditto_jupyter.kernel.magics import DittoMagics
    from ditto_jupyter.kernel.runtime_control import server_control_from_environment

    shell = _shell()
    if shell is not None:
        magics = shell.magics_manager.registry.get(DittoMagics.__name__)
        if isinstance(magics, DittoMagics):
            return magics.control
    control = server_control_from_environment()
    if control is None:
        raise InvalidRequest(
            "this kernel has no ditto runtime: run `%load_ext ditto_jupyter` first, or start "
            "it from a Jupyter server with the ditto_jupyter extension"
        )
    return control


def _shell() -> InteractiveShell | None:
    from IPython import get_ipython

    shell: InteractiveShell | None = get_ipython()
    return shell
