"""Checkout of 8 children at once beside 8 checkouts one after another (issue 44 §1).

A real `jupyter server` process with a warm kernel pool of 8 (`kernel_pool_size=8`); one
notebook kernel holds a 100 MiB numpy array (random float64) and a string, checkpointed
once. Then, in the same run:

- **fan-out**: one `POST /api/v1/runtimes/checkout` with `count: 8` (curl's
  `time_total`): the answer comes once every child's kernel holds the variables, so each
  child is then ready to run a cell; a cell in each child checks it (`data.nbytes`, the
  string), timed separately;
- **sequential**: 8 `POST .../checkout` one after another, each child checked the same.

Both start from a full pool (the run waits for it to refill between them). Target: the 8
children in at most 2 s in total. Section `bench_fanout_checkout` of RESULTS.md. Run it
with `python benchmarks/bench_fanout_checkout.py` (about a minute).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_http import api, wait_for_pool
from benchmarks.results_table import markdown_table, write_section
from tests.server.live_server import LiveServer

MIB = 1 << 20
DATA_MIB = 100
CHILDREN = 8
TARGET_S = 2.0
CHECK = "print(data.nbytes, label)"


def check_children(server: LiveServer, kernels: list[str]) -> float:
    """Run the check cell in each child; the seconds it took in all."""
    started = time.perf_counter()
    for kernel_id in kernels:
        out = server.execute(kernel_id, CHECK)
        assert out.split() == [str(DATA_MIB * MIB), "bench"], out
    return time.perf_counter() - started


def close_all(server: LiveServer, runtime_ids: list[str]) -> None:
    for runtime_id in runtime_ids:
        api(server, "close", {"runtime_id": runtime_id, "discard": True})


def main() -> None:
    load_start = os.getloadavg()[0]
    config = {"DittoJupyterApp": {"kernel_pool_size": CHILDREN}}
    with (
        tempfile.TemporaryDirectory(prefix="bench-fanout-") as tmp,
        LiveServer(Path(tmp), config=config) as server,
    ):
        session = server.open_notebook("bench.ipynb")
        server.execute(
            session["kernel"]["id"],
            f"import numpy as np\n"
            f"data = np.random.default_rng(0).random({DATA_MIB * MIB // 8})\n"
            f"label = 'bench'\n",
        )
        _, checkpoint = api(server, "checkpoint", {"runtime_id": session["id"]})
        checkpoint_id = checkpoint["checkpoint_id"]

        wait_for_pool(server, CHILDREN)
        fan_seconds, answer = api(
            server, "checkout", {"checkpoint_id": checkpoint_id, "count": CHILDREN}
        )
        made = [c["checkout"] for c in answer["children"] if c["checkout"] is not None]
        failed = [c for c in answer["children"] if c["checkout"] is None]
        assert not failed, failed
        fan_check = check_children(server, [c["kernel_id"] for c in made])
        close_all(server, [c["runtime"]["runtime_id"] for c in made])

        wait_for_pool(server, CHILDREN)
        each: list[float] = []
        kernels, runtimes = [], []
        for _ in range(CHILDREN):
            seconds, child = api(server, "checkout", {"checkpoint_id": checkpoint_id})
            each.append(seconds)
            kernels.append(child["kernel_id"])
            runtimes.append(child["runtime"]["runtime_id"])
        seq_check = check_children(server, kernels)
        close_all(server, runtimes)
    load_end = os.getloadavg()[0]
    report(fan_seconds, fan_check, sum(each), max(each), seq_check, (load_start, load_end))


def report(
    fan: float,
    fan_check: float,
    seq: float,
    seq_max: float,
    seq_check: float,
    load: tuple[float, float],
) -> None:
    def ms(seconds: float) -> str:
        return f"{seconds * 1000:.0f} ms"

    verdict = "pass" if fan <= TARGET_S else f"MISS by {ms(fan - TARGET_S)}"
    rows: list[list[object]] = [
        [
            f"fan-out: one checkout, count {CHILDREN}",
            ms(fan),
            f"<= {ms(TARGET_S)} {verdict}",
            ms(fan_check),
            "1.00x",
        ],
        [
            f"sequential: {CHILDREN} checkouts (slowest {ms(seq_max)})",
            ms(seq),
            "",
            ms(seq_check),
            f"{seq / fan:.2f}x",
        ],
    ]
    body = (
        f"{CHILDREN} children of one checkpoint of a {DATA_MIB} MiB numpy array (random "
        "float64) and a string, real `jupyter server` process with a warm kernel pool of "
        f"{CHILDREN} (full before each way), `curl -w '%{{time_total}}'`. Each answer comes "
        "once every child's kernel holds the variables; then a cell in each child checks "
        "them (`data.nbytes`, the string), one child after another, timed apart. Load "
        f"average (1 min) at start and end: {load[0]:.1f}, {load[1]:.1f} on "
        f"{os.cpu_count()} cores (the machine is shared).\n\n"
        + markdown_table(
            [
                f"{CHILDREN} children",
                "total",
                "target",
                "then a cell in each child",
                "vs fan-out",
            ],
            rows,
        )
        + "\n\nWhat bounds the fan-out: the 8 children share the 2 cores, and each restores "
        f"{DATA_MIB} MiB into its kernel (reading the chunks and building the array: "
        f"{CHILDREN * DATA_MIB} MiB in all), beside the store writes and the notebook copies; "
        "the pool spares the 8 kernel starts. The sequential checkouts pay the same work "
        "one after another plus a round trip each. "
        + (
            "The target is met."
            if fan <= TARGET_S
            else f"The target is missed by {ms(fan - TARGET_S)} in this run, at the load "
            "above: the machine's other jobs (CI, other sessions) held the cores the "
            "CPU-bound restores need. How much of the miss the load explains, one run on a "
            "shared machine cannot say."
        )
    )
    write_section("bench_fanout_checkout", "Checkout of 8 children at once (issue 44)", body)
    print(body)


if __name__ == "__main__":
    main()
