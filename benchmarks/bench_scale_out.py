"""Scale-out (issue 24 section 5): 100 MiB of state through an S3 gateway, beside local disk.

One run, all on this machine: a real Ceph RADOS Gateway on loopback (tests/support:
ceph-mon, a memstore ceph-osd, radosgw), real `jupyter server` processes with the
ditto_jupyter extension and the warm kernel pool, one notebook kernel holding 100 MiB of
random float64 (nothing compresses or dedups), built by three cells.

- **local disk**: one server, blobs on its data directory only;
- **object store**: two servers A and B, each on its own data directory (as two nodes
  would be), sharing one checkpoint store (a SQLite file) and one bucket. Checkpoints are
  `local` then uploaded behind them; a pause returns once the bucket has everything. Each
  round: new data, checkpoint, restore, new data, pause, resume on the same server (its
  cache holds every chunk: the gateway's GET counters must not move), pause, then resume on
  the other server (its cache holds none of the new chunks: they come from the gateway);
  the next round runs on that server;
- **object store, `checkpoint_durability = replicated`**: the checkpoint that waits for the
  bucket, for comparison;
- **anchor** (ElasticNotebook's baseline): `POST /api/kernels/{id}/restart` plus re-running
  the three cells, as one execute request, on a kernel of no runtime.

The local-disk server runs beside A and B, and each round takes every local-disk row and
its object-store twin one right after the other (the local one first in even rounds, second
in odd ones), so that both see the same machine: this one has two cores, shared with
whatever else runs, and a row taken a minute after its twin measures the load as much as
the code. Before each timed operation every server is settled: the previous checkpoint's
upload (if any) has finished, the warm pool holds its kernel, and no server process nor
kernel has used the CPU for a moment, so no row pays for another's upload or for a pooled
kernel starting up. The servers and their kernels run this checkout's code (it is put
first on their PYTHONPATH). Run from the repo root:
`.venv/bin/python -m benchmarks.bench_scale_out [rounds]` (default 3; a few minutes).
Writes the `bench_scale_out` section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import os
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.results_table import markdown_table, write_section  # noqa: E402
from tests.server.live_server import LiveServer  # noqa: E402
from tests.support.ceph_gateway import (  # noqa: E402
    CephGateway,
    S3Bucket,
    fetched_bytes,
    running_gateway,
)

MIB = 1 << 20
DATA_MIB = 100
CELLS = [
    "import numpy as np",
    "rng = np.random.default_rng(0)",
    f"data = rng.random({DATA_MIB} * 2**20 // 8)",
]
#: New content for the same variable (a new seed each time): 100 MiB of new chunks.
NEW_DATA = "data = np.random.default_rng({seed}).random(" + f"{DATA_MIB} * 2**20 // 8)"
PROBE = "print(data.nbytes, round(float(data[:1000].sum()), 6))"
GIVE_UP_S = 300.0
#: A server is settled when it and its kernels used less CPU than this over `QUIET_S`.
QUIET_CPU_S = 0.02
QUIET_S = 0.25


class Node:
    """One Jupyter server of the benchmark, and the runtime it serves now."""

    def __init__(self, name: str, server: LiveServer) -> None:
        self.name = name
        self.server = server

    def post(self, route: str, body: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        started = time.perf_counter()
        code, answer = self.server.api("POST", route, body)
        elapsed = time.perf_counter() - started
        if code != 200:
            raise RuntimeError(f"{self.name}: POST {route} answered {code}: {answer}")
        return elapsed, answer

    def wait_replicated(self, runtime_id: str) -> None:
        """Until every checkpoint of the runtime is in the bucket (its upload is done)."""
        deadline = time.monotonic() + GIVE_UP_S
        while time.monotonic() < deadline:
            code, listing = self.server.api("GET", f"{runtime_id}/checkpoints")
            states = {c.get("replication") for c in listing.get("checkpoints", [])}
            if code == 200 and states <= {"replicated", None}:
                return
            time.sleep(0.05)
        raise RuntimeError(f"{self.name}: checkpoints of {runtime_id} not replicated in time")


def server_config(
    root: Path, *, bucket: S3Bucket | None, secret_file: Path | None, durability: str = "local"
) -> dict[str, Any]:
    app: dict[str, Any] = {"kernel_pool_size": 1}
    if bucket is not None:
        assert secret_file is not None
        app.update(
            {
                "store_url": f"sqlite:///{root / 'shared.db'}",
                "blob_store_url": f"{bucket.url}/bench",
                "blob_store_endpoint": bucket.endpoint,
                "blob_secret_file": str(secret_file),
                "checkpoint_durability": durability,
            }
        )
    return {"DittoJupyterApp": app}


def kernel_processes(server: LiveServer) -> int:
    """How many ipykernel processes the server has started (pooled ones included)."""
    assert server.process is not None
    children = psutil.Process(server.process.pid).children(recursive=True)
    return sum("ipykernel" in " ".join(child.cmdline()) for child in children)


def wait_for_pool(server: LiveServer) -> None:
    """Until the warm pool holds its kernel beside the listed ones (pooled kernels are
    not listed), plus a moment for its warm-up when it had to wait (channel open, capture
    code imported)."""
    deadline = time.monotonic() + GIVE_UP_S
    waited = False
    while time.monotonic() < deadline:
        listed = server.request("GET", "api/kernels").json()
        if kernel_processes(server) >= len(listed) + 1:
            if waited:
                time.sleep(1.5)
            return
        waited = True
        time.sleep(0.2)
    raise RuntimeError("the warm kernel pool did not refill in time")


def fresh_data(node: Node, kernel_id: str, seed: int) -> None:
    node.server.execute(kernel_id, NEW_DATA.format(seed=seed))


def settle(*nodes: Node) -> None:
    """Until every server has its pooled kernel and it and its kernels are idle."""
    for node in nodes:
        wait_for_pool(node.server)
    for node in nodes:
        assert node.server.process is not None
        server = psutil.Process(node.server.process.pid)
        deadline = time.monotonic() + GIVE_UP_S
        while busy_for(server, QUIET_S) >= QUIET_CPU_S:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{node.name}: the server did not settle")


def busy_for(process: psutil.Process, seconds: float) -> float:
    """CPU seconds a process and its children used over the next `seconds`."""

    def used() -> float:
        total = 0.0
        for one in [process, *process.children(recursive=True)]:
            try:
                times = one.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += times.user + times.system
        return total

    before = used()
    time.sleep(seconds)
    return used() - before


class Runtime:
    """One notebook runtime served by a node, and its kernel now."""

    def __init__(self, node: Node, notebook: str) -> None:
        session = node.server.open_notebook(notebook)
        self.node, self.rid, self.kernel = node, session["id"], session["kernel"]["id"]
        for cell in CELLS:
            node.server.execute(self.kernel, cell)

    def fresh_data(self, seed: int) -> None:
        fresh_data(self.node, self.kernel, seed)

    def post(self, route: str, body: dict[str, Any] | None = None) -> tuple[float, dict[str, Any]]:
        return self.node.post(route, {"runtime_id": self.rid, **(body or {})})

    def resume_on(self, node: Node) -> float:
        """Resume on `node` (the same or another server); the seconds it took."""
        self.node = node
        elapsed, resumed = self.post("resume")
        self.kernel = resumed["kernel_id"]
        assert node.server.execute(self.kernel, PROBE).startswith(str(DATA_MIB * MIB))
        return elapsed


def paired_rows(
    root: Path,
    gateway: CephGateway,
    bucket: S3Bucket,
    secret_file: Path,
    rounds: int,
    timings: dict[str, list[float]],
    fetched: dict[str, list[int]],
) -> None:
    """The local-disk server beside servers A and B on one bucket: each operation on both,
    one right after the other, and resume on the other server."""
    config = server_config(root, bucket=bucket, secret_file=secret_file)
    with (
        LiveServer(root / "local", config=server_config(root, bucket=None, secret_file=None)) as d,
        LiveServer(root / "node-a", config=config) as a_server,
        LiveServer(root / "node-b", config=config) as b_server,
    ):
        nodes = Node("local", d), Node("A", a_server), Node("B", b_server)
        local, s3 = Runtime(nodes[0], "local.ipynb"), Runtime(nodes[1], "scale.ipynb")
        taken: dict[str, str] = {}  # the checkpoint each server took this round

        def both(row: str, run: Callable[[Runtime, str], float], r: int) -> None:
            order = [(local, "local"), (s3, "s3")]
            for runtime, where in order if r % 2 == 0 else order[::-1]:
                s3.node.wait_replicated(s3.rid)
                settle(*nodes)
                timings[f"{where} {row}"].append(run(runtime, where))

        def checkpoint(runtime: Runtime, where: str) -> float:
            elapsed, answer = runtime.post("checkpoint")
            taken[where] = answer["checkpoint_id"]
            return elapsed

        def restore(runtime: Runtime, where: str) -> float:
            return runtime.post("restore", {"checkpoint_id": taken[where]})[0]

        def resume_same(runtime: Runtime, where: str) -> float:
            before = gateway.counters()
            elapsed = runtime.resume_on(runtime.node)
            if where == "s3":
                fetched["same"].append(fetched_bytes(before, gateway.counters()))
            return elapsed

        for r in range(rounds):
            local.fresh_data(100 + r)
            s3.fresh_data(300 + r)
            both("checkpoint", checkpoint, r)
            both("restore", restore, r)
            local.fresh_data(200 + r)
            s3.fresh_data(400 + r)
            both("pause", lambda runtime, _: runtime.post("pause")[0], r)
            both("resume", resume_same, r)
            s3.fresh_data(500 + r)  # new chunks: the other server has none
            s3.post("pause")
            other = nodes[2] if s3.node is nodes[1] else nodes[1]
            s3.node.wait_replicated(s3.rid)
            settle(*nodes)
            before = gateway.counters()
            timings["s3 resume, other server"].append(s3.resume_on(other))
            fetched["other"].append(fetched_bytes(before, gateway.counters()))


def replicated_rows(
    root: Path, bucket: S3Bucket, secret_file: Path, rounds: int, timings: dict[str, list[float]]
) -> None:
    """A server whose checkpoints wait for the bucket."""
    config = server_config(root, bucket=bucket, secret_file=secret_file, durability="replicated")
    config["DittoJupyterApp"]["store_url"] = f"sqlite:///{root / 'replicated.db'}"
    with LiveServer(root / "node-r", config=config) as s:
        node = Node("R", s)
        session = s.open_notebook("replicated.ipynb")
        rid, kernel = session["id"], session["kernel"]["id"]
        for cell in CELLS:
            s.execute(kernel, cell)
        for r in range(rounds):
            fresh_data(node, kernel, 600 + r)
            settle(node)
            t, _ = node.post("checkpoint", {"runtime_id": rid})
            timings["s3 checkpoint, replicated durability"].append(t)


def anchor_rows(root: Path, rounds: int, timings: dict[str, list[float]]) -> None:
    """Kernel restart plus re-running the cells that built the state."""
    with LiveServer(root / "anchor") as s:
        response = s.request("POST", "api/kernels", {"name": "python3"})
        response.raise_for_status()
        kernel = response.json()["id"]
        s.execute(kernel, "\n".join(CELLS))
        expected = s.execute(kernel, PROBE)
        for _ in range(rounds):
            started = time.perf_counter()
            s.request("POST", f"api/kernels/{kernel}/restart").raise_for_status()
            s.execute(kernel, "\n".join(CELLS))
            timings["anchor"].append(time.perf_counter() - started)
            assert s.execute(kernel, PROBE) == expected


def main(rounds: int) -> None:
    timings: dict[str, list[float]] = {
        key: []
        for key in (
            "local checkpoint",
            "local restore",
            "local pause",
            "local resume",
            "s3 checkpoint",
            "s3 checkpoint, replicated durability",
            "s3 restore",
            "s3 pause",
            "s3 resume",
            "s3 resume, other server",
            "anchor",
        )
    }
    fetched: dict[str, list[int]] = {"same": [], "other": []}
    started = time.monotonic()
    # the servers and their kernels run this checkout (a kernel's working directory is
    # its notebook's folder: without this it imports whichever copy is installed)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    )
    with tempfile.TemporaryDirectory(prefix="bench-scale-out-") as tmp, running_gateway() as gw:
        root = Path(tmp)
        bucket = gw.bucket()
        os.environ.update(bucket.credentials_env())  # the servers' AWS chain: environment
        secret_file = root / "signing-secret"
        secret_file.write_text(secrets.token_hex(32))
        secret_file.chmod(0o600)
        anchor_rows(root, rounds, timings)
        paired_rows(root, gw, bucket, secret_file, rounds, timings, fetched)
        replicated_rows(root, bucket, secret_file, rounds, timings)
    write_results(rounds, timings, fetched, time.monotonic() - started)


def write_results(
    rounds: int, timings: dict[str, list[float]], fetched: dict[str, list[int]], took: float
) -> None:
    med: Callable[[str], float] = lambda key: statistics.median(timings[key])  # noqa: E731
    local_cp, s3_cp = med("local checkpoint"), med("s3 checkpoint")
    same, other = med("s3 resume"), med("s3 resume, other server")
    rows = [
        ["checkpoint", _s(local_cp), _s(s3_cp), f"{s3_cp / local_cp:.2f}"],
        [
            "checkpoint, `checkpoint_durability = replicated`",
            "",
            _s(med("s3 checkpoint, replicated durability")),
            f"{med('s3 checkpoint, replicated durability') / local_cp:.2f}",
        ],
        [
            "restore (in place)",
            _s(med("local restore")),
            _s(med("s3 restore")),
            f"{med('s3 restore') / med('local restore'):.2f}",
        ],
        [
            "pause (returns once the bucket has it all)",
            _s(med("local pause")),
            _s(med("s3 pause")),
            f"{med('s3 pause') / med('local pause'):.2f}",
        ],
        [
            "resume on the same server (warm pool)",
            _s(med("local resume")),
            _s(same),
            f"{same / med('local resume'):.2f}",
        ],
        [
            "resume on another server (warm pool)",
            "(impossible)",
            _s(other),
            f"{other / same:.2f} of same-server resume",
        ],
        ["anchor: kernel restart + re-run the 3 cells", _s(med("anchor")), _s(med("anchor")), ""],
    ]
    table = markdown_table(
        [
            f"{DATA_MIB} MiB of state (median of {rounds})",
            "local disk, s",
            "S3 gateway, s",
            "ratio",
        ],
        rows,
    )
    same_bytes = max(fetched["same"])
    other_bytes = statistics.median(fetched["other"])
    targets = markdown_table(
        ["target", "measured", "met"],
        [
            ["resume on another server under 1 s", _s(other), _yes(other < 1.0)],
            [
                "... within 2x of resume on the same server",
                f"{other / same:.2f}x",
                _yes(other <= 2 * same),
            ],
            [
                "checkpoint within 1.5x of local disk",
                f"{s3_cp / local_cp:.2f}x",
                _yes(s3_cp <= 1.5 * local_cp),
            ],
            [
                "bytes fetched from the gateway when the cache holds everything",
                f"{same_bytes} (max of {rounds})",
                _yes(same_bytes == 0),
            ],
        ],
    )
    load = ", ".join(f"{value:.1f}" for value in psutil.getloadavg())
    body = (
        f"Load average at the end: {load} (1, 5, 15 min) on {psutil.cpu_count()} cores; the "
        f"run took {took:.0f} s. State: {DATA_MIB} MiB of random float64 built by "
        f"`{'`; `'.join(CELLS)}`; each timed checkpoint and pause follows new data (a new "
        "seed), so it writes 100 MiB of new chunks. The gateway is Ceph 16 radosgw on "
        "loopback with a memstore OSD; the servers reach it with boto3. Each local-disk "
        "row and its S3 twin are taken one right after the other in every round (their "
        "order alternating), each with every server settled first: uploads done, the pool "
        "full, no process busy.\n\n"
        f"{table}\n\n{targets}\n\n"
        f"A resume on the other server fetched {other_bytes / MIB:.1f} MiB (median) from the "
        "gateway; one on the server that paused it, none. Checkpoints are recorded `local` "
        "and uploaded behind them; a pause uploads before it answers, which is what its "
        "ratio pays for."
    )
    write_section("bench_scale_out", "Scale-out: 100 MiB through the S3 gateway", body)
    print(body)
    for key, values in timings.items():  # every round, for the spread behind the medians
        print(f"{key}: {', '.join(_s(value) for value in values)}")


def _s(value: float) -> str:
    return f"{value:.3f}"


def _yes(met: bool) -> str:
    return "yes" if met else "**no**"


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
