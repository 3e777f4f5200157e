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

Before each timed operation, the previous checkpoint's upload (if any) has finished, so no
row pays for another's upload. Run from the repo root:
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
    not listed), plus a moment for its warm-up (channel open, capture code imported)."""
    deadline = time.monotonic() + GIVE_UP_S
    while time.monotonic() < deadline:
        listed = server.request("GET", "api/kernels").json()
        if kernel_processes(server) >= len(listed) + 1:
            time.sleep(1.5)
            return
        time.sleep(0.2)
    raise RuntimeError("the warm kernel pool did not refill in time")


def fresh_data(node: Node, kernel_id: str, seed: int) -> None:
    node.server.execute(kernel_id, NEW_DATA.format(seed=seed))


def local_disk_rows(root: Path, rounds: int, timings: dict[str, list[float]]) -> None:
    """The local-disk server: checkpoint, restore, pause, resume on the same server."""
    with LiveServer(root / "local", config=server_config(root, bucket=None, secret_file=None)) as s:
        node = Node("local", s)
        session = s.open_notebook("local.ipynb")
        rid, kernel = session["id"], session["kernel"]["id"]
        for cell in CELLS:
            s.execute(kernel, cell)
        for r in range(rounds):
            fresh_data(node, kernel, 100 + r)
            t, taken = node.post("checkpoint", {"runtime_id": rid})
            timings["local checkpoint"].append(t)
            t, _ = node.post(
                "restore", {"runtime_id": rid, "checkpoint_id": taken["checkpoint_id"]}
            )
            timings["local restore"].append(t)
            fresh_data(node, kernel, 200 + r)
            t, _ = node.post("pause", {"runtime_id": rid})
            timings["local pause"].append(t)
            wait_for_pool(s)
            t, resumed = node.post("resume", {"runtime_id": rid})
            timings["local resume"].append(t)
            kernel = resumed["kernel_id"]
            assert s.execute(kernel, PROBE).startswith(str(DATA_MIB * MIB))


def object_store_rows(
    root: Path,
    gateway: CephGateway,
    bucket: S3Bucket,
    secret_file: Path,
    rounds: int,
    timings: dict[str, list[float]],
    fetched: dict[str, list[int]],
) -> None:
    """Servers A and B on one bucket: every operation, and resume on the other server."""
    config = server_config(root, bucket=bucket, secret_file=secret_file)
    with (
        LiveServer(root / "node-a", config=config) as a_server,
        LiveServer(root / "node-b", config=config) as b_server,
    ):
        here, there = Node("A", a_server), Node("B", b_server)
        session = a_server.open_notebook("scale.ipynb")
        rid, kernel = session["id"], session["kernel"]["id"]
        for cell in CELLS:
            a_server.execute(kernel, cell)
        for r in range(rounds):
            fresh_data(here, kernel, 300 + r)
            here.wait_replicated(rid)
            t, taken = here.post("checkpoint", {"runtime_id": rid})
            timings["s3 checkpoint"].append(t)
            here.wait_replicated(rid)
            t, _ = here.post(
                "restore", {"runtime_id": rid, "checkpoint_id": taken["checkpoint_id"]}
            )
            timings["s3 restore"].append(t)
            fresh_data(here, kernel, 400 + r)
            t, _ = here.post("pause", {"runtime_id": rid})
            timings["s3 pause"].append(t)
            wait_for_pool(here.server)
            before = gateway.counters()
            t, resumed = here.post("resume", {"runtime_id": rid})
            fetched["same"].append(fetched_bytes(before, gateway.counters()))
            timings["s3 resume, same server"].append(t)
            kernel = resumed["kernel_id"]
            assert here.server.execute(kernel, PROBE).startswith(str(DATA_MIB * MIB))
            fresh_data(here, kernel, 500 + r)  # new chunks: the other server has none
            here.post("pause", {"runtime_id": rid})
            wait_for_pool(there.server)
            before = gateway.counters()
            t, resumed = there.post("resume", {"runtime_id": rid})
            fetched["other"].append(fetched_bytes(before, gateway.counters()))
            timings["s3 resume, other server"].append(t)
            kernel = resumed["kernel_id"]
            assert there.server.execute(kernel, PROBE).startswith(str(DATA_MIB * MIB))
            here, there = there, here


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
            "s3 resume, same server",
            "s3 resume, other server",
            "anchor",
        )
    }
    fetched: dict[str, list[int]] = {"same": [], "other": []}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-scale-out-") as tmp, running_gateway() as gw:
        root = Path(tmp)
        bucket = gw.bucket()
        os.environ.update(bucket.credentials_env())  # the servers' AWS chain: environment
        secret_file = root / "signing-secret"
        secret_file.write_text(secrets.token_hex(32))
        secret_file.chmod(0o600)
        anchor_rows(root, rounds, timings)
        local_disk_rows(root, rounds, timings)
        object_store_rows(root, gw, bucket, secret_file, rounds, timings, fetched)
        replicated_rows(root, bucket, secret_file, rounds, timings)
    write_results(rounds, timings, fetched, time.monotonic() - started)


def write_results(
    rounds: int, timings: dict[str, list[float]], fetched: dict[str, list[int]], took: float
) -> None:
    med: Callable[[str], float] = lambda key: statistics.median(timings[key])  # noqa: E731
    local_cp, s3_cp = med("local checkpoint"), med("s3 checkpoint")
    same, other = med("s3 resume, same server"), med("s3 resume, other server")
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
        "loopback with a memstore OSD; the servers reach it with boto3.\n\n"
        f"{table}\n\n{targets}\n\n"
        f"A resume on the other server fetched {other_bytes / MIB:.1f} MiB (median) from the "
        "gateway; one on the server that paused it, none. Checkpoints are recorded `local` "
        "and uploaded behind them; a pause uploads before it answers, which is what its "
        "ratio pays for."
    )
    write_section("bench_scale_out", "Scale-out: 100 MiB through the S3 gateway", body)
    print(body)


def _s(value: float) -> str:
    return f"{value:.3f}"


def _yes(met: bool) -> str:
    return "yes" if met else "**no**"


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
