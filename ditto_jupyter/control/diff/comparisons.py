"""What a checkpoint holds, and what changed between two points in time of a runtime.

A point in time (a `Side`) is a checkpoint, or the runtime as it is now (`live`): its
kernel's variables (from a capture that is not recorded: the server's own of an idle
kernel, or the one a magic took of itself), its live workspace files, and the notebook as
the caller sees it. Each part is read from what was recorded: the namespace manifest's
summaries and digests (`core.namespace_manifest`), the workspace manifests, the stored
documents. Nothing is unpickled. A part a side cannot show (a pruned checkpoint, an E2B
snapshot, no document) makes that part of the comparison unavailable, never an error.
`compare` shows 2 to 8 sides, of one runtime or several, side by side (`side_by_side`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from ditto_jupyter.backends.base import FileTree
from ditto_jupyter.control.checkpoint_documents import CheckpointDocuments
from ditto_jupyter.control.checkpointing import check_self_capture
from ditto_jupyter.control.diff.cells import changed_cell_count, compare_cells
from ditto_jupyter.control.diff.files import compare_files
from ditto_jupyter.control.diff.side_by_side import (
    cells_side_by_side,
    check_side_count,
    files_side_by_side,
    variables_side_by_side,
)
from ditto_jupyter.control.diff.variables import as_variable, compare_variables
from ditto_jupyter.control.documents.storage import CellView, cell_views
from ditto_jupyter.control.lookups import resolve_checkpoint
from ditto_jupyter.control.runtime_parts import RuntimeParts
from ditto_jupyter.core.blobs import BlobError
from ditto_jupyter.core.errors import DittoError, InvalidRequest
from ditto_jupyter.core.models import (
    LIVE,
    CellsCounted,
    CheckpointContents,
    CompareSide,
    ContextCapture,
    DiffSide,
    DocumentHeld,
    FilesHeld,
    NotebookDocument,
    RuntimeCheckpoint,
    RuntimeCompareResult,
    RuntimeDiffResult,
    SessionLifecycleStatus,
)
from ditto_jupyter.core.namespace_manifest import (
    RecordedVariable,
    load_namespace,
    recorded_variables,
)

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Side:
    """One point in time, as far as it can be shown (None: that part cannot)."""

    checkpoint_id: str | None
    label: str
    variables: dict[str, RecordedVariable] | None
    files: FileTree | None
    cells: list[CellView] | None

    def wire(self) -> DiffSide:
        return DiffSide(checkpoint_id=self.checkpoint_id, label=self.label)


@dataclass(frozen=True)
class LiveNotebook:
    """The live notebook as the caller sees it, and what to call it."""

    document: NotebookDocument
    label: str


@contextlib.contextmanager
def collection_paused() -> Iterator[None]:
    """No cyclic garbage collection inside the block: reading two big manifests allocates
    hundreds of thousands of objects that all live until the answer is made, and each
    collection would walk them all again (a comparison took 5x longer). Refcounting frees
    what goes; the next collection looks at the rest once."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def checkpoint_label(checkpoint: RuntimeCheckpoint) -> str:
    """`cell-5 (3f2a9c1b0d4e)`, or the short id of an unnamed checkpoint."""
    short = checkpoint.checkpoint_id[:12]
    return f"{checkpoint.name} ({short})" if checkpoint.name else short


