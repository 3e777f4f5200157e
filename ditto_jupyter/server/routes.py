"""The one table of the runtime API's routes: the runtime operations and the extension's own.

Each `RouteSpec` says everything about a route: its method and path, the request model its
body is validated with (None for GET), the result model, the error types it can answer,
and the call: an async function of the session mapping and the parsed request. The REST
handlers (`handlers.py`) and the OpenAPI document (`openapi.py`) are both built from
`ROUTES`; neither knows the other. The calls talk only to `RuntimeSessions`.

Beyond the runtime operations (checkpoint, delete-snapshot, checkout, pause, resume, close,
and reading runtimes and their checkpoints), a few routes serve the magics and the side panel:
`POST /api/v1/runtimes/restore` (restore an idle kernel in place), `POST .../exec` (a shell
command in the runtime's backend, for `%%sandbox`), the `self/...` routes a kernel calls
about itself from a magic (it is busy running the magic, so it captures or restores its
own namespace and the server only records the result; `self/checkout` skips the idle
check for the caller's own checkpoints; each proves its runtime with the kernel's
`runtime_token`, see `runtime_tokens`), and two reads of one checkpoint by id, unique id
prefix or name: `GET /api/v1/runtimes/{runtime_id}/checkpoints/{reference}` within a
runtime, `GET /api/v1/runtimes/checkpoints/{reference}` across all runtimes.
`GET /api/v1/runtimes/{runtime_id}/workspace` says where a live runtime's workspace is
(`ditto_jupyter.workspace()` asks it when its kernel's environment does not say).
`GET /api/v1/runtimes/{runtime_id}/budget` answers the token budget the runtime counts
against (`%budget`), with the figures `ditto budget` prints.
Listing a runtime's checkpoints takes query parameters (`limit`, `cursor`, `order`): it
pages.
The side panel also reads `GET /api/v1/runtimes/{runtime_id}/lineage` (head, checkout
origin, checkouts made from the runtime) to draw a checkpoint tree with its branches.
A checkpoint holds the notebook too (issue 23): `POST .../checkpoint/document` is a front
end's answer to a checkpoint awaiting its document, `GET .../checkpoints/{reference}/document`
and `.../contents` read what a checkpoint holds, `POST .../diff` (and `self/diff`, a kernel's
`%diff`) compares two points in time, `POST .../undo` (and `self/undo`, `%undo`) goes back to
just before the last cell `%autocheckpoint` recorded. Routes whose body may carry a notebook
take bodies up to `MAX_DOCUMENT_BODY_BYTES`. LangGraph's checkpoints (issue 44) have routes
of their own (`langgraph_routes`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from ditto_jupyter.core.errors import (
    BackendError,
    CheckpointNotFound,
    InvalidRequest,
    RuntimeClosed,
    RuntimeNotFound,
    RuntimePaused,
)
from ditto_jupyter.core.limits import MAX_DOCUMENT_BODY_BYTES
from ditto_jupyter.core.models import (
    AutoCheckpointPruneResult,
    CheckpointDetail,
    CheckpointListQuery,
    CheckpointListResult,
    ExecRequest,
    ExecResponse,
    RuntimeBudgetResult,
    RuntimeCheckoutRequest,
    RuntimeCheckoutResult,
    RuntimeCheckpointRequest,
    RuntimeCheckpointResult,
    RuntimeCheckpointSnapshotDeleteRequest,
    RuntimeCheckpointSnapshotDeleteResult,
    RuntimeCloseRequest,
    RuntimeCloseResult,
    RuntimeLineage,
    RuntimeListResult,
    RuntimePauseRequest,
    RuntimePauseResult,
    RuntimeRecord,
    RuntimeRestoreRequest,
    RuntimeRestoreResult,
    RuntimeResumeRequest,
    RuntimeResumeResult,
    RuntimeWorkspace,
    SelfCheckoutRequest,
    SelfCheckpointRequest,
    SelfPauseRequest,
    SelfPruneRequest,
    SelfRestoreRequest,
)
from ditto_jupyter.server.branch_routes import BRANCH_ROUTES
from ditto_jupyter.server.langgraph_routes import LANGGRAPH_ROUTES
from ditto_jupyter.server.notebook_routes import NOTEBOOK_ROUTES
from ditto_jupyter.server.route_spec import (
    API_PREFIX,
    OPERATION_ERRORS,
    PATH_PARAMETERS,
    RouteRequest,
    RouteSpec,
)
from ditto_jupyter.server.sessions import RuntimeSessions

__all__ = ["API_PREFIX", "PATH_PARAMETERS", "ROUTES", "RouteRequest", "RouteSpec"]

# ---- calls that do more than one call of the session mapping ---------------------------


async def _self_checkpoint(
    sessions: RuntimeSessions, req: RouteRequest[SelfCheckpointRequest]
) -> BaseModel:
    """A kernel's own checkpoint: its token checked, then its capture recorded."""
    body = req.body
    user = await sessions.check_runtime_token(body.runtime_id, body.runtime_token)
    return await sessions.checkpoint(
        body.runtime_id,
        body.name,
        body.metadata,
        user,
        precaptured=body.capture,
        automatic=body.automatic,
    )


