"""The OpenAPI 3.1 document of the runtime API, generated from the pydantic models.

Served at `GET {base_url}api/v1/runtimes/openapi.json`. Request and result schemas come
straight from the models the handlers validate with, so the document cannot drift from
the code; every error status a route can answer is listed with the `ErrorBody` schema.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from ditto_jupyter.core import models as core

_REF = "#/components/schemas/{model}"

#: Statuses every route may answer besides its own: auth refused, a server bug.
_COMMON_ERRORS = {
    "403": "Not authenticated (no or wrong token), not authorized, or missing XSRF token.",
    "500": "Unexpected server error (a bug; never caused by bad input).",
}
_ERROR_TEXT = {
    "400": "InvalidRequest: the body is not JSON, not an object, or a field is missing, "
    "of the wrong type, or unknown.",
    "404": "RuntimeNotFound or CheckpointNotFound: unknown id.",
    "409": "SessionBusy, RuntimePaused, RuntimeNotPaused or RuntimeClosed.",
    "422": "UnsupportedBackend: the checkpoint's backend cannot do what was asked.",
    "429": "RateLimited: the provider refused for rate or concurrency limits.",
    "502": "BackendError: the provider or the kernel failed.",
}
_ALL_OPERATION_ERRORS = ("400", "404", "409", "422", "429", "502")


def _models() -> list[type[BaseModel]]:
    from ditto_jupyter.server import handlers as ext  # local: handlers import this module

    return [
        core.RuntimeCheckpointRequest,
        core.RuntimeCheckpointResult,
        core.RuntimeCheckpointSnapshotDeleteRequest,
        core.RuntimeCheckpointSnapshotDeleteResult,
        core.RuntimeCheckoutRequest,
        core.RuntimeCheckoutResult,
        core.RuntimePauseRequest,
        core.RuntimePauseResult,
        core.RuntimeResumeRequest,
        core.RuntimeResumeResult,
        core.RuntimeCloseRequest,
        core.RuntimeCloseResult,
        core.RuntimeListResult,
        core.RuntimeRecord,
        core.CheckpointListResult,
        core.ErrorBody,
        ext.RuntimeRestoreRequest,
        ext.RuntimeRestoreResult,
        ext.SelfCheckpointRequest,
        ext.SelfCheckoutRequest,
        ext.ExecRequest,
        ext.ExecResponse,
        ext.CheckpointDetail,
    ]


@functools.cache
def _schemas() -> tuple[dict[tuple[Any, str], dict[str, Any]], dict[str, Any]]:
    pairs: list[tuple[type[BaseModel], JsonSchemaMode]] = []
    for model in _models():
        pairs += [(model, "validation"), (model, "serialization")]
    refs, top = models_json_schema(pairs, ref_template=_REF)
    by_model = {(key[0], str(key[1])): dict(value) for key, value in refs.items()}
    return by_model, dict(top.get("$defs", {}))


def component_schemas() -> dict[str, Any]:
    """JSON Schemas of every model (request and result forms), keyed by component name."""
    return copy.deepcopy(_schemas()[1])


def _json(model: type[BaseModel], mode: str = "serialization") -> dict[str, Any]:
    return {"application/json": {"schema": dict(_schemas()[0][(model, mode)])}}


def _responses(result: type[BaseModel], errors: tuple[str, ...]) -> dict[str, Any]:
    responses: dict[str, Any] = {"200": {"description": "OK", "content": _json(result)}}
    for status in errors:
        responses[status] = {"description": _ERROR_TEXT[status], "content": _json(core.ErrorBody)}
    for status, text in _COMMON_ERRORS.items():
        responses[status] = {"description": text, "content": _json(core.ErrorBody)}
    return responses


def _post(
    summary: str, request: type[BaseModel], result: type[BaseModel], errors: tuple[str, ...]
) -> dict[str, Any]:
    return {
        "post": {
            "summary": summary,
            "operationId": summary.lower().replace(" ", "_").replace("'", ""),
            "requestBody": {"required": True, "content": _json(request, "validation")},
            "responses": _responses(result, errors),
        }
    }


def _path_parameter(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": {"type": "string", "minLength": 1, "pattern": "^[^/]+$"},
    }


def _link(operation_id: str, **body: str) -> dict[str, Any]:
    return {"operationId": operation_id, "requestBody": body}


def _add_links(paths: dict[str, Any]) -> None:
    """OpenAPI links: which answer supplies the ids another operation needs.

    They document the API's flow (list -> checkpoint -> checkout ...) and let a stateful
    tester chain real runtimes and checkpoints instead of guessing ids.
    """
    first_runtime = "$response.body#/runtimes/0/runtime_id"
    listing = paths["/api/v1/runtimes"]["get"]["responses"]["200"]
    listing["links"] = {
        "GetRuntime": {
            "operationId": "get_runtime",
            "parameters": {"runtime_id": first_runtime},
        },
        "ListCheckpoints": {
            "operationId": "list_checkpoints",
            "parameters": {"runtime_id": first_runtime},
        },
        "Checkpoint": _link("checkpoint_a_runtime", runtime_id=first_runtime),
    }
    created = paths["/api/v1/runtimes/checkpoint"]["post"]["responses"]["200"]
    checkpoint_id = "$response.body#/checkpoint_id"
    runtime_id = "$response.body#/runtime/runtime_id"
    created["links"] = {
        "Checkout": _link("check_out_a_checkpoint", checkpoint_id=checkpoint_id),
        "Restore": _link(
            "restore_a_runtime_in_place", runtime_id=runtime_id, checkpoint_id=checkpoint_id
        ),
        "DeleteSnapshot": _link("delete_a_checkpoints_snapshot", checkpoint_id=checkpoint_id),
        "GetCheckpoint": {
            "operationId": "get_checkpoint",
            "parameters": {"runtime_id": runtime_id, "reference": checkpoint_id},
        },
        "Pause": _link("pause_a_runtime", runtime_id=runtime_id),
    }
    checked_out = paths["/api/v1/runtimes/checkout"]["post"]["responses"]["200"]
    checked_out["links"] = {
        "CheckpointChild": _link("checkpoint_a_runtime", runtime_id=runtime_id),
        "CloseChild": _link("close_a_runtime", runtime_id=runtime_id),
    }
    paused = paths["/api/v1/runtimes/pause"]["post"]["responses"]["200"]
    paused["links"] = {"Resume": _link("resume_a_runtime", runtime_id=runtime_id)}


def openapi_document(base_url: str = "/") -> dict[str, Any]:
    """The OpenAPI 3.1 document, with `base_url` as its server."""
    from ditto_jupyter.server import handlers as ext

    runtime_id = _path_parameter("runtime_id", "The runtime id (the Jupyter session id).")
    reference = _path_parameter("reference", "A checkpoint id, unique id prefix, or name.")
    read_errors = ("404",)
    paths: dict[str, Any] = {
        "/api/v1/runtimes/checkpoint": _post(
            "Checkpoint a runtime",
            core.RuntimeCheckpointRequest,
            core.RuntimeCheckpointResult,
            _ALL_OPERATION_ERRORS,
        ),
        "/api/v1/runtimes/checkpoint/delete-snapshot": _post(
            "Delete a checkpoint's snapshot",
            core.RuntimeCheckpointSnapshotDeleteRequest,
            core.RuntimeCheckpointSnapshotDeleteResult,
            _ALL_OPERATION_ERRORS,
        ),
        "/api/v1/runtimes/checkout": _post(
            "Check out a checkpoint",
            core.RuntimeCheckoutRequest,
            core.RuntimeCheckoutResult,
            _ALL_OPERATION_ERRORS,
        ),
        "/api/v1/runtimes/pause": _post(
            "Pause a runtime",
            core.RuntimePauseRequest,
            core.RuntimePauseResult,
            _ALL_OPERATION_ERRORS,
        ),
        "/api/v1/runtimes/resume": _post(
            "Resume a runtime",
            core.RuntimeResumeRequest,
            core.RuntimeResumeResult,
            _ALL_OPERATION_ERRORS,
        ),
        "/api/v1/runtimes/close": _post(
            "Close a runtime",
            core.RuntimeCloseRequest,
            core.RuntimeCloseResult,
            _ALL_OPERATION_ERRORS,
        ),
        "/api/v1/runtimes/restore": _post(
            "Restore a runtime in place",
            ext.RuntimeRestoreRequest,
            ext.RuntimeRestoreResult,
            _ALL_OPERATION_ERRORS,
        ),
        "/api/v1/runtimes/self/checkpoint": _post(
            "Record a kernel's own checkpoint",
            ext.SelfCheckpointRequest,
            core.RuntimeCheckpointResult,
            _ALL_OPERATION_ERRORS,
        ),
        "/api/v1/runtimes/self/checkout": _post(
            "Check out from a kernel's magic",
            ext.SelfCheckoutRequest,
            core.RuntimeCheckoutResult,
            _ALL_OPERATION_ERRORS,
        ),
        "/api/v1/runtimes/exec": _post(
            "Run a command in a runtime's backend",
            ext.ExecRequest,
            ext.ExecResponse,
            _ALL_OPERATION_ERRORS,
        ),
        "/api/v1/runtimes/self/pause": _post(
            "Pause a kernel that captured itself",
            ext.SelfCheckpointRequest,
            core.RuntimePauseResult,
            _ALL_OPERATION_ERRORS,
        ),
        "/api/v1/runtimes/self/restore": _post(
            "Record a kernel's own restore",
            ext.RuntimeRestoreRequest,
            ext.RuntimeRestoreResult,
            _ALL_OPERATION_ERRORS,
        ),
        "/api/v1/runtimes": {
            "get": {
                "summary": "List runtimes",
                "operationId": "list_runtimes",
                "responses": _responses(core.RuntimeListResult, ()),
            }
        },
        "/api/v1/runtimes/{runtime_id}": {
            "get": {
                "summary": "Get a runtime",
                "operationId": "get_runtime",
                "parameters": [runtime_id],
                "responses": _responses(core.RuntimeRecord, read_errors),
            }
        },
        "/api/v1/runtimes/{runtime_id}/checkpoints": {
            "get": {
                "summary": "List a runtime's checkpoints",
                "operationId": "list_checkpoints",
                "parameters": [runtime_id],
                "responses": _responses(core.CheckpointListResult, read_errors),
            }
        },
        "/api/v1/runtimes/{runtime_id}/checkpoints/{reference}": {
            "get": {
                "summary": "Resolve a checkpoint by id, id prefix or name",
                "operationId": "get_checkpoint",
                "parameters": [runtime_id, reference],
                "responses": _responses(ext.CheckpointDetail, ("400", "404")),
            }
        },
    }
    _add_links(paths)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "ditto-jupyter runtime API",
            "version": "1",
            "description": "Checkpoint, checkout, pause, resume and close live Jupyter "
            "runtimes (a runtime is a Jupyter session). DESIGN.md section 6.",
        },
        "servers": [{"url": base_url.rstrip("/") or "/"}],
        "security": [{"token": []}, {"bearer": []}],
        "paths": paths,
        "components": {
            "schemas": component_schemas(),
            "securitySchemes": {
                "token": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "Authorization",
                    "description": "`Authorization: token <token>`",
                },
                "bearer": {"type": "http", "scheme": "bearer"},
            },
        },
    }
