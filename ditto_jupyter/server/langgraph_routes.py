"""The routes of LangGraph's checkpoints (issue 44 section 4).

`self/langgraph/...`: what `DittoSaver` sends from a kernel the server started (put,
writes, get, list, delete-thread, copy-thread, prune, delete-runs). Each proves with the
kernel's runtime token that it comes from the runtime's own kernel, and reads or writes
that runtime's threads only: another runtime's threads, another user's above all, are
never named by one. `GET .../{runtime_id}/langgraph/threads` lists a runtime's threads for
its owner; another user's runtime answers as an unknown one.

Store work runs on the store's threads (`control.off_loop`), never on the server's
event loop: a store that waits (a lock another server holds) never stops the server.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from ditto_jupyter.control.off_loop import off_loop
from ditto_jupyter.core.errors import (
    InvalidRequest,
    RuntimeClosed,
    RuntimeNotFound,
    UnsupportedBackend,
)
from ditto_jupyter.core.models.langgraph import (
    LangGraphChanged,
    LangGraphCopyThreadRequest,
    LangGraphDeleteRunsRequest,
    LangGraphDeleteThreadRequest,
    LangGraphGetRequest,
    LangGraphGetResult,
    LangGraphListRequest,
    LangGraphListResult,
    LangGraphPruneRequest,
    LangGraphPutRequest,
    LangGraphThreadList,
    LangGraphWritesRequest,
)
from ditto_jupyter.server.route_spec import API_PREFIX, RouteRequest, RouteSpec
from ditto_jupyter.server.sessions import RuntimeSessions

#: What a `self/langgraph/...` call can answer.
_ERRORS = (InvalidRequest, RuntimeNotFound, RuntimeClosed, UnsupportedBackend)


def _own(sessions: RuntimeSessions, runtime_id: str, runtime_token: str) -> None:
    """InvalidRequest unless the caller is `runtime_id`'s own kernel (its token)."""
    sessions.tokens.check(runtime_id, runtime_token)


async def _put(sessions: RuntimeSessions, req: RouteRequest[LangGraphPutRequest]) -> BaseModel:
    body = req.body
    _own(sessions, body.runtime_id, body.runtime_token)
    return await off_loop(sessions.service.langgraph.put, body.runtime_id, body.checkpoint)


async def _writes(
    sessions: RuntimeSessions, req: RouteRequest[LangGraphWritesRequest]
) -> BaseModel:
    body = req.body
    _own(sessions, body.runtime_id, body.runtime_token)
    return await off_loop(
        sessions.service.langgraph.put_writes,
        body.runtime_id,
        body.thread_id,
        body.checkpoint_ns,
        body.checkpoint_id,
        body.writes,
        replace=body.replace,
    )


async def _get(sessions: RuntimeSessions, req: RouteRequest[LangGraphGetRequest]) -> BaseModel:
    body = req.body
    _own(sessions, body.runtime_id, body.runtime_token)
    found = await off_loop(
        sessions.service.langgraph.get,
        body.runtime_id,
        body.thread_id,
        body.checkpoint_ns,
        body.checkpoint_id,
    )
    return LangGraphGetResult(found=found)


async def _list(sessions: RuntimeSessions, req: RouteRequest[LangGraphListRequest]) -> BaseModel:
    body = req.body
    _own(sessions, body.runtime_id, body.runtime_token)
    return await off_loop(
        sessions.service.langgraph.list,
        body.runtime_id,
        thread_id=body.thread_id,
        checkpoint_ns=body.checkpoint_ns,
        checkpoint_id=body.checkpoint_id,
        filter=body.filter,
        before=body.before,
        after=body.after,
        limit=body.limit,
    )


async def _delete_thread(
    sessions: RuntimeSessions, req: RouteRequest[LangGraphDeleteThreadRequest]
) -> BaseModel:
    body = req.body
    _own(sessions, body.runtime_id, body.runtime_token)
    return await off_loop(sessions.service.langgraph.delete_thread, body.runtime_id, body.thread_id)


