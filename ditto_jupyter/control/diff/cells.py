"""Cells added, removed and changed between two notebook documents.

Cells are compared as stored (`documents.CellView`): equal chunks, equal cells, so the
unchanged cells at the start and the end are matched without looking inside. The cells
between are paired by their ids when every cell has a distinct one (nbformat 4.5, as
JupyterLab writes: a cell keeps its id when edited, moved or run), else aligned by nbdime
(`diff_notebooks`, the field's notebook diff: it pairs a cell with its edited self by
similarity), with each large value (an image) standing as its chunk name, never loaded.
nbdime's alignment grows with the product of the two sides' cells (about 0.4 s at 100 x
100, minutes at 1,500 x 1,500): above `MAX_NBDIME_PAIRS` the cells are aligned by their
sources instead (a sequence match on each cell's type and source, `_by_source`), and the
answer says so (`CellsDiff.aligned_by`, `note`). A pair whose chunks differ is a changed
cell: a unified diff of its source when the source changed, and whether its outputs did.
Comparing reads blobs and aligns: callers run it off the event loop.
"""

from __future__ import annotations

import difflib
import logging
from dataclasses import dataclass
from typing import Any

from ditto_jupyter.control.documents.storage import CellView, replaced_at
from ditto_jupyter.control.documents.validation import cell_source
from ditto_jupyter.core.models import AlignedBy, CellChange, CellEntry, CellsCounted, CellsDiff

_log = logging.getLogger(__name__)

#: Characters of a cell's source a comparison shows (the rest is cut, with "…").
MAX_SOURCE_SHOWN = 16 * 1024
#: The most cells nbdime aligns: old cells times new cells of the changed part. Above it,
#: cells are aligned by their sources (benchmarks/bench_cell_alignment.py: nbdime takes
#: about 0.4 s at 100 x 100 and grows with the product).
MAX_NBDIME_PAIRS = 100 * 100

Pairs = list[tuple[int | None, int | None]]


@dataclass(frozen=True)
class Alignment:
    """Pairs (old index, new index) of the same cells, how they were found, and a note
    for the answer when the alignment is not the best one (too many cells for nbdime)."""

    pairs: Pairs
    by: AlignedBy
    note: str | None = None


def _text(value: Any) -> Any:
    """nbformat's multiline strings (a list of lines) as one string, as nbdime wants them."""
    if isinstance(value, list) and all(isinstance(line, str) for line in value):
        return "".join(value)
    return value


def _cell_of(view: CellView) -> dict[str, Any]:
    """The cell as nbdime sees it: each large value stands as its chunk name, and every
    multiline string is one string (as nbformat holds them in memory)."""
    cell: Any = view.record["cell"]
    for value in view.record.get("large", []):
        chunks = value.get("chunks") or [""]
        cell = replaced_at(cell, list(value["path"]), f"<stored as {chunks[0][:16]}>")
    assert isinstance(cell, dict)
    shown: dict[str, Any] = {**cell, "source": cell_source(cell)}
    outputs = shown.get("outputs")
    if isinstance(outputs, list):
        shown["outputs"] = [_output_of(output) for output in outputs]
    return shown


def _output_of(output: Any) -> Any:
    if not isinstance(output, dict):
        return output
    output = dict(output)
    if "text" in output:
        output["text"] = _text(output["text"])
    data = output.get("data")
    if isinstance(data, dict):
        output["data"] = {mime: _text(value) for mime, value in data.items()}
    return output


def _shown(source: str) -> str:
    return source if len(source) <= MAX_SOURCE_SHOWN else source[:MAX_SOURCE_SHOWN] + "…"


def cell_entry(index: int, view: CellView) -> CellEntry:
    """What a comparison shows of one cell."""
    cell = view.record["cell"]
    count = cell.get("execution_count")
    outputs = cell.get("outputs")
    return CellEntry(
        index=index,
        cell_type=str(cell.get("cell_type", "")),
        source=_shown(cell_source(cell)),
        execution_count=count if isinstance(count, int) and not isinstance(count, bool) else None,
        outputs=len(outputs) if isinstance(outputs, list) else 0,
    )


