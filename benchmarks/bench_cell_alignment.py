"""Aligning the cells of large old notebooks (issue 40, section 8), beside nbdime's own.

Run from the repository root: `.venv/bin/python -m benchmarks.bench_cell_alignment`.
Writes the `bench_cell_alignment` section of benchmarks/RESULTS.md.

Two nbformat 4.4 documents (cells without ids, as old notebooks hold them) of N code
cells, each with a stream output; between them every tenth cell's source is edited (the
first and the last included, so the whole notebook is the changed part), one cell is
added and one removed. Timed, on the same cells as stored (`cell_views`):

- `compare_cells`, what a comparison and a restore's count now do: nbdime's alignment up
  to `MAX_NBDIME_PAIRS` (old x new cells of the changed part), the alignment by sources
  above it;
- nbdime's alignment itself (`_nbdime_aligned`: `nbdime.diff_notebooks` and the pairing
  read from it), what they did before at every size; skipped at 1,500 cells, where it
  takes minutes (the issue measured 154 s for a comparison);
- `RuntimeService.diff` between two checkpoints holding the 1,500-cell documents (the
  route's service call: documents read from the blob store, variables and files compared
  too, a tiny namespace); target: under 1 s.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import nbformat  # noqa: E402

from benchmarks.results_table import markdown_table, write_section  # noqa: E402
from ditto_jupyter.control.checkpoint_documents import DocumentToRecord  # noqa: E402
from ditto_jupyter.control.diff.cells import (  # noqa: E402
    MAX_NBDIME_PAIRS,
    _nbdime_aligned,
    compare_cells,
)
from ditto_jupyter.control.documents.storage import cell_views  # noqa: E402
from ditto_jupyter.core.models import NotebookDocument  # noqa: E402
from ditto_jupyter.kernel.local_control import StandaloneContext  # noqa: E402
from ditto_jupyter.wiring import open_runtime_service  # noqa: E402

SIZES = (100, 200, 400, 1500)
#: nbdime is timed up to this many cells (beyond, minutes per run).
NBDIME_UP_TO = 400
TARGET_S = 1.0


def old_notebook(count: int, *, edited: bool) -> NotebookDocument:
    """`count` code cells without ids; `edited`: every tenth source edited, one cell added
    (at a third), one removed (at two thirds)."""
    made = nbformat.v4.new_notebook()
    sources = [f"result_{i} = compute({i})\nprint(result_{i})" for i in range(count)]
    if edited:
        sources = [s + ("  # edited" if i % 10 == 0 else "") for i, s in enumerate(sources)]
        sources[-1] += "  # edited"
        sources.insert(count // 3, "inserted = True")
        del sources[2 * count // 3 + 1]
    for source in sources:
        cell = nbformat.v4.new_code_cell(source)
        del cell["id"]
        cell.outputs = [nbformat.v4.new_output("stream", text=f"out of {source}\n")]
        made.cells.append(cell)
    return NotebookDocument.model_validate({**made, "nbformat_minor": 4}, strict=False)


def timed(call: Callable[[], Any], runs: int) -> tuple[list[float], Any]:
    """Wall seconds of each run, and the last run's result."""
    times: list[float] = []
    result: Any = None
    for _ in range(runs):
        started = time.perf_counter()
        result = call()
        times.append(time.perf_counter() - started)
    return times, result


async def service_diff(data_dir: Path, before: NotebookDocument, after: NotebookDocument) -> Any:
    """Wall seconds of 5 runs of `RuntimeService.diff` between two checkpoints holding
    `before` and `after`, and its cells answer."""
    token = uuid.uuid4().hex
    values: dict[str, Any] = {"x": 1}

    def context(blobs: Any) -> StandaloneContext:
        return StandaloneContext(blobs, values, token, data_dir)

    service = open_runtime_service(data_dir, context_factory=context)
    try:
        rid = (await service.create_runtime("old.ipynb", handle_state={"self": token})).runtime_id
        a = await service.checkpoint(rid, "a", document=DocumentToRecord(before, "request"))
        values["x"] = 2
        b = await service.checkpoint(rid, "b", document=DocumentToRecord(after, "request"))
        times: list[float] = []
        result: Any = None
        for _ in range(5):
            started = time.perf_counter()
            result = await service.diff(rid, a.checkpoint_id, b.checkpoint_id)
            times.append(time.perf_counter() - started)
        return times, result.cells
    finally:
        service.close_store()


