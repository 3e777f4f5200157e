"""bench_notebooks against issue 25's targets: a checkpoint costs what changed, every byte.

Per notebook: Kishu's hook time over ours (caller-side and in the kernel), our mean
checkpoint beside pickling the final namespace once, the no-op checkpoints (time at the
caller and in the kernel, bytes written: blobs plus both SQLite logs), and the data
directory beside Kishu's store; then each target, met or missed by how much.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from benchmarks.notebook_figures import (
    checkpoint_times,
    duration,
    ratio,
    total_time_ratios,
    verdict,
)
from benchmarks.results_table import markdown_table

if TYPE_CHECKING:
    from benchmarks.bench_notebooks import NotebookRun

KIB = 1024
TOTAL_TIME_TARGET = 10.0
PER_NOTEBOOK_TIME_TARGET = 3.0
NOOP_SECONDS = 0.020
NOOP_BYTES = 8 * KIB


def _size(count: float) -> str:
    if abs(count) >= KIB * KIB:
        return f"{count / KIB / KIB:.2f} MiB"
    return f"{count / KIB:.1f} KiB" if abs(count) >= KIB else f"{count:.0f} B"


def _noop(run: NotebookRun, values: list[float] | list[int]) -> list[float]:
    return [float(values[i]) for i, c in enumerate(run.cells) if c.noop and i < len(values)]


def _mean_in_kernel(run: NotebookRun) -> float:
    times = [t for t in run.ours.in_kernel if not math.isnan(t)]
    return sum(times) / len(times) if times else math.nan


def _complete(run: NotebookRun) -> bool:
    from benchmarks.notebook_report import _kishu_complete

    return _kishu_complete(run)


def table(runs: list[NotebookRun]) -> str:
    """One row per notebook: the figures each target of issue 25 is judged on."""
    rows: list[list[object]] = []
    for run in runs:
        ours_s, inside_s, kishu_s = checkpoint_times(run)
        anchor = run.pickle_cost.get("seconds", math.nan) if run.pickle_cost else math.nan
        noop_caller = _noop(run, run.ours.seconds)
        noop_inside = _noop(run, run.ours.in_kernel)
        noop_written = _noop(run, run.ours.written)
        rows.append(
            [
                run.source.name,
                f"{ratio(kishu_s, ours_s):.1f}x ({ratio(kishu_s, inside_s):.1f}x)",
                f"{duration(_mean_in_kernel(run))} / {duration(anchor)}",
                f"{duration(max(noop_caller, default=0))} "
                f"({duration(max(noop_inside, default=0))})",
                f"{_size(max(noop_written, default=0))}",
                f"{_size(run.ours.stored)} / {_size(run.kishu.stored)}"
                + ("" if _complete(run) else " (Kishu wrong)"),
            ]
        )
    headers = [
        "notebook",
        "Kishu / ours: caller (in kernel)",
        "mean checkpoint in kernel / pickling the namespace once",
        "no-op checkpoint, slowest: caller (in kernel)",
        "no-op checkpoint, most written (blobs + databases)",
        "data directory: ours / Kishu",
    ]
    return markdown_table(headers, rows)


def targets(runs: list[NotebookRun]) -> list[str]:
    """Each target of issue 25 section 3, met or missed by how much."""

    lines = []
    total, total_inside = total_time_ratios(runs)
    lines.append(
        f"- Checkpoint time at least 10x below Kishu's hooks in total: {total:.1f}x caller-side "
        f"{verdict(total >= TOTAL_TIME_TARGET)}, {total_inside:.1f}x in the kernel "
        f"{verdict(total_inside >= TOTAL_TIME_TARGET)}"
    )
    per = [(run, ratio(checkpoint_times(run)[2], checkpoint_times(run)[0])) for run in runs]
    per_inside = [(run, ratio(checkpoint_times(run)[2], checkpoint_times(run)[1])) for run in runs]
    below = [f"{run.source.name} {r:.1f}x" for run, r in per if r < PER_NOTEBOOK_TIME_TARGET]
    below_inside = [
        f"{run.source.name} {r:.1f}x" for run, r in per_inside if r < PER_NOTEBOOK_TIME_TARGET
    ]
    lines.append(
        f"- At least 3x below Kishu on every notebook: caller-side {verdict(not below)}"
        + (f" (below on {', '.join(below)})" if below else "")
        + f"; in the kernel {verdict(not below_inside)}"
        + (f" (below on {', '.join(below_inside)})" if below_inside else "")
    )
    slower = [
        f"{run.source.name} {duration(_mean_in_kernel(run))} vs "
        f"{duration(run.pickle_cost['seconds'])}"
        for run in runs
        if run.pickle_cost and _mean_in_kernel(run) >= run.pickle_cost["seconds"]
    ]
    lines.append(
        "- On every notebook the mean checkpoint (in the kernel) costs less than pickling the "
        f"whole final namespace once: {verdict(not slower)}"
        + (f"; not on {len(slower)}: {', '.join(slower)}" if slower else "")
    )
    noops = [
        (run, caller, written)
        for run in runs
        for caller, written in zip(
            _noop(run, run.ours.seconds), _noop(run, run.ours.written), strict=True
        )
    ]
    slow = [(run, c) for run, c, _ in noops if c > NOOP_SECONDS]
    heavy = [(run, w) for run, _, w in noops if w > NOOP_BYTES]
    slowest = max(noops, key=lambda item: item[1], default=None)
    heaviest = max(noops, key=lambda item: item[2], default=None)
    inside = [t for run in runs for t in _noop(run, run.ours.in_kernel) if not math.isnan(t)]
    lines.append(
        f"- A no-op checkpoint at most 20 ms (caller-side, the whole checkpoint): "
        f"{len(slow)} of {len(noops)} above"
        + (f", the slowest {duration(slowest[1])} ({slowest[0].source.name})" if slowest else "")
        + f"; in the kernel the slowest {duration(max(inside, default=0))}; {verdict(not slow)}"
    )
    lines.append(
        f"- A no-op checkpoint writes at most 8 KiB, blobs plus databases: {len(heavy)} of "
        f"{len(noops)} above"
        + (f", the most {_size(heaviest[2])} ({heaviest[0].source.name})" if heaviest else "")
        + f"; {verdict(not heavy)}"
    )
    complete = [run for run in runs if _complete(run)]
    over = [
        f"{run.source.name} {ratio(run.ours.stored, run.kishu.stored):.2f}x"
        for run in complete
        if run.ours.stored > run.kishu.stored
    ]
    lines.append(
        f"- Bytes on disk at most Kishu's where Kishu restored everything right ({len(complete)} "
        f"of {len(runs)} notebooks): {verdict(not over)}"
        + (f"; over on {', '.join(over)}" if over else "")
    )
    ours_total = sum(run.ours.stored for run in runs)
    kishu_total = sum(run.kishu.stored for run in runs)
    share = ratio(ours_total, kishu_total)
    lines.append(
        f"- At most half of Kishu's bytes in total: {_size(ours_total)} vs {_size(kishu_total)}, "
        f"{share:.2f}x, {verdict(share <= 0.5)}"
    )
    wrong = sum(1 for run in runs for outcome in run.ours.restores if outcome["wrong"])
    restores = sum(len(run.ours.restores) for run in runs)
    lines.append(
        f"- Zero wrong restores and checkouts: {wrong} of {restores}, {verdict(not wrong)}"
    )
    return lines
