"""Two real Jupyter servers on two data directories, one checkpoint store and one bucket of
a real S3 server (Ceph's gateway): a notebook paused on the first resumes on the second
with its variables and files; a pause the object store refuses answers 503 naming it and
leaves the kernel running; and the server's log of it never holds a secret key.

The servers get the object store from their traits (`blob_store_url`, `blob_store_endpoint`,
`blob_secret_file`) and the credentials from the standard AWS chain (their environment).
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest

from tests.server.live_server import LiveServer
from tests.support.ceph_gateway import CephGateway, S3Bucket

pytest_plugins = ["tests.support.ceph_fixtures"]
pytestmark = [pytest.mark.s3, pytest.mark.slow]  # real kernels, two jupyter servers


def object_store_config(tmp_path: Path, bucket: S3Bucket) -> dict[str, Any]:
    secret_file = tmp_path / "signing-secret"
    if not secret_file.exists():
        secret_file.write_text(secrets.token_hex(32) + "\n")
        secret_file.chmod(0o600)
    return {
        "DittoJupyterApp": {
            "store_url": f"sqlite:///{tmp_path / 'shared.db'}",
            "blob_store_url": f"{bucket.url}/hub",
            "blob_store_endpoint": bucket.endpoint,
            "blob_secret_file": str(secret_file),
            "kernel_pool_size": 0,
        }
    }


@pytest.fixture
def credentials(s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in s3_bucket.credentials_env().items():
        monkeypatch.setenv(name, value)


@pytest.mark.usefixtures("credentials")
def test_a_notebook_paused_on_one_server_resumes_on_another(
    tmp_path: Path, s3_bucket: S3Bucket
) -> None:
    config = object_store_config(tmp_path, s3_bucket)
    with LiveServer(tmp_path / "node-a", config=config) as a:
        notebook = a.open_notebook("analysis.ipynb")
        rid, kernel = notebook["id"], notebook["kernel"]["id"]
        a.execute(
            kernel,
            "import numpy as np, ditto_jupyter\n"
            "table = np.arange(3_000_000, dtype=np.float64)\nnote = 'from node a'\n"
            "(ditto_jupyter.workspace() / 'out.txt').write_text('written on node a')",
        )
        out = a.execute(kernel, "%checkpoint first")
        assert "checkpoint" in out
        paused_status, paused = a.api("POST", "pause", {"runtime_id": rid})
        assert paused_status == 200, paused
        status, listing = a.api("GET", f"{rid}/checkpoints")
        assert status == 200, listing
        states = {c["name"]: c["replication"] for c in listing["checkpoints"]}
        assert states["pause"] == "replicated"  # in the bucket before the pause answered
        assert states["first"] in ("local", "replicated")

    with LiveServer(tmp_path / "node-b", config=config) as b:  # another disk, same bucket
        status, resumed = b.api("POST", "resume", {"runtime_id": rid})
        assert status == 200, resumed
        assert resumed["checkpoint_id"] == paused["checkpoint_id"]
        out = b.execute(
            resumed["kernel_id"],
            "import ditto_jupyter\nprint(note, float(table.sum()), "
            "(ditto_jupyter.workspace() / 'out.txt').read_text())",
        )
        assert out.strip().split(maxsplit=4) == [
            "from",
            "node",
            "a",
            "4499998500000.0",
            "written on node a",
        ]


@pytest.mark.usefixtures("credentials")
def test_a_pause_the_object_store_refuses_answers_503_and_the_kernel_runs_on(
    tmp_path: Path, ceph_gateway: CephGateway, s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = "X" + secrets.token_hex(19)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", wrong)
    config = object_store_config(tmp_path, s3_bucket)
    config["ServerApp"] = {"log_level": "DEBUG"}
    server = LiveServer(tmp_path / "node", config=config)
    with server:
        notebook = server.open_notebook("refused.ipynb")
        rid, kernel = notebook["id"], notebook["kernel"]["id"]
        server.execute(kernel, "kept = 'still here'")
        status, answer = server.api("POST", "pause", {"runtime_id": rid})
        assert status == 503, answer
        assert answer["error"] == "StoreUnavailable"
        assert "refused the credentials" in answer["message"]
        assert s3_bucket.name in answer["message"]
        status, runtime = server.api("GET", rid)
        assert status == 200 and runtime["status"] == "idle", runtime
        assert server.execute(kernel, "print(kept)").strip() == "still here"
        with ceph_gateway.stopped():
            status, answer = server.api("POST", "pause", {"runtime_id": rid})
        assert status == 503, answer
        assert "cannot be reached" in answer["message"]
        assert server.execute(kernel, "print(kept)").strip() == "still here"
    log = server.log_path.read_text()
    assert "refused the credentials" in log or "not usable" in log
    assert wrong not in log and s3_bucket.secret_key not in log
