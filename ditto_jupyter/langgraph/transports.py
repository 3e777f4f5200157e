"""How the saver reaches the runtime's LangGraph threads: in process, or over REST.

Without a server the kernel runs the control plane itself (`kernel.local_control`), and
`LocalThreads` calls its `LangGraphThreads` directly on the embedded store. Under a server
the kernel never holds the store's credentials: `ServerThreads` sends each call to the
server's `self/langgraph/...` routes with the kernel's runtime token, as the magics' own
`self/...` calls do. Both take and answer the same models (`core.models.langgraph`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import httpx
from pydantic import BaseModel

from ditto_jupyter.core.errors import BackendError, DittoError, error_type_of
from ditto_jupyter.core.models.langgraph import (
    LangGraphCheckpoint,
    LangGraphCopyThreadRequest,
    LangGraphCursor,
    LangGraphDeleteRunsRequest,
    LangGraphDeleteThreadRequest,
    LangGraphGetRequest,
    LangGraphGetResult,
    LangGraphListRequest,
    LangGraphListResult,
    LangGraphPruneRequest,
    LangGraphPutRequest,
    LangGraphTuple,
    LangGraphWrite,
    LangGraphWritesRequest,
)

if TYPE_CHECKING:
    from ditto_jupyter.control.langgraph_threads import LangGraphThreads

_Answer = TypeVar("_Answer", bound=BaseModel)


class ThreadsTransport(Protocol):
    """The runtime's LangGraph threads, as the saver calls them."""

    runtime_id: str
    #: Which store the threads are in (with the runtime id, names the kernel's cache).
    place: str

    def put(self, checkpoint: LangGraphCheckpoint) -> bool:
        """Store it; whether pending writes of it were stored already."""
        ...

    def put_writes(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        writes: list[LangGraphWrite],
        *,
        replace: bool,
    ) -> None: ...

    def get(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str | None
    ) -> LangGraphTuple | None: ...

    def list(
        self,
        *,
        thread_id: str | None,
        checkpoint_ns: str | None,
        checkpoint_id: str | None,
        filter: dict[str, Any] | None,
        before: str | None,
        after: LangGraphCursor | None,
        limit: int,
    ) -> LangGraphListResult: ...

    def delete_thread(self, thread_id: str) -> None: ...

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None: ...

    def prune(self, thread_ids: Sequence[str], strategy: str) -> None: ...

    def delete_for_runs(self, run_ids: Sequence[str]) -> None: ...


class LocalThreads:
    """The threads of `runtime_id` on an in-process control plane (no server)."""

    def __init__(self, threads: LangGraphThreads, runtime_id: str) -> None:
        self._threads = threads
        self.runtime_id = runtime_id
        self.place = f"in-process:{id(threads)}"

    def put(self, checkpoint: LangGraphCheckpoint) -> bool:
        return self._threads.put(self.runtime_id, checkpoint).had_writes

    def put_writes(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        writes: list[LangGraphWrite],
        *,
        replace: bool,
    ) -> None:
        self._threads.put_writes(
            self.runtime_id, thread_id, checkpoint_ns, checkpoint_id, writes, replace=replace
        )

    def get(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str | None
    ) -> LangGraphTuple | None:
        return self._threads.get(self.runtime_id, thread_id, checkpoint_ns, checkpoint_id)

    def list(
        self,
        *,
        thread_id: str | None,
        checkpoint_ns: str | None,
        checkpoint_id: str | None,
        filter: dict[str, Any] | None,
        before: str | None,
        after: LangGraphCursor | None,
        limit: int,
    ) -> LangGraphListResult:
        return self._threads.list(
            self.runtime_id,
            thread_id=thread_id,
            checkpoint_ns=checkpoint_ns,
            checkpoint_id=checkpoint_id,
            filter=filter,
            before=before,
            after=after,
            limit=limit,
        )

    def delete_thread(self, thread_id: str) -> None:
        self._threads.delete_thread(self.runtime_id, thread_id)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._threads.copy_thread(self.runtime_id, source_thread_id, target_thread_id)

    def prune(self, thread_ids: Sequence[str], strategy: str) -> None:
        self._threads.prune(self.runtime_id, thread_ids, strategy)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._threads.delete_for_runs(self.runtime_id, run_ids)


