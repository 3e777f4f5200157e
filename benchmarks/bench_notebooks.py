"""Checkpoints on real notebooks, beside Kishu 0.3.4, with every restore checked (issue 14).

Run from the repository root: `.venv/bin/python -m benchmarks.bench_notebooks` (needs the
bench extra; the first run downloads two pinned sdists, ~40 MB, see notebook_sources).
Writes the `bench_notebooks` section of benchmarks/RESULTS.md; with notebook names as
arguments it runs only those and prints the table without recording it. With
`BENCH_NOTEBOOKS_DUMP=file` it also keeps the raw figures; `--report-from file SECONDS
LOAD` writes the section again from them (after a change to the report).

For each notebook (a public matplotlib or scikit-learn tutorial, cut into its cells), two
ipykernel kernels run the same cells side by side, with MPLBACKEND=Agg:

- ours: after every cell, `RuntimeService.checkpoint` (the path of the server's REST
  checkpoint: the capture through `KernelContextDriver` and `JupyterClientHost`, the
  workspace snapshot, the store's records), timed at the caller, so with the kernel round
  trip (the in-kernel capture beside it); the bytes it reports written and the growth of its
  data directory on disk, every file (the blob store, its catalogue and the checkpoint
  store, with their write-ahead logs, and the workspaces);
- Kishu: `init_kishu()` in its test mode (benchmarks.kishu_harness), committing after every
  cell through its IPython hooks, timed inside the kernel; its store is its `.kishudb`.

Every third cell and after the last one, a no-op cell is added: it only displays the value
last assigned (a cell that changes nothing), to measure what a checkpoint after nothing
costs. At three cells (a third of the way, two thirds, the end) the whole namespace is
fingerprinted live (benchmarks.state_fingerprint). After the last cell each engine goes back
in place to the first third, the second, then the end, and checks out the two-thirds state
into a fresh kernel (ours: `RuntimeService.restore`, then `RuntimeService.checkout`; Kishu:
`init_kishu` in a new kernel on the same store, then `checkout`). Each result is
fingerprinted and compared with the live one; a restore is wrong when any value differs, is
missing without being reported unrestorable, is there when it was not live, or when pyplot's
open figures and current figure differ.
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_kernel import LAST_TIMING  # noqa: E402
from benchmarks.kishu_harness import (  # noqa: E402
    ATTACH_KISHU,
    CHECKOUT,
    HEAD,
    HOOK_ERRORS,
    INSTALL,
    LAST,
    KishuNotebook,
    tree_size,
)
from benchmarks.notebook_report import report  # noqa: E402
from benchmarks.notebook_sources import NOTEBOOKS, NotebookSource, prepare  # noqa: E402
from benchmarks.results_table import write_section  # noqa: E402
from benchmarks.state_fingerprint import compare  # noqa: E402
from ditto_jupyter.control.service import RuntimeService  # noqa: E402
from ditto_jupyter.core.blobs import BlobStore  # noqa: E402
from ditto_jupyter.core.errors import BackendError, DittoError  # noqa: E402
from ditto_jupyter.core.namespace_manifest import load_namespace, recorded_variables  # noqa: E402
from ditto_jupyter.hosts.jupyter_client_host import JupyterClientHost  # noqa: E402
from ditto_jupyter.hosts.kernel_context_driver import KernelContextDriver  # noqa: E402
from ditto_jupyter.wiring import open_runtime_service  # noqa: E402

WORK = ROOT / "benchmarks" / ".work" / "bench_notebooks"
NOOP_EVERY = 3
SNAPSHOT = "benchmarks.state_fingerprint:snapshot"
UNSTABLE = "benchmarks.state_fingerprint:unstable_pickles"
PICKLE_COST = "benchmarks.state_fingerprint:pickle_cost"


@dataclass(frozen=True)
class Cell:
    """One cell of the run: the tutorial's own code, or a no-op display cell."""

    source: str
    noop: bool = False


