"""The context driver: the pluggable part of the control plane that runs a runtime's live state.

For a notebook runtime the live context is a kernel: the driver starts and stops it, asks
whether it is running a cell (`is_busy`), captures its namespace into the blob store and
restores a captured one into it. A pause fences the context before it captures and seals
it before it stops it, so that a cell that arrived meanwhile is never lost (`fence`,
`seal`, `unseal`). The kernel implementation lives above this layer
(`ditto_jupyter.hosts.kernel_context_driver`, over a kernel host; the code it calls inside
the kernel is `ditto_jupyter.kernel.capture`); the control plane only sees this protocol.
The control plane's own tests use a test double (`tests/fakes`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ditto_jupyter.core.models import ContextCapture, SessionRecord, UnrestorableValue


@runtime_checkable
class ContextDriver(Protocol):
    """Start, stop, probe, capture and restore the live context (the kernel) of a runtime."""

    async def start(self, session: SessionRecord, workspace: Path | None) -> dict[str, Any]:
        """Start a fresh context (a kernel) for `session`; return its new handle state.

        `workspace` is the runtime's local workspace directory (None for a remote
        sandbox). It is not where the kernel runs: every kernel of a runtime runs in its
        notebook's folder; the workspace is where code finds the files checkpoints keep.
        """
        ...

    async def stop(self, session: SessionRecord) -> None:
        """Stop the context and free what it holds (shut the kernel down)."""
        ...

    async def is_busy(self, session: SessionRecord) -> bool:
        """Whether the context is running user code right now."""
        ...

    async def capture(self, session: SessionRecord) -> ContextCapture:
        """Capture the live context into the blob store as one signed manifest."""
        ...

    async def fence(self, session: SessionRecord) -> None:
        """A pause's capture comes next: from now on, every cell the context runs counts."""
        ...

    async def seal(self, session: SessionRecord) -> bool:
        """Refuse every cell from now on, when none ran since `fence`; False, and nothing
        sealed, when one did (the pause then gives up and the context keeps running)."""
        ...

    async def unseal(self, session: SessionRecord) -> None:
        """Run cells again: the pause that sealed the context failed after."""
        ...

    async def restore(
        self, session: SessionRecord, manifest_id: str | None, *, arrivals: str | None = None
    ) -> list[UnrestorableValue]:
        """Replace the live context with a captured one (None: an empty context).

        `arrivals`: the arrival log of a fetch of the checkpoint still under way, for the
        restore to read what the store lacks from as it lands (`BlobStore.reading_arrivals`).
        Returns the values the checkpoint could not keep, to show the user again.
        """
        ...
