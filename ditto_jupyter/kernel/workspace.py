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

from ditto_jupyter.core.environment import WORKSPACE_ENV
from ditto_jupyter.core.errors import InvalidRequest
from ditto_jupyter.kernel import this_kernel


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
    path = this_kernel.control().workspace_path()
    os.environ[WORKSPACE_ENV] = str(path)
    return path
