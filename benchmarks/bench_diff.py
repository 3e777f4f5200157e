"""Comparing two checkpoints in the server (issue 23, section 3): variables, files, cells.

Run from the repository root: `.venv/bin/python -m benchmarks.bench_diff`. Writes the
`bench_diff` section of benchmarks/RESULTS.md.

A runtime of the real RuntimeService on a fresh data directory (SQLite store, blob store,
local workspace), whose context is this process's own namespace (the in-process context the
magics use without a server: the capture is the kernel's `capture_namespace`). Checkpoint A
holds 1,000 variables (numbers, strings, lists, dicts, small numpy arrays), 10,000 files in
100 folders and a 200-cell notebook document. Between A and B: 50 variables changed, 10
added, 10 removed; 100 files changed, 20 added, 20 removed; 20 cells edited, 5 added. The
figure is the wall time of the service call the `POST /api/v1/runtimes/diff` route makes
(`RuntimeService.diff`), a fresh service each run so no cache of a run helps the next;
target: under 200 ms. The first call of a process also imports nbdime (about a second), so
one comparison runs before the timed ones.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import nbformat  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks.results_table import markdown_table, write_section  # noqa: E402
from ditto_jupyter.control.checkpoint_documents import DocumentToRecord  # noqa: E402
from ditto_jupyter.control.service import RuntimeService  # noqa: E402
from ditto_jupyter.core.models import NotebookDocument  # noqa: E402
from ditto_jupyter.core.namespace_manifest import forget_parts  # noqa: E402
from ditto_jupyter.kernel.local_control import StandaloneContext  # noqa: E402
from ditto_jupyter.wiring import open_runtime_service  # noqa: E402

VARIABLES = 1000
FILES = 10_000
FOLDERS = 100
CELLS = 200
RUNS = 7


def namespace() -> dict[str, Any]:
    rng = np.random.default_rng(7)
    values: dict[str, Any] = {}
    for index in range(VARIABLES):
        kind = index % 5
        if kind == 0:
            values[f"n_{index}"] = index * 3
        elif kind == 1:
            values[f"s_{index}"] = f"label {index}"
        elif kind == 2:
            values[f"l_{index}"] = list(range(index % 40))
        elif kind == 3:
            values[f"d_{index}"] = {"id": index, "tags": ["a", "b"], "score": index / 7}
        else:
            values[f"a_{index}"] = rng.random(64)
    return values


def document(edits: bool = False, added: int = 0) -> NotebookDocument:
    made = nbformat.v4.new_notebook()
    for index in range(CELLS):
        source = f"result_{index} = compute({index})\nresult_{index}"
        if edits and index % 10 == 0:
            source += "  # edited"
        cell = nbformat.v4.new_code_cell(source, execution_count=index + 1)
        cell["id"] = f"c{index:03d}"
        cell.outputs = [nbformat.v4.new_output("execute_result", data={"text/plain": str(index)})]
        made.cells.append(cell)
    for extra in range(added):
        made.cells.insert(50 + extra, nbformat.v4.new_code_cell(f"extra_{extra} = 1"))
    return NotebookDocument.model_validate(nbformat.from_dict(made), strict=False)


def write_files(root: Path, *, changed: bool) -> None:
    for index in range(FILES):
        folder = root / f"part-{index % FOLDERS:03d}"
        folder.mkdir(exist_ok=True)
        path = folder / f"row-{index:05d}.csv"
        if changed and index < 20:
            path.unlink()
            continue
        text = f"id,value\n{index},{index * 1.5}\n"
        if changed and index % 100 == 50:
            text += "edited,1\n"
        path.write_text(text)
    if changed:
        for extra in range(20):
            (root / f"new-{extra}.txt").write_text(f"new file {extra}\n")


async def two_checkpoints(data_dir: Path) -> tuple[str, str, str]:
    values = namespace()
    token = uuid.uuid4().hex
    contexts: list[StandaloneContext] = []

    def context(blobs: Any) -> StandaloneContext:
        contexts.append(StandaloneContext(blobs, values, token, data_dir))
        return contexts[-1]

    service = open_runtime_service(data_dir, context_factory=context)
    try:
        rid = (await service.create_runtime("bench.ipynb", handle_state={"self": token})).runtime_id
        workspace = service.workspace_path(rid)
        assert workspace is not None
        write_files(workspace, changed=False)
        first = await service.checkpoint(rid, "a", document=DocumentToRecord(document(), "request"))
        names = sorted(values)
        for name in names[:50]:
            value = values[name]
            values[name] = value * 2 if isinstance(value, int | np.ndarray) else [value]
        for name in names[50:]:  # a new object, the same value: unchanged
            if isinstance(values[name], list):
                values[name] = list(values[name])
        for name in names[-10:]:
            del values[name]
        values.update({f"new_{i}": i for i in range(10)})
        write_files(workspace, changed=True)
        second = await service.checkpoint(
            rid, "b", document=DocumentToRecord(document(edits=True, added=5), "request")
        )
        return rid, first.checkpoint_id, second.checkpoint_id
    finally:
        service.close_store()


def fresh_service(data_dir: Path) -> RuntimeService:
    return open_runtime_service(
        data_dir, context_factory=lambda blobs: StandaloneContext(blobs, {}, "", data_dir)
    )


async def timed_diff(service: RuntimeService, rid: str, a: str, b: str) -> tuple[float, float, Any]:
    """(wall seconds, CPU seconds of the process, the result) of one comparison."""
    started, cpu = time.perf_counter(), time.process_time()
    result = await service.diff(rid, a, b)
    return time.perf_counter() - started, time.process_time() - cpu, result


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-diff-") as tmp:
        data_dir = Path(tmp) / "data"
        rid, a, b = asyncio.run(two_checkpoints(data_dir))
        warm = fresh_service(data_dir)
        asyncio.run(timed_diff(warm, rid, a, b))  # imports nbdime, warms the page cache
        warm.close_store()
        load = os.getloadavg()
        cold: list[tuple[float, float]] = []
        again: list[tuple[float, float]] = []
        result: Any = None
        for _ in range(RUNS):
            forget_parts()  # as in a server that just started
            service = fresh_service(data_dir)
            try:
                wall, cpu, result = asyncio.run(timed_diff(service, rid, a, b))
                cold.append((wall, cpu))
                wall, cpu, _ = asyncio.run(timed_diff(service, rid, a, b))
                again.append((wall, cpu))
            finally:
                service.close_store()
    variables, files, cells = result.variables, result.files, result.cells
    what = [
        f"{VARIABLES:,} variables, {FILES:,} files, {CELLS} cells",
        f"{len(variables.changed)} / {len(variables.added)} / {len(variables.removed)}",
        f"{len(files.changed)} / {len(files.added)} / {len(files.removed)}",
        f"{len(cells.changed)} / {len(cells.added)} / {len(cells.removed)}",
    ]

    def row(label: str, runs: list[tuple[float, float]]) -> list[object]:
        wall = statistics.median(w for w, _ in runs) * 1000
        cpu = statistics.median(c for _, c in runs) * 1000
        best = min(w for w, _ in runs) * 1000
        met = "yes" if wall < 200 else ("yes (CPU)" if cpu < 200 else "no")
        return [*what, label, f"{wall:.0f}", f"{best:.0f}", f"{cpu:.0f}", "< 200", met]

    rows = [row("first in a new server", cold), row("the same again", again)]
    headers = [
        "checkpoints compared",
        "variables changed / added / removed",
        "files changed / added / removed",
        "cells changed / added / removed",
        "comparison",
        "median wall ms",
        "best wall ms",
        "median CPU ms",
        "target ms",
        "met",
    ]
    body = markdown_table(headers, rows) + (
        f"\n\n- Time of `RuntimeService.diff(runtime, A, B)`, the route's service call, "
        f"{RUNS} runs. First in a new server: a service opened afresh on the data directory "
        "and no namespace part read yet (nothing carries over from the run before), after "
        "one untimed run of the process that imports nbdime and warms the page cache. The "
        "same again: a second call on that service (what a panel comparing neighbours "
        "sees: snapshots and parts read are kept).\n"
        f"- Load average at the start: {', '.join(f'{x:.1f}' for x in load)} on "
        f"{os.cpu_count()} cores (a machine shared with other work: wall time includes "
        "waiting for a core, CPU time does not; `met` says yes on wall time, else on CPU).\n"
        "- It reads A's and B's namespace manifests (variables by their recorded digests and "
        "summaries, nothing unpickled), their workspace manifests (files by chunk names; "
        "text diffs of the changed small files, read from the blob store), and their "
        "documents (cells by chunk names; the changed middle aligned by nbdime).\n"
        "- The changed files each get a unified text diff (at most 100 per comparison)."
    )
    write_section("bench_diff", "Comparing two checkpoints", body)
    print(body)


if __name__ == "__main__":
    main()
