"""Retention over an eight-hour run of the long notebooks, compressed in time (issue 42 s. 1).

Run from the repository root: `.venv/bin/python -m benchmarks.bench_retention` (the bench
extra; the first run downloads the notebooks' pinned sdists, see notebook_sources). Writes
the `bench_retention` section of benchmarks/RESULTS.md. About 15 minutes on 2 cores.

What runs: two long real notebooks of bench_notebooks (notebook_sources), each in its own
runtime (a real ipykernel kernel through `JupyterClientHost` and `KernelContextDriver`,
under a `RuntimeService` on its SQLite store in one data directory, as bench_notebooks
drives it), their cells taken in turn, each notebook looped from its first cell when it
ends, in the same kernel (a user running it again). After every cell the runtime's
automatic checkpoint is taken as `%autocheckpoint` records one: `RuntimeService.checkpoint`
named `cell-<n>` with the cell it followed (`automatic`), the capture and the store's
records on the product's path (the server's route passes the kernel's own capture instead;
retention does not tell them apart). ipykernel's default inline backend draws and closes
each cell's figures, as a user's kernel does.

Time is compressed: each cell stands for SIM_HOURS * 3600 / CELLS simulated seconds. A
checkpoint's time is written through the store to the simulated time it was taken at (as
the retention tests do: a record's time comes from the wall clock), the retention's own
clock (`Retention.clock`) is the simulated one, and a round (`Retention.round`, what the
server's timer runs) runs every `retention_interval` (600) simulated seconds. The
collection's grace period is scaled by the same factor (its 600 s are a wall-clock age of
the blob files). Tiers are the defaults (every cell of the last hour, then one an hour);
the byte budget is BUDGET_MIB (BENCH_RETENTION_BUDGET_MIB), chosen so that it bites: under
what the tiers alone keep by the end of the run.

Measured: the data directory on disk (`core.disk_usage.data_dir_bytes`, the retention's
own measure: every file, both databases with their -wal/-shm, the chunks, the workspaces)
after every checkpoint and after every round. After every cell the live namespace is
fingerprinted (benchmarks.state_fingerprint, read only); at the end every automatic
checkpoint still whole is restored in place (`RuntimeService.restore`) and fingerprinted
again: it differs when any value differs, is missing without being declared unrestorable,
or pyplot's state differs. One thinned checkpoint per runtime is tried too: its restore
must be refused.
"""

from __future__ import annotations

import asyncio
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

from benchmarks.notebook_sources import NOTEBOOKS, prepare  # noqa: E402
from benchmarks.results_table import markdown_table, write_section  # noqa: E402
from benchmarks.state_fingerprint import compare  # noqa: E402
from ditto_jupyter.control.service import RuntimeService  # noqa: E402
from ditto_jupyter.core.blobs import GRACE_SECONDS, BlobStore  # noqa: E402
from ditto_jupyter.core.disk_usage import data_dir_bytes  # noqa: E402
from ditto_jupyter.core.errors import DittoError  # noqa: E402
from ditto_jupyter.core.models import AutoCheckpointCell, RetentionReport  # noqa: E402
from ditto_jupyter.hosts.jupyter_client_host import JupyterClientHost  # noqa: E402
from ditto_jupyter.hosts.kernel_context_driver import KernelContextDriver  # noqa: E402
from ditto_jupyter.wiring import open_runtime_service  # noqa: E402

WORK = ROOT / "benchmarks" / ".work" / "bench_retention"
SNAPSHOT = "benchmarks.state_fingerprint:snapshot"
#: The notebooks, each in a runtime of its own, looped.
NAMES = ("skl-linear-models-session", "mpl-statistics-session")
SIM_HOURS = 8
#: Cells over the whole run (both notebooks together): each stands for 8 h / CELLS.
CELLS = int(os.environ.get("BENCH_RETENTION_CELLS", "1920"))
#: The data directory's byte budget, in MiB.
BUDGET_MIB = float(os.environ.get("BENCH_RETENTION_BUDGET_MIB", "12"))
#: The server's default `retention_interval`, in simulated seconds.
INTERVAL_S = 600
HOUR_MS = 3600 * 1000
MIB = 1024 * 1024


@dataclass
class Runtime:
    """One notebook's runtime: its cells, where it is in them, and its checkpoints."""

    name: str
    cells: list[str]
    runtime_id: str = ""
    kernel_id: str = ""
    position: int = 0
    count: int = 0  # cells run (its execution counts)
    loops: int = 0
    failed: int = 0  # cells that raised (their checkpoint is taken all the same)
    live: dict[str, dict[str, Any]] = field(default_factory=dict)  # checkpoint id: fingerprint
    declared: dict[str, set[str]] = field(default_factory=dict)  # unrestorable at capture


