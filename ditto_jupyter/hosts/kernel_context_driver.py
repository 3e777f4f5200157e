"""KernelContextDriver: the session context of a notebook runtime is a live kernel.

The control plane starts and stops kernels through a `KernelHost` and captures or restores
their namespaces by calling `ditto_jupyter.kernel.capture` inside them, by name
(`kernel_calls`; the server-initiated path: the kernel is idle). A magic cannot use that
path, since its own kernel is busy running it: it calls `capture_namespace` /
`restore_namespace` on its own namespace in-process and hands the resulting
`ContextCapture` to the service.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ditto_jupyter.core.environment import workspace_env
from ditto_jupyter.core.errors import BackendError
from ditto_jupyter.core.models import ContextCapture, SessionRecord, UnrestorableValue
from ditto_jupyter.hosts.kernel_calls import (
    CAPTURE,
    FENCE,
    RESTORE,
    SEAL,
    SETTLE,
    UNSEAL,
    WARM_UP,
)
from ditto_jupyter.hosts.kernel_host import KernelHost


class KernelContextDriver:
    """ContextDriver over real kernels; `handle_state` is `{"kernel_id": ...}`.

    `notebook_folder` says where a runtime's kernels run (its notebook's folder); without
    it they run in the host's own working directory.
    """

    def __init__(
        self,
        host: KernelHost,
        blob_root: Path,
        *,
        notebook_folder: Callable[[SessionRecord], Path | None] | None = None,
    ) -> None:
        self.host = host
        self.blob_root = Path(blob_root)
        self.notebook_folder = notebook_folder
        self._last_manifest: dict[str, str] = {}

    @staticmethod
    def kernel_id(session: SessionRecord) -> str:
        """The live kernel of a session (BackendError when it has none)."""
        kernel_id = session.handle_state.get("kernel_id")
        if not isinstance(kernel_id, str) or not kernel_id:
            raise BackendError(f"runtime {session.session_id} has no live kernel")
        return kernel_id

    async def start(self, session: SessionRecord, workspace: Path | None) -> dict[str, Any]:
        """Start a kernel in the notebook's folder, told where its workspace is."""
        cwd = self.notebook_folder(session) if self.notebook_folder is not None else None
        kernel_id = await self.host.start_kernel(
            session.kernel_name, cwd=cwd, env=workspace_env(workspace)
        )
        try:  # load the capture code now, not during the first checkpoint
            await self.host.call(kernel_id, WARM_UP, {"blob_root": str(self.blob_root)})
        except BaseException:
            await self.host.shutdown_kernel(kernel_id)
            raise
        return {"kernel_id": kernel_id}

    async def stop(self, session: SessionRecord) -> None:
        """Shut the session's kernel down (nothing to do when it has none)."""
        kernel_id = session.handle_state.get("kernel_id")
        if isinstance(kernel_id, str) and kernel_id:
            self._last_manifest.pop(kernel_id, None)
            await self.host.shutdown_kernel(kernel_id)

    async def is_busy(self, session: SessionRecord) -> bool:
        """Whether the session's kernel is running code."""
        kernel_id = session.handle_state.get("kernel_id")
        if not isinstance(kernel_id, str) or not kernel_id:
            return False
        return await self.host.is_busy(kernel_id)

    async def capture(self, session: SessionRecord) -> ContextCapture:
        """Capture the kernel's namespace (incrementally after its previous capture)."""
        kernel_id = self.kernel_id(session)
        result = await self.host.call(
            kernel_id,
            CAPTURE,
            {
                "blob_root": str(self.blob_root),
                "previous_manifest_id": self._last_manifest.get(kernel_id),
                "runtime_id": session.session_id,
            },
        )
        try:
            captured = ContextCapture.model_validate_json(_json(result))
        except ValidationError as error:
            reason = f"kernel {kernel_id} returned a malformed capture: {error}"
            raise BackendError(reason) from None
        self._last_manifest[kernel_id] = captured.manifest_id
        return captured

    async def settle(self, session: SessionRecord) -> None:
        """Wait for the kernel's `%autocheckpoint` write-behind (`kernel_calls.SETTLE`)."""
        await self.host.call(self.kernel_id(session), SETTLE, {})

    async def fence(self, session: SessionRecord) -> None:
        """Make the kernel count every cell from now on (`kernel.pause_fence`)."""
        await self.host.call(self.kernel_id(session), FENCE, {})

    async def seal(self, session: SessionRecord) -> bool:
        """Seal the kernel unless a cell ran since the fence (the call queues behind any
        cell that arrived, so it sees it)."""
        sealed = await self.host.call(
            self.kernel_id(session), SEAL, {"runtime_id": session.session_id}
        )
        return sealed is True

    async def unseal(self, session: SessionRecord) -> None:
        """Let the kernel run cells again."""
        await self.host.call(self.kernel_id(session), UNSEAL, {})

    async def restore(
        self, session: SessionRecord, manifest_id: str | None, *, arrivals: str | None = None
    ) -> list[UnrestorableValue]:
        """Replace the kernel's namespace with a captured one (None: an empty one), reading
        what the store lacks from a fetch's arrival log as it lands."""
        kernel_id = self.kernel_id(session)
        args: dict[str, object] = {"blob_root": str(self.blob_root), "manifest_id": manifest_id}
        if arrivals is not None:
            args["arrivals"] = arrivals
        result = await self.host.call(kernel_id, RESTORE, args)
        if not isinstance(result, list):
            raise BackendError(f"kernel {kernel_id} returned a malformed restore result")
        try:
            lost = [UnrestorableValue.model_validate_json(_json(entry)) for entry in result]
        except ValidationError as error:
            reason = f"kernel {kernel_id} returned a malformed restore: {error}"
            raise BackendError(reason) from None
        if manifest_id is not None:
            self._last_manifest[kernel_id] = manifest_id
        return lost


def _json(value: object) -> str:
    return json.dumps(value)