def fmt(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms" if seconds < 10 else f"{seconds:,.1f} s"


def main() -> None:
    import nbdime  # noqa: F401  (imported before timing: it takes a second)

    load = os.getloadavg()
    rows: list[list[object]] = []
    for size in SIZES:
        old = cell_views(old_notebook(size, edited=False))
        new = cell_views(old_notebook(size, edited=True))
        runs = 5 if size <= 200 else 3
        ours, diff = timed(lambda o=old, n=new: compare_cells(o, n), runs)
        theirs = "skipped (minutes)"
        ratio = "-"
        if size <= NBDIME_UP_TO:
            nb_times, _ = timed(lambda o=old, n=new: _nbdime_aligned(o, n), 1 if size > 200 else 3)
            theirs = fmt(statistics.median(nb_times))
            ratio = f"{statistics.median(nb_times) / statistics.median(ours):,.0f}x"
        pairs = len(old) * len(new)
        rows.append(
            [
                f"{size:,}",
                f"{pairs:,}",
                diff.aligned_by,
                f"{len(diff.changed)} / {len(diff.added)} / {len(diff.removed)}",
                fmt(statistics.median(ours)),
                theirs,
                ratio,
                "-",
                "-",
            ]
        )
    with tempfile.TemporaryDirectory(prefix="bench-align-") as tmp:
        before, after = old_notebook(1500, edited=False), old_notebook(1500, edited=True)
        times, cells = asyncio.run(service_diff(Path(tmp) / "data", before, after))
    median = statistics.median(times)
    rows.append(
        [
            "1,500, `RuntimeService.diff` of two checkpoints",
            f"{1500 * 1500:,}",
            cells.aligned_by,
            f"{len(cells.changed)} / {len(cells.added)} / {len(cells.removed)}",
            fmt(median),
            "-",
            "-",
            f"< {TARGET_S:.0f} s",
            "yes" if median < TARGET_S else "no",
        ]
    )
    headers = [
        "cells without ids (each side)",
        "pairs (old x new)",
        "aligned by",
        "cells changed / added / removed",
        "ditto now (median)",
        "nbdime's alignment (median)",
        "nbdime / ditto",
        "target",
        "met",
    ]
    body = markdown_table(headers, rows) + (
        f"\n\n- `MAX_NBDIME_PAIRS` = {MAX_NBDIME_PAIRS:,}: above it the changed part is "
        "aligned by the cells' sources (a sequence match on each cell's type and source), and "
        "the answer says so (`CellsDiff.aligned_by`, `note`; a restore's `cells_note`). Below "
        "it nbdime still aligns (it pairs an edited cell with its old self by similarity "
        "wherever it moved).\n"
        "- Every tenth cell's source edited (the first and the last too, so the whole "
        "notebook is the changed part), one cell added, one removed; each cell has a stream "
        "output. Alignment rows: 5 runs up to 200 cells, 3 above; nbdime 3 runs up to 200, "
        "one at 400, none at 1,500 (minutes).\n"
        "- The service row: 5 runs of `RuntimeService.diff(runtime, A, B)` on a fresh data "
        "directory (SQLite, local blob store), documents read from the blob store, a "
        "one-variable namespace; the route runs it on a worker thread, never on the loop "
        "(so does a restore's count of the cells changed).\n"
        f"- Load average at the start: {', '.join(f'{x:.1f}' for x in load)} on "
        f"{os.cpu_count()} cores (a machine shared with other work: wall time includes "
        "waiting for a core)."
    )
    write_section("bench_cell_alignment", "Aligning the cells of large old notebooks", body)
    print(body)


if __name__ == "__main__":
    main()
