"""The bench_notebooks section of RESULTS.md: per-notebook table, totals, targets, findings."""

from __future__ import annotations

import math
import textwrap
from typing import TYPE_CHECKING

from benchmarks import notebook_targets
from benchmarks.notebook_figures import (
    checkpoint_times,
    duration,
    ratio,
    total_time_ratios,
    verdict,
)
from benchmarks.results_table import markdown_table
from benchmarks.state_fingerprint import PYPLOT

if TYPE_CHECKING:
    from benchmarks.bench_notebooks import EngineRun, NotebookRun

KIB = 1024
MIB = 1024 * 1024
NOOP_TARGET = 4 * KIB
TIME_TARGET = 10.0


def size(count: float) -> str:
    if abs(count) < KIB:
        return f"{count:.0f} B"
    if abs(count) >= MIB:
        return f"{count / MIB:.2f} MiB"
    return f"{count / KIB:.1f} KiB"


def _noop(run: NotebookRun, engine: EngineRun, attribute: str) -> list[int]:
    values: list[int] = getattr(engine, attribute)
    return [values[i] for i, cell in enumerate(run.cells) if cell.noop and i < len(values)]


def _wrong(engine: EngineRun) -> int:
    return sum(1 for outcome in engine.restores if outcome["wrong"])


def _values_wrong(engine: EngineRun) -> int:
    """Restores where a variable came back wrong (not only pyplot's figure manager)."""
    return sum(
        1
        for outcome in engine.restores
        if any(not entry.startswith(PYPLOT) for entry in outcome["wrong"])
    )


def _wrong_cell(engine: EngineRun) -> str:
    if engine.failed:
        return f"failed: {engine.failed[:60]}"
    wrong, values = _wrong(engine), _values_wrong(engine)
    return f"{wrong} / {len(engine.restores)}" + (
        f" ({wrong - values} pyplot only)" if wrong > values else ""
    )


def _kishu_complete(run: NotebookRun) -> bool:
    """Kishu ran every cell, its hooks never raised, and every variable came back right.

    pyplot's figure manager is left out here: Kishu restores variables, not pyplot.
    """
    kishu = run.kishu
    return (
        kishu.failed is None
        and not kishu.errors
        and bool(kishu.restores)
        and not _values_wrong(kishu)
    )


def _cell_label(run: NotebookRun, position: int) -> str:
    ordinal = sum(1 for cell in run.cells[: position + 1] if not cell.noop)
    return f"cell {ordinal}"


def _row(run: NotebookRun) -> list[object]:
    ours, kishu = run.ours, run.kishu
    ours_s, in_kernel_s, kishu_s = checkpoint_times(run)
    real = sum(1 for cell in run.cells if not cell.noop)
    noop_ours = _noop(run, ours, "written")
    noop_kishu = _noop(run, kishu, "growth")
    kishu_stored = size(kishu.stored) + (" (partial)" if kishu.failed else "")
    return [
        f"{run.source.name}<br>{run.source.origin}",
        f"{real} + {len(run.cells) - real}",
        f"{duration(sum(ours.seconds))} ({duration(sum(ours.in_kernel))})",
        duration(sum(kishu.seconds)),
        f"{ratio(kishu_s, ours_s):.1f}x ({ratio(kishu_s, in_kernel_s):.1f}x)",
        size(ours.stored),
        kishu_stored,
        f"{ratio(ours.stored, kishu.stored):.2f}x",
        f"{size(sum(noop_ours) / max(1, len(noop_ours)))} ({size(max(noop_ours, default=0))})",
        size(sum(noop_kishu) / max(1, len(noop_kishu))),
        _wrong_cell(ours),
        _wrong_cell(kishu),
    ]


def _total_row(runs: list[NotebookRun]) -> list[object]:
    ours_s = sum(checkpoint_times(run)[0] for run in runs)
    in_kernel_s = sum(checkpoint_times(run)[1] for run in runs)
    kishu_s = sum(checkpoint_times(run)[2] for run in runs)
    ours_stored = sum(run.ours.stored for run in runs)
    kishu_stored = sum(run.kishu.stored for run in runs)
    noop_ours = [n for run in runs for n in _noop(run, run.ours, "written")]
    noop_kishu = [n for run in runs for n in _noop(run, run.kishu, "growth")]
    real = sum(1 for run in runs for cell in run.cells if not cell.noop)
    cells = sum(len(run.cells) for run in runs)
    return [
        f"**total** ({len(runs)} notebooks)",
        f"{real} + {cells - real}",
        f"{duration(sum(sum(run.ours.seconds) for run in runs))} "
        f"({duration(sum(sum(run.ours.in_kernel) for run in runs))})",
        duration(kishu_s),
        f"{ratio(kishu_s, ours_s):.1f}x ({ratio(kishu_s, in_kernel_s):.1f}x)",
        size(ours_stored),
        size(kishu_stored),
        f"{ratio(ours_stored, kishu_stored):.2f}x",
        f"{size(sum(noop_ours) / max(1, len(noop_ours)))} ({size(max(noop_ours, default=0))})",
        size(sum(noop_kishu) / max(1, len(noop_kishu))),
        _total_wrong([run.ours for run in runs]),
        _total_wrong([run.kishu for run in runs]),
    ]


