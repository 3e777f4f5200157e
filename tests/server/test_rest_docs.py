"""docs/rest.md is the output of `ditto_jupyter.server.rest_docs` for the current API."""

from __future__ import annotations

from pathlib import Path

from ditto_jupyter.server.openapi import openapi_document
from ditto_jupyter.server.rest_docs import REGENERATE, render, type_text
from ditto_jupyter.server.routes import ROUTES

REST_MD = Path(__file__).resolve().parents[2] / "docs" / "rest.md"


def test_docs_rest_md_is_current() -> None:
    expected = render(openapi_document())
    assert REST_MD.is_file(), f"docs/rest.md is missing; write it with: {REGENERATE}"
    assert REST_MD.read_text() == expected, (
        f"docs/rest.md is not the current API's; regenerate it with: {REGENERATE}"
    )


def test_every_route_and_its_errors_are_documented() -> None:
    text = render(openapi_document())
    for spec in ROUTES:
        assert f"### {spec.method} {spec.path}\n" in text, spec.path
        assert f"{spec.summary}." in text
    for error in {error for spec in ROUTES for error in spec.errors}:
        assert f"| `{error.code}` | {error.http_status} |" in text, error.code
    assert "| `runtime_id` | string | yes |  |" in text  # a request field, with its type
    assert "| `deleted` | boolean | yes |  |" in text  # an answer field


def test_schema_types_read_as_phrases() -> None:
    assert type_text({"anyOf": [{"type": "string"}, {"type": "null"}]}) == "string or null"
    assert type_text({"type": "array", "items": {"$ref": "#/components/schemas/A"}}) == (
        "array of [A](#a)"
    )
    assert type_text({"type": "number", "exclusiveMinimum": 0}) == "number (> 0)"
    assert type_text({"enum": ["idle", "busy"]}) == "one of `idle`, `busy`"
    assert type_text({"type": "string", "minLength": 1, "maxLength": 9}) == (
        "string (1 to 9 characters)"
    )
    assert type_text({"type": "object", "maxProperties": 3}) == "object (at most 3 keys)"
    assert type_text({"type": "object", "additionalProperties": {"type": "integer"}}) == (
        "object of integer"
    )
