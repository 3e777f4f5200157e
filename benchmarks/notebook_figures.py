"""The figures both bench_notebooks reports read off a run: times, ratios, verdicts."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from benchmarks.bench_notebooks import NotebookRun


def duration(value: float) -> str:
    """Seconds as the tables show them: `850 ms`, `1.16 s`."""
    return f"{value:.2f} s" if value >= 1 else f"{value * 1000:.0f} ms"


def ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator > 0 else math.inf


def verdict(met: bool) -> str:
    return "**met**" if met else "**missed**"


def checkpoint_times(run: NotebookRun) -> tuple[float, float, float]:
    """Ours (caller-side), ours (in kernel), Kishu: over the cells Kishu ran."""
    count = len(run.kishu.seconds)
    ours = sum(run.ours.seconds[:count])
    in_kernel = sum(run.ours.in_kernel[:count])
    return ours, in_kernel, sum(run.kishu.seconds)


def total_time_ratios(runs: list[NotebookRun]) -> tuple[float, float]:
    """Kishu's hook time over ours in total: caller-side, and in the kernel."""
    ours = sum(checkpoint_times(run)[0] for run in runs)
    inside = sum(checkpoint_times(run)[1] for run in runs)
    kishu = sum(checkpoint_times(run)[2] for run in runs)
    return ratio(kishu, ours), ratio(kishu, inside)