def _total_wrong(engines: list[EngineRun]) -> str:
    wrong = sum(_wrong(engine) for engine in engines)
    values = sum(_values_wrong(engine) for engine in engines)
    restores = sum(len(engine.restores) for engine in engines)
    return f"{wrong} / {restores}" + (f" ({wrong - values} pyplot only)" if wrong > values else "")


def _targets(runs: list[NotebookRun]) -> list[str]:
    lines = []
    complete = [run for run in runs if _kishu_complete(run)]
    over = [run for run in complete if run.ours.stored > run.kishu.stored]
    detail = ", ".join(
        f"{run.source.name} {ratio(run.ours.stored, run.kishu.stored):.2f}x "
        f"({size(run.ours.stored)} vs {size(run.kishu.stored)})"
        for run in over
    )
    lines.append(
        f"- Storage at most Kishu's on every notebook where Kishu saved and restored everything "
        f"({len(complete)} of {len(runs)}): {verdict(not over)}"
        + (f"; over on {len(over)}: {detail}" if over else "")
    )
    caller, inside = total_time_ratios(runs)
    lines.append(
        f"- Checkpoint time at least {TIME_TARGET:.0f}x below Kishu's hooks in total: "
        f"{caller:.1f}x caller-side {verdict(caller >= TIME_TARGET)}, {inside:.1f}x in kernel "
        f"{verdict(inside >= TIME_TARGET)}"
    )
    wrong = sum(_wrong(run.ours) for run in runs)
    values = sum(_values_wrong(run.ours) for run in runs)
    restores = sum(len(run.ours.restores) for run in runs)
    lines.append(
        f"- Zero wrong restores: {wrong} of {restores} wrong ({values} with a variable wrong, "
        f"{wrong - values} with only pyplot's figures wrong), {verdict(wrong == 0)}"
    )
    noop = [(n, run) for run in runs for n in _noop(run, run.ours, "written")]
    above = [pair for pair in noop if pair[0] > NOOP_TARGET]
    worst = max(noop, key=lambda pair: pair[0], default=(0, None))
    lines.append(
        f"- A checkpoint after a cell that changed nothing writes at most 4 KiB (issue item 4): "
        f"{len(above)} of {len(noop)} no-op checkpoints above, the largest {size(worst[0])}"
        + (f" ({worst[1].source.name})" if worst[1] is not None else "")
        + f", {verdict(not above)}"
    )
    if above:
        lines.append("  " + _noop_cause(runs, {id(run) for _, run in above}))
    return lines


def _noop_cause(runs: list[NotebookRun], over: set[int]) -> str:
    """Which values the notebooks with heavy no-op checkpoints hold whose pickle never repeats."""
    heavy = [run for run in runs if id(run) in over]
    unstable = [run for run in heavy if run.unstable]
    kinds: dict[str, int] = {}
    for run in unstable:
        for kind in {entry["type"].rsplit(".", 1)[-1] for entry in run.unstable}:
            kinds[kind] = kinds.get(kind, 0) + 1
    ranked = sorted(kinds.items(), key=lambda pair: -pair[1])
    listed = ", ".join(f"{kind} ({count})" for kind, count in ranked)
    return (
        f"Of the {len(heavy)} notebooks with a no-op checkpoint above 4 KiB, {len(unstable)} "
        f"hold values whose pickle differs at every pickling (by type, notebooks: {listed}); "
        "the findings below name them."
    )


def _outcomes(run: NotebookRun, engine: EngineRun, who: str) -> list[str]:
    lines = []
    for outcome in engine.restores:
        if outcome["wrong"]:
            names = outcome["wrong"]
            shown = "; ".join(names[:4]) + (
                f"; and {len(names) - 4} more" if len(names) > 4 else ""
            )
            lines.append(
                f"  - {who}, {_cell_label(run, outcome['position'])} {outcome['how']}: {shown}"
            )
    return lines