def _outputs_of(view: CellView) -> Any:
    cell = _cell_of(view)
    return cell.get("outputs", [])


def _change(old_index: int, old: CellView, new_index: int, new: CellView) -> CellChange:
    old_source, new_source = cell_source(old.record["cell"]), cell_source(new.record["cell"])
    source_diff = None
    if old_source != new_source:
        lines = difflib.unified_diff(
            old_source.splitlines(), new_source.splitlines(), "before", "after", lineterm=""
        )
        source_diff = _shown("\n".join(lines))
    return CellChange(
        index_old=old_index,
        index_new=new_index,
        source_diff=source_diff,
        outputs_changed=_outputs_of(old) != _outputs_of(new),
        old=cell_entry(old_index, old),
        new=cell_entry(new_index, new),
    )


def _by_sequence(old_items: list[Any], new_items: list[Any]) -> Pairs:
    """Cells aligned as a plain sequence of hashable items: equal runs pair, and in a run
    replaced by as many cells, each pairs with the cell in its place."""
    pairs: Pairs = []
    matcher = difflib.SequenceMatcher(a=old_items, b=new_items)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1):
            pairs += list(zip(range(i1, i2), range(j1, j2), strict=True))
        else:
            pairs += [(i, None) for i in range(i1, i2)]
            pairs += [(None, j) for j in range(j1, j2)]
    return pairs


def _by_position(old: list[CellView], new: list[CellView]) -> Pairs:
    """Cells aligned as a plain sequence of their chunk names (when nbdime cannot)."""
    return _by_sequence([v.key for v in old], [v.key for v in new])


def _source_of(view: CellView) -> tuple[str, str]:
    cell = view.record["cell"]
    return str(cell.get("cell_type", "")), cell_source(cell)


def _by_source(old: list[CellView], new: list[CellView]) -> Pairs:
    """Cells aligned by their type and source (a cell run again, same source, new outputs,
    pairs with its old self; an edited one where it stands in the same place)."""
    return _by_sequence([_source_of(v) for v in old], [_source_of(v) for v in new])


def _cell_ids(views: list[CellView]) -> list[str] | None:
    """Each cell's id (nbformat 4.5), or None unless every cell has a distinct one."""
    ids = [view.record["cell"].get("id") for view in views]
    if all(isinstance(i, str) and i for i in ids) and len(set(ids)) == len(ids):
        return [str(i) for i in ids]
    return None


def _by_id(old_ids: list[str], new_ids: list[str]) -> list[tuple[int | None, int | None]]:
    """Cells aligned by their ids: a cell keeps its id when it is edited, moved or run."""
    where = {cell_id: index for index, cell_id in enumerate(old_ids)}
    pairs: list[tuple[int | None, int | None]] = []
    kept = set()
    for index, cell_id in enumerate(new_ids):
        found = where.get(cell_id)
        pairs.append((found, index))
        if found is not None:
            kept.add(found)
    pairs += [(index, None) for index in range(len(old_ids)) if index not in kept]
    return pairs


def _aligned(old: list[CellView], new: list[CellView]) -> Alignment:
    """Pairs (old index, new index) of the same cells: by their ids when every cell has
    one (JupyterLab's notebooks), else as nbdime aligns them (by similarity) up to
    `MAX_NBDIME_PAIRS`, else by their sources; both set for a kept or changed cell, one
    None for an added or removed one."""
    old_ids, new_ids = _cell_ids(old), _cell_ids(new)
    if old_ids is not None and new_ids is not None:
        return Alignment(_by_id(old_ids, new_ids), "ids")
    if len(old) * len(new) > MAX_NBDIME_PAIRS:
        note = (
            f"the cells that differ ({len(old):,} before, {len(new):,} after) have no distinct "
            f"ids and are more than nbdime aligns in good time ({MAX_NBDIME_PAIRS:,} pairs), "
            "so they were aligned by their sources: an edited cell pairs with its old self "
            "only where it stands in the same place, else it shows as removed and added"
        )
        return Alignment(_by_source(old, new), "sources", note)
    return _nbdime_aligned(old, new)