async def _self_pause(sessions: RuntimeSessions, req: RouteRequest[SelfPauseRequest]) -> BaseModel:
    """A kernel pauses itself: its token checked, its capture recorded, then it stops."""
    body = req.body
    user = await sessions.check_runtime_token(body.runtime_id, body.runtime_token)
    return await sessions.pause(
        body.runtime_id, body.name, body.metadata, user, precaptured=body.capture
    )


async def _self_restore(
    sessions: RuntimeSessions, req: RouteRequest[SelfRestoreRequest]
) -> BaseModel:
    """A kernel restored itself: its token checked, then the checkpoint becomes its head."""
    body = req.body
    user = await sessions.check_runtime_token(body.runtime_id, body.runtime_token)
    return await sessions.record_restore(body.runtime_id, body.checkpoint_id, user)


async def _self_checkout(
    sessions: RuntimeSessions, req: RouteRequest[SelfCheckoutRequest]
) -> BaseModel:
    """A kernel's own checkout: its token checked, then branch (no idle check of itself)."""
    body = req.body
    user = await sessions.check_runtime_token(body.runtime_id, body.runtime_token)
    await sessions.ensure_runtime(body.runtime_id, user)
    return await sessions.checkout(
        body.checkpoint_id,
        body.conversation_id,
        body.sender_id,
        body.metadata,
        user,
        caller_runtime_id=body.runtime_id,
        count=body.count,
    )


async def _self_prune(sessions: RuntimeSessions, req: RouteRequest[SelfPruneRequest]) -> BaseModel:
    """A kernel prunes its automatic checkpoints: its token checked, then the prune."""
    body = req.body
    user = await sessions.check_runtime_token(body.runtime_id, body.runtime_token)
    return await sessions.prune_automatic(body.runtime_id, body.keep, user)


async def _exec(sessions: RuntimeSessions, req: RouteRequest[ExecRequest]) -> BaseModel:
    body = req.body
    result = await sessions.exec(body.runtime_id, body.command, body.timeout, req.user)
    return ExecResponse(
        exit_code=result.exit_code,
        stdout=result.stdout,
        stderr=result.stderr,
        timed_out=result.timed_out,
        truncated=result.truncated,
    )


async def _list_checkpoints(
    sessions: RuntimeSessions, req: RouteRequest[None]
) -> CheckpointListResult:
    """One page of a runtime's checkpoints."""
    query = req.query if isinstance(req.query, CheckpointListQuery) else CheckpointListQuery()
    return await sessions.list_checkpoints(
        req.path["runtime_id"],
        req.user,
        limit=query.limit,
        cursor=query.cursor,
        newest_first=query.order == "newest",
    )


async def _checkpoint_detail(
    sessions: RuntimeSessions, req: RouteRequest[None]
) -> CheckpointDetail:
    """One checkpoint by reference, within the path's runtime when it names one."""
    runtime_id = req.path.get("runtime_id")
    checkpoint = await sessions.find_checkpoint(req.path["reference"], runtime_id, req.user)
    return CheckpointDetail(
        checkpoint=sessions.service.summary(checkpoint),
        context_manifest_id=checkpoint.context_manifest_id,
    )


