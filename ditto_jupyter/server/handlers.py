"""REST handlers of the runtime API, built from the route table.

One generic handler serves every route of `routes.ROUTES`: it validates the body with the
route's request model, runs the route's call on the session mapping and writes the result.
Every handler is `@tornado.web.authenticated` and `@authorized` with the auth resource
`ditto`. Bodies are validated by the strict pydantic request models; anything malformed
(not JSON, not an object, a missing, mistyped or unknown field, a lone surrogate) is a 400
`InvalidRequest` naming the problem, before any service code runs; so is a body over
`MAX_BODY_BYTES` or a field over a limit of `core.limits` (the message names the limit).
Every error answer is `{"error": code, "message": one sentence}`; only a bug inside the
service answers 500. When the extension could not start (a setting is wrong), every route
answers 503 `ConfigurationError` with the line naming the setting, once the request is
authenticated (`CONFIGURATION_ERROR`, set by the app); while the store is not reachable
yet at start, 503 `StoreUnavailable` with the line saying so (`STORE_PENDING`).
The OpenAPI document is served from the function the app passes in (this module does not
build it).
"""

from __future__ import annotations

import contextlib
import json
import traceback
from collections.abc import Callable, Mapping
from http.client import responses
from typing import Any, TypeVar

import tornado.web
from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from pydantic import BaseModel, ValidationError

from ditto_jupyter.core.errors import (
    ConfigurationError,
    DittoError,
    InvalidRequest,
    StoreUnavailable,
)
from ditto_jupyter.core.limits import MAX_BODY_BYTES
from ditto_jupyter.server.routes import API_PREFIX, ROUTES, RouteRequest, RouteSpec
from ditto_jupyter.server.sessions import RuntimeSessions
from ditto_jupyter.server.user_scope import request_user

AUTH_RESOURCE = "ditto"
#: The settings key of the line saying why the extension did not start (absent: it did).
CONFIGURATION_ERROR = "ditto_configuration_error"
#: The settings key of the line saying the store is not reachable yet (absent: it is).
STORE_PENDING = "ditto_store_pending"

M = TypeVar("M", bound=BaseModel)

#: Error codes for HTTP errors raised outside the service (auth, routing, tornado).
HTTP_ERROR_CODES: dict[int, str] = {
    400: "InvalidRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    500: "InternalError",
}

#: Builds the OpenAPI document for a base_url (`openapi.openapi_document`, given by the app).
DocumentBuilder = Callable[[str], dict[str, Any]]

#: One entry of the extension's handler list: URL pattern, handler class, its arguments.
Route = tuple[str, type["DittoAPIHandler"], dict[str, Any]]


