"""Many servers, one store (issue 24 section 2): two real Jupyter servers, each on a data
directory of its own (two nodes), sharing one PostgreSQL store, one bucket of a real S3
server (Ceph's gateway) and the signing secret, both running at once.

- A runtime live on A is not operated on from B: B's resume and checkpoint answer 409
  `SessionBusy` naming A's URL, while A's checkpoint of it at the same moment proceeds.
- B reads what a checkpoint taken on A holds, and checks it out: the child runs on B with
  A's variables and files (both fetched from the bucket first).
- A paused runtime resumed on both servers at once: exactly one proceeds, the other answers
  `SessionBusy`; the new kernel has the variables and files back.
- The server that resumed it is killed: the other takes the runtime over once its holder
  is gone, and resumes it from the bucket.
"""

from __future__ import annotations

import concurrent.futures
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.server.live_server import LiveServer
from tests.support.ceph_gateway import S3Bucket

pytest_plugins = ["tests.support.ceph_fixtures", "tests.support.postgres_fixtures"]
pytestmark = [pytest.mark.s3, pytest.mark.postgres, pytest.mark.slow]

#: How long a server is given to take a runtime over once its holder is gone (hang guard).
GIVE_UP_S = 120.0

FILL = """
import ditto_jupyter
x = 41
(ditto_jupyter.workspace() / "notes.txt").write_text("written on A")
"""
READ_BACK = "import ditto_jupyter\nprint(x, (ditto_jupyter.workspace() / 'notes.txt').read_text())"


@pytest.fixture
def nodes(
    tmp_path: Path, postgres_url: str, s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[LiveServer, LiveServer]]:
    for name, value in s3_bucket.credentials_env().items():
        monkeypatch.setenv(name, value)
    secret = tmp_path / "signing-secret"
    secret.write_text(secrets.token_hex(32) + "\n")
    secret.chmod(0o600)
    config = {
        "DittoJupyterApp": {
            "store_url": postgres_url,
            "blob_store_url": f"{s3_bucket.url}/nodes",
            "blob_store_endpoint": s3_bucket.endpoint,
            "blob_secret_file": str(secret),
            "checkpoint_durability": "replicated",
            "kernel_pool_size": 0,
        }
    }
    a = LiveServer(tmp_path / "node-a", config=config)
    b = LiveServer(tmp_path / "node-b", config=config)
    with a, b:
        yield a, b


def at_once(calls: list[tuple[LiveServer, str, dict[str, Any]]]) -> list[tuple[int, Any]]:
    """The answers of several POSTs sent together, in the order given."""
    with concurrent.futures.ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(server.api, "POST", route, body) for server, route, body in calls]
        return [future.result() for future in futures]


def status_on(server: LiveServer, runtime_id: str) -> str:
    status, record = server.api("GET", runtime_id)
    assert status == 200, record
    return str(record["status"])


def test_two_nodes_on_one_store_and_bucket(nodes: tuple[LiveServer, LiveServer]) -> None:
    a, b = nodes
    notebook = a.open_notebook("shared.ipynb")
    rid, kernel = notebook["id"], notebook["kernel"]["id"]
    a.execute(kernel, FILL)

    # Live on A: B is refused, naming A, while A's own checkpoint goes ahead.
    (on_a, on_b) = at_once(
        [(a, "checkpoint", {"runtime_id": rid}), (b, "checkpoint", {"runtime_id": rid})]
    )
    assert on_a[0] == 200, on_a
    assert (on_b[0], on_b[1]["error"]) == (409, "SessionBusy"), on_b
    assert a.url in on_b[1]["message"]
    status, refused = b.api("POST", "resume", {"runtime_id": rid})
    assert (status, refused["error"]) == (409, "SessionBusy"), refused
    assert a.url in refused["message"]
    taken = on_a[1]["checkpoint_id"]
    assert status_on(a, rid) == "idle"

    # B reads what A's checkpoint holds, fetched from the bucket...
    status, contents = b.api("GET", f"{rid}/checkpoints/{taken}/contents")
    assert status == 200, contents
    assert "x" in {v["name"] for v in contents["variables"]}
    # ...and checks it out: a new runtime on B's node with A's state.
    status, child = b.api("POST", "checkout", {"checkpoint_id": taken})
    assert status == 200, child
    assert b.execute(child["kernel_id"], READ_BACK).strip() == "41 written on A"
    status, where = b.api("GET", f"{child['runtime']['runtime_id']}/workspace")
    assert status == 200 and Path(where["path"]).is_relative_to(b.data_dir), where

    # Paused on A, resumed on both at once: exactly one proceeds.
    status, paused = a.api("POST", "pause", {"runtime_id": rid})
    assert status == 200, paused
    answers = at_once([(a, "resume", {"runtime_id": rid}), (b, "resume", {"runtime_id": rid})])
    assert sorted(code for code, _ in answers) == [200, 409], answers
    winner, loser = (a, b) if answers[0][0] == 200 else (b, a)
    resumed = answers[0][1] if winner is a else answers[1][1]
    busy = answers[1][1] if winner is a else answers[0][1]
    assert busy["error"] == "SessionBusy" and winner.url in busy["message"], busy
    assert winner.execute(resumed["kernel_id"], READ_BACK).strip() == "41 written on A"

    # The winner dies: the other takes the runtime over, then resumes it from the bucket.
    winner.kill()
    deadline = time.monotonic() + GIVE_UP_S
    while status_on(loser, rid) != "paused" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert status_on(loser, rid) == "paused"
    status, back = loser.api("POST", "resume", {"runtime_id": rid})
    assert status == 200, back
    assert loser.execute(back["kernel_id"], READ_BACK).strip() == "41 written on A"
