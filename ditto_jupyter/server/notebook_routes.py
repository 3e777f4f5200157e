"""The routes of a checkpoint's notebook, of comparisons and of undo (issue 23).

A front end's answer to a checkpoint awaiting its document (`checkpoint/document`), what a
checkpoint holds (`.../contents`, `.../document`), comparing two points in time (`diff`,
and `self/diff` for a kernel's `%diff`), and undoing the last cell (`undo`, and `self/undo`
for `%undo`). Each talks to the session mapping only (its `documents` and `changes`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from ditto_jupyter.core.errors import (
    BackendError,
    CheckpointNotFound,
    InvalidRequest,
    RuntimeNotFound,
)
from ditto_jupyter.core.limits import MAX_DOCUMENT_BODY_BYTES
from ditto_jupyter.core.models import (
    CheckpointContents,
    CheckpointDocumentRequest,
    CheckpointDocumentResult,
    NotebookDocument,
    RuntimeDiffRequest,
    RuntimeDiffResult,
    RuntimeUndoRequest,
    RuntimeUndoResult,
    SelfDiffRequest,
    SelfUndoRequest,
)
from ditto_jupyter.server.route_spec import API_PREFIX, OPERATION_ERRORS, RouteRequest, RouteSpec
from ditto_jupyter.server.sessions import RuntimeSessions


async def _self_undo(sessions: RuntimeSessions, req: RouteRequest[SelfUndoRequest]) -> BaseModel:
    """A kernel undid its last cell: its token checked, its files back, the head moved."""
    body = req.body
    user = await sessions.check_runtime_token(body.runtime_id, body.runtime_token)
    return await sessions.changes.record_undo(
        body.runtime_id, body.checkpoint_id, body.undone_checkpoint_id, user
    )


async def _self_diff(sessions: RuntimeSessions, req: RouteRequest[SelfDiffRequest]) -> BaseModel:
    """A kernel compares: its token checked, `live` is its own capture."""
    body = req.body
    user = await sessions.check_runtime_token(body.runtime_id, body.runtime_token)
    return await sessions.changes.diff(
        body.runtime_id, body.from_, body.to, user, capture=body.capture
    )


async def _diff(sessions: RuntimeSessions, req: RouteRequest[RuntimeDiffRequest]) -> BaseModel:
    body = req.body
    return await sessions.changes.diff(
        body.runtime_id, body.from_, body.to, req.user, document=body.document
    )


async def _record_document(
    sessions: RuntimeSessions, req: RouteRequest[CheckpointDocumentRequest]
) -> BaseModel:
    body = req.body
    return await sessions.documents.record(
        body.runtime_id, body.checkpoint_id, body.document, req.user
    )


_TABLE = (
    RouteSpec(
        "POST",
        f"{API_PREFIX}/checkpoint/document",
        "Send the document of a checkpoint that awaits one",
        "send_a_checkpoints_document",
        CheckpointDocumentRequest,
        CheckpointDocumentResult,
        OPERATION_ERRORS,
        _record_document,
        body_limit=MAX_DOCUMENT_BODY_BYTES,
    ),
    RouteSpec(
        "POST",
        f"{API_PREFIX}/undo",
        "Undo a runtime's last cell",
        "undo_a_runtimes_last_cell",
        RuntimeUndoRequest,
        RuntimeUndoResult,
        OPERATION_ERRORS,
        lambda sessions, req: sessions.changes.undo(req.body.runtime_id, req.user),
    ),
    RouteSpec(
        "POST",
        f"{API_PREFIX}/diff",
        "Compare two checkpoints, or a checkpoint and the live runtime",
        "compare_checkpoints",
        RuntimeDiffRequest,
        RuntimeDiffResult,
        OPERATION_ERRORS,
        _diff,
        body_limit=MAX_DOCUMENT_BODY_BYTES,
    ),
    RouteSpec(
        "POST",
        f"{API_PREFIX}/self/undo",
        "Record a kernel's own undo of its last cell",
        "record_a_kernels_own_undo",
        SelfUndoRequest,
        RuntimeUndoResult,
        OPERATION_ERRORS,
        _self_undo,
    ),
    RouteSpec(
        "POST",
        f"{API_PREFIX}/self/diff",
        "Compare from a kernel's magic",
        "compare_from_a_kernels_magic",
        SelfDiffRequest,
        RuntimeDiffResult,
        OPERATION_ERRORS,
        _self_diff,
    ),
    RouteSpec[None](
        "GET",
        f"{API_PREFIX}/{{runtime_id}}/checkpoints/{{reference}}/contents",
        "List what a checkpoint holds",
        "get_checkpoint_contents",
        None,
        CheckpointContents,
        (InvalidRequest, RuntimeNotFound, CheckpointNotFound, BackendError),
        lambda sessions, req: sessions.documents.contents(
            req.path["runtime_id"], req.path["reference"], req.user
        ),
    ),
    RouteSpec[None](
        "GET",
        f"{API_PREFIX}/{{runtime_id}}/checkpoints/{{reference}}/document",
        "Get the notebook document a checkpoint holds",
        "get_checkpoint_document",
        None,
        NotebookDocument,
        (InvalidRequest, RuntimeNotFound, CheckpointNotFound),
        lambda sessions, req: sessions.documents.document(
            req.path["runtime_id"], req.path["reference"], req.user
        ),
    ),
)

#: The routes of this module, in the order of the OpenAPI document.
NOTEBOOK_ROUTES: tuple[RouteSpec[Any], ...] = _TABLE
