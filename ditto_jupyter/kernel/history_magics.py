"""`%diff`, `%compare` and `%undo`: what changed between two points in time, 2 to 8 of
them side by side, and back to just before the last cell.

- `%diff A B` compares checkpoints A and B (ids, id prefixes or names; either may be
  `live`: this kernel now); `%diff A` compares A with its parent; `%diff` alone compares
  the head with this kernel now. It returns a `DiffView` (text, and HTML in JupyterLab):
  variables from what the kernel recorded at capture time, files from the workspace
  snapshots (this kernel's live workspace for `live`), cells from the checkpoints' notebook
  documents (the saved notebook for `live`). Comparing with `live` captures this kernel's
  namespace without recording a checkpoint.
- `%compare A B C ...` shows 2 to 8 points in time side by side (`CompareView`): each
  `RUNTIME` (live when it is live, else its head), `RUNTIME@REF` (a checkpoint of it, or
  `@live`) or `@REF` (a checkpoint of this runtime). This kernel is busy running the
  magic, so it is never a live side: bare, its own runtime is its head.
- `%undo`, with `%autocheckpoint` on, rolls this kernel back to just before the last cell
  it recorded: its variables (restored here first) and its workspace files (brought back
  by the control plane), and names the cell. When the files cannot come back, the
  variables are put back as they were and the error is one line.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics, line_magic, magics_class

from ditto_jupyter.core.errors import Conflict, DittoError, InvalidRequest

# Loaded with the magics in every kernel: the capture, the models and the diff view are
# imported by the magic that first needs them.
if TYPE_CHECKING:
    from ditto_jupyter.core.models import UnrestorableValue
    from ditto_jupyter.kernel.autocheckpoint import AutoCheckpointer
    from ditto_jupyter.kernel.diff_view import CompareView, DiffView
    from ditto_jupyter.kernel.runtime_control import RuntimeControl

T = TypeVar("T")


class MagicsOwner(Protocol):
    """What these magics need from the kernel's main magics (`DittoMagics`)."""

    @property
    def control(self) -> RuntimeControl: ...

    @property
    def namespace(self) -> dict[str, Any]: ...

    last_manifest: str | None
    autocheckpointer: AutoCheckpointer

    def guard(self, action: Callable[[], T]) -> T | None: ...


