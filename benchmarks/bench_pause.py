"""Idle pause (issue 13 section 1): the memory a paused kernel gives back, and getting it back.

A real `jupyter server` process with the ditto_jupyter extension and
`pause_idle_after = 3` s; one notebook session whose kernel holds 100 MiB of numpy data
(random float64, so nothing compresses or dedups), built by three cells.

- Memory: resident size (RSS) of the kernel's process tree (the kernel and any children,
  psutil) before the idle pauser paused it, and after (the kernel process is gone); the
  Jupyter server's own RSS before and after too, to show the memory did not move there.
- Time to the variables: `POST /api/v1/runtimes/resume` (new kernel, namespace restored;
  the variables are there when it answers), against the anchor measured in the same run on
  the same server: `POST /api/kernels/{id}/restart` plus re-running the three cells that
  built the state, sent as one execute request (the anchor's best case), on a kernel of no
  runtime.

Run from the repo root: `.venv/bin/python -m benchmarks.bench_pause [reps]` (default 3;
about a minute). Writes the `bench_pause` section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.results_table import markdown_table, write_section  # noqa: E402
from tests.server.live_server import LiveServer  # noqa: E402

MIB = 1 << 20
DATA_MIB = 100
PAUSE_IDLE_AFTER = 3.0
#: The cells that build the state (re-run by the anchor after a kernel restart).
CELLS = [
    "import numpy as np",
    "rng = np.random.default_rng(0)",
    f"data = rng.random({DATA_MIB} * 2**20 // 8)",
]
PROBE = "print(data.nbytes, round(float(data[:1000].sum()), 6))"
GIVE_UP_S = 120.0


def tree_rss(pid: int) -> int:
    """Resident bytes of a process and its descendants (0 when it is gone)."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for process in processes:
        try:
            total += process.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total


def own_rss(pid: int) -> int:
    """Resident bytes of one process alone (the server, without its kernels)."""
    return int(psutil.Process(pid).memory_info().rss)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def kernel_pid(server: LiveServer, kernel_id: str) -> int:
    return int(server.execute(kernel_id, "print(__import__('os').getpid())"))


def wait_until_paused(server: LiveServer, runtime_id: str) -> float:
    """Poll the runtime until the idle pauser paused it; seconds waited."""
    started = time.perf_counter()
    while time.perf_counter() - started < GIVE_UP_S:
        code, record = server.api("GET", runtime_id)
        if code == 200 and record["status"] == "paused":
            return time.perf_counter() - started
        time.sleep(0.1)
    raise RuntimeError(f"runtime {runtime_id} was not paused within {GIVE_UP_S} s")


def main(reps: int) -> None:
    config = {"DittoJupyterApp": {"pause_idle_after": PAUSE_IDLE_AFTER}}
    with (
        tempfile.TemporaryDirectory(prefix="bench-pause-") as tmp,
        LiveServer(Path(tmp), config=config) as server,
    ):
        assert server.process is not None
        server_pid = server.process.pid
        session = server.open_notebook("pause.ipynb")
        runtime_id, kernel_id = session["id"], session["kernel"]["id"]
        for cell in CELLS:
            server.execute(kernel_id, cell)
        expected = server.execute(kernel_id, PROBE).strip()
        assert expected.startswith(str(DATA_MIB * MIB)), expected

        rss_rows: list[tuple[int, int, int, int, float]] = []
        resume_s: list[float] = []
        for _ in range(reps):
            pid = kernel_pid(server, kernel_id)
            kernel_before, server_before = tree_rss(pid), own_rss(server_pid)
            waited = wait_until_paused(server, runtime_id)  # the idle pauser, not a request
            while not gone(pid):
                time.sleep(0.05)
            kernel_after, server_after = tree_rss(pid), own_rss(server_pid)
            rss_rows.append((kernel_before, kernel_after, server_before, server_after, waited))
            started = time.perf_counter()
            code, resumed = server.api("POST", "resume", {"runtime_id": runtime_id})
            resume_s.append(time.perf_counter() - started)
            assert code == 200, resumed
            kernel_id = resumed["kernel_id"]
            assert server.execute(kernel_id, PROBE).strip() == expected

        # The anchor on a kernel of no runtime (the idle pauser leaves it alone).
        response = server.request("POST", "api/kernels", {"name": "python3"})
        response.raise_for_status()
        kernel_id = response.json()["id"]
        restart_s: list[float] = []
        rerun_s: list[float] = []
        for _ in range(reps):
            started = time.perf_counter()
            server.request("POST", f"api/kernels/{kernel_id}/restart").raise_for_status()
            restarted = time.perf_counter()
            server.execute(kernel_id, "\n".join(CELLS))  # one request: the anchor's best case
            done = time.perf_counter()
            assert server.execute(kernel_id, PROBE).strip() == expected, "not the same state"
            restart_s.append(restarted - started)
            rerun_s.append(done - started)

    median = statistics.median
    freed = [before - after for before, after, *_ in rss_rows]
    server_growth = [after - before for _, _, before, after, _ in rss_rows]
    memory = markdown_table(
        [f"measure (median of {reps} pauses)", "MiB"],
        [
            ["kernel process tree RSS before the idle pause", _mib(median(r[0] for r in rss_rows))],
            ["kernel process tree RSS after", _mib(median(r[1] for r in rss_rows))],
            ["**given back per paused kernel**", f"**{_mib(median(freed))}**"],
            [
                "Jupyter server process RSS change across the pause (kernels not counted)",
                _mib(median(server_growth)),
            ],
        ],
    )
    speed = markdown_table(
        [f"getting the {DATA_MIB} MiB of variables back (median of {reps})", "seconds", "ratio"],
        [
            [
                "resume (`POST resume`: new kernel + namespace restore)",
                _s(median(resume_s)),
                "1.00",
            ],
            [
                "anchor: kernel restart + re-run the 3 cells (one request)",
                _s(median(rerun_s)),
                f"{median(rerun_s) / median(resume_s):.2f}",
            ],
            ["(of which the kernel restart alone)", _s(median(restart_s)), ""],
        ],
    )
    waited = median(r[4] for r in rss_rows)
    load = ", ".join(f"{value:.1f}" for value in psutil.getloadavg())
    body = (
        f"Load average at the end of the run: {load} (1, 5, 15 min) on {psutil.cpu_count()} "
        "cores; seconds stretch with it, the ratio is the figure to read.\n\n"
        f"`pause_idle_after = {PAUSE_IDLE_AFTER:g}` s; the idle pauser paused the runtime "
        f"{waited:.1f} s (median) after its last cell (checks every "
        f"{max(PAUSE_IDLE_AFTER / 4, 0.5):g} s). State: {DATA_MIB} MiB of random float64 "
        f"built by `{'`; `'.join(CELLS)}`.\n\n{memory}\n\n{speed}\n\n"
        "The anchor's cells are cheap (random numbers); state built by slower cells (reading "
        "files, queries, training) makes the anchor slower by that much and leaves resume "
        "where it is."
    )
    write_section("bench_pause", "Idle pause: memory given back, time to the variables", body)
    print(body)


def _mib(value: float) -> str:
    return f"{value / MIB:.1f}"


def _s(value: float) -> str:
    return f"{value:.3f}"


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
