"""REST handlers of the runtime API (DESIGN.md section 6), thin over RuntimeSessions.

Every handler is `@tornado.web.authenticated` and `@authorized` with the auth resource
`ditto`. Bodies are validated by the strict pydantic request models; anything malformed
(not JSON, not an object, a missing, mistyped or unknown field, a lone surrogate) is a 400
`InvalidRequest` naming the problem, before any service code runs. Every error answer is
`{"error": code, "message": one sentence}`; only a bug inside the service answers 500.

Beyond the table of section 6, a few routes serve the magics and the side panel:
`POST /api/v1/runtimes/restore` (restore an idle kernel in place), `POST .../exec` (a shell
command in the runtime's backend, for `%%sandbox`), the `self/...` routes a kernel calls
about itself from a magic (it is busy running the magic, so it captures or restores its
own namespace and the server only records the result; `self/checkout` skips the idle
check for the caller's own checkpoints), and
`GET /api/v1/runtimes/{runtime_id}/checkpoints/{reference}` (a checkpoint by id, unique id
prefix or name, with its context manifest id).
"""

from __future__ import annotations

import contextlib
import json
import traceback
from collections.abc import Awaitable, Callable
from http.client import responses
from typing import Any, TypeVar

import tornado.web
from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ditto_jupyter.core.errors import DittoError, InvalidRequest
from ditto_jupyter.core.models import (
    CheckpointSummary,
    ContextCapture,
    RuntimeCheckoutRequest,
    RuntimeCheckpointRequest,
    RuntimeCheckpointSnapshotDeleteRequest,
    RuntimeCloseRequest,
    RuntimePauseRequest,
    RuntimeRecord,
    RuntimeResumeRequest,
    UnrestorableValue,
)
from ditto_jupyter.server.openapi import openapi_document
from ditto_jupyter.server.sessions import RuntimeSessions

AUTH_RESOURCE = "ditto"
API_PREFIX = "api/v1/runtimes"

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


class _ExtensionModel(BaseModel):
    """Request/result models of the extension's own routes: strict like the core models."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class RuntimeRestoreRequest(_ExtensionModel):
    """POST /api/v1/runtimes/restore and /self/restore: a checkpoint by id, prefix or name."""

    runtime_id: str
    checkpoint_id: str


class RuntimeRestoreResult(_ExtensionModel):
    """Result of a restore: the runtime, the checkpoint restored, what it could not keep."""

    runtime: RuntimeRecord
    checkpoint_id: str
    unrestorable: list[UnrestorableValue]


class SelfCheckpointRequest(_ExtensionModel):
    """POST /api/v1/runtimes/self/checkpoint and /self/pause: a kernel's own capture."""

    runtime_id: str
    capture: ContextCapture
    name: str | None = None
    metadata: dict[str, Any] | None = None


class SelfCheckoutRequest(_ExtensionModel):
    """POST /api/v1/runtimes/self/checkout: a kernel branches from a magic.

    `runtime_id` is the calling runtime: when the checkpoint is its own, its kernel is busy
    only with the magic asking, so the idle check of checkout does not apply to it.
    """

    runtime_id: str
    checkpoint_id: str
    conversation_id: str | None = None
    sender_id: str | None = None
    metadata: dict[str, Any] | None = None


class ExecRequest(_ExtensionModel):
    """POST /api/v1/runtimes/exec: a shell command in the runtime's backend (`%%sandbox`)."""

    runtime_id: str
    command: str
    timeout: float | None = Field(default=None, gt=0)


