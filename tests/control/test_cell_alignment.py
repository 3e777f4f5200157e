"""Aligning the cells of two documents: by ids, by nbdime, or by sources above a bound.

Real documents (nbformat 4.4 cells without ids, as old notebooks hold them), compared as
stored (`cell_views`), with the real nbdime. Above `MAX_NBDIME_PAIRS` (cells of the changed
part, old times new) nbdime's alignment, which grows with that product, gives way to one
by the cells' sources, and the answer says so. How long each takes is measured in
benchmarks/bench_cell_alignment.py, not here.
"""

from __future__ import annotations

from typing import Any

import nbformat

from ditto_jupyter.control.diff.cells import MAX_NBDIME_PAIRS, compare_cells
from ditto_jupyter.control.documents.storage import cell_views
from ditto_jupyter.core.models import NotebookDocument


def old_notebook(sources: list[str], outputs: dict[int, str] | None = None) -> NotebookDocument:
    """An nbformat 4.4 document: code cells with these sources and no ids, each with an
    output of its own (`outputs`: other outputs, by index)."""
    made = nbformat.v4.new_notebook()
    for index, source in enumerate(sources):
        cell = nbformat.v4.new_code_cell(source)
        del cell["id"]
        text = (outputs or {}).get(index, f"out of {source}\n")
        cell.outputs = [nbformat.v4.new_output("stream", text=text)]
        made.cells.append(cell)
    document: dict[str, Any] = {**made, "nbformat_minor": 4}
    return NotebookDocument.model_validate(document, strict=False)


def sources(count: int) -> list[str]:
    return [f"result_{i} = compute({i})\nprint(result_{i})" for i in range(count)]


def test_1500_cells_without_ids_are_aligned_by_their_sources_and_the_answer_says_so() -> None:
    before = sources(1500)
    after = list(before)
    after[100] += "  # edited"  # a source edited in place
    after.insert(300, "inserted = True")  # a cell added
    del after[1201]  # a cell removed (1200 of before)
    reran = {701: "new output\n"}  # 700 of before, run again: its output changed
    diff = compare_cells(cell_views(old_notebook(before)), cell_views(old_notebook(after, reran)))
    assert diff.aligned_by == "sources"
    assert diff.note is not None and "1,101 before" in diff.note and "nbdime" in diff.note
    assert [(c.index_old, c.index_new) for c in diff.changed] == [(100, 100), (700, 701)]
    assert diff.changed[1].source_diff is None and diff.changed[1].outputs_changed
    assert [c.index for c in diff.added] == [300]
    assert [c.index for c in diff.removed] == [1200]
    assert diff.unchanged == 1500 - 3


def test_duplicate_ids_count_as_no_ids() -> None:
    made = old_notebook(sources(200))
    cells = [{**cell, "id": "same"} for cell in made.cells]
    duplicated = made.model_copy(update={"cells": cells, "nbformat_minor": 5})
    edited = [dict(cell) for cell in cells]
    edited[50] = {**edited[50], "source": "edited"}
    edited[60] = {**edited[60], "source": "edited too"}
    diff = compare_cells(
        cell_views(duplicated), cell_views(duplicated.model_copy(update={"cells": edited}))
    )
    assert diff.aligned_by == "nbdime"  # a middle of 11 x 11 cells, all with one id
    assert [(c.index_old, c.index_new) for c in diff.changed] == [(50, 50), (60, 60)]


def test_below_the_bound_nbdime_aligns_and_no_note() -> None:
    before = sources(40)
    after = [s + ("  # edited" if i % 10 == 0 else "") for i, s in enumerate(before)]
    after.insert(20, "new = 1")
    assert len(before) * len(after) <= MAX_NBDIME_PAIRS
    diff = compare_cells(cell_views(old_notebook(before)), cell_views(old_notebook(after)))
    assert (diff.aligned_by, diff.note) == ("nbdime", None)
    assert [c.index for c in diff.added] == [20]
    assert len(diff.changed) == 4


def test_cells_with_ids_are_aligned_by_them() -> None:
    made = old_notebook(sources(1500))
    cells = [{**cell, "id": f"c{i}"} for i, cell in enumerate(made.cells)]
    with_ids = made.model_copy(update={"cells": cells, "nbformat_minor": 5})
    edited = list(cells)
    edited[3] = {**edited[3], "source": "edited"}
    diff = compare_cells(
        cell_views(with_ids), cell_views(with_ids.model_copy(update={"cells": edited}))
    )
    assert (diff.aligned_by, diff.note) == ("ids", None)
    assert [(c.index_old, c.index_new) for c in diff.changed] == [(3, 3)]
