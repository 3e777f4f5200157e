"""Every capture path on one namespace, under a real server (issue 41 section 1).

The issue's measurement, rerun: a namespace holding
`objs = [dict(a=i, b=str(i), c=[i, i + 1]) for i in range(300000)]`, checkpointed three
times (the first, a second with nothing changed, a third after `small = 2`), by each path
a user has:

- the REST route the panel and `ditto checkpoint` call (the server asks the idle kernel);
- `%checkpoint` in a cell of its own (the kernel captures itself);
- a pause, by `%pause` in a cell of its own and by the REST route: on a runtime never
  checkpointed (its capture is whole), and on one checkpointed before `small = 2` (its
  capture follows that base);
- `%autocheckpoint on`, the cell `small = 2` timed with its automatic checkpoint, beside the
  same cell in the same kernel with `%autocheckpoint off`.

Each path runs on a runtime of its own (a notebook session of the same server), built by
the same cell. The anchor, in the same run and the same kernel: one plain
`pickle.dumps(objs)`. Times are wall-clock round trips of the request or the cell as a
client sees them (median of `reps`).

Run from the repo root: `.venv/bin/python -m benchmarks.bench_capture_paths [reps]`
(default 3; a few minutes). Writes the `bench_capture_paths` section of
benchmarks/RESULTS.md.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.results_table import markdown_table, write_section  # noqa: E402
from tests.server.live_server import LiveServer  # noqa: E402

BUILD = "objs = [dict(a=i, b=str(i), c=[i, i + 1]) for i in range(300000)]"
PLAIN_PICKLE = (
    "import pickle, time\n_t = time.perf_counter(); pickle.dumps(objs, protocol=5)\n"
    "print(time.perf_counter() - _t)"
)


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def rest_path(server: LiveServer, runtime_id: str, kernel_id: str) -> list[float]:
    """First, again with nothing changed, after `small = 2`: REST checkpoints."""

    def checkpoint() -> None:
        code, answer = server.api("POST", "checkpoint", {"runtime_id": runtime_id})
        assert code == 200, answer

    first = timed(checkpoint)
    again = timed(checkpoint)
    server.execute(kernel_id, "small = 2")
    changed = timed(checkpoint)
    return [first, again, changed]


def magic_path(server: LiveServer, kernel_id: str) -> list[float]:
    """The same, with `%checkpoint` in a cell of its own."""

    def checkpoint() -> None:
        printed = server.execute(kernel_id, "%checkpoint")
        assert printed.startswith("checkpoint "), printed

    first = timed(checkpoint)
    again = timed(checkpoint)
    server.execute(kernel_id, "small = 2")
    changed = timed(checkpoint)
    return [first, again, changed]


def pause_path(
    server: LiveServer, runtime_id: str, kernel_id: str, *, after_checkpoint: bool, rest: bool
) -> float:
    """A pause's whole round trip: `%pause` as a cell, or the REST pause (`rest`, the
    panel's); after `%checkpoint` and `small = 2` when `after_checkpoint` (the pause then
    pickles what changed only)."""
    if after_checkpoint:
        server.execute(kernel_id, "%checkpoint")
        server.execute(kernel_id, "small = 2")
    started = time.perf_counter()
    if rest:
        code, answer = server.api("POST", "pause", {"runtime_id": runtime_id})
        assert code == 200, answer
    else:
        printed = server.execute(kernel_id, "%pause")
        assert printed.startswith("paused runtime "), printed
    return time.perf_counter() - started


def autocheckpoint_path(server: LiveServer, kernel_id: str) -> tuple[float, float]:
    """`small = N` with `%autocheckpoint` on (its checkpoint included), and off."""
    server.execute(kernel_id, "%autocheckpoint on")
    server.execute(kernel_id, "small = 1")  # the first automatic capture is whole
    on = timed(lambda: server.execute(kernel_id, "small = 2"))
    server.execute(kernel_id, "%autocheckpoint off")
    off = timed(lambda: server.execute(kernel_id, "small = 3"))
    return on, off


def session(server: LiveServer, name: str) -> tuple[str, str]:
    opened = server.open_notebook(name)
    runtime_id, kernel_id = opened["id"], opened["kernel"]["id"]
    server.execute(kernel_id, BUILD)
    return runtime_id, kernel_id


def main(reps: int) -> None:
    rest: list[list[float]] = []
    magic: list[list[float]] = []
    auto: list[tuple[float, float]] = []
    pauses: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    plain: list[float] = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-capture-paths-") as tmp,
        LiveServer(Path(tmp), config={"DittoJupyterApp": {"kernel_pool_size": 0}}) as server,
    ):
        for rep in range(reps):
            runtime_id, kernel_id = session(server, f"rest-{rep}.ipynb")
            plain.append(float(server.execute(kernel_id, PLAIN_PICKLE)))
            rest.append(rest_path(server, runtime_id, kernel_id))
            _, kernel_id = session(server, f"magic-{rep}.ipynb")
            magic.append(magic_path(server, kernel_id))
            _, kernel_id = session(server, f"auto-{rep}.ipynb")
            auto.append(autocheckpoint_path(server, kernel_id))
            for rest_pause in (False, True):
                kind = "rest" if rest_pause else "magic"
                runtime_id, kernel_id = session(server, f"pause-{kind}-whole-{rep}.ipynb")
                whole = pause_path(
                    server, runtime_id, kernel_id, after_checkpoint=False, rest=rest_pause
                )
                runtime_id, kernel_id = session(server, f"pause-{kind}-after-{rep}.ipynb")
                after = pause_path(
                    server, runtime_id, kernel_id, after_checkpoint=True, rest=rest_pause
                )
                pauses[rest_pause].append((whole, after))

    median = statistics.median
    anchor = median(plain)

    def row(label: str, runs: list[list[float]]) -> list[object]:
        cells: list[object] = [label]
        for column in range(3):
            value = median(run[column] for run in runs)
            cells.append(f"{value * 1000:,.0f} ms ({value / anchor:.2f}x)")
        return cells

    def pause_row(label: str, runs: list[tuple[float, float]]) -> list[object]:
        whole, after = median(a for a, _ in runs), median(b for _, b in runs)
        return [
            f"{label} (1st: never checkpointed; 3rd: after `%checkpoint`, `small = 2`)",
            f"{whole * 1000:,.0f} ms ({whole / anchor:.2f}x)",
            "-",
            f"{after * 1000:,.0f} ms ({after / anchor:.2f}x)",
        ]

    table = markdown_table(
        [f"path (median of {reps})", "1st", "2nd, nothing changed", "after `small = 2`"],
        [
            row("REST checkpoint (the panel's path)", rest),
            row("`%checkpoint` in a cell", magic),
            pause_row("`%pause` in a cell", pauses[False]),
            pause_row("REST pause (the panel's)", pauses[True]),
        ],
    )
    on, off = median(a for a, _ in auto), median(b for _, b in auto)
    auto_table = markdown_table(
        ["`small = 2` as a cell", "ms", "ratio"],
        [
            ["`%autocheckpoint off`", f"{off * 1000:,.0f}", "1.00"],
            [
                "`%autocheckpoint on` (its checkpoint included)",
                f"{on * 1000:,.0f}",
                f"{on / off:.2f}",
            ],
        ],
    )
    load = ", ".join(f"{value:.1f}" for value in psutil.getloadavg())
    body = (
        f"Load average at the end of the run: {load} (1, 5, 15 min) on {psutil.cpu_count()} "
        f"cores. The namespace: `{BUILD}`. Anchor, in the same kernels: one plain "
        f"`pickle.dumps(objs)` took {anchor * 1000:,.0f} ms (median); the ratios below are "
        "to it. Every path enters `capture_following` and follows the namespace's one base "
        "(issue 41 section 1), so the second and third checkpoints pickle what changed "
        "only, whichever path took the one before.\n\n"
        f"{table}\n\n{auto_table}"
    )
    write_section("bench_capture_paths", "Every capture path on one namespace", body)
    print(body)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