class ExecResponse(_ExtensionModel):
    """The command's outcome; a non-zero exit code is a result, not an error."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool
    truncated: bool


class CheckpointDetail(_ExtensionModel):
    """GET /api/v1/runtimes/{runtime_id}/checkpoints/{reference}."""

    checkpoint: CheckpointSummary
    context_manifest_id: str | None


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


def parse_body(raw: bytes, model: type[M]) -> M:
    """Validate a request body with `model`; InvalidRequest names what is wrong."""
    if not raw.strip():
        raise InvalidRequest("the request body is empty; send a JSON object")
    try:
        data = json.loads(raw, parse_constant=_refuse_constant)
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


class DittoAPIHandler(ExtensionHandlerMixin, APIHandler):
    """Base handler: JSON bodies, `{"error", "message"}` errors, the extension's sessions."""

    auth_resource = AUTH_RESOURCE

    @property
    def runtime_sessions(self) -> RuntimeSessions:
        sessions: RuntimeSessions = self.settings["ditto_runtime_sessions"]
        return sessions

    @property
    def user_name(self) -> str:
        user = self.current_user
        return str(getattr(user, "username", None) or getattr(user, "name", None) or "local")

    def write_json(self, payload: BaseModel | dict[str, Any], status: int = 200) -> None:
        self.set_status(status)
        text = payload.model_dump_json() if isinstance(payload, BaseModel) else json.dumps(payload)
        self.finish(text)

    async def respond(self, operation: Callable[[], Awaitable[BaseModel]]) -> None:
        """Run an operation and write its result, or its error with the code's status."""
        try:
            result = await operation()
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

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """Errors raised outside `respond` (auth, XSRF, routing) in the same body shape."""
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

    @classmethod
    def allowed_methods(cls) -> list[str]:
        """The HTTP methods this route implements (OPTIONS comes with every API handler)."""
        base = tornado.web.RequestHandler
        own = [
            m for m in ("GET", "POST") if getattr(cls, m.lower()) is not getattr(base, m.lower())
        ]
        return [*own, "OPTIONS"]

    def body(self, model: type[M]) -> M:
        return parse_body(self.request.body, model)


class CheckpointHandler(DittoAPIHandler):
    """POST /api/v1/runtimes/checkpoint."""

    @tornado.web.authenticated
    @authorized
    async def post(self) -> None:
        async def run() -> BaseModel:
            req = self.body(RuntimeCheckpointRequest)
            return await self.runtime_sessions.checkpoint(
                req.runtime_id, req.name, req.metadata, self.user_name
            )

        await self.respond(run)


class DeleteSnapshotHandler(DittoAPIHandler):
    """POST /api/v1/runtimes/checkpoint/delete-snapshot."""

    @tornado.web.authenticated
    @authorized
    async def post(self) -> None:
        async def run() -> BaseModel:
            req = self.body(RuntimeCheckpointSnapshotDeleteRequest)
            return await self.runtime_sessions.delete_snapshot(req.checkpoint_id)

        await self.respond(run)


class CheckoutHandler(DittoAPIHandler):
    """POST /api/v1/runtimes/checkout."""

    @tornado.web.authenticated
    @authorized
    async def post(self) -> None:
        async def run() -> BaseModel:
            req = self.body(RuntimeCheckoutRequest)
            return await self.runtime_sessions.checkout(
                req.checkpoint_id, req.conversation_id, req.sender_id, req.metadata
            )

        await self.respond(run)


class PauseHandler(DittoAPIHandler):
    """POST /api/v1/runtimes/pause."""

    @tornado.web.authenticated
    @authorized
    async def post(self) -> None:
        async def run() -> BaseModel:
            req = self.body(RuntimePauseRequest)
            return await self.runtime_sessions.pause(
                req.runtime_id, req.name, req.metadata, self.user_name
            )

        await self.respond(run)


class ResumeHandler(DittoAPIHandler):
    """POST /api/v1/runtimes/resume."""

    @tornado.web.authenticated
    @authorized
    async def post(self) -> None:
        async def run() -> BaseModel:
            req = self.body(RuntimeResumeRequest)
            return await self.runtime_sessions.resume(req.runtime_id, req.metadata, self.user_name)

        await self.respond(run)


class CloseHandler(DittoAPIHandler):
    """POST /api/v1/runtimes/close."""

    @tornado.web.authenticated
    @authorized
    async def post(self) -> None:
        async def run() -> BaseModel:
            req = self.body(RuntimeCloseRequest)
            return await self.runtime_sessions.close(req.runtime_id, self.user_name)

        await self.respond(run)