def _field_error(error: ValidationError) -> str:
    """One sentence naming the first bad field of a validation error."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "body"
    kind = first["type"]
    if kind == "missing":
        return f"field {where!r} is required"
    if kind == "extra_forbidden":
        return f"unknown field {where!r}"
    return f"field {where!r}: {first['msg']}"


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"the number {text[:40]} is too large for a float")
    return value


def parse_body(raw: bytes, model: type[M], limit: int = MAX_BODY_BYTES) -> M:
    """Validate a request body with `model`; InvalidRequest names what is wrong."""
    if len(raw) > limit:
        raise InvalidRequest(f"the request body is {len(raw)} bytes; the limit is {limit}")
    if not raw.strip():
        raise InvalidRequest("the request body is empty; send a JSON object")
    try:
        data = json.loads(raw, parse_constant=_refuse_constant, parse_float=_finite_float)
    except (ValueError, UnicodeDecodeError, RecursionError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise InvalidRequest(f"the request body is not valid JSON: {reason}") from None
    if not isinstance(data, dict):
        raise InvalidRequest(f"the request body must be a JSON object, not {type(data).__name__}")
    try:  # lone surrogates (\ud800) parse but cannot be stored or sent back as UTF-8
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequest("the request body holds a string that is not valid Unicode") from None
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise InvalidRequest(_field_error(error)) from None


#: Query parameters the Jupyter server itself reads (authentication), never a route's.
SERVER_QUERY_PARAMETERS = frozenset({"token", "_xsrf"})


def _is_cache_buster(name: str, given: list[bytes], seen: bool) -> bool:
    """JupyterLab's `ServerConnection` appends a bare timestamp to GET requests (its
    default `cache: 'no-store'`): `?limit=200&1796647483540`, a digits-only name with an
    empty value. One such key is skipped; a second, or one with a value, is unknown."""
    return not seen and name.isascii() and name.isdigit() and given == [b""]


def parse_query(arguments: Mapping[str, list[bytes]], model: type[M]) -> M:
    """Validate query parameters with `model`; InvalidRequest names what is wrong.

    The server's own parameters (token, _xsrf) and JupyterLab's cache-buster are skipped;
    any other name the model does not know is refused."""
    values: dict[str, str] = {}
    cache_buster = False
    for name, given in arguments.items():
        if name in SERVER_QUERY_PARAMETERS:
            continue
        if _is_cache_buster(name, given, cache_buster):
            cache_buster = True
            continue
        if len(given) != 1:
            raise InvalidRequest(f"query parameter {name!r} is given {len(given)} times")
        try:
            values[name] = given[0].decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidRequest(f"query parameter {name!r} is not valid UTF-8") from None
    try:
        return model.model_validate(values)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        if first["type"] == "extra_forbidden":
            raise InvalidRequest(f"unknown query parameter {where!r}") from None
        raise InvalidRequest(f"query parameter {where!r}: {first['msg']}") from None


class DittoAPIHandler(ExtensionHandlerMixin, APIHandler):
    """Base handler: JSON answers, `{"error", "message"}` errors, the extension's sessions."""

    auth_resource = AUTH_RESOURCE

    @property
    def runtime_sessions(self) -> RuntimeSessions:
        sessions: RuntimeSessions = self.settings["ditto_runtime_sessions"]
        return sessions

    @property
    def user_name(self) -> str:
        """Who the request acts as: the identity provider's user (the hub user), or the
        server's user where the provider names nobody (see `user_scope.request_user`)."""
        owner = self.runtime_sessions.scope.server_user
        return request_user(self.identity_provider, self.current_user, owner)

    def write_json(self, payload: BaseModel | dict[str, Any], status: int = 200) -> None:
        self.set_status(status)
        text = payload.model_dump_json() if isinstance(payload, BaseModel) else json.dumps(payload)
        self.finish(text)

    def refused_for_configuration(self) -> bool:
        """Answer 503 `ConfigurationError` when the extension did not start (True), with
        the line naming the setting that is wrong; 503 `StoreUnavailable` while it waits
        for its store."""
        problem = self.settings.get(CONFIGURATION_ERROR)
        pending = self.settings.get(STORE_PENDING)
        if not problem and not pending:
            return False
        error: DittoError = (
            ConfigurationError(str(problem)) if problem else StoreUnavailable(str(pending))
        )
        self.set_status(error.http_status)
        self.finish(json.dumps(error.to_body()))
        return True

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """Errors raised outside a route's call (auth, XSRF, routing) in the same body shape."""
        self.set_header("Content-Type", "application/json")
        message = responses.get(status_code, "Unknown HTTP Error")
        exc_info = kwargs.get("exc_info")
        if exc_info is not None and isinstance(exc_info[1], tornado.web.HTTPError):
            message = exc_info[1].log_message or message
            if exc_info[1].args:  # log_message is a format string
                with contextlib.suppress(TypeError, ValueError):
                    message = message % exc_info[1].args
        if status_code == 405:  # RFC 9110: say which methods the route has
            self.set_header("Allow", ", ".join(self.allowed_methods()))
        code = HTTP_ERROR_CODES.get(status_code, "HTTPError")
        self.finish(json.dumps({"error": code, "message": str(message)}))

    def allowed_methods(self) -> list[str]:
        """The HTTP methods this handler implements (OPTIONS comes with every API handler)."""
        base = tornado.web.RequestHandler
        own = [
            m
            for m in ("GET", "POST")
            if getattr(type(self), m.lower()) is not getattr(base, m.lower())
        ]
        return [*own, "OPTIONS"]