# ---- the table: each call talks to the session mapping only ----------------------------

# One row a route: method, path, summary, OpenAPI operationId, request model (GET: None),
# result model, error types, call. Built without a declared type first, so that mypy checks
# each call with its own request model (under `tuple[RouteSpec[Any], ...]` every body would
# be Any).
_TABLE = (
    RouteSpec(
        "POST",
        f"{API_PREFIX}/checkpoint",
        "Checkpoint a runtime",
        "checkpoint_a_runtime",
        RuntimeCheckpointRequest,
        RuntimeCheckpointResult,
        OPERATION_ERRORS,
        lambda sessions, req: sessions.checkpoint(
            req.body.runtime_id,
            req.body.name,
            req.body.metadata,
            req.user,
            document=req.body.document,
        ),
        body_limit=MAX_DOCUMENT_BODY_BYTES,
    ),
    RouteSpec(
        "POST",
        f"{API_PREFIX}/checkpoint/delete-snapshot",
        "Delete a checkpoint's snapshot",
        "delete_a_checkpoints_snapshot",
        RuntimeCheckpointSnapshotDeleteRequest,
        RuntimeCheckpointSnapshotDeleteResult,
        OPERATION_ERRORS,
        lambda sessions, req: sessions.delete_snapshot(req.body.checkpoint_id, req.user),
    ),
    RouteSpec(
        "POST",
        f"{API_PREFIX}/checkout",
        "Check out a checkpoint",
        "check_out_a_checkpoint",
        RuntimeCheckoutRequest,
        RuntimeCheckoutResult,
        OPERATION_ERRORS,
        lambda sessions, req: sessions.checkout(
            req.body.checkpoint_id,
            req.body.conversation_id,
            req.body.sender_id,
            req.body.metadata,
            req.user,
            count=req.body.count,
        ),
    ),
    RouteSpec(
        "POST",
        f"{API_PREFIX}/pause",
        "Pause a runtime",
        "pause_a_runtime",
        RuntimePauseRequest,
        RuntimePauseResult,
        OPERATION_ERRORS,
        lambda sessions, req: sessions.pause(
            req.body.runtime_id, req.body.name, req.body.metadata, req.user
        ),
    ),
    RouteSpec(
        "POST",
        f"{API_PREFIX}/resume",
        "Resume a runtime",
        "resume_a_runtime",
        RuntimeResumeRequest,
        RuntimeResumeResult,
        OPERATION_ERRORS,
        lambda sessions, req: sessions.resume(req.body.runtime_id, req.body.metadata, req.user),
    ),
    RouteSpec(
        "POST",
        f"{API_PREFIX}/close",
        "Close a runtime",
        "close_a_runtime",
        RuntimeCloseRequest,
        RuntimeCloseResult,
        OPERATION_ERRORS,
        lambda sessions, req: sessions.close(
            req.body.runtime_id, req.user, discard=req.body.discard
        ),
    ),
    RouteSpec(
        "POST",
        f"{API_PREFIX}/restore",
        "Restore a runtime in place",
        "restore_a_runtime_in_place",
        RuntimeRestoreRequest,
        RuntimeRestoreResult,
        OPERATION_ERRORS,
        lambda sessions, req: sessions.changes.restore(
            req.body.runtime_id, req.body.checkpoint_id, req.user, req.body.document
        ),
        body_limit=MAX_DOCUMENT_BODY_BYTES,
    ),
    RouteSpec(
        "POST",
        f"{API_PREFIX}/self/checkpoint",
        "Record a kernel's own checkpoint",
        "record_a_kernels_own_checkpoint",
        SelfCheckpointRequest,
        RuntimeCheckpointResult,
        OPERATION_ERRORS,
        _self_checkpoint,
    ),
    RouteSpec(
        "POST",
        f"{API_PREFIX}/self/checkout",
        "Check out from a kernel's magic",
        "check_out_from_a_kernels_magic",
        SelfCheckoutRequest,
        RuntimeCheckoutResult,
        OPERATION_ERRORS,
        _self_checkout,
    ),
    RouteSpec(
        "POST",
        f"{API_PREFIX}/exec",
        "Run a command in a runtime's backend",
        "run_a_command_in_a_runtimes_backend",
        ExecRequest,
        ExecResponse,
        OPERATION_ERRORS,
        _exec,
    ),
    RouteSpec(
        "POST",
        f"{API_PREFIX}/self/pause",
        "Pause a kernel that captured itself",
        "pause_a_kernel_that_captured_itself",
        SelfPauseRequest,
        RuntimePauseResult,
        OPERATION_ERRORS,
        _self_pause,
    ),
    RouteSpec(
        "POST",
        f"{API_PREFIX}/self/prune",
        "Prune a kernel's own automatic checkpoints",
        "prune_a_kernels_own_automatic_checkpoints",
        SelfPruneRequest,
        AutoCheckpointPruneResult,
        OPERATION_ERRORS,
        _self_prune,
    ),
    RouteSpec(
        "POST",
        f"{API_PREFIX}/self/restore",
        "Record a kernel's own restore",
        "record_a_kernels_own_restore",
        SelfRestoreRequest,
        RuntimeRestoreResult,
        OPERATION_ERRORS,
        _self_restore,
    ),
    RouteSpec[None](
        "GET",
        API_PREFIX,
        "List runtimes",
        "list_runtimes",
        None,
        RuntimeListResult,
        (),
        lambda sessions, req: sessions.list_runtimes(req.user),
        trailing_slash=True,
    ),
    RouteSpec[None](
        "GET",
        f"{API_PREFIX}/{{runtime_id}}",
        "Get a runtime",
        "get_runtime",
        None,
        RuntimeRecord,
        (RuntimeNotFound,),
        lambda sessions, req: sessions.get_runtime(req.path["runtime_id"], req.user),
        trailing_slash=True,
    ),
    RouteSpec[None](
        "GET",
        f"{API_PREFIX}/{{runtime_id}}/checkpoints",
        "List a runtime's checkpoints",
        "list_checkpoints",
        None,
        CheckpointListResult,
        (InvalidRequest, RuntimeNotFound),
        _list_checkpoints,
        trailing_slash=True,
        query=CheckpointListQuery,
    ),
    RouteSpec[None](
        "GET",
        f"{API_PREFIX}/{{runtime_id}}/lineage",
        "Get a runtime's head, checkout origin and checkouts",
        "get_runtime_lineage",
        None,
        RuntimeLineage,
        (RuntimeNotFound,),
        lambda sessions, req: sessions.lineage(req.path["runtime_id"], req.user),
    ),
    RouteSpec[None](
        "GET",
        f"{API_PREFIX}/{{runtime_id}}/checkpoints/{{reference}}",
        "Resolve a checkpoint by id, id prefix or name",
        "get_checkpoint",
        None,
        CheckpointDetail,
        (InvalidRequest, RuntimeNotFound, CheckpointNotFound),
        _checkpoint_detail,
    ),
    RouteSpec[None](
        "GET",
        f"{API_PREFIX}/checkpoints/{{reference}}",
        "Resolve a checkpoint of any runtime by id, id prefix or name",
        "find_checkpoint",
        None,
        CheckpointDetail,
        (InvalidRequest, CheckpointNotFound),
        _checkpoint_detail,
    ),
    RouteSpec[None](
        "GET",
        f"{API_PREFIX}/{{runtime_id}}/workspace",
        "Find a runtime's workspace",
        "get_workspace",
        None,
        RuntimeWorkspace,
        (RuntimeNotFound, RuntimePaused, RuntimeClosed, BackendError),
        lambda sessions, req: sessions.workspace(req.path["runtime_id"], req.user),
    ),
    RouteSpec[None](
        "GET",
        f"{API_PREFIX}/{{runtime_id}}/budget",
        "Get the token budget a runtime counts against",
        "get_runtime_budget",
        None,
        RuntimeBudgetResult,
        (RuntimeNotFound,),
        lambda sessions, req: sessions.budget(req.path["runtime_id"], req.user),
    ),
)

#: Every route of the API, in the order of the OpenAPI document.
ROUTES: tuple[RouteSpec[Any], ...] = (
    *_TABLE,
    *NOTEBOOK_ROUTES,
    *BRANCH_ROUTES,
    *LANGGRAPH_ROUTES,
)
