"""2 to 8 points in time side by side (issue 44 §3): one row per variable, path or cell
position, one value per side, and whether the sides agree.

Each side's parts are what a two-sided comparison reads (`comparisons.Side`): recorded
variables (nothing is unpickled), file trees, document cells. A part a side cannot show is
None: that side is not `available` for it, shows None in every row, and takes no part in
`same`. A row is `same` when every available side holds it, all alike: variables by their
digest (by type and summary when one has none), files by content, cells by source.
"""

from __future__ import annotations

from collections.abc import Sequence

from ditto_jupyter.backends.base import FileTree, TreeEntry
from ditto_jupyter.control.diff.cells import cell_entry
from ditto_jupyter.control.diff.files import file_entry, same_entry
from ditto_jupyter.control.diff.variables import as_variable
from ditto_jupyter.control.documents.storage import CellView
from ditto_jupyter.control.documents.validation import cell_source
from ditto_jupyter.core.errors import InvalidRequest
from ditto_jupyter.core.limits import MAX_COMPARE_SIDES
from ditto_jupyter.core.models import (
    CellRow,
    CellsSideBySide,
    FileRow,
    FilesSideBySide,
    VariableRow,
    VariablesSideBySide,
)
from ditto_jupyter.core.namespace_manifest import RecordedVariable

#: The fewest sides of a comparison.
MIN_COMPARE_SIDES = 2


def check_side_count(count: int) -> None:
    """InvalidRequest unless 2 to `MAX_COMPARE_SIDES` sides are asked for."""
    if not MIN_COMPARE_SIDES <= count <= MAX_COMPARE_SIDES:
        raise InvalidRequest(
            f"sides: compare takes {MIN_COMPARE_SIDES} to {MAX_COMPARE_SIDES} sides, got {count}"
        )


def _variable_key(variable: RecordedVariable) -> tuple[object, ...]:
    if variable.digest is None:
        return (variable.type, variable.summary, variable.kept, variable.reason)
    return (variable.digest, variable.type, variable.kept, variable.reason)


def variables_side_by_side(
    sides: Sequence[dict[str, RecordedVariable] | None],
) -> VariablesSideBySide:
    """Every variable any side holds, by name."""
    held = [side for side in sides if side is not None]
    rows = []
    for name in sorted({name for side in held for name in side}):
        found = [side.get(name) if side is not None else None for side in sides]
        present = [found[i] for i, side in enumerate(sides) if side is not None]
        same = all(v is not None for v in present) and (
            len({_variable_key(v) for v in present if v is not None}) == 1
        )
        values = [as_variable(v) if v is not None else None for v in found]
        rows.append(VariableRow(name=name, values=values, same=same))
    return VariablesSideBySide(available=[side is not None for side in sides], rows=rows)


def _alike(entries: Sequence[TreeEntry | None]) -> bool:
    first = entries[0]
    return first is not None and all(
        entry is not None and same_entry(first, entry) for entry in entries
    )


def files_side_by_side(sides: Sequence[FileTree | None]) -> FilesSideBySide:
    """Every workspace path any side holds, by path."""
    trees = [side.entries if side is not None else None for side in sides]
    rows = []
    for path in sorted({path for tree in trees if tree is not None for path in tree}):
        found = [tree.get(path) if tree is not None else None for tree in trees]
        present = [found[i] for i, tree in enumerate(trees) if tree is not None]
        entries = [file_entry(entry) if entry is not None else None for entry in found]
        rows.append(FileRow(path=path, entries=entries, same=_alike(present)))
    return FilesSideBySide(available=[tree is not None for tree in trees], rows=rows)


def cells_side_by_side(sides: Sequence[list[CellView] | None]) -> CellsSideBySide:
    """The cells of every side, position by position."""
    longest = max((len(side) for side in sides if side is not None), default=0)
    rows = []
    for index in range(longest):
        found = [side[index] if side is not None and index < len(side) else None for side in sides]
        present = [found[i] for i, side in enumerate(sides) if side is not None]
        sources = {
            cell_source(view.record["cell"]) if view is not None else None for view in present
        }
        same = None not in sources and len(sources) == 1
        cells = [cell_entry(index, view) if view is not None else None for view in found]
        rows.append(CellRow(index=index, cells=cells, same=same))
    return CellsSideBySide(available=[side is not None for side in sides], rows=rows)