class RestoreHandler(DittoAPIHandler):
    """POST /api/v1/runtimes/restore: restore a checkpoint into the idle kernel in place."""

    @tornado.web.authenticated
    @authorized
    async def post(self) -> None:
        async def run() -> BaseModel:
            req = self.body(RuntimeRestoreRequest)
            sessions = self.runtime_sessions
            checkpoint_id, unrestorable = await sessions.restore(
                req.runtime_id, req.checkpoint_id, self.user_name
            )
            return RuntimeRestoreResult(
                runtime=await sessions.service.get_runtime(req.runtime_id),
                checkpoint_id=checkpoint_id,
                unrestorable=unrestorable,
            )

        await self.respond(run)


class SelfCheckpointHandler(DittoAPIHandler):
    """POST /api/v1/runtimes/self/checkpoint: record a kernel's own capture as a checkpoint."""

    @tornado.web.authenticated
    @authorized
    async def post(self) -> None:
        async def run() -> BaseModel:
            req = self.body(SelfCheckpointRequest)
            return await self.runtime_sessions.checkpoint(
                req.runtime_id, req.name, req.metadata, self.user_name, precaptured=req.capture
            )

        await self.respond(run)


class SelfCheckoutHandler(DittoAPIHandler):
    """POST /api/v1/runtimes/self/checkout: checkout asked by a kernel about its own state."""

    @tornado.web.authenticated
    @authorized
    async def post(self) -> None:
        async def run() -> BaseModel:
            req = self.body(SelfCheckoutRequest)
            sessions = self.runtime_sessions
            await sessions.ensure_runtime(req.runtime_id, self.user_name)
            return await sessions.checkout(
                req.checkpoint_id,
                req.conversation_id,
                req.sender_id,
                req.metadata,
                caller_runtime_id=req.runtime_id,
            )

        await self.respond(run)


class ExecHandler(DittoAPIHandler):
    """POST /api/v1/runtimes/exec: run a shell command in the runtime's backend."""

    @tornado.web.authenticated
    @authorized
    async def post(self) -> None:
        async def run() -> BaseModel:
            req = self.body(ExecRequest)
            result = await self.runtime_sessions.exec(
                req.runtime_id, req.command, req.timeout, self.user_name
            )
            return ExecResponse(
                exit_code=result.exit_code,
                stdout=result.stdout,
                stderr=result.stderr,
                timed_out=result.timed_out,
                truncated=result.truncated,
            )

        await self.respond(run)


class SelfPauseHandler(DittoAPIHandler):
    """POST /api/v1/runtimes/self/pause: pause a kernel that captured itself.

    The answer is sent first; the kernel is shut down when the calling cell has finished.
    """

    @tornado.web.authenticated
    @authorized
    async def post(self) -> None:
        async def run() -> BaseModel:
            req = self.body(SelfCheckpointRequest)
            return await self.runtime_sessions.pause(
                req.runtime_id, req.name, req.metadata, self.user_name, precaptured=req.capture
            )

        await self.respond(run)


class SelfRestoreHandler(DittoAPIHandler):
    """POST /api/v1/runtimes/self/restore: a kernel restored a checkpoint itself; record it."""

    @tornado.web.authenticated
    @authorized
    async def post(self) -> None:
        async def run() -> BaseModel:
            req = self.body(RuntimeRestoreRequest)
            sessions = self.runtime_sessions
            await sessions.record_restore(req.runtime_id, req.checkpoint_id, self.user_name)
            checkpoint = sessions.service.get_checkpoint(req.checkpoint_id)
            return RuntimeRestoreResult(
                runtime=await sessions.service.get_runtime(req.runtime_id),
                checkpoint_id=checkpoint.checkpoint_id,
                unrestorable=checkpoint.unrestorable,
            )

        await self.respond(run)


class RuntimeListHandler(DittoAPIHandler):
    """GET /api/v1/runtimes: the store's runtimes, after registering live Jupyter sessions."""

    @tornado.web.authenticated
    @authorized
    async def get(self) -> None:
        async def run() -> BaseModel:
            return await self.runtime_sessions.list_runtimes(self.user_name)

        await self.respond(run)


