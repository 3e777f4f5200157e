"""%autocheckpoint beside Kishu 0.3.4 in one run: cell latency added and bytes stored.

Run from the repository root: `.venv/bin/python -m benchmarks.bench_autocheckpoint`
(needs the bench extra: `pip install kishu==0.3.4`). Writes the `bench_autocheckpoint`
section of benchmarks/RESULTS.md. About 20 minutes: each workload runs 15 times on fresh
kernels (`BENCH_REPS=N` for fewer), because a heavy cell's plain latency varies by more
than our hook costs, and each cell's median of the 15 is what counts.

Two workloads, each in three fresh ipykernel kernels side by side, cell by cell:
- a plain kernel (the anchor), one with `%autocheckpoint on` (no server: the in-process
  service on a SQLite store in a data directory of its own), one with Kishu attached
  (`init_kishu()`, Kishu's test mode, committing after every cell);
- per cell, the latency the client sees (execute_request sent to execute_reply received);
  the latency added is the engine's minus the plain kernel's for the same cell;
- bytes stored: growth of our data directory (blobs + SQLite) and of Kishu's `.kishudb`.

Workloads: Kishu's 8-cell workload (bench_kernel's, a 50 MiB array), and a 30-cell notebook
mixing pandas, numpy and plain Python; then the six long notebooks of bench_notebooks, plain
and ours only (benchmarks.autocheckpoint_notebooks; `BENCH_LONG=0` leaves them out).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from jupyter_client.manager import KernelManager  # noqa: E402

from benchmarks.bench_kernel import CELLS as KISHU_CELLS  # noqa: E402
from benchmarks.bench_kernel import SETUP as KISHU_SETUP  # noqa: E402
from benchmarks.kishu_harness import ATTACH_KISHU, KishuNotebook, tree_size  # noqa: E402
from benchmarks.results_table import markdown_table, write_section  # noqa: E402

WORK = ROOT / "benchmarks" / ".work" / "bench_autocheckpoint"
#: Runs of each workload on fresh kernels (BENCH_REPS overrides); each cell's median counts.
REPS = 15
#: Seconds between one kernel's cell and the next kernel's, in the per-cell tables.
SETTLE_S = 0.25

MIXED_SETUP = "import numpy as np\nimport pandas as pd"
MIXED_CELLS = [
    "rng = np.random.default_rng(0)",
    "n = 200_000",
    "df = pd.DataFrame({'a': rng.random(n), 'b': rng.integers(0, 100, n)})",
    "df['c'] = df['a'] * 2",
    "summary = df.describe()",
    "names = [f'user{i}' for i in range(5000)]",
    "lookup = {name: i for i, name in enumerate(names)}",
    "total = sum(lookup.values())",
    "matrix = rng.random((500, 500))",
    "inv = np.linalg.inv(matrix)",
    "df['d'] = df['b'] % 7",
    "grouped = df.groupby('d')['a'].mean()",
    "text = ' '.join(names[:1000])",
    "words = text.split()",
    "counts = {}\nfor w in words:\n    counts[w[:5]] = counts.get(w[:5], 0) + 1",
    "len(counts)",
    "matrix[0, 0] = 1.0",
    "df.loc[0, 'a'] = 0.5",
    "series = pd.Series(rng.random(10_000)).cumsum()",
    "series.tail(3)",
    "def score(row):\n    return row * 3 + 1",
    "scored = df['a'].head(1000).apply(score)",
    "nested = {'a': [1, 2, {'b': (3, 4)}], 'c': names[:10]}",
    "arr = np.arange(1_000_000)",
    "arr[::2] = 0",
    "means = [float(df['a'].mean()), float(arr.mean())]",
    "print(means)",
    "df2 = df[df['b'] > 50].copy()",
    "merged = df2.head(1000).merge(df.head(1000), on='b', how='left')",
    "result = {'rows': len(merged), 'total': total}",
]


#: How the hook stays cheap, and what these figures include.
WHERE_THE_TIME_GOES = (
    "How: a cell's checkpoint pickles only the variables its code can have reached (the "
    "names it uses, those used by notebook functions, and their alias groups; "
    "`kernel/capture/cell_effects.py`), fingerprints their buffers and copies the chunks not "
    "stored yet; writing the chunks (byte-shuffled and zstd-compressed when that pays: "
    "random float64 stores at 0.84), the manifest and the checkpoint record happen on a "
    "write-behind thread started 20 ms after the reply is sent (or at once when the next "
    "cell or a magic needs it: ipykernel 7 forwards replies from a thread of its own, which "
    "a busy write-behind would hold back by the GIL's 5 ms switch interval), and no garbage "
    "collection pass runs inside the hook. In the per-cell tables each cell "
    "runs in the three kernels in turn, with a 0.25 s pause after each (so no kernel's "
    "leftover work, BLAS threads spinning or our write-behind, lands on another's cell): "
    "our write-behind has finished before our next cell. The hook columns are the time the "
    "kernel spent in its pre_run_cell and post_run_cell callbacks, timed inside it (the "
    "engine's whole per-cell work on the cell's path, without the noise of the cell's own "
    "run: a cell that allocates fresh memory, like `np.arange`, varies by tens of ms from "
    "run to run on this machine, in the plain kernel too). The Run All table runs the cells "
    "back to back, where the write-behind overlaps the next cell, which waits only for its "
    "copy of live memory."
)


#: The module (in sys.modules, not the namespace) where `TIME_HOOKS` keeps its figures.
HOOKS = "_ditto_bench_hooks"
_HOOK_TIMER = "\n".join(
    [
        "import sys, time, types",
        f"timer = sys.modules[{HOOKS!r}] = types.ModuleType({HOOKS!r})",
        "timer.seconds, timer.pre, timer.inside = [], 0.0, False",
        "events = get_ipython().events",
        "trigger = events.trigger",
        "def timed(event, *args, **kwargs):",
        "    if event not in ('pre_run_cell', 'post_run_cell'):",
        "        return trigger(event, *args, **kwargs)",
        "    started, timer.inside = time.perf_counter(), True",
        "    try:",
        "        return trigger(event, *args, **kwargs)",
        "    finally:",
        "        took, timer.inside = time.perf_counter() - started, False",
        "        if event == 'pre_run_cell':",
        "            timer.pre = took",
        "        else:",
        "            timer.seconds.append(timer.pre + took)",
        "            timer.pre = 0.0",
        "events.trigger = timed",
        "import gc",
        "timer.gc, timer.gc_started = 0.0, 0.0",
        "def collecting(phase, info):",
        "    if phase == 'start':",
        "        timer.gc_started = time.perf_counter()",
        "    elif not timer.inside:  # one inside a callback is the callback's time",
        "        timer.gc += time.perf_counter() - timer.gc_started",
        "gc.callbacks.append(collecting)",
    ]
)
#: Run silently (so no callback runs for it) before the engine is set up (`%autocheckpoint
#: on`, Kishu's attach): code run silently is code no cell showed, which the change journal
#: must assume could have changed anything, so the cell after it would be captured whole,
#: as no cell of a user's is. It times every pre_run_cell and post_run_cell callback, those
#: registered later included (IPython's trigger of the two events, in globals of its own).
TIME_HOOKS = f"exec({_HOOK_TIMER!r}, {{'get_ipython': get_ipython}})"


class Kernel:
    """One ipykernel kernel and a blocking client timing each cell at the client."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.manager = KernelManager(kernel_name="python3")
        self.manager.start_kernel(env={**os.environ, **env}, cwd=str(cwd))
        self.client = self.manager.blocking_client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=120)

    def run(self, code: str) -> float:
        """Seconds from execute_request sent to execute_reply received; raises on error."""
        started = time.perf_counter()
        reply = self.client.execute(code, reply=True, timeout=900)
        elapsed = time.perf_counter() - started
        if reply["content"]["status"] != "ok":
            raise RuntimeError(f"cell failed: {code!r}: {reply['content'].get('evalue')}")
        return elapsed

    def time_hooks(self) -> None:
        """From now on, time the pre_run_cell and post_run_cell callbacks inside the kernel
        (from the first one's start to the last one's end); nothing joins the namespace.
        Called before the engine is set up (see TIME_HOOKS)."""
        self.client.execute(TIME_HOOKS, silent=True, reply=True, timeout=60)

    def hook_seconds(self) -> list[float]:
        """Per cell run since `time_hooks`, the seconds spent in the callbacks."""
        seconds: list[float] = self._timer("seconds")
        return seconds

    def gc_seconds(self) -> float:
        """The seconds the garbage collector ran since `time_hooks` (every generation),
        outside the timed callbacks (a collection inside one is counted as theirs)."""
        return float(self._timer("gc"))

    def _timer(self, field: str) -> Any:
        """A field of the timer `time_hooks` installed, read by a cell of its own."""
        marker = "ditto-bench-hooks:"
        show = f"print({marker!r} + json.dumps(sys.modules[{HOOKS!r}].{field}))"
        self.client.execute(f"exec({'import sys, json; ' + show!r})", reply=True, timeout=60)
        while True:
            message = self.client.get_iopub_msg(timeout=60)
            text = message["content"].get("text", "") if message["msg_type"] == "stream" else ""
            for line in text.splitlines():
                if line.startswith(marker):
                    return json.loads(line[len(marker) :])

    def stop(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


def settled(seconds: float) -> float:
    """`seconds`, after a pause that lets the machine settle: one kernel's leftover work
    (BLAS threads spinning after `np.linalg.inv`, our write-behind) must not land on the
    next kernel's cell, which would slow the anchor as much as us."""
    time.sleep(SETTLE_S)
    return seconds


def plain_env() -> dict[str, str]:
    return {"PYTHONPATH": str(ROOT)}


def run_workload(
    label: str, setup: str, cells: list[str], *, interleaved: bool = True
) -> dict[str, Any]:
    """Each cell in the three kernels; latencies, added latencies and bytes stored.

    Interleaved, each cell runs in the three kernels in turn before the next cell (so each
    kernel is idle while the other two run theirs). Otherwise each kernel runs all the
    cells back to back, as "Run All" does: a write-behind then overlaps the next cell."""
    work = WORK / label
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    data_dir = work / "ditto-data"
    kishu = KishuNotebook(work / "kishu_nb.ipynb")
    kishu.create()
    plain = Kernel(plain_env(), work)
    ours = Kernel({**plain_env(), "DITTO_DATA_DIR": str(data_dir)}, work)
    theirs = Kernel(kishu.env(), work)
    try:
        for kernel in (plain, ours, theirs):
            kernel.run(setup)
            kernel.time_hooks()
        ours.run("%load_ext ditto_jupyter")
        ours.run("%autocheckpoint on")
        theirs.run(ATTACH_KISHU)
        ours_before, kishu_before = tree_size(data_dir), kishu.db_size()
        if interleaved:
            timed = [tuple(settled(k.run(c)) for k in (plain, ours, theirs)) for c in cells]
        else:
            runs = [[kernel.run(c) for c in cells] for kernel in (plain, ours, theirs)]
            timed = list(zip(*runs, strict=True))
        hooks = [kernel.hook_seconds()[-len(cells) :] for kernel in (plain, ours, theirs)]
        rows = [
            {
                "cell": cell,
                "plain": base,
                "ours": mine,
                "kishu": kishu_s,
                "hook_plain": hook_plain,
                "hook_ours": hook_ours,
                "hook_kishu": hook_kishu,
            }
            for cell, (base, mine, kishu_s), hook_plain, hook_ours, hook_kishu in zip(
                cells, timed, *hooks, strict=True
            )
        ]
        ours.run("%autocheckpoint off")
        return {
            "rows": rows,
            "ours_bytes": tree_size(data_dir) - ours_before,
            "kishu_bytes": kishu.db_size() - kishu_before,
        }
    finally:
        for kernel in (plain, ours, theirs):
            kernel.stop()


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def report(results: dict[str, dict[str, Any]]) -> str:
    parts = [
        "Per cell, latency seen by the client (execute_request to execute_reply), in ms, "
        f"the median of {next(iter(results.values()))['reps']} runs on fresh kernels; "
        "added = engine minus the plain kernel for the same cell (an added latency under "
        "0.5 ms counts as 0.5 ms in the ratio). Target: Kishu's added latency >= 10x ours "
        "on every cell; our bytes stored <= 1/3 of Kishu's. Hook ms: the time the engine's "
        "cell callbacks took inside the kernel (the same median; the plain kernel's IPython "
        "callbacks subtracted)."
    ]
    for label, result in results.items():
        table = []
        ratios = []
        hook_ratios = []
        for index, row in enumerate(result["rows"], 1):
            added_ours = row["added_ours"]
            added_kishu = row["added_kishu"]
            ratio = added_kishu / max(added_ours, 0.0005)
            ratios.append(ratio)
            hook_ratio = row["hook_kishu"] / max(row["hook_ours"], 0.0005)
            hook_ratios.append(hook_ratio)
            first = row["cell"].splitlines()[0]
            table.append(
                [
                    index,
                    f"`{first[:38]}`",
                    ms(row["plain"]),
                    ms(added_ours),
                    ms(added_kishu),
                    f"{ratio:.1f}x",
                    ms(row["hook_ours"]),
                    ms(row["hook_kishu"]),
                    f"{hook_ratio:.1f}x",
                ]
            )
        headers = [
            "cell",
            "source",
            "plain ms",
            "added, ours",
            "added, Kishu",
            "Kishu/ours",
            "hook, ours",
            "hook, Kishu",
            "Kishu/ours",
        ]
        met = sum(1 for r in ratios if r >= 10)
        storage = result["ours_bytes"] / max(result["kishu_bytes"], 1)
        parts.append(f"### {label}\n\n" + markdown_table(headers, table))
        verdict = "met" if met == len(ratios) else f"missed on {len(ratios) - met} cells"
        parts.append(
            f"Latency target {verdict}: >= 10x on {met} of {len(ratios)} cells (worst "
            f"{min(ratios):.1f}x, median {sorted(ratios)[len(ratios) // 2]:.1f}x). "
            f"Inside the kernel, the hooks: >= 10x on {sum(1 for r in hook_ratios if r >= 10)} "
            f"of {len(hook_ratios)} cells (worst {min(hook_ratios):.1f}x, median "
            f"{sorted(hook_ratios)[len(hook_ratios) // 2]:.1f}x). Bytes stored: ours "
            f"{result['ours_bytes'] / 2**20:.2f} MiB, Kishu {result['kishu_bytes'] / 2**20:.2f} "
            f"MiB: {storage:.2f} of Kishu's (target <= 0.33: "
            f"{'met' if storage <= 1 / 3 else 'missed'})."
        )
    return "\n\n".join(parts)


def back_to_back_report(results: dict[str, dict[str, Any]]) -> str:
    """One "Run All" run per workload: the time added over all cells, and the worst cell."""
    lines = [
        "### Run All: the cells back to back",
        "",
        "One run per workload, each kernel running every cell straight after the one before "
        "(the write-behind of a cell then shares the machine with the next cell).",
        "",
    ]
    table: list[list[object]] = []
    for label, result in results.items():
        rows = result["rows"]
        ours = sum(r["ours"] - r["plain"] for r in rows)
        kishu = sum(r["kishu"] - r["plain"] for r in rows)
        worst = min((r["kishu"] - r["plain"]) / max(r["ours"] - r["plain"], 0.0005) for r in rows)
        table.append(
            [label, ms(ours), ms(kishu), f"{kishu / max(ours, 0.0005):.1f}x", f"{worst:.1f}x"]
        )
    headers = ["workload", "added, ours (ms)", "added, Kishu (ms)", "Kishu/ours", "worst cell"]
    lines.append(markdown_table(headers, table))
    return "\n".join(lines)


def repeated(label: str, setup: str, cells: list[str], reps: int) -> dict[str, Any]:
    """The workload `reps` times on fresh kernels; per cell, the median of each repetition's
    latencies and added latencies (this machine is shared: one run per cell is noise)."""
    runs = [run_workload(label, setup, cells) for _ in range(reps)]
    rows = []
    for index, cell in enumerate(cells):
        seen = [run["rows"][index] for run in runs]
        rows.append(
            {
                "cell": cell,
                "plain": statistics.median(r["plain"] for r in seen),
                "added_ours": statistics.median(r["ours"] - r["plain"] for r in seen),
                "added_kishu": statistics.median(r["kishu"] - r["plain"] for r in seen),
                "hook_ours": statistics.median(r["hook_ours"] - r["hook_plain"] for r in seen),
                "hook_kishu": statistics.median(r["hook_kishu"] - r["hook_plain"] for r in seen),
            }
        )
    return {
        "rows": rows,
        "reps": reps,
        "ours_bytes": statistics.median(run["ours_bytes"] for run in runs),
        "kishu_bytes": statistics.median(run["kishu_bytes"] for run in runs),
    }


def main() -> None:
    reps = int(os.environ.get("BENCH_REPS", str(REPS)))
    results = {
        "Kishu's 8-cell workload": repeated("kishu8", KISHU_SETUP, KISHU_CELLS, reps),
        "30 cells of pandas, numpy and plain Python": repeated(
            "mixed30", MIXED_SETUP, MIXED_CELLS, reps
        ),
    }
    back_to_back = {
        label: run_workload(f"{key}-run-all", setup, cells, interleaved=False)
        for label, key, setup, cells in (
            ("Kishu's 8-cell workload", "kishu8", KISHU_SETUP, KISHU_CELLS),
            ("30 cells of pandas, numpy and plain Python", "mixed30", MIXED_SETUP, MIXED_CELLS),
        )
    }
    parts = [report(results), back_to_back_report(back_to_back)]
    if os.environ.get("BENCH_LONG", "1") != "0":
        from benchmarks.autocheckpoint_notebooks import long_report, run_all_long

        parts.append(long_report(run_all_long()))
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    parts += [WHERE_THE_TIME_GOES, f"Load average at the end of the run: {load} (2 cores)."]
    text = "\n\n".join(parts)
    print(text)
    write_section("bench_autocheckpoint", "%autocheckpoint beside Kishu 0.3.4", text)


if __name__ == "__main__":
    main()