class RouteHandler(DittoAPIHandler):
    """Serves the routes of one URL pattern, one `RouteSpec` per HTTP method."""

    specs: Mapping[str, RouteSpec[Any]]

    def initialize(self, name: str, specs: Mapping[str, RouteSpec[Any]]) -> None:
        super().initialize(name)
        self.specs = specs

    def allowed_methods(self) -> list[str]:
        return [*self.specs, "OPTIONS"]

    async def prepare(self) -> None:  # type: ignore[override]  # as APIHandler.prepare
        """After the server's own checks (host, user, XSRF): 405 for a method not routed."""
        await super().prepare()
        method = self.request.method or ""
        if method not in self.specs and method != "OPTIONS":
            raise tornado.web.HTTPError(405)

    # One decorated function per method: `authorized` fixes its action (read for GET, write
    # for POST) at its first call, so GET and POST cannot share one.

    @tornado.web.authenticated
    @authorized
    async def get(self, **path: str) -> None:
        await self.serve(path)

    @tornado.web.authenticated
    @authorized
    async def post(self, **path: str) -> None:
        await self.serve(path)

    async def serve(self, path: dict[str, str]) -> None:
        """Run the route's call and write its result, or its error with the code's status."""
        if self.refused_for_configuration():
            return
        spec = self.specs[self.request.method or ""]
        try:
            body = None
            if spec.request is not None:
                body = parse_body(self.request.body, spec.request, spec.body_limit)
            query = None
            if spec.query is not None:
                query = parse_query(self.request.query_arguments, spec.query)
            request = RouteRequest(body, path, self.user_name, query)
            result = await spec.call(self.runtime_sessions, request)
        except DittoError as error:
            self.set_status(error.http_status)
            self.finish(json.dumps(error.to_body()))
            return
        except tornado.web.HTTPError:
            raise
        except Exception as error:  # a bug, not bad input: one line out, traceback to the log
            self.log.error("ditto: unexpected error\n%s", traceback.format_exc())
            message = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
            self.set_status(500)
            self.finish(json.dumps({"error": "InternalError", "message": message.rstrip(": ")}))
            return
        self.write_json(result)


class OpenAPIHandler(DittoAPIHandler):
    """GET /api/v1/runtimes/openapi.json: the OpenAPI 3 document of the routes."""

    def initialize(self, name: str, document: DocumentBuilder) -> None:
        super().initialize(name)
        self.document = document

    @tornado.web.authenticated
    @authorized
    async def get(self) -> None:
        if self.refused_for_configuration():
            return
        base_url = self.settings.get("base_url", "/")
        self.write_json(self.document(base_url))


def _literal_first(spec: RouteSpec[Any]) -> tuple[bool, ...]:
    """Sort key: at each path segment a literal comes before a parameter (`{runtime_id}`)."""
    return tuple(segment.startswith("{") for segment in spec.path.split("/"))


def route_table(document: DocumentBuilder) -> list[Route]:
    """URL patterns (relative to base_url), handlers and their arguments, from `ROUTES`.

    Literal segments are matched before parameters, so `checkpoint` is never a runtime id.
    """
    by_pattern: dict[str, dict[str, RouteSpec[Any]]] = {}
    for spec in sorted(ROUTES, key=_literal_first):
        by_pattern.setdefault(spec.pattern(), {})[spec.method] = spec
    table: list[Route] = [(rf"{API_PREFIX}/openapi\.json", OpenAPIHandler, {"document": document})]
    table += [(pattern, RouteHandler, {"specs": specs}) for pattern, specs in by_pattern.items()]
    return table
