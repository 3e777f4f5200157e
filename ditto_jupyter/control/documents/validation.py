"""What a checkpoint accepts as a notebook document: nbformat 4, cell by cell.

The checks are the ones storing and writing the document back rely on, each failing with
one sentence that names the cell and the field: every cell is a code, markdown or raw cell
with a source (a string or a list of strings) and metadata; a code cell has outputs (each
of a known output type) and an execution count (a whole number or null); a cell id, when
there is one, is a string; the document nests at most 32 levels deep (the JSON nesting
limit of every request, `core.limits`). Anything else in a cell is kept as it is.
"""

from __future__ import annotations

from typing import Any

from ditto_jupyter.core.errors import InvalidRequest
from ditto_jupyter.core.limits import document_problem
from ditto_jupyter.core.models import NotebookDocument

CELL_TYPES = frozenset({"code", "markdown", "raw"})
OUTPUT_TYPES = frozenset({"stream", "display_data", "execute_result", "error"})


def _is_source(value: object) -> bool:
    return isinstance(value, str) or (
        isinstance(value, list) and all(isinstance(line, str) for line in value)
    )


def _cell_problem(cell: object) -> str | None:
    """What is wrong with one cell, or None."""
    if not isinstance(cell, dict):
        return f"is a {type(cell).__name__}, not an object"
    kind = cell.get("cell_type")
    if kind not in CELL_TYPES:
        return f"has cell_type {kind!r}; it must be one of code, markdown, raw"
    if not _is_source(cell.get("source")):
        return "has no source (a string or a list of strings)"
    if not isinstance(cell.get("metadata", {}), dict):
        return "has metadata that is not an object"
    if "id" in cell and not isinstance(cell["id"], str):
        return "has an id that is not a string"
    if kind != "code":
        return None
    count = cell.get("execution_count")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 0):
        return "has an execution_count that is not a whole number or null"
    outputs = cell.get("outputs", [])
    if not isinstance(outputs, list):
        return "has outputs that are not a list"
    for index, output in enumerate(outputs):
        if not isinstance(output, dict) or output.get("output_type") not in OUTPUT_TYPES:
            return f"has an output (outputs[{index}]) of no known output_type"
    return None


def check_document(document: NotebookDocument) -> None:
    """InvalidRequest, naming the cell and what is wrong, unless every cell can be stored
    (and the document nests no deeper than the JSON nesting limit, `core.limits`)."""
    nesting = document_problem({"metadata": document.metadata, "cells": document.cells})
    if nesting is not None:
        raise InvalidRequest(nesting)
    for index, cell in enumerate(document.cells):
        problem = _cell_problem(cell)
        if problem is not None:
            raise InvalidRequest(f"document.cells[{index}] {problem}")


def cell_source(cell: dict[str, Any]) -> str:
    """A cell's source as one string (nbformat allows a list of lines too)."""
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)
