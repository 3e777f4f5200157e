"""A real JupyterHub (issue 24 section 4): two users, each user's server on a node of its
own, the nodes sharing only the PostgreSQL store, the bucket of a real S3 server (Ceph's
gateway) and the signing secret.

Alice fills a notebook (a variable, a file in her workspace), checkpoints it from its
kernel (`%checkpoint`, the kernel calling its server with the hub's token) and pauses it.
Her server is stopped and started again on another node (a new, empty data directory):
resume brings her variables and files back. Bob, on his own server, sees none of it,
before and after, and cannot resume, read or check out any of it.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.ceph_gateway import S3Bucket
from tests.support.jupyterhub import PROXY, RunningHub

pytest_plugins = ["tests.support.ceph_fixtures", "tests.support.postgres_fixtures"]
# jupyterhub, its proxy, two or three single-user servers and their kernels
pytestmark = [pytest.mark.s3, pytest.mark.postgres, pytest.mark.slow]

FILL = """
import ditto_jupyter
table = list(range(100_000))
note = "alice's note"
(ditto_jupyter.workspace() / "results.csv").write_text("a,b\\n1,2\\n")
"""


@pytest.fixture
def hub(tmp_path: Path, postgres_url: str, s3_bucket: S3Bucket) -> Iterator[RunningHub]:
    pytest.importorskip("jupyterhub", reason="jupyterhub is not installed: make pytest")
    if not PROXY.exists():
        pytest.skip(f"the hub's proxy is not installed at {PROXY}: make pytest")
    secret = tmp_path / "signing-secret"
    secret.write_text(secrets.token_hex(32) + "\n")
    secret.chmod(0o600)
    shared = {
        "DittoJupyterApp": {
            "store_url": postgres_url,
            "blob_store_url": f"{s3_bucket.url}/hub",
            "blob_store_endpoint": s3_bucket.endpoint,
            "blob_secret_file": str(secret),
            "kernel_pool_size": 0,
        }
    }
    with RunningHub(
        tmp_path / "hub",
        ["alice", "bob"],
        server_config=shared,
        environment=s3_bucket.credentials_env(),
    ) as running:
        yield running


def test_a_paused_notebook_follows_its_user_to_another_node_and_nobody_else_sees_it(
    hub: RunningHub,
) -> None:
    hub.start_server("alice")
    hub.start_server("bob")
    notebook = hub.open_notebook("alice", "analysis.ipynb")
    rid, kernel = notebook["id"], notebook["kernel"]["id"]
    hub.execute(kernel, FILL)
    # The kernel's own magic reaches its server with the hub's token for it, as alice.
    out = hub.execute(kernel, "%checkpoint filled")
    assert "filled" in out, out
    status, listing = hub.api("alice", "GET", f"{rid}/checkpoints")
    assert [c["name"] for c in listing["checkpoints"]] == ["filled"], listing
    status, paused = hub.api("alice", "POST", "pause", {"runtime_id": rid})
    assert status == 200, paused
    assert paused["runtime"]["status"] == "paused"

    def bob_sees_nothing() -> None:
        status, listing = hub.api("bob", "GET")
        assert status == 200, listing
        assert rid not in {r["runtime_id"] for r in listing["runtimes"]}
        for method, route, body in (
            ("GET", rid, None),
            ("GET", f"{rid}/checkpoints", None),
            ("GET", f"checkpoints/{paused['checkpoint_id']}", None),
            ("POST", "resume", {"runtime_id": rid}),
            ("POST", "checkout", {"checkpoint_id": paused["checkpoint_id"]}),
        ):
            status, answer = hub.api("bob", method, route, body)
            assert status == 404, (route, answer)
        # Bob's token does not open Alice's server either (the hub refuses it).
        assert hub.request("alice", "GET", "api/v1/runtimes", as_user="bob").status_code == 403

    bob_sees_nothing()

    # Alice's server stops; her next one starts on another node, with an empty disk.
    hub.stop_server("alice")
    second_node = hub.base / "nodes" / "alice-2"
    hub.place({"alice": str(second_node)})
    hub.start_server("alice")
    status, listing = hub.api("alice", "GET")
    assert status == 200, listing
    assert {r["runtime_id"]: r["status"] for r in listing["runtimes"]} == {rid: "paused"}

    status, resumed = hub.api("alice", "POST", "resume", {"runtime_id": rid})
    assert status == 200, resumed
    assert resumed["checkpoint_id"] == paused["checkpoint_id"]
    out = hub.execute(
        resumed["kernel_id"],
        "import ditto_jupyter\nprint(len(table), note, "
        "repr((ditto_jupyter.workspace() / 'results.csv').read_text()))",
    )
    assert out.strip() == "100000 alice's note 'a,b\\n1,2\\n'"
    status, where = hub.api("alice", "GET", f"{rid}/workspace")
    assert status == 200, where
    assert Path(where["path"]).is_relative_to(second_node)  # on the new node's disk

    bob_sees_nothing()
