"""docs/rest.md, written from the OpenAPI document of the runtime API.

    python -m ditto_jupyter.server.rest_docs > docs/rest.md

Every route (method, path, summary, path parameters, request fields, result fields, error
statuses and what they mean), then the limits every request is held to, then every error
code, then every schema the routes use.
`tests/server/test_rest_docs.py` fails when docs/rest.md is not this module's output.
"""

from __future__ import annotations

import inspect
import json
import sys
from typing import Any

from ditto_jupyter.core import errors
from ditto_jupyter.core.limits import LIMITS
from ditto_jupyter.server.handlers import HTTP_ERROR_CODES
from ditto_jupyter.server.openapi import openapi_document

#: The command that regenerates docs/rest.md (the test's failure message names it).
REGENERATE = "python -m ditto_jupyter.server.rest_docs > docs/rest.md"

_REF_PREFIX = "#/components/schemas/"

#: What the codes of errors the server raises outside the routes' calls mean.
_HTTP_ERROR_MEANINGS = {
    "Unauthorized": "Not authenticated.",
    "Forbidden": "No or wrong token, not authorized for the `ditto` resource, or a cookie "
    "request without its XSRF token.",
    "NotFound": "No such route, or the request's origin was refused.",
    "MethodNotAllowed": "The route has no such method; the `Allow` header lists its methods.",
    "InternalError": "A bug in the server, never bad input: the message is one line, the "
    "traceback goes to the server's log.",
}


def _cell(text: str) -> str:
    """Text that stays inside one Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def _model_link(ref: str) -> str:
    name = ref.removeprefix(_REF_PREFIX)
    return f"[{name}](#{name.lower()})"


def type_text(schema: dict[str, Any]) -> str:
    """A JSON Schema as a short phrase: `string or null`, `array of [Model](#model)`."""
    if "$ref" in schema:
        return _model_link(schema["$ref"])
    if "anyOf" in schema:
        return " or ".join(type_text(option) for option in schema["anyOf"])
    if "enum" in schema:
        return "one of " + ", ".join(f"`{value}`" for value in schema["enum"])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {type_text(schema.get('items', {}))}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"object of {type_text(schema['additionalProperties'])}"
    bounds = [
        f"{sign} {schema[key]}"
        for key, sign in (
            ("exclusiveMinimum", ">"),
            ("minimum", ">="),
            ("exclusiveMaximum", "<"),
            ("maximum", "<="),
        )
        if key in schema
    ]
    low, high = schema.get("minLength"), schema.get("maxLength")
    if low and high is not None:
        bounds.append(f"{low} to {high} characters")
    elif high is not None:
        bounds.append(f"at most {high} characters")
    if "maxProperties" in schema:
        bounds.append(f"at most {schema['maxProperties']} keys")
    return f"{kind} ({', '.join(bounds)})" if bounds else str(kind)


def _field_table(model: dict[str, Any]) -> list[str]:
    """A model's fields: name, type, whether required, default."""
    lines = ["| field | type | required | default |", "| --- | --- | --- | --- |"]
    required = set(model.get("required", []))
    for name, field in model.get("properties", {}).items():
        default = f"`{json.dumps(field['default'])}`" if "default" in field else ""
        lines.append(
            f"| `{name}` | {_cell(type_text(field))} | "
            f"{'yes' if name in required else 'no'} | {default} |"
        )
    return [*lines, ""]


def _body(title: str, content: dict[str, Any], schemas: dict[str, Any]) -> list[str]:
    """A request or answer body: its model, and the model's fields."""
    schema = content["application/json"]["schema"]
    model = schemas[schema["$ref"].removeprefix(_REF_PREFIX)]
    return [f"{title}: {type_text(schema)}", "", *_field_table(model)]


def _route(method: str, path: str, operation: dict[str, Any], schemas: dict[str, Any]) -> list[str]:
    lines = [f"### {method.upper()} {path}", "", f"{operation['summary']}.", ""]
    parameters = operation.get("parameters", [])
    in_path = [p for p in parameters if p["in"] == "path"]
    in_query = [p for p in parameters if p["in"] == "query"]
    if in_path:
        lines += ["Path parameters:", "", "| name | meaning |", "| --- | --- |"]
        lines += [f"| `{p['name']}` | {_cell(p['description'])} |" for p in in_path]
        lines.append("")
    if in_query:
        lines += ["Query parameters:", "", "| name | type | default | meaning |"]
        lines.append("| --- | --- | --- | --- |")
        for p in in_query:
            schema = p["schema"]
            default = f"`{json.dumps(schema['default'])}`" if "default" in schema else ""
            lines.append(
                f"| `{p['name']}` | {_cell(type_text(schema))} | {default} | "
                f"{_cell(p['description'])} |"
            )
        lines.append("")
    if "requestBody" in operation:
        lines += _body("Request body", operation["requestBody"]["content"], schemas)
    responses = operation["responses"]
    lines += _body("Answer (200)", responses["200"]["content"], schemas)
    lines += [
        "Errors (body: [ErrorBody](#errorbody)):",
        "",
        "| status | meaning |",
        "| --- | --- |",
    ]
    for status in sorted(status for status in responses if status != "200"):
        lines.append(f"| {status} | {_cell(responses[status]['description'])} |")
    return [*lines, ""]