class ServerThreads:
    """The threads of `runtime_id` through the server's `self/langgraph/...` routes."""

    def __init__(self, http: httpx.Client, base_url: str, runtime_id: str, token: str) -> None:
        self._http = http
        self._base = base_url.rstrip("/") + "/api/v1/runtimes/self/langgraph/"
        self.runtime_id = runtime_id
        self.place = self._base
        self._token = token

    def _call(self, route: str, request: BaseModel, answer: type[_Answer]) -> _Answer:
        """POST `request` to `self/langgraph/<route>`; the answer, or the DittoError of the
        server's error code (one line)."""
        try:
            response = self._http.post(
                self._base + route,
                content=request.model_dump_json(exclude_none=True),
                headers={"Content-Type": "application/json"},
            )
        except httpx.HTTPError as error:
            raise BackendError(
                f"cannot reach the server for LangGraph's {route}: {error}"
            ) from None
        if response.status_code >= 400:
            raise _refusal(response)
        return answer.model_validate_json(response.content)

    def _who(self) -> dict[str, str]:
        return {"runtime_id": self.runtime_id, "runtime_token": self._token}

    def put(self, checkpoint: LangGraphCheckpoint) -> bool:
        request = LangGraphPutRequest(**self._who(), checkpoint=checkpoint)
        return self._call("put", request, _Changed).had_writes

    def put_writes(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        writes: list[LangGraphWrite],
        *,
        replace: bool,
    ) -> None:
        request = LangGraphWritesRequest(
            **self._who(),
            thread_id=thread_id,
            checkpoint_ns=checkpoint_ns,
            checkpoint_id=checkpoint_id,
            writes=writes,
            replace=replace,
        )
        self._call("writes", request, _Changed)

    def get(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str | None
    ) -> LangGraphTuple | None:
        request = LangGraphGetRequest(
            **self._who(),
            thread_id=thread_id,
            checkpoint_ns=checkpoint_ns,
            checkpoint_id=checkpoint_id,
        )
        return self._call("get", request, LangGraphGetResult).found

    def list(
        self,
        *,
        thread_id: str | None,
        checkpoint_ns: str | None,
        checkpoint_id: str | None,
        filter: dict[str, Any] | None,
        before: str | None,
        after: LangGraphCursor | None,
        limit: int,
    ) -> LangGraphListResult:
        request = LangGraphListRequest(
            **self._who(),
            thread_id=thread_id,
            checkpoint_ns=checkpoint_ns,
            checkpoint_id=checkpoint_id,
            filter=filter,
            before=before,
            after=after,
            limit=limit,
        )
        return self._call("list", request, LangGraphListResult)

    def delete_thread(self, thread_id: str) -> None:
        self._call(
            "delete-thread",
            LangGraphDeleteThreadRequest(**self._who(), thread_id=thread_id),
            _Changed,
        )

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        request = LangGraphCopyThreadRequest(
            **self._who(), source_thread_id=source_thread_id, target_thread_id=target_thread_id
        )
        self._call("copy-thread", request, _Changed)

    def prune(self, thread_ids: Sequence[str], strategy: str) -> None:
        request = LangGraphPruneRequest.model_validate(
            {**self._who(), "thread_ids": list(thread_ids), "strategy": strategy}
        )
        self._call("prune", request, _Changed)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        request = LangGraphDeleteRunsRequest(**self._who(), run_ids=list(run_ids))
        self._call("delete-runs", request, _Changed)


class _Changed(BaseModel):
    """What a write answers (its count is not needed here)."""

    rows: int
    had_writes: bool = False


def _refusal(response: httpx.Response) -> DittoError:
    """The DittoError an error answer names (BackendError when it names none)."""
    try:
        body = response.json()
    except ValueError:
        body = None
    code = body.get("error") if isinstance(body, dict) else None
    message = body.get("message") if isinstance(body, dict) else None
    kind = error_type_of(code)
    if kind is None:
        return BackendError(f"the server answered HTTP {response.status_code} to LangGraph")
    return kind(str(message))