@dataclass
class Hour:
    """One simulated hour's figures."""

    taken: int = 0
    thinned_tiers: int = 0  # by rounds that ran the tiers only
    thinned_budget: int = 0  # by rounds the budget joined (tiers and budget together)
    rounds: int = 0
    over_budget_rounds: int = 0  # rounds that ended still over the budget
    peak: int = 0  # data directory, after any checkpoint or round
    peak_after_round: int = 0
    end: int = 0
    whole_end: int = 0
    thinned_end: int = 0


class Run:
    def __init__(self) -> None:
        shutil.rmtree(WORK, ignore_errors=True)
        WORK.mkdir(parents=True)
        self.host = JupyterClientHost()
        self.data_dir = WORK / "data"
        self.step_ms = round(SIM_HOURS * HOUR_MS / CELLS)
        self.compression = self.step_ms / 1000.0  # simulated seconds per cell, for the note
        # the run ends at the wall clock's last whole hour: hourly buckets are exact
        self.start_ms = (int(time.time() * 1000) // HOUR_MS) * HOUR_MS - SIM_HOURS * HOUR_MS
        self.now_ms = self.start_ms
        self.service = self._service()
        retention = self.service.retention
        retention.clock = lambda: self.now_ms
        retention.budget_bytes = int(BUDGET_MIB * MIB)
        self.hours = [Hour() for _ in range(SIM_HOURS)]
        self.errors: list[str] = []
        self.reports: list[RetentionReport] = []
        self.wall_cells = 0.0
        self.grace_seconds = float(GRACE_SECONDS)
        self.wall_started = time.perf_counter()

    def _service(self) -> RuntimeService:
        cwd = WORK

        def context(blobs: BlobStore) -> KernelContextDriver:
            return KernelContextDriver(self.host, blobs.root, notebook_folder=lambda _: cwd)

        return open_runtime_service(self.data_dir, context_factory=context)

    def hour(self) -> Hour:
        """The simulated hour now is in: (h, h + 1], so a round at an hour's end is its."""
        index = max(0, (self.now_ms - self.start_ms - 1) // HOUR_MS)
        return self.hours[min(int(index), SIM_HOURS - 1)]

    def measured(self, after_round: bool = False) -> int:
        used = data_dir_bytes(self.data_dir)
        hour = self.hour()
        hour.peak = max(hour.peak, used)
        if after_round:
            hour.peak_after_round = max(hour.peak_after_round, used)
        return used

    async def cell(self, runtime: Runtime) -> None:
        if runtime.position == len(runtime.cells):
            runtime.position = 0
            runtime.loops += 1
        code = runtime.cells[runtime.position]
        runtime.position += 1
        runtime.count += 1
        failed = False
        started = time.perf_counter()
        try:
            await self.host.execute(runtime.kernel_id, code)
        except DittoError as error:  # a cell that fails on a second pass: its checkpoint too
            failed = True
            runtime.failed += 1
            if runtime.failed <= 3:
                self.errors.append(f"{runtime.name} cell {runtime.count}: {error}"[:200])
        self.wall_cells += time.perf_counter() - started
        automatic = AutoCheckpointCell(execution_count=runtime.count, source=code, failed=failed)
        name = f"cell-{runtime.count}"
        result = await self.service.checkpoint(runtime.runtime_id, name, automatic=automatic)
        store = self.service.store
        record = store.get_checkpoint(result.checkpoint_id)
        assert record is not None
        store.put_checkpoint(record.model_copy(update={"created_at_ms": self.now_ms}))
        runtime.declared[record.checkpoint_id] = {e.name for e in record.unrestorable}
        runtime.live[record.checkpoint_id] = await self.host.call(runtime.kernel_id, SNAPSHOT, {})
        # taken at the start of its step: [h, h + 1)
        self.hours[min((self.now_ms - self.start_ms) // HOUR_MS, SIM_HOURS - 1)].taken += 1
        self.measured()

    async def round(self) -> None:
        hour = self.hour()
        try:
            report = await self.service.retention.round()
        except Exception as error:  # logged and kept by the retention; the run goes on
            self.errors.append(f"round at {self.sim_clock()}: {type(error).__name__}: {error}")
            return
        self.reports.append(report)
        hour.rounds += 1
        if "budget" in report.rules:
            hour.thinned_budget += report.thinned
        else:
            hour.thinned_tiers += report.thinned
        hour.over_budget_rounds += report.over_budget
        self.measured(after_round=True)

    def scale_grace(self, cells: int) -> None:
        """The collection's grace period (600 s of age on the wall clock) scaled to the
        simulated time: 600 simulated seconds, in the wall-clock seconds they took so far."""
        wall_per_sim_s = (time.perf_counter() - self.wall_started) / (cells * self.step_ms / 1000)
        self.grace_seconds = GRACE_SECONDS * wall_per_sim_s
        self.service.retention.gc_grace_seconds = self.grace_seconds

    def sim_clock(self) -> str:
        seconds = (self.now_ms - self.start_ms) // 1000
        return f"{seconds // 3600}:{seconds % 3600 // 60:02d}"

    def automatic(self) -> tuple[int, int]:
        """Automatic checkpoints whole and thinned, over every runtime."""
        found = [c for c in self.service.store.list_checkpoints() if c.automatic is not None]
        whole = sum(1 for c in found if not c.pruned and c.context_manifest_id)
        return whole, len(found) - whole

    async def run(self) -> dict[str, Any]:
        sources = prepare([s for s in NOTEBOOKS if s.name in NAMES])
        runtimes = [Runtime(name, sources[name]) for name in NAMES]
        for runtime in runtimes:
            record = await self.service.create_runtime("bench", runtime_id=runtime.name)
            runtime.runtime_id = record.runtime_id
            runtime.kernel_id = str(
                self.service.session(record.runtime_id).handle_state["kernel_id"]
            )
        next_round = self.start_ms + INTERVAL_S * 1000
        for index in range(CELLS):
            await self.cell(runtimes[index % len(runtimes)])
            self.now_ms += self.step_ms
            if self.now_ms >= next_round:
                self.scale_grace(index + 1)
                await self.round()
                next_round += INTERVAL_S * 1000
            if (self.now_ms - self.start_ms) % HOUR_MS < self.step_ms:
                hour = self.hours[(self.now_ms - self.start_ms) // HOUR_MS - 1]
                hour.end = self.measured()
                hour.whole_end, hour.thinned_end = self.automatic()
                print(
                    f"simulated {self.sim_clock()}: {hour.whole_end} whole, "
                    f"{hour.thinned_end} thinned, {hour.end / MIB:.1f} MiB "
                    f"({time.perf_counter() - self.wall_started:.0f} s)",
                    flush=True,
                )
        last = self.hours[-1]
        if not last.end:  # the run ended short of the hour (CELLS does not divide it)
            last.end = self.measured()
            last.whole_end, last.thinned_end = self.automatic()
        run_seconds = time.perf_counter() - self.wall_started
        restores = await self.restore_all(runtimes)
        return {
            "runtimes": runtimes,
            "restores": restores,
            "run_seconds": run_seconds,
            "restore_seconds": time.perf_counter() - self.wall_started - run_seconds,
        }

    async def restore_all(self, runtimes: list[Runtime]) -> dict[str, Any]:
        """Every automatic checkpoint still whole, restored in place and compared; one
        thinned checkpoint per runtime, whose restore must be refused."""
        checked = differed = 0
        wrong: list[str] = []
        declared: set[str] = set()
        refused = tried_thinned = 0
        for runtime in runtimes:
            mine = self.service.store.list_checkpoints(runtime.runtime_id)
            automatic = [c for c in mine if c.automatic is not None]
            automatic.sort(key=lambda c: c.created_at_ms)
            for checkpoint in automatic:
                if checkpoint.pruned or not checkpoint.context_manifest_id:
                    continue
                checked += 1
                cid = checkpoint.checkpoint_id
                try:
                    _, lost = await self.service.restore(runtime.runtime_id, cid)
                except DittoError as error:
                    differed += 1
                    wrong.append(f"{runtime.name} {checkpoint.name}: restore failed: {error}"[:200])
                    continue
                names = {e.name for e in lost} | runtime.declared.get(cid, set())
                restored = await self.host.call(runtime.kernel_id, SNAPSHOT, {})
                outcome = compare(runtime.live[cid], restored, names)
                declared.update(outcome["declared"])
                if outcome["wrong"]:
                    differed += 1
                    wrong.append(f"{runtime.name} {checkpoint.name}: {outcome['wrong'][:3]}")
            thinned = [c for c in automatic if c.pruned]
            if thinned:
                tried_thinned += 1
                try:
                    await self.service.restore(runtime.runtime_id, thinned[0].checkpoint_id)
                except DittoError as error:
                    refused += "pruned" in str(error)
        return {
            "checked": checked,
            "differed": differed,
            "wrong": wrong,
            "declared": sorted(declared),
            "thinned_tried": tried_thinned,
            "thinned_refused": refused,
        }

    async def close(self, runtimes: list[Runtime]) -> None:
        for runtime in runtimes:
            try:
                await self.service.close(runtime.runtime_id, discard=True)
            except DittoError as error:
                self.errors.append(f"close {runtime.name}: {error}"[:200])
        self.service.close_store()


def mib(count: int) -> str:
    return f"{count / MIB:.1f}"


def report(run: Run, outcome: dict[str, Any]) -> str:
    runtimes: list[Runtime] = outcome["runtimes"]
    restores = outcome["restores"]
    budget = run.service.retention.budget_bytes or 0
    rows: list[list[object]] = []
    for index, hour in enumerate(run.hours):
        rows.append(
            [
                f"{index}-{index + 1} h",
                hour.taken,
                hour.rounds,
                f"{hour.thinned_tiers} + {hour.thinned_budget}",
                hour.whole_end,
                hour.thinned_end,
                mib(hour.peak),
                mib(hour.peak_after_round),
                mib(hour.end),
                f"{hour.over_budget_rounds}",
            ]
        )
    headers = [
        "simulated hour",
        "checkpoints taken",
        "rounds",
        "thinned in the hour: by rounds of the tiers alone + by rounds the budget joined",
        "kept whole at its end",
        "thinned at its end",
        "peak MiB (after any checkpoint)",
        "peak MiB after a round",
        "MiB at its end",
        "rounds still over budget",
    ]
    peak = max(h.peak for h in run.hours)
    peak_round = max(h.peak_after_round for h in run.hours)
    taken = sum(h.taken for h in run.hours)
    notebooks = "; ".join(
        f"{r.name} ({len(r.cells)} cells, run {r.loops + r.position / len(r.cells):.1f} times, "
        f"{r.count} cells, {r.failed} raised)"
        for r in runtimes
    )
    lines = [
        f"Two long notebooks of bench_notebooks, a runtime each (real ipykernel kernels, "
        f"inline backend), cells in turn and each notebook looped: {notebooks}. {taken} "
        f"automatic checkpoints (`RuntimeService.checkpoint` with `automatic`, named "
        f"`cell-<n>`), one per cell, each cell standing for {run.step_ms / 1000:.0f} simulated "
        f"seconds ({SIM_HOURS} simulated hours in {outcome['run_seconds'] / 60:.1f} minutes: "
        f"x{SIM_HOURS * 3600 / outcome['run_seconds']:.0f}); a checkpoint's time is written "
        "through the store at its simulated time, the retention's clock is the simulated one, a "
        f"round every {INTERVAL_S} simulated seconds (the default `retention_interval`), "
        "default tiers (every cell of the last hour, then one an hour), the collection's "
        f"grace scaled to 600 simulated seconds (last: {run.grace_seconds:.1f} s of wall "
        f"clock). Budget: **{mib(budget)} MiB** (`retention_budget_bytes`), chosen to bite. "
        "Data directory: `data_dir_bytes` (disk blocks of every file in it: both databases "
        "and their -wal/-shm, chunks, workspaces), measured after every checkpoint and "
        "after every round.",
        markdown_table(headers, rows),
        f"Peak: **{mib(peak)} MiB** after any checkpoint, **{mib(peak_round)} MiB** after a "
        f"round, against the {mib(budget)} MiB budget "
        f"({'under it' if peak_round <= budget else 'OVER it'} after every round; "
        f"{'under it' if peak <= budget else 'over it'} between rounds: a round runs every "
        f"{INTERVAL_S} simulated seconds, and the cells between two rounds write before it). "
        f"Rounds: {len(run.reports)}, "
        f"{sum(1 for r in run.reports if r.over_budget)} ended still over the budget.",
        f"Restores: **{restores['checked']}** automatic checkpoints kept whole at the end, "
        f"each restored in place and fingerprinted: **{restores['differed']} differed** "
        f"(target 0). Values declared unrestorable at capture or restore (not counted "
        f"wrong): {', '.join(restores['declared']) or 'none'}. Thinned checkpoints tried: "
        f"{restores['thinned_tried']}, refused as pruned: {restores['thinned_refused']}.",
    ]
    if restores["wrong"]:
        lines.append("Differed:\n\n" + "\n".join(f"- {w}" for w in restores["wrong"][:10]))
    if run.errors:
        lines.append("Errors:\n\n" + "\n".join(f"- {e}" for e in run.errors[:10]))
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    lines.append(
        f"Wall clock: the run {outcome['run_seconds'] / 60:.1f} min (cells "
        f"{run.wall_cells / 60:.1f} min), the restores {outcome['restore_seconds'] / 60:.1f} "
        f"min; load average at the end {load} (2 cores, a CI run beside it)."
    )
    return "\n\n".join(lines)


async def main() -> None:
    run = Run()
    outcome = await run.run()
    await run.close(outcome["runtimes"])
    text = report(run, outcome)
    print(text)
    if os.environ.get("BENCH_RETENTION_RECORD", "1") != "0":
        write_section("bench_retention", "Retention over an eight-hour run (issue 42)", text)


if __name__ == "__main__":
    asyncio.run(main())
