"""End-to-end HTTP latency of the runtime API, as a client sees it (`curl -w '%{time_total}'`).

A real `jupyter server` process with the ditto_jupyter extension; one notebook session whose
kernel holds 100 MiB of numpy data (random float64, so nothing compresses or dedups). Timed
with curl exactly as the seed timed its E2B smoke run (checkpoint 1.516 s, checkout
2.335 s): first checkpoint, clean re-checkpoint, checkpoint after a one-element change,
checkout to a running child kernel, pause, resume.

"first checkpoint" is the first checkpoint of a runtime the server already knows (the
runtime list registered its session and warmed its kernel up: channel open, capture module
imported); "cold" is a checkpoint that is the very first request about a session.

Anchors measured in the same run, on the same kernel and data:
- HTTP floor: `GET /api/v1/runtimes/{id}` (auth, routing, store read, no kernel work);
- naive checkpoint: a cell doing `pickle.dump` of the array to a file plus `fsync`
  (cell wall time seen by a jupyter_client);
- naive checkout: `POST /api/sessions` for a new kernel (curl) plus a cell doing
  `pickle.load` of that file in it.

Run from the repo root: `.venv/bin/python -m benchmarks.bench_http` (about a minute). The
main run keeps the warm kernel pool off (`kernel_pool_size=0`), so its checkout and resume
rows stay comparable with earlier runs.

`--pool` measures the warm kernel pool instead (issue 13 section 2): checkout to a running
child kernel and resume, 100 MiB state, in the same run on three servers: today's code
(commit `TODAY_COMMIT`, the last before the pool, exported with `git archive` and put first
on the server's and its kernels' PYTHONPATH), this code with the pool off
(`kernel_pool_size=0`) and with it on (`kernel_pool_size=1`); two rounds, in alternating
order, so a load change on the machine hits all three alike. Before each timed operation
it waits until the pool has refilled, as a user's next checkout a few seconds later would
find it; the other servers wait the same. Section `bench_http_pool` of RESULTS.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.results_table import markdown_table, write_section  # noqa: E402
from tests.server.live_server import LiveServer  # noqa: E402

MIB = 1 << 20
DATA_MIB = 100
SEED_E2B = {"checkpoint": 1.516061, "checkout": 2.335461}
TARGETS = {"first checkpoint": 0.5, "clean re-checkpoint": 0.050, "checkout": 2.0}
#: The last commit before the warm kernel pool: "today" in the `--pool` run.
TODAY_COMMIT = "76a3773"
POOL_TARGET_S = 0.3
POOL_RUNS = 3


def curl(server: LiveServer, method: str, path: str, body: Any = None) -> tuple[float, Any]:
    """One request through curl; (time_total in seconds, parsed JSON body)."""
    with tempfile.NamedTemporaryFile() as out:
        command = [
            "curl",
            "-s",
            "-o",
            out.name,
            "-w",
            "%{http_code} %{time_total}",
            "-X",
            method,
            "-H",
            f"Authorization: Bearer {server.token}",
        ]
        if body is not None:
            command += ["-H", "Content-Type: application/json", "-d", json.dumps(body)]
        result = subprocess.run(
            [*command, server.url + path], capture_output=True, text=True, check=True
        )
        code, seconds = result.stdout.split()
        payload = json.loads(Path(out.name).read_bytes() or b"null")
    if not code.startswith("2"):
        raise RuntimeError(f"{method} {path} answered {code}: {payload}")
    return float(seconds), payload


def api(server: LiveServer, route: str, body: Any) -> tuple[float, Any]:
    return curl(server, "POST", f"api/v1/runtimes/{route}", body)


def timed_cell(server: LiveServer, kernel_id: str, code: str) -> float:
    started = time.perf_counter()
    server.execute(kernel_id, code)
    return time.perf_counter() - started


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def main() -> None:
    samples: dict[str, list[float]] = {}
    no_pool = {"DittoJupyterApp": {"kernel_pool_size": 0}}
    with (
        tempfile.TemporaryDirectory(prefix="bench-http-") as tmp,
        LiveServer(Path(tmp), config=no_pool) as server,
    ):
        session = server.open_notebook("bench.ipynb")
        runtime_id, kernel_id = session["id"], session["kernel"]["id"]
        server.execute(
            kernel_id,
            f"import numpy as np\n"
            f"data = np.random.default_rng(0).random({DATA_MIB * MIB // 8})\n"
            f"label = 'bench'\n",
        )
        pickle_path = Path(tmp) / "naive.pkl"

        # cold: the very first request about a runtime is its checkpoint (registration,
        # kernel channel, capture module import, then the capture)
        cold = server.open_notebook("cold.ipynb")
        server.execute(
            cold["kernel"]["id"],
            f"import numpy as np\ndata = np.random.default_rng(1).random({DATA_MIB * MIB // 8})",
        )
        seconds, _ = api(server, "checkpoint", {"runtime_id": cold["id"]})
        samples["first checkpoint, cold (first touch of the runtime)"] = [seconds]
        api(server, "close", {"runtime_id": cold["id"]})

        # registered: the runtime list (the side panel) registered the session and warmed
        # its kernel up a moment before the user asks for the first checkpoint
        samples["HTTP floor (GET runtime)"] = [
            curl(server, "GET", f"api/v1/runtimes/{runtime_id}")[0] for _ in range(5)
        ]
        time.sleep(2.0)
        seconds, first = api(server, "checkpoint", {"runtime_id": runtime_id, "name": "first"})
        samples["first checkpoint"] = [seconds]
        samples["clean re-checkpoint"] = [
            api(server, "checkpoint", {"runtime_id": runtime_id})[0] for _ in range(5)
        ]
        changed = []
        for value in range(3):
            server.execute(kernel_id, f"data[0] = {value + 42}")
            changed.append(api(server, "checkpoint", {"runtime_id": runtime_id})[0])
        samples["re-checkpoint after data[0] = v"] = changed

        checkouts = []
        for _ in range(3):
            seconds, child = api(server, "checkout", {"checkpoint_id": first["checkpoint_id"]})
            checkouts.append(seconds)
            out = server.execute(child["kernel_id"], "print(data.nbytes, data[0] != 42)")
            assert out.split() == [str(DATA_MIB * MIB), "True"], out
            api(server, "close", {"runtime_id": child["runtime"]["runtime_id"]})
        samples["checkout"] = checkouts

        pauses, resumes = [], []
        for _ in range(2):
            seconds, _ = api(server, "pause", {"runtime_id": runtime_id})
            pauses.append(seconds)
            seconds, resumed = api(server, "resume", {"runtime_id": runtime_id})
            resumes.append(seconds)
            kernel_id = resumed["kernel_id"]
            assert server.execute(kernel_id, "print(data.nbytes)").strip() == str(DATA_MIB * MIB)
        samples["pause"] = pauses
        samples["resume"] = resumes

        samples["naive checkpoint: pickle.dump + fsync (cell)"] = [
            timed_cell(
                server,
                kernel_id,
                f"import os, pickle\n"
                f"with open({str(pickle_path)!r}, 'wb') as f:\n"
                f"    pickle.dump(data, f, protocol=5); f.flush(); os.fsync(f.fileno())\n",
            )
            for _ in range(3)
        ]
        naive_checkouts = []
        for _ in range(2):
            body = {"path": "naive.ipynb", "type": "notebook", "kernel": {"name": "python3"}}
            seconds, model = curl(server, "POST", "api/sessions", body)
            seconds += timed_cell(
                server,
                model["kernel"]["id"],
                f"import pickle\ndata = pickle.load(open({str(pickle_path)!r}, 'rb'))\n",
            )
            naive_checkouts.append(seconds)
            curl_delete = [
                "curl",
                "-s",
                "-X",
                "DELETE",
                "-H",
                f"Authorization: Bearer {server.token}",
            ]
            subprocess.run([*curl_delete, server.url + f"api/sessions/{model['id']}"], check=True)
        samples["naive checkout: new session + pickle.load (cell)"] = naive_checkouts

    report(samples)


def report(samples: dict[str, list[float]]) -> None:
    floor = statistics.median(samples["HTTP floor (GET runtime)"])
    naive_checkpoint = statistics.median(samples["naive checkpoint: pickle.dump + fsync (cell)"])
    naive_checkout = statistics.median(samples["naive checkout: new session + pickle.load (cell)"])
    anchors = {
        "first checkpoint": ("naive checkpoint", naive_checkpoint, SEED_E2B["checkpoint"]),
        "first checkpoint, cold (first touch of the runtime)": (
            "naive checkpoint",
            naive_checkpoint,
            SEED_E2B["checkpoint"],
        ),
        "clean re-checkpoint": ("naive checkpoint", naive_checkpoint, SEED_E2B["checkpoint"]),
        "re-checkpoint after data[0] = v": (
            "naive checkpoint",
            naive_checkpoint,
            SEED_E2B["checkpoint"],
        ),
        "checkout": ("naive checkout", naive_checkout, SEED_E2B["checkout"]),
    }
    rows: list[list[object]] = []
    for name, values in samples.items():
        median = statistics.median(values)
        target = TARGETS.get(name)
        verdict = "" if target is None else ("pass" if median < target else "MISS")
        anchor = anchors.get(name)
        rows.append(
            [
                name,
                len(values),
                ms(median),
                ms(max(values)),
                f"< {ms(target)} {verdict}" if target is not None else "",
                f"{median / anchor[1]:.2f}x {anchor[0]}" if anchor else "",
                f"{median / anchor[2]:.3f}x" if anchor else "",
                f"{median / floor:.1f}x",
            ]
        )
    body = (
        f"{DATA_MIB} MiB numpy array (random float64) in one notebook kernel, real "
        "`jupyter server` process, `curl -w '%{time_total}'` per request (median and max of "
        "n runs). Ratios: against the naive approach measured in the same run on the same "
        "kernel (pickle.dump+fsync for a checkpoint; new session + pickle.load for a "
        "checkout), against the seed's E2B smoke figures (checkpoint 1.516 s, checkout "
        "2.335 s: a different machine and provider, for scale only), and against the HTTP "
        "floor (an authenticated GET of the runtime) of this run.\n\n"
        + markdown_table(
            [
                "operation",
                "n",
                "median",
                "max",
                "target",
                "vs naive (same run)",
                "vs seed E2B",
                "vs HTTP floor",
            ],
            rows,
        )
    )
    write_section("bench_http", "HTTP API latency (bench_http)", body)
    print(body)


def kernel_processes(server: LiveServer) -> int:
    """How many ipykernel processes the server has started (pooled ones included)."""
    assert server.process is not None
    children = psutil.Process(server.process.pid).children(recursive=True)
    return sum("ipykernel" in " ".join(child.cmdline()) for child in children)


def wait_for_pool(server: LiveServer, pool_size: int) -> None:
    """Until the pool holds `pool_size` started kernels beside the listed ones, plus a
    moment for their warm-up (channel open, capture module imported)."""
    while True:
        _, listed = curl(server, "GET", "api/kernels")
        if kernel_processes(server) >= len(listed) + pool_size:
            break
        time.sleep(0.2)
    time.sleep(1.5)


#: Timed operations that failed with a kernel dying at start-up (retried), per route.
START_FAILURES: dict[str, int] = {}


def timed_retrying(server: LiveServer, route: str, body: Any) -> tuple[float, Any]:
    """A timed request; one whose new kernel died at start-up is counted and retried."""
    for _ in range(3):
        try:
            return api(server, route, body)
        except RuntimeError as error:
            if "did not start" not in str(error):
                raise
            START_FAILURES[route] = START_FAILURES.get(route, 0) + 1
    return api(server, route, body)


def when_idle(server: LiveServer, route: str, body: Any) -> Any:
    """An untimed request, once the server has seen the last cell's `idle` (it may lag)."""
    for _ in range(50):
        try:
            return api(server, route, body)[1]
        except RuntimeError as error:
            if "SessionBusy" not in str(error):
                raise
            time.sleep(0.2)
    raise RuntimeError(f"{route} {body}: the runtime stayed busy")


