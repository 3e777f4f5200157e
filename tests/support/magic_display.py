"""What a notebook shows for a magic's cell: its result must appear exactly once.

A magic either prints (the actions) or returns a value with a rich repr (the listings,
%%sandbox's exit status), never both. These count a cell's outputs: the lines of its
stream messages (a notebook joins consecutive stream messages into one output, so lines
are what a reader sees) and its execute_result / display_data messages.
"""

from __future__ import annotations

from typing import Any

from tests.support.kernel_cells import CellOutput


def printed_once(out: CellOutput) -> str:
    """The one line an action magic shows: printed to stdout, nothing returned."""
    assert out.error is None, out.error
    assert out.stderr == "", out.stderr
    assert out.results == [], f"the magic also returned a displayed value: {out.results}"
    lines = out.stdout.splitlines()
    assert len(lines) == 1, f"expected one printed line, got {lines}"
    return lines[0]


def returned_once(out: CellOutput) -> dict[str, Any]:
    """The one result a listing magic shows: returned with a rich repr, nothing printed."""
    assert out.error is None, out.error
    assert out.stdout == "" and out.stderr == "", (out.stdout, out.stderr)
    assert len(out.results) == 1, f"expected one displayed result, got {out.results}"
    result = out.results[0]
    assert "text/plain" in result and "text/html" in result, result.keys()
    return result
