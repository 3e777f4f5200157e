"""Run All of bench_notebooks' long sessions under two checkouts' engines, side by side.

Usage, from the repository root: `.venv/bin/python benchmarks/run_all_ab.py OTHER NOTEBOOK...`
where OTHER is another checkout of this repository (`git worktree add /tmp/old <commit>`) and
each NOTEBOOK a long session's name (`skl-linear-models-session`, ...). Per notebook, three
fresh kernels run every cell back to back (a no-op cell, `None`, after every third and after
the last): a plain one, one with `%autocheckpoint on` importing the engine from OTHER, one
importing it from this checkout; twice, in the order plain, other, this and then this, other,
plain (so none gains from running last). Printed: each pass's seconds and what each engine
added to the plain kernel's total. For telling a change to the engine from a change of
machine: both engines run on the same machine, in the same minutes.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.autocheckpoint_notebooks import LONG  # noqa: E402
from benchmarks.bench_autocheckpoint import Kernel  # noqa: E402
from benchmarks.bench_notebooks import noop_follows  # noqa: E402
from benchmarks.notebook_sources import prepare  # noqa: E402


def run_all(cells: list[str], engine: Path | None, work: Path) -> float:
    """Seconds for every cell in a fresh kernel (`engine`: the checkout whose engine
    autocheckpoints it; None: a plain kernel), the last write-behind waited for."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = {"PYTHONPATH": str(engine or ROOT)}
    if engine is not None:
        env["DITTO_DATA_DIR"] = str(work / "data")
    kernel = Kernel(env, work)
    try:
        if engine is not None:
            kernel.run("%load_ext ditto_jupyter")
            kernel.run("%autocheckpoint on")
        started = time.perf_counter()
        for cell in cells:
            kernel.run(cell)
        if engine is not None:
            kernel.run("%autocheckpoint off")  # waits for the last write-behind
        return time.perf_counter() - started
    finally:
        kernel.stop()


def main() -> None:
    known = {source.name: source for source in LONG}
    parser = argparse.ArgumentParser(
        prog="run_all_ab",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("other", type=Path, metavar="OTHER", help="another checkout's root")
    parser.add_argument(
        "notebooks", nargs="+", choices=sorted(known), metavar="NOTEBOOK", help="a long session"
    )
    args = parser.parse_args()
    other = args.other.resolve()
    if not (other / "ditto_jupyter").is_dir():
        parser.error(f"{other} is not a checkout of ditto-jupyter")
    sources = prepare([known[name] for name in args.notebooks])
    engines: dict[str, Path | None] = {"plain": None, "other": other, "this": ROOT}
    scratch = Path(tempfile.mkdtemp(prefix="run-all-ab-"))
    try:
        for name, tutorial in sources.items():
            compare(name, tutorial, engines, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def compare(name: str, tutorial: list[str], engines: dict[str, Path | None], scratch: Path) -> None:
    """Both passes of one notebook under every engine, printed as they end."""
    cells: list[str] = []
    for index, source in enumerate(tutorial):
        cells.append(source)
        if noop_follows(index, len(tutorial)):
            cells.append("None")
    totals: dict[str, float] = dict.fromkeys(engines, 0.0)
    for order in (["plain", "other", "this"], ["this", "other", "plain"]):
        for label in order:
            seconds = run_all(cells, engines[label], scratch / f"{name}-{label}")
            totals[label] += seconds
            print(f"{name} {label}: {seconds:.1f} s", flush=True)
    plain = totals["plain"]
    added = {label: (totals[label] / plain - 1) * 100 for label in ("other", "this")}
    print(
        f"{name}: plain {plain:.1f} s, other {totals['other']:.1f} s ({added['other']:+.1f}%),"
        f" this {totals['this']:.1f} s ({added['this']:+.1f}%)",
        flush=True,
    )


if __name__ == "__main__":
    main()