class Comparisons:
    """Contents of checkpoints and comparisons of two points in time, over one service."""

    def __init__(self, parts: RuntimeParts, documents: CheckpointDocuments) -> None:
        self.parts = parts
        self.documents = documents

    # ---- the parts of a side ------------------------------------------------------------

    def _variables(self, manifest_id: str | None, whose: str) -> dict[str, RecordedVariable] | None:
        if manifest_id is None:
            return None
        try:
            return recorded_variables(load_namespace(self.parts.blobs, manifest_id))
        except DittoError:
            raise
        except (BlobError, KeyError, TypeError, ValueError) as error:
            _log.warning("ditto: the variables of %s cannot be read: %s", whose, error)
            return None

    def _files(self, checkpoint: RuntimeCheckpoint) -> FileTree | None:
        ref = checkpoint.backend_ref
        if ref is None or not ref.provider_snapshot_id:
            return None
        try:
            return self.parts.backends.snapshot_tree(ref)
        except DittoError as error:
            if error.http_status >= 500 and error.code != "BackendError":
                raise  # the disk or the store failed: not a part we can skip
            _log.warning(
                "ditto: the files of checkpoint %s cannot be read: %s",
                checkpoint.checkpoint_id,
                error,
            )
            return None

    def _cells(self, checkpoint: RuntimeCheckpoint) -> list[CellView] | None:
        manifest_id = checkpoint.document_manifest_id
        if manifest_id is None:
            return None
        try:
            return self.documents.store.views(manifest_id)
        except DittoError:
            raise
        except (BlobError, KeyError, TypeError, ValueError) as error:
            _log.warning(
                "ditto: the document of checkpoint %s cannot be read: %s",
                checkpoint.checkpoint_id,
                error,
            )
            return None

    def checkpoint_side(self, checkpoint: RuntimeCheckpoint) -> Side:
        """A checkpoint as a side of a comparison."""
        whose = f"checkpoint {checkpoint.checkpoint_id}"
        return Side(
            checkpoint_id=checkpoint.checkpoint_id,
            label=checkpoint_label(checkpoint),
            variables=self._variables(checkpoint.context_manifest_id, whose),
            files=self._files(checkpoint),
            cells=self._cells(checkpoint),
        )

    async def live_side(
        self,
        runtime_id: str,
        capture: ContextCapture | None,
        notebook: LiveNotebook | None,
    ) -> Side:
        """The runtime as it is now: its kernel's variables (`capture`, else a capture of
        the idle kernel that is not recorded), its live files, the caller's notebook.

        The caller holds the runtime's operation slot when no capture is given.
        """
        parts = self.parts
        session = parts.guard.live_session(runtime_id)
        if capture is None:
            await parts.guard.require_idle(session)
            capture = await parts.context.capture(session)
        else:
            check_self_capture(parts.blobs, runtime_id, capture)
        backend = await parts.backend(session)
        files = await backend.live_tree() if backend is not None else None
        cells = cell_views(notebook.document) if notebook is not None else None
        label = "live kernel" + (f", {notebook.label}" if notebook is not None else "")
        hold = f"diff:{uuid.uuid4().hex}"  # the capture is garbage once compared
        parts.guard.hold(hold, [capture.manifest_id])
        try:
            variables = self._variables(capture.manifest_id, f"runtime {runtime_id}'s kernel")
        finally:
            parts.guard.let_go(hold)
        return Side(checkpoint_id=None, label=label, variables=variables, files=files, cells=cells)

    # ---- the answers --------------------------------------------------------------------

    async def diff(
        self,
        runtime_id: str,
        from_ref: str | None,
        to_ref: str | None,
        *,
        capture: ContextCapture | None = None,
        notebook: LiveNotebook | None = None,
    ) -> RuntimeDiffResult:
        """What changed from `from_ref` (default: the head) to `to_ref` (default: `live`)."""
        parts = self.parts
        parts.guard.session(runtime_id)
        if from_ref is None:
            head = parts.store.get_head(runtime_id)
            if head is None:
                raise InvalidRequest(
                    f"runtime {runtime_id} has no checkpoint yet: name the two to compare"
                )
            from_ref = head
        to_ref = to_ref or LIVE
        refs = (from_ref, to_ref)
        resolved = {
            ref: resolve_checkpoint(parts.store, ref, runtime_id) for ref in refs if ref != LIVE
        }
        live: Side | None = None
        if LIVE in refs:
            if capture is None:  # the server captures the idle kernel: one operation
                async with parts.guard.operation(runtime_id):
                    live = await self.live_side(runtime_id, None, notebook)
            else:
                live = await self.live_side(runtime_id, capture, notebook)

        def side(ref: str) -> Side:
            if ref == LIVE:
                assert live is not None
                return live
            return self.checkpoint_side(resolved[ref])

        def compare() -> RuntimeDiffResult:
            with collection_paused():
                before, after = side(from_ref), side(to_ref)
                return RuntimeDiffResult(
                    from_=before.wire(),
                    to=after.wire(),
                    variables=compare_variables(before.variables, after.variables),
                    files=compare_files(before.files, after.files),
                    cells=compare_cells(before.cells, after.cells),
                )

        return await asyncio.to_thread(compare)

    def _side_at(self, runtime_id: str, at: str | None) -> RuntimeCheckpoint | None:
        """The checkpoint `at` names within the runtime, or None for the live runtime (`at`
        None: live when the runtime is live, else its head)."""
        parts = self.parts
        session = parts.guard.session(runtime_id)
        if at is None:
            if session.status in (SessionLifecycleStatus.IDLE, SessionLifecycleStatus.BUSY):
                return None
            at = parts.store.get_head(runtime_id)
            if at is None:
                raise InvalidRequest(
                    f"runtime {runtime_id} is {session.status.value} and has no checkpoint"
                )
        return None if at == LIVE else resolve_checkpoint(parts.store, at, runtime_id)

    async def compare(
        self,
        sides: Sequence[tuple[str, str | None]],
        notebooks: Mapping[str, LiveNotebook] | None = None,
    ) -> RuntimeCompareResult:
        """2 to 8 sides side by side, each (runtime id, `at`): `"live"`, a checkpoint
        reference within that runtime, or None (live when it is live, else its head). A
        live side is a capture of the idle kernel that is not recorded, with the runtime's
        notebook from `notebooks` (else none)."""
        check_side_count(len(sides))
        resolved = [(runtime_id, self._side_at(runtime_id, at)) for runtime_id, at in sides]
        live: dict[str, Side] = {}
        for runtime_id, checkpoint in resolved:
            if checkpoint is None and runtime_id not in live:
                notebook = (notebooks or {}).get(runtime_id)
                async with self.parts.guard.operation(runtime_id):
                    live[runtime_id] = await self.live_side(runtime_id, None, notebook)

        def compare() -> RuntimeCompareResult:
            with collection_paused():
                shown = [
                    live[runtime_id] if checkpoint is None else self.checkpoint_side(checkpoint)
                    for runtime_id, checkpoint in resolved
                ]
                return RuntimeCompareResult(
                    sides=[
                        CompareSide(
                            runtime_id=runtime_id,
                            checkpoint_id=side.checkpoint_id,
                            label=side.label,
                        )
                        for (runtime_id, _), side in zip(resolved, shown, strict=True)
                    ],
                    variables=variables_side_by_side([side.variables for side in shown]),
                    files=files_side_by_side([side.files for side in shown]),
                    cells=cells_side_by_side([side.cells for side in shown]),
                )

        return await asyncio.to_thread(compare)

    def contents(self, checkpoint: RuntimeCheckpoint) -> CheckpointContents:
        """What a checkpoint holds: its variables as recorded, its files, its document."""
        whose = f"checkpoint {checkpoint.checkpoint_id}"
        recorded = self._variables(checkpoint.context_manifest_id, whose) or {}
        tree = self._files(checkpoint)
        files = FilesHeld(count=None, bytes=None)
        if tree is not None:
            held = [entry for entry in tree.entries.values() if entry.kind == "file"]
            files = FilesHeld(count=len(held), bytes=sum(entry.size or 0 for entry in held))
        document = checkpoint.document
        return CheckpointContents(
            checkpoint_id=checkpoint.checkpoint_id,
            variables=[as_variable(recorded[name]) for name in sorted(recorded)],
            files=files,
            document=(
                DocumentHeld(cells=document.cells or 0)
                if document is not None and document.manifest_id
                else None
            ),
        )

    def changed_cells(
        self, checkpoint: RuntimeCheckpoint, document: NotebookDocument | None
    ) -> CellsCounted:
        """How many cells of the checkpoint's document differ from `document` (None when
        either is missing), and the comparison's note; blocking (reads and aligns)."""
        if document is None:
            return None, None
        return changed_cell_count(self._cells(checkpoint), cell_views(document))