def bound_names(source: str) -> list[str]:
    """The names a cell assigns at top level, in order."""
    names: list[str] = []
    for statement in ast.parse(source).body:
        targets: list[ast.expr] = []
        if isinstance(statement, ast.Assign):
            targets = list(statement.targets)
        elif isinstance(statement, (ast.AnnAssign, ast.AugAssign)):
            targets = [statement.target]
        for target in targets:
            nodes = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
            names += [n.id for n in nodes if isinstance(n, ast.Name) and n.id != "_"]
    return names


def noop_follows(index: int, count: int) -> bool:
    """Whether a no-op cell follows the index-th of a tutorial's `count` cells: after every
    NOOP_EVERY-th and after the last (every benchmark of the real notebooks adds them so)."""
    return (index + 1) % NOOP_EVERY == 0 or index == count - 1


def plan(sources: list[str]) -> list[Cell]:
    """The tutorial's cells with a no-op cell where `noop_follows` says."""
    cells: list[Cell] = []
    for index, source in enumerate(sources):
        cells.append(Cell(source))
        if noop_follows(index, len(sources)):
            cells.append(Cell("", noop=True))  # its name is chosen when it runs
    return cells


def restore_targets(cells: list[Cell]) -> list[int]:
    """Positions of the real cells a third of the way, two thirds, and at the end."""
    real = [index for index, cell in enumerate(cells) if not cell.noop]
    count = len(real)
    picks = [real[max(0, count // 3 - 1)], real[max(0, 2 * count // 3 - 1)], real[-1]]
    return list(dict.fromkeys(picks))


@dataclass
class EngineRun:
    """What one engine did on one notebook."""

    seconds: list[float] = field(default_factory=list)  # per cell
    in_kernel: list[float] = field(default_factory=list)
    written: list[int] = field(default_factory=list)
    growth: list[int] = field(default_factory=list)
    points: list[str] = field(default_factory=list)  # manifest or commit id per cell
    stored: int = 0
    live: dict[int, dict[str, Any]] = field(default_factory=dict)
    lost_at: dict[int, set[str]] = field(default_factory=dict)  # reported at checkpoint
    restores: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    failed: str | None = None


@dataclass
class NotebookRun:
    """Both engines on one notebook."""

    source: NotebookSource
    cells: list[Cell]
    ours: EngineRun = field(default_factory=EngineRun)
    kishu: EngineRun = field(default_factory=EngineRun)
    unstable: list[dict[str, Any]] = field(default_factory=list)
    pickle_cost: dict[str, float] = field(default_factory=dict)  # of the final namespace
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # where the run's time went

    def mark(self, phase: str, since: float) -> float:
        """Add the time since `since` to a phase; now, for the next mark."""
        now = time.perf_counter()
        self.phases[phase] = self.phases.get(phase, 0.0) + now - since
        return now


class Bench:
    """The kernels of one run, one notebook at a time."""

    def __init__(self) -> None:
        shutil.rmtree(WORK, ignore_errors=True)
        WORK.mkdir(parents=True)
        self.host = JupyterClientHost()
        self.in_kernel_timing = True

    def _service(self, data_dir: Path, cwd: Path) -> RuntimeService:
        """The service of our engine on `data_dir`, its kernels running in `cwd`."""

        def context(blobs: BlobStore) -> KernelContextDriver:
            return KernelContextDriver(self.host, blobs.root, notebook_folder=lambda _: cwd)

        return open_runtime_service(data_dir, context_factory=context)

    @staticmethod
    def _kernel(service: RuntimeService, runtime_id: str) -> str:
        return str(service.session(runtime_id).handle_state["kernel_id"])

    @staticmethod
    def _noop_source(
        service: RuntimeService, runtime_id: str, cells: list[Cell], position: int
    ) -> str:
        """Display the value assigned last that still exists (nothing, if none), as the
        head checkpoint (the cell before) recorded it: asking the kernel would run code no
        cell showed, after which the change journal rightly vouches for nothing and the
        no-op cell's checkpoint would pickle everything again."""
        head = service.head_checkpoint(runtime_id)
        manifest_id = head.context_manifest_id if head is not None else None
        present = (
            set(recorded_variables(load_namespace(service.blobs, manifest_id)))
            if manifest_id is not None
            else set()
        )
        assigned = [n for cell in cells[:position] for n in bound_names(cell.source)]
        for name in reversed(assigned):
            if name in present:
                return name
        return "None"

    async def _json(self, kernel_id: str, function: str, **args: object) -> Any:
        return await self.host.call(kernel_id, function, dict(args))

    async def run(self, source: NotebookSource, sources: list[str]) -> NotebookRun:
        started = time.perf_counter()
        work = WORK / source.name
        work.mkdir(parents=True)
        result = NotebookRun(source, plan(sources))
        cells = result.cells
        targets = set(restore_targets(cells))
        data_dir = work / "ours"
        service = self._service(data_dir, work)
        runtime_id = (await service.create_runtime("bench", runtime_id=source.name)).runtime_id
        ours_kernel = self._kernel(service, runtime_id)
        base = tree_size(data_dir)
        kishu = KishuNotebook(work / "kishu" / f"{source.name}.ipynb")
        kishu.create()
        kishu_kernel: str | None = await self._start_kishu(kishu, work, result.kishu)
        kishu_base = kishu.db_size()
        now = result.mark("kernels", started)
        for position, cell in enumerate(cells):
            code = cell.source
            if cell.noop:
                code = self._noop_source(service, runtime_id, cells, position)
            cells[position] = Cell(code, cell.noop)
            await self.host.execute(ours_kernel, code)  # a tutorial that fails is a bug here
            now = result.mark("cells", now)
            await self._checkpoint(service, runtime_id, data_dir, result.ours)
            now = result.mark("checkpoints", now)
            if position in targets:
                result.ours.live[position] = await self._json(ours_kernel, SNAPSHOT)
                now = result.mark("fingerprints", now)
            if kishu_kernel is not None:
                kishu_kernel = await self._kishu_cell(
                    kishu, kishu_kernel, code, position in targets, result.kishu
                )
                now = result.mark("Kishu cells", now)
        result.ours.stored = tree_size(data_dir) - base
        result.kishu.stored = kishu.db_size() - kishu_base
        result.unstable = await self._json(ours_kernel, UNSTABLE)
        result.pickle_cost = await self._json(ours_kernel, PICKLE_COST)
        now = result.mark("fingerprints", now)
        for position in sorted(targets):
            await self._restore_ours(service, runtime_id, position, result.ours)
        now = result.mark("restores", now)
        if kishu_kernel is not None:
            for position in sorted(targets):
                await self._checkout_kishu(kishu_kernel, position, result.kishu, "in place")
            await self.host.shutdown_kernel(kishu_kernel)
        now = result.mark("Kishu restores", now)
        branch = sorted(targets)[len(targets) // 2]
        await self._checkout_ours(service, branch, result.ours)
        await service.close(runtime_id, discard=True)
        service.close_store()
        now = result.mark("restores", now)
        if result.kishu.failed is None:
            fresh_kishu = await self._start_kishu(kishu, work, result.kishu)
            if fresh_kishu is not None:
                await self._checkout_kishu(fresh_kishu, branch, result.kishu, "fresh kernel")
                await self.host.shutdown_kernel(fresh_kishu)
        result.mark("Kishu restores", now)
        result.seconds = time.perf_counter() - started
        return result

    async def _checkpoint(
        self, service: RuntimeService, runtime_id: str, data_dir: Path, run: EngineRun
    ) -> None:
        before = tree_size(data_dir)
        started = time.perf_counter()
        try:
            result = await service.checkpoint(runtime_id)
        except DittoError as error:  # reported, and the run goes on
            run.errors.append(f"cell {len(run.seconds) + 1}: checkpoint failed: {error}")
            run.seconds.append(time.perf_counter() - started)
            run.in_kernel.append(0.0)
            run.written.append(0)
            run.growth.append(tree_size(data_dir) - before)
            run.points.append("")
            return
        run.seconds.append(time.perf_counter() - started)
        run.growth.append(tree_size(data_dir) - before)
        checkpoint = service.get_checkpoint(result.checkpoint_id)
        run.written.append(result.bytes_written)  # blobs and both databases' logs
        run.points.append(checkpoint.checkpoint_id)
        run.lost_at[len(run.points) - 1] = {entry.name for entry in checkpoint.unrestorable}
        run.in_kernel.append(await self._in_kernel(self._kernel(service, runtime_id)))

    async def _in_kernel(self, kernel_id: str) -> float:
        if not self.in_kernel_timing:
            return float("nan")
        try:
            timing = await self.host.call(kernel_id, LAST_TIMING, {})
        except BackendError:  # the capture no longer exposes it: caller-side time only
            self.in_kernel_timing = False
            return float("nan")
        assert isinstance(timing, dict)
        return float(timing.get("capture_s", float("nan")))

    async def _start_kishu(self, kishu: KishuNotebook, cwd: Path, run: EngineRun) -> str | None:
        kernel_id = await self.host.start_kernel(cwd=cwd, env=kishu.env())
        try:
            await self.host.execute(kernel_id, ATTACH_KISHU)
            await self.host.call(kernel_id, INSTALL, {})
        except BackendError as error:
            run.failed = f"init_kishu failed: {error}"
            await self.host.shutdown_kernel(kernel_id)
            return None
        return kernel_id

    async def _kishu_cell(
        self, kishu: KishuNotebook, kernel_id: str, code: str, snapshot: bool, run: EngineRun
    ) -> str | None:
        """Run one cell under Kishu; None once Kishu broke the kernel's run."""
        position = len(run.seconds)
        before = kishu.db_size()
        errors_before = len(await self._json(kernel_id, HOOK_ERRORS))
        try:
            await self.host.execute(kernel_id, code)
        except BackendError as error:
            run.failed = f"cell {position + 1} failed under Kishu: {error}"[:300]
            await self.host.shutdown_kernel(kernel_id)
            return None
        run.seconds.append(float(await self._json(kernel_id, LAST)))
        run.growth.append(kishu.db_size() - before)
        run.points.append(str(await self._json(kernel_id, HEAD)))
        for raised in (await self._json(kernel_id, HOOK_ERRORS))[errors_before:]:
            run.errors.append(f"cell {position + 1}: Kishu's hook raised {raised}")
        if snapshot:
            run.live[position] = await self._json(kernel_id, SNAPSHOT)
        return kernel_id

    async def _restore_ours(
        self, service: RuntimeService, runtime_id: str, position: int, run: EngineRun
    ) -> None:
        outcome: dict[str, Any] = {"position": position, "how": "in place"}
        started = time.perf_counter()
        try:
            _, lost = await service.restore(runtime_id, run.points[position])
        except DittoError as error:
            outcome.update(wrong=[f"restore failed: {error}"[:300]], declared=[], uncomparable=[])
        else:
            outcome["seconds"] = time.perf_counter() - started
            declared = {entry.name for entry in lost} | run.lost_at.get(position, set())
            restored = await self._json(self._kernel(service, runtime_id), SNAPSHOT)
            outcome.update(compare(run.live[position], restored, declared))
        run.restores.append(outcome)

    async def _checkout_ours(self, service: RuntimeService, position: int, run: EngineRun) -> None:
        """Check the state of `position` out into a new runtime (a fresh kernel), then close it."""
        outcome: dict[str, Any] = {"position": position, "how": "fresh kernel"}
        try:
            child = await service.checkout(run.points[position])
        except DittoError as error:
            outcome.update(wrong=[f"checkout failed: {error}"[:300]], declared=[], uncomparable=[])
        else:
            declared = {entry.name for entry in child.unrestorable} | run.lost_at.get(
                position, set()
            )
            restored = await self._json(self._kernel(service, child.runtime.runtime_id), SNAPSHOT)
            outcome.update(compare(run.live[position], restored, declared))
            await service.close(child.runtime.runtime_id, discard=True)
        run.restores.append(outcome)

    async def _checkout_kishu(
        self, kernel_id: str, position: int, run: EngineRun, how: str
    ) -> None:
        outcome: dict[str, Any] = {"position": position, "how": how}
        try:
            outcome["seconds"] = await self._json(
                kernel_id, CHECKOUT, commit_id=run.points[position]
            )
        except BackendError as error:
            outcome.update(wrong=[f"checkout failed: {error}"[:300]], declared=[], uncomparable=[])
        else:
            restored = await self._json(kernel_id, SNAPSHOT)
            outcome.update(compare(run.live[position], restored, set()))
        run.restores.append(outcome)


def _load() -> str:
    return ", ".join(f"{value:.1f}" for value in os.getloadavg())


def runs_from_dump(path: Path) -> list[NotebookRun]:
    """The runs a BENCH_NOTEBOOKS_DUMP file holds, to report them again."""
    by_name = {source.name: source for source in NOTEBOOKS}
    runs = []
    for raw in json.loads(path.read_text()):
        engines = {
            key: EngineRun(
                **{
                    **raw[key],
                    "live": {int(k): v for k, v in raw[key]["live"].items()},
                    "lost_at": {int(k): set(v) for k, v in raw[key]["lost_at"].items()},
                }
            )
            for key in ("ours", "kishu")
        }
        runs.append(
            NotebookRun(
                **{
                    **raw,
                    "source": by_name[raw["source"]["name"]],
                    "cells": [Cell(**cell) for cell in raw["cells"]],
                    **engines,
                }
            )
        )
    return runs


def report_again(path: Path, wall: float, load: str, note: Path | None = None) -> None:
    """Write the section again from a dump (`--report-from DUMP SECONDS LOAD [NOTE]`; the
    text of the file NOTE, if given, goes first)."""
    runs = runs_from_dump(path)
    body = report(runs, wall, True, load)
    if note is not None:
        body = note.read_text().strip() + "\n\n" + body
    print(body)
    write_section(
        "bench_notebooks", "Checkpoints on real notebooks beside Kishu 0.3.4 (issue 14)", body
    )


async def main() -> None:
    if sys.argv[1:2] == ["--report-from"]:
        note = Path(sys.argv[5]) if len(sys.argv) > 5 else None
        report_again(Path(sys.argv[2]), float(sys.argv[3]), sys.argv[4], note)
        return
    os.environ["MPLBACKEND"] = "Agg"  # every kernel this process starts inherits it
    os.environ["PYTHONPATH"] = os.pathsep.join(
        part for part in [str(ROOT), os.environ.get("PYTHONPATH", "")] if part
    )
    chosen = [s for s in NOTEBOOKS if not sys.argv[1:] or s.name in sys.argv[1:]]
    sources = prepare(chosen)
    bench = Bench()
    runs: list[NotebookRun] = []
    started = time.perf_counter()
    start_load = _load()
    try:
        for source in chosen:
            print(f"{source.name}: {len(sources[source.name])} cells", flush=True)
            runs.append(await bench.run(source, sources[source.name]))
            phases = ", ".join(f"{k} {v:.1f}" for k, v in runs[-1].phases.items())
            print(f"  done in {runs[-1].seconds:.1f} s ({phases})", flush=True)
    finally:
        await bench.host.shutdown_all()
        shutil.rmtree(WORK, ignore_errors=True)
    load = f"{start_load} at the start, {_load()} at the end (2 cores)"
    dump = os.environ.get("BENCH_NOTEBOOKS_DUMP")
    if dump:  # the raw figures, to compare two runs (before and after a change) side by side
        Path(dump).write_text(json.dumps([dataclasses.asdict(run) for run in runs], default=str))
    body = report(runs, time.perf_counter() - started, bench.in_kernel_timing, load)
    print(body)
    if len(chosen) < len(NOTEBOOKS):
        return  # a partial run (notebooks named on the command line) is not recorded
    write_section(
        "bench_notebooks", "Checkpoints on real notebooks beside Kishu 0.3.4 (issue 14)", body
    )


if __name__ == "__main__":
    asyncio.run(main())
