"""The lab extension's `apiTypes.ts` checked against the server's OpenAPI document.

A small reader takes each exported TypeScript interface's field names (and the fields of
inline object types, recursively); every interface that types a server answer is paired
with its component schema, and both must name the same fields, bar the omissions listed
below. An interface naming a field the server's model lacks, or missing one of its fields,
fails here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ditto_jupyter.server.openapi import openapi_document

API_TYPES = Path(__file__).resolve().parents[2] / "labextension" / "src" / "apiTypes.ts"

#: Each interface that types a server answer, and the component schema it mirrors.
SCHEMA_OF = {
    "IRuntimeRecord": "RuntimeRecord",
    "IFanOutMember": "FanOutMember",
    "IUnrestorableValue": "UnrestorableValue",
    "ICheckpointDocumentInfo": "DocumentInfo",
    "ICheckpointSummary": "CheckpointSummary",
    "ICheckpointPage": "CheckpointListResult",
    "ICheckpointDetail": "CheckpointDetail",
    "ICheckoutBranch": "CheckoutBranch",
    "IRuntimeLineage": "RuntimeLineage",
    "INotebookDocument": "NotebookDocument",
    "IVariable": "Variable",
    "ICheckpointContents": "CheckpointContents",
    "IExecutedCell": "AutoCheckpointCell",
    "IDiffFile": "FileEntry",
    "IDiffCell": "CellEntry",
    "IDiffSide": "DiffSide",
    "IDiffResult": "RuntimeDiffResult",
    "ICompareSide": "CompareSide",
    "ICompareResult": "RuntimeCompareResult",
    "IKeepResult": "RuntimeKeepResult",
    "IUndoResult": "RuntimeUndoResult",
    "ICheckpointResult": "RuntimeCheckpointResult",
    "IRestoreResult": "RuntimeRestoreResult",
    "ICheckoutResult": "RuntimeCheckoutResult",
    "IPauseResult": "RuntimePauseResult",
    "IResumeResult": "RuntimeResumeResult",
    "ICloseResult": "RuntimeCloseResult",
    "IDeleteSnapshotResult": "RuntimeCheckpointSnapshotDeleteResult",
}

#: Interfaces that are no OpenAPI component: checked by nothing here, on purpose.
NOT_SERVER_MODELS = {
    # An nbformat cell: the server keeps a document's cells as free-form JSON objects.
    "INotebookCell",
    # A runtime event of /api/events/subscribe (server/events.py), not a REST answer.
    "IRuntimeEvent",
}

#: Fields of a server model the panel leaves out of its type on purpose, by interface path.
INTENTIONAL_OMISSIONS: dict[str, set[str]] = {
    # The panel checks out one runtime at a time: the per-child list of a fan-out checkout
    # (the `count` field of the request) is for programs, never read by the panel.
    "ICheckoutResult": {"children"},
}

_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.DOTALL)
_FIELD = re.compile(r"\s*(\w+)(\?)?\s*:")
_INTERFACE = re.compile(r"export\s+interface\s+(\w+)\s*\{")

Fields = dict[str, "tuple[bool, str, Fields | None]"]


def _closing(text: str, opening: int) -> int:
    """The index of the brace closing the one at `opening`."""
    depth = 0
    for index in range(opening, len(text)):
        if text[index] == "{":
            depth += 1
        elif text[index] == "}":
            depth -= 1
            if depth == 0:
                return index
    raise AssertionError(f"unbalanced braces in apiTypes.ts after offset {opening}")


def _fields(body: str) -> Fields:
    """Field name -> (optional, type text, fields of its inline object type or None)."""
    fields: Fields = {}
    position = 0
    while body[position:].strip():
        match = _FIELD.match(body, position)
        assert match, f"apiTypes.ts: cannot read a field at {body[position : position + 40]!r}"
        start = index = match.end()
        depth = 0
        while index < len(body) and not (depth == 0 and body[index] in ";\n}"):
            depth += body[index] in "{([<"
            depth -= body[index] in "})]>"
            index += 1
        kind = body[start:index].strip()
        inline = None
        if kind.startswith("{"):
            inline = _fields(kind[1 : _closing(kind, 0)])
        fields[match.group(1)] = (bool(match.group(2)), kind, inline)
        position = index + 1
    return fields


def read_interfaces(source: str) -> dict[str, Fields]:
    """Every exported interface of a TypeScript source, with its fields."""
    text = _COMMENT.sub("", source)
    interfaces = {}
    for match in _INTERFACE.finditer(text):
        opening = match.end() - 1
        interfaces[match.group(1)] = _fields(text[opening + 1 : _closing(text, opening)])
    return interfaces


def _target(schema: dict[str, Any], schemas: dict[str, Any]) -> dict[str, Any] | None:
    """The object schema a property holds: through $ref, anyOf (with null) and array items."""
    if "$ref" in schema:
        return _target(schemas[schema["$ref"].rsplit("/", 1)[1]], schemas)
    if "properties" in schema:
        return schema
    for option in schema.get("anyOf", []):
        found = _target(option, schemas)
        if found is not None:
            return found
    if "items" in schema:
        return _target(schema["items"], schemas)
    return None


def _compare(
    where: str, fields: Fields, schema: dict[str, Any], schemas: dict[str, Any]
) -> list[str]:
    properties = schema["properties"]
    problems = [
        f"{where} declares {name!r}, which the server's {schema.get('title')} lacks"
        for name in sorted(set(fields) - set(properties))
    ]
    missing = set(properties) - set(fields) - INTENTIONAL_OMISSIONS.get(where, set())
    problems += [
        f"{where} misses {name!r} of the server's {schema.get('title')}" for name in sorted(missing)
    ]
    for name, (_optional, kind, inline) in fields.items():
        if name not in properties:
            continue
        target = _target(properties[name], schemas)
        if inline is not None:
            assert target is not None, f"{where}.{name}: the server's field holds no object"
            problems += _compare(f"{where}.{name}", inline, target, schemas)
            continue
        for named in re.findall(r"\bI[A-Z]\w*", kind):
            if named in SCHEMA_OF:
                expected = schemas[SCHEMA_OF[named]]
                assert target is not None and target.get("title") == expected.get("title"), (
                    f"{where}.{name} is typed {named}; the server's field is not a "
                    f"{SCHEMA_OF[named]}"
                )
    return problems


def test_the_reader_reads_fields_optional_marks_and_inline_objects() -> None:
    source = """
    /** doc { with braces } */
    export interface IA {
      a: string; // a comment
      b?: { c: number; d: { e: string }[] } | null;
      f: Record<string, unknown>;
    }
    """
    (interface,) = read_interfaces(source).values()
    assert list(interface) == ["a", "b", "f"]
    assert interface["b"][0] is True
    inline = interface["b"][2]
    assert inline is not None and list(inline) == ["c", "d"]
    assert inline["d"][2] is not None and list(inline["d"][2]) == ["e"]


def test_every_interface_is_paired_with_a_schema_or_listed_as_none() -> None:
    interfaces = read_interfaces(API_TYPES.read_text(encoding="utf-8"))
    unpaired = set(interfaces) - set(SCHEMA_OF) - NOT_SERVER_MODELS
    assert not unpaired, f"apiTypes.ts interfaces with no schema named in SCHEMA_OF: {unpaired}"
    stale = (set(SCHEMA_OF) | NOT_SERVER_MODELS) - set(interfaces)
    assert not stale, f"names this test pairs that apiTypes.ts no longer has: {stale}"


def test_api_types_name_the_fields_of_the_server_models() -> None:
    schemas = openapi_document()["components"]["schemas"]
    interfaces = read_interfaces(API_TYPES.read_text(encoding="utf-8"))
    problems: list[str] = []
    for interface, component in SCHEMA_OF.items():
        problems += _compare(interface, interfaces[interface], schemas[component], schemas)
    assert not problems, "apiTypes.ts drifted from the OpenAPI document:\n" + "\n".join(problems)
