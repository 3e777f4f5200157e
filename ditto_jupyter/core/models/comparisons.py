"""What a checkpoint holds, what changed between two points in time, and 2 to 8 points in
time side by side (`compare`, issue 44 §3).

Everything here is read from what the kernel recorded at capture time (each variable's
type, summary, size and digest), from the workspace manifests and from the stored
documents: answering never unpickles a value.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from ditto_jupyter.core.models.documents import NotebookDocument
from ditto_jupyter.core.models.fields import RequestId, StrictModel

#: `from` / `to` of a comparison that names the runtime's live kernel and notebook.
LIVE = "live"


class Variable(StrictModel):
    """One variable of a checkpoint as the kernel described it when it captured it.

    `type` is the qualified type name; `summary` a short description (shape and dtype of
    an array, shape and columns of a data frame, length of a container, the repr of a short
    scalar or string); `size` the bytes its pickle took (None when unknown); `kept` false
    when the checkpoint could not keep it, with the `reason`; `digest` a hash of its kept
    bytes, which tells a changed value whose summary is the same (an array edited in place).
    """

    name: str
    type: str
    summary: str
    size: int | None
    kept: bool
    reason: str | None = None
    digest: str | None = None


class FilesHeld(StrictModel):
    """How many files a checkpoint's workspace snapshot holds, and their bytes (None when
    the backend cannot say: an E2B snapshot, a deleted or pruned one)."""

    count: int | None
    bytes: int | None


class DocumentHeld(StrictModel):
    """The notebook document a checkpoint holds: how many cells."""

    cells: int


class CheckpointContents(StrictModel):
    """GET .../checkpoints/{reference}/contents: what a checkpoint holds."""

    checkpoint_id: str
    variables: list[Variable]
    files: FilesHeld
    document: DocumentHeld | None


class DiffSide(StrictModel):
    """One side of a comparison: a checkpoint (its id), or the live runtime (id null)."""

    checkpoint_id: str | None
    label: str


class VariableChange(StrictModel):
    """A variable both sides hold, changed: its old and new description."""

    name: str
    old: Variable
    new: Variable


class VariablesDiff(StrictModel):
    """Variables added, removed and changed; `available` false when a side holds none to
    compare (a pruned checkpoint)."""

    added: list[Variable]
    removed: list[Variable]
    changed: list[VariableChange]
    unchanged: int
    available: bool = True


class FileEntry(StrictModel):
    """One entry of a workspace: a file, a folder or a symbolic link."""

    path: str
    size: int | None
    kind: Literal["file", "dir", "symlink"]


class FileChange(StrictModel):
    """A path both sides hold, changed; `text_diff` a unified diff for small text files."""

    path: str
    old: FileEntry
    new: FileEntry
    text_diff: str | None


class FilesDiff(StrictModel):
    """Workspace entries added, removed and changed; `available` false when a side's files
    cannot be read here (an E2B snapshot, a deleted or pruned snapshot)."""

    added: list[FileEntry]
    removed: list[FileEntry]
    changed: list[FileChange]
    unchanged: int
    available: bool = True


class CellEntry(StrictModel):
    """One cell of a notebook document: where it is, what it is, how many outputs."""

    index: int
    cell_type: str
    source: str
    execution_count: int | None
    outputs: int


class CellChange(StrictModel):
    """A cell both documents hold, changed: a unified diff of its source (None when the
    source is the same) and whether its outputs changed."""

    index_old: int
    index_new: int
    source_diff: str | None
    outputs_changed: bool
    old: CellEntry
    new: CellEntry


#: How the cells of a comparison were paired: by their ids, by nbdime's similarity, by
#: their sources (too many cells without ids for nbdime), or in order (nbdime failed).
AlignedBy = Literal["ids", "nbdime", "sources", "order"]


class CellsDiff(StrictModel):
    """Cells added, removed and changed; `available` false when a side holds no document.

    `aligned_by` says how the cells that differ were paired (None when nothing needed
    pairing); `note` says why, when it is not the best way (too many cells without ids for
    nbdime: aligned by their sources)."""

    added: list[CellEntry]
    removed: list[CellEntry]
    changed: list[CellChange]
    unchanged: int
    available: bool
    aligned_by: AlignedBy | None = None
    note: str | None = None


#: How many cells of two documents differ (None: a side holds none), and the comparison's
#: note (`CellsDiff.note`).
CellsCounted = tuple[int | None, str | None]


class RuntimeDiffRequest(StrictModel):
    """POST /api/v1/runtimes/diff: compare two checkpoints, or a checkpoint and the live
    runtime (`"live"`). `from` defaults to the head, `to` to `"live"`; `document` is the
    live notebook as the user sees it (else the saved file stands for it)."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        frozen=True,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
    )

    runtime_id: RequestId
    from_: RequestId | None = Field(
        default=None, validation_alias="from", serialization_alias="from"
    )
    to: RequestId | None = None
    document: NotebookDocument | None = None


class RuntimeDiffResult(StrictModel):
    """What changed from `from` to `to`: variables, files and cells."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        frozen=True,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
    )

    from_: DiffSide = Field(validation_alias="from", serialization_alias="from")
    to: DiffSide
    variables: VariablesDiff
    files: FilesDiff
    cells: CellsDiff


class CompareSideRequest(StrictModel):
    """One side of a compare: a runtime and when (`at`): `"live"`, a checkpoint reference
    within that runtime, or null (live when the runtime is live, else its head)."""

    runtime_id: RequestId
    at: RequestId | None = None


class RuntimeCompareRequest(StrictModel):
    """POST /api/v1/runtimes/compare: 2 to 8 points in time, of one runtime or several."""

    sides: list[CompareSideRequest]


class CompareSide(StrictModel):
    """One side of a compare: the runtime, its checkpoint (null: the live runtime), a label."""

    runtime_id: str
    checkpoint_id: str | None
    label: str


class VariableRow(StrictModel):
    """One variable across the sides (null where a side holds none of that name); `same`
    when every side holding variables holds it, all alike (digest, else type and summary)."""

    name: str
    values: list[Variable | None]
    same: bool


class VariablesSideBySide(StrictModel):
    """The variables of every side, by name; `available` false for a side that holds none
    to show (a pruned checkpoint)."""

    available: list[bool]
    rows: list[VariableRow]


class FileRow(StrictModel):
    """One workspace path across the sides; `same` when every side whose files can be read
    holds it with the same content."""

    path: str
    entries: list[FileEntry | None]
    same: bool


class FilesSideBySide(StrictModel):
    """The workspace entries of every side, by path; `available` false for a side whose
    files cannot be read here (an E2B snapshot, a deleted or pruned snapshot)."""

    available: list[bool]
    rows: list[FileRow]


class CellRow(StrictModel):
    """The cells at one position across the sides; `same` when every side holding a
    document holds a cell there with the same source."""

    index: int
    cells: list[CellEntry | None]
    same: bool


class CellsSideBySide(StrictModel):
    """The notebook cells of every side, by position; `available` false for a side that
    holds no document."""

    available: list[bool]
    rows: list[CellRow]


class RuntimeCompareResult(StrictModel):
    """2 to 8 points in time side by side: each row one value per side, in the sides' order."""

    sides: list[CompareSide]
    variables: VariablesSideBySide
    files: FilesSideBySide
    cells: CellsSideBySide