class RuntimeHandler(DittoAPIHandler):
    """GET /api/v1/runtimes/{runtime_id}."""

    @tornado.web.authenticated
    @authorized
    async def get(self, runtime_id: str) -> None:
        async def run() -> BaseModel:
            return await self.runtime_sessions.get_runtime(runtime_id, self.user_name)

        await self.respond(run)


class CheckpointListHandler(DittoAPIHandler):
    """GET /api/v1/runtimes/{runtime_id}/checkpoints."""

    @tornado.web.authenticated
    @authorized
    async def get(self, runtime_id: str) -> None:
        async def run() -> BaseModel:
            sessions = self.runtime_sessions
            await sessions.ensure_runtime(runtime_id, self.user_name)
            return await sessions.service.list_checkpoints(runtime_id)

        await self.respond(run)


class CheckpointDetailHandler(DittoAPIHandler):
    """GET /api/v1/runtimes/{runtime_id}/checkpoints/{reference}: id, id prefix or name."""

    @tornado.web.authenticated
    @authorized
    async def get(self, runtime_id: str, reference: str) -> None:
        async def run() -> BaseModel:
            sessions = self.runtime_sessions
            await sessions.ensure_runtime(runtime_id, self.user_name)
            checkpoint = sessions.service.resolve_checkpoint(reference, runtime_id)
            return CheckpointDetail(
                checkpoint=checkpoint.summary(),
                context_manifest_id=checkpoint.context_manifest_id,
            )

        await self.respond(run)


class CheckpointLookupHandler(DittoAPIHandler):
    """GET /api/v1/runtimes/checkpoints/{reference}: id, id prefix or name in any runtime."""

    @tornado.web.authenticated
    @authorized
    async def get(self, reference: str) -> None:
        async def run() -> BaseModel:
            checkpoint = self.runtime_sessions.service.resolve_checkpoint(reference)
            return CheckpointDetail(
                checkpoint=checkpoint.summary(),
                context_manifest_id=checkpoint.context_manifest_id,
            )

        await self.respond(run)


class OpenAPIHandler(DittoAPIHandler):
    """GET /api/v1/runtimes/openapi.json: the OpenAPI 3 document of these routes."""

    @tornado.web.authenticated
    @authorized
    async def get(self) -> None:
        base_url = self.settings.get("base_url", "/")
        self.write_json(openapi_document(base_url))


_ID = r"(?P<runtime_id>[^/]+)"


def route_table() -> list[tuple[str, type[DittoAPIHandler]]]:
    """URL patterns (relative to base_url) and their handlers; literal routes come first."""
    return [
        (rf"/{API_PREFIX}/openapi\.json", OpenAPIHandler),
        (rf"/{API_PREFIX}/checkpoint", CheckpointHandler),
        (rf"/{API_PREFIX}/checkpoint/delete-snapshot", DeleteSnapshotHandler),
        (rf"/{API_PREFIX}/checkout", CheckoutHandler),
        (rf"/{API_PREFIX}/pause", PauseHandler),
        (rf"/{API_PREFIX}/resume", ResumeHandler),
        (rf"/{API_PREFIX}/close", CloseHandler),
        (rf"/{API_PREFIX}/restore", RestoreHandler),
        (rf"/{API_PREFIX}/self/checkpoint", SelfCheckpointHandler),
        (rf"/{API_PREFIX}/self/checkout", SelfCheckoutHandler),
        (rf"/{API_PREFIX}/self/pause", SelfPauseHandler),
        (rf"/{API_PREFIX}/exec", ExecHandler),
        (rf"/{API_PREFIX}/self/restore", SelfRestoreHandler),
        (rf"/{API_PREFIX}/checkpoints/(?P<reference>[^/]+)", CheckpointLookupHandler),
        (rf"/{API_PREFIX}/?", RuntimeListHandler),
        (rf"/{API_PREFIX}/{_ID}/checkpoints/?", CheckpointListHandler),
        (rf"/{API_PREFIX}/{_ID}/checkpoints/(?P<reference>[^/]+)", CheckpointDetailHandler),
        (rf"/{API_PREFIX}/{_ID}/?", RuntimeHandler),
    ]