async def _copy_thread(
    sessions: RuntimeSessions, req: RouteRequest[LangGraphCopyThreadRequest]
) -> BaseModel:
    body = req.body
    _own(sessions, body.runtime_id, body.runtime_token)
    return await off_loop(
        sessions.service.langgraph.copy_thread,
        body.runtime_id,
        body.source_thread_id,
        body.target_thread_id,
    )


async def _prune(sessions: RuntimeSessions, req: RouteRequest[LangGraphPruneRequest]) -> BaseModel:
    body = req.body
    _own(sessions, body.runtime_id, body.runtime_token)
    return await off_loop(
        sessions.service.langgraph.prune, body.runtime_id, body.thread_ids, body.strategy
    )


async def _delete_runs(
    sessions: RuntimeSessions, req: RouteRequest[LangGraphDeleteRunsRequest]
) -> BaseModel:
    body = req.body
    _own(sessions, body.runtime_id, body.runtime_token)
    return await off_loop(sessions.service.langgraph.delete_for_runs, body.runtime_id, body.run_ids)


async def _threads(sessions: RuntimeSessions, req: RouteRequest[None]) -> BaseModel:
    """A runtime's threads, for its owner (another user's runtime: RuntimeNotFound)."""
    runtime_id = req.path["runtime_id"]

    def read() -> LangGraphThreadList:
        sessions.scope.runtime(runtime_id, req.user)
        return sessions.service.langgraph.threads(runtime_id)

    return await off_loop(read)


def _self_route(
    route: str,
    summary: str,
    operation_id: str,
    request: type[BaseModel],
    response: type[BaseModel],
    call: Callable[..., Any],
) -> RouteSpec[Any]:
    return RouteSpec(
        "POST",
        f"{API_PREFIX}/self/langgraph/{route}",
        summary,
        operation_id,
        request,
        response,
        _ERRORS,
        call,
    )


#: The routes of this module, in the order of the OpenAPI document.
LANGGRAPH_ROUTES: tuple[RouteSpec[Any], ...] = (
    _self_route(
        "put",
        "Store a LangGraph checkpoint of a kernel's runtime",
        "put_langgraph_checkpoint",
        LangGraphPutRequest,
        LangGraphChanged,
        _put,
    ),
    _self_route(
        "writes",
        "Store a LangGraph task's pending writes",
        "put_langgraph_writes",
        LangGraphWritesRequest,
        LangGraphChanged,
        _writes,
    ),
    _self_route(
        "get",
        "Get a LangGraph checkpoint of a kernel's runtime",
        "get_langgraph_checkpoint",
        LangGraphGetRequest,
        LangGraphGetResult,
        _get,
    ),
    _self_route(
        "list",
        "List LangGraph checkpoints of a kernel's runtime",
        "list_langgraph_checkpoints",
        LangGraphListRequest,
        LangGraphListResult,
        _list,
    ),
    _self_route(
        "delete-thread",
        "Delete a LangGraph thread of a kernel's runtime",
        "delete_langgraph_thread",
        LangGraphDeleteThreadRequest,
        LangGraphChanged,
        _delete_thread,
    ),
    _self_route(
        "copy-thread",
        "Copy a LangGraph thread of a kernel's runtime",
        "copy_langgraph_thread",
        LangGraphCopyThreadRequest,
        LangGraphChanged,
        _copy_thread,
    ),
    _self_route(
        "prune",
        "Prune LangGraph threads of a kernel's runtime",
        "prune_langgraph_threads",
        LangGraphPruneRequest,
        LangGraphChanged,
        _prune,
    ),
    _self_route(
        "delete-runs",
        "Delete the LangGraph checkpoints of runs",
        "delete_langgraph_runs",
        LangGraphDeleteRunsRequest,
        LangGraphChanged,
        _delete_runs,
    ),
    RouteSpec[None](
        "GET",
        f"{API_PREFIX}/{{runtime_id}}/langgraph/threads",
        "List a runtime's LangGraph threads",
        "list_langgraph_threads",
        None,
        LangGraphThreadList,
        (RuntimeNotFound,),
        _threads,
    ),
)
