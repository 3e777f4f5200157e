"""The OpenAPI 3.1 document of the runtime API, generated from the route table.

Served at `GET {base_url}api/v1/runtimes/openapi.json`. Paths, operations, parameters and
the request and result schemas come from `routes.ROUTES` and the pydantic models the
handlers validate with, so the document cannot drift from the code; every error status a
route can answer (from its error types) is listed with the `ErrorBody` schema.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from ditto_jupyter.core.models import ErrorBody
from ditto_jupyter.server.routes import PATH_PARAMETERS, ROUTES, RouteSpec

_REF = "#/components/schemas/{model}"

#: Statuses every route may answer besides its own: auth refused, the extension off for a
#: setting that is wrong, a server bug.
_COMMON_ERRORS = {
    "403": "Not authenticated (no or wrong token), not authorized, or missing XSRF token.",
    "503": "ConfigurationError: a setting is wrong, and the extension is off until it is "
    "fixed and the server restarted; the message names the setting.",
    "500": "Unexpected server error (a bug; never caused by bad input).",
}
#: What an error status means, by the error types that answer it.
_ERROR_TEXT = {
    "400": "InvalidRequest: the body is not JSON, not an object or too big, or a field is "
    "missing, of the wrong type, unknown, or over a limit (see Limits).",
    "404": "RuntimeNotFound or CheckpointNotFound: unknown id.",
    "409": "SessionBusy, RuntimePaused, RuntimeNotPaused, RuntimeClosed, Conflict (nothing "
    "to undo; a checkpoint that does not await a document) or CaptureLost (a kernel's own "
    "capture names bytes collected meanwhile: the kernel captures again).",
    "422": "UnsupportedBackend: the checkpoint's backend cannot do what was asked.",
    "429": "RateLimited: the provider refused for rate or concurrency limits.",
    "502": "BackendError: the provider, the kernel or the object store failed (a damaged, "
    "foreign or missing object of the bucket is named in the message).",
    "503": "StoreUnavailable: the checkpoint store or blob store could not be read or "
    "written (or another server held the store's write lock past store_lock_timeout; "
    "nothing was written); or ConfigurationError: a setting is wrong, and the extension is "
    "off until it is fixed and the server restarted.",
    "507": "StorageFull: the disk holding the data directory is full; nothing was saved.",
}


def _models() -> list[type[BaseModel]]:
    """Every model a route reads or answers, and the error body; each once, in table order."""
    models: dict[type[BaseModel], None] = {}
    for spec in ROUTES:
        if spec.request is not None:
            models[spec.request] = None
        models[spec.response] = None
    models[ErrorBody] = None
    return list(models)


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


def error_statuses(spec: RouteSpec[Any]) -> list[str]:
    """The error statuses a route answers itself (without 403 and 500), in order."""
    return [str(status) for status in sorted({error.http_status for error in spec.errors})]


def _responses(spec: RouteSpec[Any]) -> dict[str, Any]:
    responses: dict[str, Any] = {"200": {"description": "OK", "content": _json(spec.response)}}
    for status in error_statuses(spec):
        responses[status] = {"description": _ERROR_TEXT[status], "content": _json(ErrorBody)}
    for status, text in _COMMON_ERRORS.items():  # a route's own text says more
        responses.setdefault(status, {"description": text, "content": _json(ErrorBody)})
    return responses


def _path_parameter(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": PATH_PARAMETERS[name],
        "schema": {"type": "string", "minLength": 1, "pattern": "^[^/]+$"},
    }


def _query_parameters(model: type[BaseModel]) -> list[dict[str, Any]]:
    """One `in: query` parameter per field of a route's query model."""
    schema = model.model_json_schema(ref_template=_REF)
    required = set(schema.get("required", []))
    parameters = []
    for name, field in schema["properties"].items():
        field = dict(field)
        description = field.pop("description", "")
        field.pop("title", None)
        options = field.get("anyOf", [])
        if {"type": "null"} in options:  # absent is how a query says None
            (field,) = [option for option in options if option != {"type": "null"}]
        parameters.append(
            {
                "name": name,
                "in": "query",
                "required": name in required,
                "description": description,
                "schema": field,
            }
        )
    return parameters


def _operation(spec: RouteSpec[Any]) -> dict[str, Any]:
    operation: dict[str, Any] = {"summary": spec.summary, "operationId": spec.operation_id}
    parameters = [_path_parameter(name) for name in spec.parameters]
    if spec.query is not None:
        parameters += _query_parameters(spec.query)
    if parameters:
        operation["parameters"] = parameters
    if spec.request is not None:
        body = _json(spec.request, "validation")
        operation["requestBody"] = {"required": True, "content": body}
    operation["responses"] = _responses(spec)
    return operation


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
    paths: dict[str, Any] = {}
    for spec in ROUTES:
        paths.setdefault(spec.path, {})[spec.method.lower()] = _operation(spec)
    _add_links(paths)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "ditto-jupyter runtime API",
            "version": "1",
            "description": "Checkpoint, checkout, pause, resume and close live Jupyter "
            "runtimes (a runtime is a Jupyter session). Checkpoint, checkout and pause need "
            "an idle runtime; checkout always makes a new runtime and never changes its "
            "source; pause and resume keep the runtime's id. An error answers "
            '`{"error": code, "message": one sentence}`; bad input is a 400 naming what was '
            "wrong, and a failed operation leaves the store as it was.",
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