def _findings(runs: list[NotebookRun]) -> list[str]:
    lines: list[str] = []
    for run in runs:
        found = _outcomes(run, run.ours, "ours") + _outcomes(run, run.kishu, "Kishu")
        declared = sorted({n for o in run.ours.restores for n in o.get("declared", [])})
        uncomparable = sorted({n for o in run.ours.restores for n in o.get("uncomparable", [])})
        if declared:
            found.append(f"  - ours reported unrestorable (not counted wrong): {declared}")
        if uncomparable:
            found.append(f"  - not comparable: {uncomparable}")
        for engine, who in ((run.ours, "ours"), (run.kishu, "Kishu")):
            if engine.errors:
                more = f" (and {len(engine.errors) - 1} more)" if len(engine.errors) > 1 else ""
                found.append(f"  - {who}: {engine.errors[0][:200]}{more}")
        if run.unstable:
            entries = ", ".join(
                f"`{e['name']}` ({e['type'].rsplit('.', 1)[-1]}, {size(e['bytes'])})"
                for e in run.unstable
            )
            found.append(f"  - pickle differs on every pickling: {entries}")
        noop = _noop(run, run.ours, "written")
        if noop:
            growth = _noop(run, run.ours, "growth")
            found.append(
                f"  - ours no-op checkpoints wrote {', '.join(size(n) for n in noop)} "
                f"(store grew {', '.join(size(n) for n in growth)})"
            )
        found.append(f"  - {_time_line(run)}")
        if found:
            lines.append(f"- {run.source.name}:")
            lines += found
    return lines


def _time_line(run: NotebookRun) -> str:
    """Mean checkpoint time beside pickling the final namespace once, restore times, run."""
    checkpoints = [t for t in run.ours.in_kernel if not math.isnan(t)]
    mean = sum(checkpoints) / len(checkpoints) if checkpoints else math.nan
    cost = run.pickle_cost
    anchor = (
        f"pickling the final namespace once {duration(cost['seconds'])} ({size(cost['bytes'])})"
        if cost
        else "n/a"
    )
    return (
        f"ours mean checkpoint in kernel {duration(mean)} (anchor: {anchor}); restore in "
        f"place {_restore_time(run.ours)}, Kishu checkout {_restore_time(run.kishu)}; "
        f"notebook run {run.seconds:.0f} s"
    )


def _restore_time(engine: EngineRun) -> str:
    times = [o["seconds"] for o in engine.restores if o["how"] == "in place" and "seconds" in o]
    return f"{duration(sum(times) / len(times))} mean" if times else "n/a"


NOTES = """
How it was measured: one run, one machine (2 cores shared with other engineers' tests, so
times move between runs; ratios are taken within the run, cell by cell on both engines).
Ours is `KernelContextDriver.capture` timed at the caller (with the kernel round trip of the
server path); the in-kernel part (parentheses) is the like-for-like figure with Kishu's
hooks, which run inside the kernel. Bytes: ours is the growth of the data directory on disk,
every file (the blobs, the SQLite files ditto.db and objects.db with their -wal and -shm,
the workspaces), Kishu's the growth of its `.kishudb` after `init_kishu`; no-op columns:
ours the bytes the checkpoint reports written (blobs, and the page images both SQLite logs
took: `RuntimeCheckpointResult.bytes_written`), Kishu its store growth, per no-op cell (a
cell that only displays the value assigned last, added every 3rd cell and after the last).
Wrong restores count, per notebook, the 3 in-place restores (a third of the way, two thirds,
the end) and the checkout of the two-thirds state into a fresh kernel; a restore is wrong
when a variable's fingerprint differs from the live one (values compared as
benchmarks/state_fingerprint documents: arrays and frames by content, figures by their data,
other objects by their attributes), a variable is missing without being reported
unrestorable, one appears that was not there, or pyplot's open figures or current figure
differ. Kishu's restores are counted the same way (it reports nothing unrestorable); "pyplot
only" counts the restores where every variable was right and only pyplot's figures differed
(issue item 3). "Saved everything" for the storage target means Kishu ran every cell, its
hooks never raised and every variable of its 4 restores came back right (pyplot left out:
Kishu does not claim it).
"""


def report(runs: list[NotebookRun], wall: float, in_kernel: bool, load: str) -> str:
    """The section body: table with a total row, targets, findings per notebook, method."""
    headers = [
        "notebook (source)",
        "cells + no-op",
        "ours: checkpoint time (in kernel)",
        "Kishu: hook time",
        "Kishu / ours (in kernel)",
        "ours: stored",
        "Kishu: stored",
        "ours / Kishu stored",
        "no-op cell, ours: mean (max)",
        "no-op cell, Kishu: mean",
        "wrong restores, ours",
        "wrong restores, Kishu",
    ]
    table = markdown_table(headers, [*(_row(run) for run in runs), _total_row(runs)])
    parts = [
        table,
        "Targets (issue 14):\n\n" + "\n".join(_targets(runs)),
        "Targets (issue 25), per notebook:\n\n" + notebook_targets.table(runs),
        "\n".join(notebook_targets.targets(runs)),
    ]
    findings = _findings(runs)
    if findings:
        parts.append("What came back wrong, and what dominates:\n\n" + "\n".join(findings))
    notes = textwrap.dedent(NOTES).strip().replace("\n", " ")
    if not in_kernel:
        notes += " The capture did not report its in-kernel time in this run (nan)."
    parts.append(f"{notes} The whole run took {wall:.0f} s; load average {load}.")
    return "\n\n".join(parts)