def _limits() -> list[str]:
    """The limits of `core.limits`: a request over one is a 400 naming it."""
    lines = [
        "A request over a limit is refused with 400 `InvalidRequest` before anything runs, "
        'and the message names the limit (`"metadata is nested 200 deep; the limit is 32"`). '
        "They keep every stored record readable: pydantic reads JSON up to about 200 levels "
        "deep, and a stored checkpoint nests its metadata three levels down. Metadata and a "
        "notebook `document` are the only free-form JSON a request holds, so their nesting "
        'limit is every body\'s (`"document is nested 40 deep; the limit is 32"`, counted '
        "from the document object). Sizes are bytes of compact UTF-8 JSON; numbers must be "
        "finite.",
        "",
        "| what | limit |",
        "| --- | --- |",
    ]
    lines += [f"| {_cell(what)} | {limit} {unit} |" for what, limit, unit in LIMITS]
    return [*lines, ""]


def _error_codes() -> list[str]:
    """Every error code: the control plane's error types, then the server's own."""
    lines = ["| code | status | meaning |", "| --- | --- | --- |"]
    types = [
        cls
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, errors.DittoError)
        and cls is not errors.DittoError
        and cls.__module__ == errors.__name__
    ]
    for cls in sorted(types, key=lambda c: (c.http_status, c.code)):
        lines.append(f"| `{cls.code}` | {cls.http_status} | {_cell(inspect.getdoc(cls) or '')} |")
    for status, code in sorted(HTTP_ERROR_CODES.items()):
        if code not in {cls.code for cls in types}:
            lines.append(f"| `{code}` | {status} | {_cell(_HTTP_ERROR_MEANINGS[code])} |")
    return [*lines, ""]


def _model(name: str, schema: dict[str, Any]) -> list[str]:
    lines = [f"### {name}", ""]
    if schema.get("description"):
        lines += [" ".join(schema["description"].split()), ""]
    if "enum" in schema:
        return [*lines, type_text(schema) + ".", ""]
    return lines + _field_table(schema)


def render(document: dict[str, Any]) -> str:
    """The Markdown of docs/rest.md for this OpenAPI document."""
    schemas: dict[str, Any] = document["components"]["schemas"]
    info = document["info"]
    lines = [
        f"# {info['title']}",
        "",
        f"<!-- Generated from the OpenAPI document by `{REGENERATE}`; do not edit. -->",
        "",
        " ".join(info["description"].split()),
        "",
        "The routes are served by the Jupyter server below its base URL; the same document is "
        "served at `GET /api/v1/runtimes/openapi.json`. Every request needs the server's "
        "token: `Authorization: token <token>` or `Authorization: Bearer <token>` (a browser "
        "session cookie works too, with the `X-XSRFToken` header on POST). Bodies and "
        "answers are JSON; an unknown or mistyped field is refused with 400. Every error "
        'answer is `{"error": code, "message": one sentence}`.',
        "",
        "## Routes",
        "",
        "| method | path | summary |",
        "| --- | --- | --- |",
    ]
    operations = [
        (method, path, operation)
        for path, item in document["paths"].items()
        for method, operation in item.items()
    ]
    lines += [f"| {m.upper()} | `{p}` | {_cell(o['summary'])} |" for m, p, o in operations]
    lines.append("")
    for method, path, operation in operations:
        lines += _route(method, path, operation, schemas)
    lines += ["## Limits", "", *_limits()]
    lines += ["## Error codes", "", *_error_codes(), "## Schemas", ""]
    for name in sorted(schemas):
        lines += _model(name, schemas[name])
    return "\n".join(lines).rstrip("\n") + "\n"


def main() -> None:
    """Print docs/rest.md."""
    sys.stdout.write(render(openapi_document()))


if __name__ == "__main__":
    main()
