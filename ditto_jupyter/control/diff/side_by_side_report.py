"""A compare of 2 to 8 sides as a plain-text table, for `%compare` and `ditto compare`.

    S1  r-1a2b: live kernel, saved notebook
    S2  r-3c4d: cell-4 (3f2a9c1b0d4e)
    variables          S1          S2
      = w              7           7
      * x              10          1
      * y              5           -
    files: 3 the same on every side
      * out.csv        1.2 KiB     -
    cells: 2 the same on every side
      * 1              x = 10      x = 1

A row marked `*` differs (or a side lacks it, `-`); `n/a`: that side cannot show the part.
Every variable is listed; of files and cells only those that differ, the rest counted.
"""

from __future__ import annotations

from collections.abc import Sequence

from ditto_jupyter.control.diff.report import size_text
from ditto_jupyter.core.models import CellEntry, FileEntry, RuntimeCompareResult, Variable

#: The widest a cell of the table gets (longer values are cut, with `…`).
COLUMN = 24


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= COLUMN else text[: COLUMN - 1] + "…"


def _variable(variable: Variable | None) -> str:
    if variable is None:
        return "-"
    return _cut(variable.summary if variable.kept else f"not kept: {variable.reason}")


def _file(entry: FileEntry | None) -> str:
    if entry is None:
        return "-"
    return entry.kind if entry.kind != "file" else size_text(entry.size) or "file"


def _cell(cell: CellEntry | None) -> str:
    if cell is None:
        return "-"
    return _cut(next((line for line in cell.source.splitlines() if line.strip()), "(empty)"))


def _table(
    title: str,
    available: Sequence[bool],
    rows: Sequence[tuple[str, bool, list[str]]],
    *,
    only_differing: bool,
) -> list[str]:
    """One part of the report: a row per name, a column per side."""
    if not rows:
        return [f"{title}: none"]
    shown = [row for row in rows if not (only_differing and row[1])]
    same = sum(1 for _, alike, _ in rows if alike)
    lines = [f"{title}: {same} the same on every side"] if only_differing else []
    if not shown:
        return lines
    grid = [["" if only_differing else title, *(f"S{i + 1}" for i in range(len(available)))]]
    for name, alike, values in shown:
        shown_values = [value if available[i] else "n/a" for i, value in enumerate(values)]
        grid.append([("  = " if alike else "  * ") + name, *shown_values])
    widths = [max(len(row[i]) for row in grid) for i in range(len(grid[0]))]
    lines += [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in grid
    ]
    return lines


def compare_text(result: RuntimeCompareResult) -> str:
    """The whole report: the sides, then variables, files and cells side by side."""
    lines = [f"S{i + 1}  {side.runtime_id}: {side.label}" for i, side in enumerate(result.sides)]
    variables = result.variables
    lines += _table(
        "variables",
        variables.available,
        [(row.name, row.same, [_variable(v) for v in row.values]) for row in variables.rows],
        only_differing=False,
    )
    files = result.files
    lines += _table(
        "files",
        files.available,
        [(row.path, row.same, [_file(e) for e in row.entries]) for row in files.rows],
        only_differing=True,
    )
    cells = result.cells
    lines += _table(
        "cells",
        cells.available,
        [(str(row.index), row.same, [_cell(c) for c in row.cells]) for row in cells.rows],
        only_differing=True,
    )
    return "\n".join(lines)
