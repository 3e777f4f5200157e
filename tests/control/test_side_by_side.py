"""Rows of a compare of N sides (`control.diff.side_by_side`) and its text table: what a
side that cannot show a part does, when a row is the same, what differs and is missing."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from ditto_jupyter.backends.base import TreeEntry
from ditto_jupyter.control.diff.side_by_side import (
    cells_side_by_side,
    check_side_count,
    files_side_by_side,
    variables_side_by_side,
)
from ditto_jupyter.control.diff.side_by_side_report import compare_text
from ditto_jupyter.control.documents.storage import CellView
from ditto_jupyter.core.errors import InvalidRequest
from ditto_jupyter.core.models import CompareSide, RuntimeCompareResult
from ditto_jupyter.core.namespace_manifest import RecordedVariable


def var(name: str, summary: str, digest: str | None = "d") -> RecordedVariable:
    return RecordedVariable(name, "int", summary, 28, digest, True)


@dataclass
class Tree:
    """A file tree of the test: entries only."""

    entries: dict[str, TreeEntry]

    def read(self, path: str, limit: int) -> bytes | None:
        return None


def tree(**files: str) -> Tree:
    return Tree({p: TreeEntry(p, "file", 3, 0o644, (c,)) for p, c in files.items()})


def cell(source: str) -> CellView:
    return CellView((source,), {"cell": {"cell_type": "code", "source": source, "outputs": []}})


def test_the_count_of_sides_is_2_to_8() -> None:
    for count in (0, 1, 9):
        with pytest.raises(InvalidRequest, match=f"compare takes 2 to 8 sides, got {count}"):
            check_side_count(count)
    check_side_count(2)
    check_side_count(8)


def test_variables_same_by_digest_else_type_and_summary_and_unavailable_sides() -> None:
    a = {"w": var("w", "7"), "x": var("x", "1", "d1"), "n": var("n", "3", None)}
    b = {"w": var("w", "7"), "x": var("x", "1", "d2"), "n": var("n", "3", None)}
    shown = variables_side_by_side([a, None, b])
    assert shown.available == [True, False, True]
    rows = {row.name: row for row in shown.rows}
    assert [row.name for row in shown.rows] == ["n", "w", "x"]
    assert rows["w"].same and rows["n"].same  # the pruned side takes no part
    assert not rows["x"].same  # same summary, another digest: changed in place
    assert rows["w"].values[1] is None
    only = variables_side_by_side([a, {"w": var("w", "7")}])
    assert not {row.name: row for row in only.rows}["x"].same  # missing on a side


def test_files_and_cells_by_path_and_position() -> None:
    files = files_side_by_side([tree(a="1", b="2"), tree(a="1"), tree(a="1", b="3")])
    assert [(row.path, row.same) for row in files.rows] == [("a", True), ("b", False)]
    assert files.rows[1].entries[1] is None
    cells = cells_side_by_side([[cell("x = 1"), cell("y")], [cell("x = 1")], None])
    assert cells.available == [True, True, False]
    assert [(row.index, row.same) for row in cells.rows] == [(0, True), (1, False)]
    assert cells.rows[1].cells[0] is not None and cells.rows[1].cells[0].source == "y"

    text = compare_text(
        RuntimeCompareResult(
            sides=[
                CompareSide(runtime_id="r1", checkpoint_id=None, label="live kernel"),
                CompareSide(runtime_id="r2", checkpoint_id="c", label="one (c)"),
                CompareSide(runtime_id="r3", checkpoint_id="d", label="two (d)"),
            ],
            variables=variables_side_by_side([{"w": var("w", "7")}, {"w": var("w", "7")}, None]),
            files=files,
            cells=cells,
        )
    )
    lines = text.splitlines()
    assert lines[:3] == ["S1  r1: live kernel", "S2  r2: one (c)", "S3  r3: two (d)"]
    assert ["=", "w", "7", "7", "n/a"] in [line.split() for line in lines]
    assert "files: 1 the same on every side" in lines
    assert ["*", "b", "3", "B", "-", "3", "B"] in [line.split() for line in lines]
    assert ["*", "1", "y", "-", "n/a"] in [line.split() for line in lines]
