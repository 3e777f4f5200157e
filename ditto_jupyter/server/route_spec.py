"""What a route of the runtime API is: `RouteSpec` (method, path, models, errors, the call)
and `RouteRequest` (what a call is given). The table of routes is `routes.ROUTES`.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from pydantic import BaseModel

from ditto_jupyter.core.errors import ERROR_TYPES, DittoError
from ditto_jupyter.core.limits import MAX_BODY_BYTES
from ditto_jupyter.server.sessions import RuntimeSessions

#: The prefix of every route of the API, below the server's base_url.
API_PREFIX = "/api/v1/runtimes"

#: What each path parameter of the table names (shown in the OpenAPI document).
PATH_PARAMETERS: dict[str, str] = {
    "runtime_id": "The runtime id (the Jupyter session id).",
    "reference": "A checkpoint id, unique id prefix, or name.",
}

#: Every error an operation on a runtime can answer.
OPERATION_ERRORS: tuple[type[DittoError], ...] = ERROR_TYPES

Body = TypeVar("Body")


@dataclass(frozen=True)
class RouteRequest(Generic[Body]):
    """A request as a call sees it: the validated body, the path parameters, the user, and
    the validated query parameters (None for a route without any)."""

    body: Body
    path: Mapping[str, str]
    user: str
    query: BaseModel | None = None


@dataclass(frozen=True)
class RouteSpec(Generic[Body]):
    """One route: how it is reached, what it takes and answers, and what it does."""

    method: Literal["GET", "POST"]
    path: str
    summary: str
    operation_id: str
    request: type[Body] | None
    response: type[BaseModel]
    errors: tuple[type[DittoError], ...]
    call: Callable[[RuntimeSessions, RouteRequest[Body]], Awaitable[BaseModel]]
    #: GET routes of collections and runtimes also answer with a trailing slash.
    trailing_slash: bool = False
    #: The model query parameters are validated with (None: the route takes none).
    query: type[BaseModel] | None = None
    #: The largest body it takes (bytes): more for routes that may carry a notebook.
    body_limit: int = MAX_BODY_BYTES

    @property
    def parameters(self) -> list[str]:
        """The path parameters, in the order the path names them."""
        return re.findall(r"\{(\w+)\}", self.path)

    def pattern(self) -> str:
        """The tornado URL pattern (relative to base_url) of this route."""
        parts = re.split(r"(\{\w+\})", self.path)
        regex = "".join(
            f"(?P<{part[1:-1]}>[^/]+)" if part.startswith("{") else re.escape(part)
            for part in parts
        )
        return regex + ("/?" if self.trailing_slash else "")