def _nbdime_aligned(old: list[CellView], new: list[CellView]) -> Alignment:
    """Cells aligned by nbdime's notebook diff (a cell paired with its edited self)."""
    from nbdime import diff_notebooks  # imported on first use: it takes a second to load
    from nbformat import from_dict  # nbdime reads cells and outputs by attribute

    def notebook(views: list[CellView]) -> Any:
        cells = [_cell_of(view) for view in views]
        made = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells}
        return from_dict(made)  # type: ignore[no-untyped-call]

    ops: list[dict[str, Any]] = []
    try:
        found = diff_notebooks(notebook(old), notebook(new))
    except Exception as error:  # a cell nbdime does not take (its own asserts): align plainly
        _log.warning("ditto: nbdime could not align the cells (%s); aligned them in order", error)
        note = f"nbdime could not align the cells ({error}), so they were aligned in order"
        return Alignment(_by_position(old, new), "order", note)
    for entry in found:
        if entry.get("key") == "cells" and entry.get("op") == "patch":
            ops = list(entry.get("diff", []))
    ops.sort(key=lambda op: (int(op["key"]), op["op"] != "addrange"))
    pairs: list[tuple[int | None, int | None]] = []
    i_old = i_new = 0
    for op in ops:
        key = int(op["key"])
        while i_old < key:
            pairs.append((i_old, i_new))
            i_old, i_new = i_old + 1, i_new + 1
        if op["op"] == "addrange":
            for _ in op["valuelist"]:
                pairs.append((None, i_new))
                i_new += 1
        elif op["op"] == "removerange":
            for _ in range(int(op["length"])):
                pairs.append((i_old, None))
                i_old += 1
        else:  # patch: the same cell, changed
            pairs.append((i_old, i_new))
            i_old, i_new = i_old + 1, i_new + 1
    while i_old < len(old):
        pairs.append((i_old, i_new))
        i_old, i_new = i_old + 1, i_new + 1
    return Alignment(pairs, "nbdime")


def compare_cells(old: list[CellView] | None, new: list[CellView] | None) -> CellsDiff:
    """What changed from the cells `old` to the cells `new` (None: that side holds no
    document, so nothing is compared)."""
    if old is None or new is None:
        return CellsDiff(added=[], removed=[], changed=[], unchanged=0, available=False)
    start = 0
    while start < min(len(old), len(new)) and old[start].key == new[start].key:
        start += 1
    end = 0
    while end < min(len(old), len(new)) - start and old[-1 - end].key == new[-1 - end].key:
        end += 1
    middle_old, middle_new = old[start : len(old) - end], new[start : len(new) - end]
    unchanged = start + end
    added: list[CellEntry] = []
    removed: list[CellEntry] = []
    changed: list[CellChange] = []
    alignment: Alignment | None = None
    if middle_old and middle_new:
        alignment = _aligned(middle_old, middle_new)
        pairs = alignment.pairs
    else:
        pairs = [(i, None) for i in range(len(middle_old))]
        pairs += [(None, i) for i in range(len(middle_new))]
    for i_old, i_new in pairs:
        if i_old is None and i_new is not None:
            added.append(cell_entry(start + i_new, middle_new[i_new]))
        elif i_new is None and i_old is not None:
            removed.append(cell_entry(start + i_old, middle_old[i_old]))
        elif i_old is not None and i_new is not None:
            before, after = middle_old[i_old], middle_new[i_new]
            if before.key == after.key:
                unchanged += 1
            else:
                changed.append(_change(start + i_old, before, start + i_new, after))
    return CellsDiff(
        added=added,
        removed=removed,
        changed=changed,
        unchanged=unchanged,
        available=True,
        aligned_by=alignment.by if alignment is not None else None,
        note=alignment.note if alignment is not None else None,
    )


def changed_cell_count(old: list[CellView] | None, new: list[CellView] | None) -> CellsCounted:
    """How many cells differ between two documents (added, removed or changed), None when
    either side holds no document; and the comparison's note, if any (`CellsDiff.note`)."""
    if old is None or new is None:
        return None, None
    diff = compare_cells(old, new)
    return len(diff.added) + len(diff.removed) + len(diff.changed), diff.note