@contextlib.contextmanager
def python_path_first(source: Path | None) -> Iterator[None]:
    """Put `source` first on PYTHONPATH (the servers started inside inherit it)."""
    if source is None:
        yield
        return
    previous = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(source), *([previous] if previous else [])])
    try:
        yield
    finally:
        if previous is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = previous


@contextlib.contextmanager
def exported_commit(commit: str) -> Iterator[Path]:
    """The package as of `commit`, in a temporary directory."""
    with tempfile.TemporaryDirectory(prefix="bench-http-today-") as tmp:
        archive = subprocess.run(
            ["git", "archive", commit, "ditto_jupyter"], cwd=REPO, capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        yield Path(tmp)


def pool_samples(
    pool_size: int | None, samples: dict[str, list[float]], source: Path | None = None
) -> None:
    """Checkout to a running child and resume, 100 MiB state; None: today's code."""
    config = {} if pool_size is None else {"DittoJupyterApp": {"kernel_pool_size": pool_size}}
    with (
        tempfile.TemporaryDirectory(prefix="bench-http-pool-") as tmp,
        python_path_first(source),
        LiveServer(Path(tmp), config=config) as server,
    ):
        session = server.open_notebook("bench.ipynb")
        runtime_id, kernel_id = session["id"], session["kernel"]["id"]
        server.execute(
            kernel_id,
            f"import numpy as np\ndata = np.random.default_rng(0).random({DATA_MIB * MIB // 8})\n",
        )
        first = when_idle(server, "checkpoint", {"runtime_id": runtime_id, "name": "first"})
        for _ in range(POOL_RUNS):
            wait_for_pool(server, pool_size or 0)
            body = {"checkpoint_id": first["checkpoint_id"]}
            seconds, child = timed_retrying(server, "checkout", body)
            samples["checkout"].append(seconds)
            out = server.execute(child["kernel_id"], "print(data.nbytes)")
            assert out.strip() == str(DATA_MIB * MIB), out
            when_idle(server, "close", {"runtime_id": child["runtime"]["runtime_id"]})
        for _ in range(POOL_RUNS):
            when_idle(server, "pause", {"runtime_id": runtime_id})
            wait_for_pool(server, pool_size or 0)
            seconds, resumed = timed_retrying(server, "resume", {"runtime_id": runtime_id})
            samples["resume"].append(seconds)
            out = server.execute(resumed["kernel_id"], "print(data.nbytes)")
            assert out.strip() == str(DATA_MIB * MIB), out


def pool_main() -> None:
    load_before = os.getloadavg()[0]
    runs: dict[str, dict[str, list[float]]] = {
        kind: {"checkout": [], "resume": []} for kind in ("today", "off", "on")
    }
    with exported_commit(TODAY_COMMIT) as today_source:
        for order in (("today", "off", "on"), ("on", "off", "today")):
            for kind in order:
                size = {"today": None, "off": 0, "on": 1}[kind]
                source = today_source if kind == "today" else None
                pool_samples(size, runs[kind], source)
    rows: list[list[object]] = []
    for name in ("checkout", "resume"):
        today, off, on = (statistics.median(runs[kind][name]) for kind in ("today", "off", "on"))
        rows.append(
            [
                name,
                len(runs["on"][name]),
                f"{ms(on)} (max {ms(max(runs['on'][name]))})",
                f"< {ms(POOL_TARGET_S)} {'pass' if on < POOL_TARGET_S else 'MISS'}",
                f"{ms(off)} (max {ms(max(runs['off'][name]))})",
                f"{ms(today)} (max {ms(max(runs['today'][name]))})",
                f"{off / today:.2f}x {'pass' if off <= today else 'MISS'}",
                f"{on / today:.2f}x",
            ]
        )
    body = (
        f"Warm kernel pool (issue 13 section 2). {DATA_MIB} MiB numpy array (random float64) in "
        "one notebook kernel, real `jupyter server` process, `curl -w '%{time_total}'` per "
        "request, median of n over two rounds. Three servers per round: today's code "
        f"(commit {TODAY_COMMIT}, before the pool), this code with the pool off "
        "(`kernel_pool_size=0`) and on (`kernel_pool_size=1`, the default); each operation "
        "waits for the pool to refill first, and the servers without one wait the same. "
        f"Load average (1 min) at start and end: {load_before:.1f}, {os.getloadavg()[0]:.1f} "
        f"on {os.cpu_count()} cores. Requests whose new kernel died at start-up (answer 502, "
        f"retried, not in the figures): {START_FAILURES or 'none'}.\n\n"
        + markdown_table(
            [
                "operation",
                "n",
                "pool on: median",
                "target (pool on)",
                "pool off: median",
                "today: median",
                "pool off / today (target <= 1)",
                "pool on / today",
            ],
            rows,
        )
    )
    write_section("bench_http_pool", "Checkout and resume with the warm kernel pool", body)
    print(body)


if __name__ == "__main__":
    if "--pool" in sys.argv[1:]:
        pool_main()
    else:
        main()