def _split(line: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError as error:
        raise InvalidRequest(f"cannot parse the arguments: {error}") from None


def _lost(values: list[UnrestorableValue]) -> str:
    return ", ".join(f"{v.name} ({v.type}: {v.reason})" for v in values)


def undo_line(
    execution_count: int, source: str, checkpoint_id: str, name: str | None, lost: str
) -> str:
    """`undid cell 12 (x = 1): back at checkpoint 3f2a9c1b0d4e 'cell-11'; ...`."""
    first = next((line.strip() for line in source.splitlines() if line.strip()), "")
    first = first if len(first) <= 40 else first[:39] + "…"
    label = f" {name!r}" if name else ""
    text = (
        f"undid cell {execution_count} ({first}): back at checkpoint "
        f"{checkpoint_id[:12]}{label}; variables and workspace files restored"
    )
    return text + (f"; not kept: {lost}" if lost else "")


@magics_class
class HistoryMagics(Magics):
    """`%diff` and `%undo` of one kernel, beside its `DittoMagics`."""

    def __init__(self, shell: InteractiveShell, owner: MagicsOwner) -> None:
        super().__init__(shell)
        self.owner = owner

    @line_magic
    def diff(self, line: str = "") -> DiffView | None:
        """`%diff A B`, `%diff A` (against its parent), `%diff` (the head against this kernel
        now); A or B may be `live`. Returns the comparison (text and HTML)."""

        def run() -> DiffView:
            from ditto_jupyter.core.models import LIVE
            from ditto_jupyter.kernel.capture import capture_following, open_blob_store
            from ditto_jupyter.kernel.diff_view import DiffView

            parts = _split(line)
            if len(parts) > 2:
                raise InvalidRequest("%diff takes at most two checkpoints: %diff A B")
            owner = self.owner
            control = owner.control
            if not parts:
                from_ref, to_ref = None, LIVE
            elif len(parts) == 1 and parts[0] != LIVE:
                checkpoint = control.resolve(parts[0])
                if checkpoint.parent_checkpoint_id is None:
                    raise InvalidRequest(
                        f"checkpoint {checkpoint.checkpoint_id[:12]} has no parent: "
                        "compare it with another (%diff A B) or with this kernel (%diff A live)"
                    )
                from_ref, to_ref = checkpoint.parent_checkpoint_id, checkpoint.checkpoint_id
            elif len(parts) == 1:
                from_ref, to_ref = None, LIVE
            else:
                from_ref, to_ref = parts[0], parts[1]
            capture = None
            if LIVE in (from_ref, to_ref):
                capture = capture_following(
                    owner.namespace,
                    open_blob_store(control.blob_root),
                    previous_manifest_id=owner.last_manifest,
                    runtime_id=control.runtime_id,
                )
            return DiffView(control.diff(from_ref, to_ref, capture))

        return self.owner.guard(run)

    @line_magic
    def compare(self, line: str = "") -> CompareView | None:
        """`%compare A B C ...`: 2 to 8 points in time side by side (see the module)."""

        def run() -> CompareView:
            from ditto_jupyter.core.models import LIVE
            from ditto_jupyter.kernel.diff_view import CompareView

            control = self.owner.control
            sides: list[tuple[str, str | None]] = []
            for part in _split(line):
                runtime_id, marked, ref = part.partition("@")
                runtime_id = runtime_id or control.runtime_id
                at: str | None = ref if marked else None
                if runtime_id == control.runtime_id and at in (None, LIVE):
                    if at == LIVE:
                        raise InvalidRequest(
                            "this kernel is running %compare: compare one of its checkpoints "
                            "(@NAME), or use %diff for this kernel now"
                        )
                    at = control.lineage(runtime_id).head_checkpoint_id
                    if at is None:
                        raise InvalidRequest("this runtime has no checkpoint yet to compare")
                sides.append((runtime_id, at))
            return CompareView(control.compare(sides))

        return self.owner.guard(run)

    def _at(self, manifest_id: str | None) -> bool:
        """Whether this kernel's variables are the state `manifest_id` holds (cells ran
        since it, but changed nothing): a capture, compared."""
        from ditto_jupyter.kernel.capture import capture_following, open_blob_store

        owner = self.owner
        control = owner.control
        capture = capture_following(
            owner.namespace,
            open_blob_store(control.blob_root),
            previous_manifest_id=owner.last_manifest,
            runtime_id=control.runtime_id,
        )
        return manifest_id is not None and capture.manifest_id == manifest_id

    @line_magic
    def undo(self, line: str = "") -> None:
        """Roll this kernel back to just before the last cell `%autocheckpoint` recorded:
        variables and workspace files. Prints a line naming the cell."""

        def run() -> None:
            from ditto_jupyter.kernel.capture import open_blob_store, restore_namespace

            if _split(line):
                raise InvalidRequest("%undo takes no arguments")
            owner = self.owner
            control = owner.control
            plan = control.undo_plan()
            blobs = open_blob_store(control.blob_root)
            refusal = owner.autocheckpointer.undo_refusal(plan)
            if refusal is not None and not self._at(plan.head_manifest):
                raise Conflict(refusal)  # going back would lose cells no checkpoint holds
            target = plan.target
            lost = restore_namespace(owner.namespace, blobs, target.context_manifest_id)
            try:
                result = control.record_undo(target.checkpoint_id, plan.head_id)
            except DittoError:
                restore_namespace(owner.namespace, blobs, plan.head_manifest)
                raise
            owner.last_manifest = target.context_manifest_id
            owner.autocheckpointer.undone()
            cell = result.undone_cell
            lost_text = _lost(lost or target.unrestorable)
            print(
                undo_line(
                    cell.execution_count, cell.source, target.checkpoint_id, target.name, lost_text
                )
            )

        self.owner.guard(run)
