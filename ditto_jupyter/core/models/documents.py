"""The notebook document a checkpoint holds: its wire form, where it came from, and the
requests that carry one (a front end answering a checkpoint's pending document).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ditto_jupyter.core.models.fields import RequestId, StrictModel, now_ms

#: Where a checkpoint's document came from: the request itself, the front end that had the
#: notebook open (answering the checkpoint's event), the saved file, or nowhere.
DocumentOrigin = Literal["request", "front_end", "saved_file", "none"]
#: What a listing says of a checkpoint's document: its origin, or `pending` while a front
#: end may still answer with the notebook as the user sees it.
DocumentSource = Literal["request", "front_end", "saved_file", "none", "pending"]


class NotebookDocument(StrictModel):
    """An nbformat 4 notebook as JSON: what JupyterLab's model holds, unsaved edits included.

    Cells are checked further when a checkpoint stores them (`control.documents`): each is
    a code, markdown or raw cell with its source, and code cells carry their outputs.
    """

    nbformat: int = Field(ge=4, le=4, description="Always 4.")
    nbformat_minor: int = Field(ge=0)
    metadata: dict[str, Any]
    cells: list[dict[str, Any]]


class CheckpointDocument(StrictModel):
    """The document part of a stored checkpoint: its origin, blob-store manifest and size.

    `awaiting_until_ms` is set while a front end may still replace the recorded document
    (the saved file, or none) with the notebook as it sees it; past it, the record is final.
    """

    origin: DocumentOrigin
    manifest_id: str | None = None
    cells: int | None = Field(default=None, ge=0)
    awaiting_until_ms: int | None = None

    def awaiting(self, at_ms: int | None = None) -> bool:
        """Whether a front end's answer is still accepted."""
        until = self.awaiting_until_ms
        return until is not None and (now_ms() if at_ms is None else at_ms) < until

    def info(self) -> DocumentInfo:
        """What a checkpoint listing says of this document."""
        source: DocumentSource = "pending" if self.awaiting() else self.origin
        return DocumentInfo(source=source, cells=self.cells)


class DocumentInfo(StrictModel):
    """`document` of a checkpoint summary: where its document came from, how many cells."""

    source: DocumentSource
    cells: int | None


#: The summary of a checkpoint that holds no document.
NO_DOCUMENT = DocumentInfo(source="none", cells=None)


class CheckpointDocumentRequest(StrictModel):
    """POST /api/v1/runtimes/checkpoint/document: a front end answers a pending checkpoint
    with the notebook as the user sees it (accepted once, within the wait)."""

    runtime_id: RequestId
    checkpoint_id: RequestId
    document: NotebookDocument


class CheckpointDocumentResult(StrictModel):
    """The checkpoint whose document was recorded, and what it holds now."""

    checkpoint_id: str
    runtime_id: str
    document: DocumentInfo
