"""Real Jupyter servers on a bucket of a real S3 server (Ceph's gateway) when the bucket is
not what it should be (issue 40, items 3 and 4).

- Another deployment (its own store and signing secret, a copied configuration) started
  on the same prefix refuses it at start with one line, deletes nothing, and the first
  deployment's paused runtime still resumes.
- A gateway that accepts connections and never answers (radosgw stopped with SIGSTOP) gets
  a pause and a resume a 503 naming it within seconds, not minutes; the kernel runs on, the
  runtime stays paused.
- A resume that reads a manifest the deployment refuses answers 502 naming it, not 500.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

from tests.server.live_server import LiveServer
from tests.support.ceph_gateway import CephGateway, S3Bucket

pytest_plugins = ["tests.support.ceph_fixtures"]
pytestmark = [pytest.mark.s3, pytest.mark.slow]  # real kernels, several jupyter servers

#: The prefix every deployment of these tests is configured with.
PREFIX = "team"
#: Seconds a pause or resume against a hung gateway may take here: the bound is about 10 s
#: (two attempts of a 3 s read timeout); before, it took minutes (60 s reads, retried).
HUNG_ANSWER_S = 60


def deployment_config(root: Path, bucket: S3Bucket) -> dict[str, Any]:
    """One deployment: its own SQLite store and signing secret under `root`."""
    root.mkdir(parents=True, exist_ok=True)
    secret = root / "signing-secret"
    if not secret.exists():
        secret.write_text(secrets.token_hex(32) + "\n")
        secret.chmod(0o600)
    return {
        "DittoJupyterApp": {
            "store_url": f"sqlite:///{root / 'shared.db'}",
            "blob_store_url": f"{bucket.url}/{PREFIX}",
            "blob_store_endpoint": bucket.endpoint,
            "blob_secret_file": str(secret),
            "kernel_pool_size": 0,
        }
    }


@pytest.fixture
def credentials(s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in s3_bucket.credentials_env().items():
        monkeypatch.setenv(name, value)


def s3_client(bucket: S3Bucket) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=bucket.endpoint,
        aws_access_key_id=bucket.access_key,
        aws_secret_access_key=bucket.secret_key,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}),
    )


def objects(bucket: S3Bucket) -> dict[str, str]:
    """Every object under the prefix: key to ETag."""
    listed = s3_client(bucket).list_objects_v2(Bucket=bucket.name, Prefix=f"{PREFIX}/")
    return {entry["Key"]: entry["ETag"] for entry in listed.get("Contents", [])}


def paused_notebook(server: LiveServer) -> str:
    """A notebook whose kernel holds `table` and `note`, paused; its runtime id."""
    notebook = server.open_notebook("analysis.ipynb")
    rid, kernel = notebook["id"], notebook["kernel"]["id"]
    server.execute(kernel, "import numpy as np\ntable = np.arange(2_000_000.0)\nnote = 'kept safe'")
    status, paused = server.api("POST", "pause", {"runtime_id": rid})
    assert status == 200, paused
    return str(rid)


def resumed_note(server: LiveServer, rid: str) -> str:
    status, resumed = server.api("POST", "resume", {"runtime_id": rid})
    assert status == 200, resumed
    return server.execute(resumed["kernel_id"], "print(note, float(table.sum()))").strip()


@pytest.mark.usefixtures("credentials")
def test_another_deployment_on_the_prefix_refuses_it_at_start_and_the_first_resumes(
    tmp_path: Path, s3_bucket: S3Bucket
) -> None:
    first = deployment_config(tmp_path / "first", s3_bucket)
    with LiveServer(tmp_path / "first-a", config=first) as a:
        rid = paused_notebook(a)
    before = objects(s3_bucket)
    assert f"{PREFIX}/deployment.json" in before and len(before) > 3

    copied = deployment_config(tmp_path / "second", s3_bucket)  # own store and secret
    with LiveServer(tmp_path / "second-a", config=copied) as other:
        status, answer = other.api("GET")
        assert status == 503, answer
        assert answer["error"] == "ConfigurationError"
        line = answer["message"]
        assert line.startswith(f"blob_store_url: the prefix {s3_bucket.url}/{PREFIX}")
        assert "belongs to the deployment whose signing key is" in line
        status, refused = other.api("POST", "resume", {"runtime_id": rid})
        assert (status, refused) == (503, answer)
    assert other.log_path.read_text().count(f"ditto_jupyter is off: {line}") == 1
    assert objects(s3_bucket) == before  # nothing deleted, nothing written

    with LiveServer(tmp_path / "first-b", config=first) as b:  # the first, on a new node
        assert resumed_note(b, rid) == "kept safe 1999999000000.0"


@pytest.mark.usefixtures("credentials")
def test_a_hung_gateway_gets_a_pause_and_a_resume_a_503_within_seconds(
    tmp_path: Path, ceph_gateway: CephGateway, s3_bucket: S3Bucket
) -> None:
    config = deployment_config(tmp_path / "deployment", s3_bucket)
    with LiveServer(tmp_path / "node-a", config=config) as a:
        notebook = a.open_notebook("hung.ipynb")
        rid, kernel = notebook["id"], notebook["kernel"]["id"]
        a.execute(kernel, "import numpy as np\ntable = np.arange(2_000_000.0)\nnote = 'kept safe'")
        with ceph_gateway.frozen():
            started = time.monotonic()
            status, answer = a.api("POST", "pause", {"runtime_id": rid})
            took = time.monotonic() - started
        assert status == 503, answer
        assert answer["error"] == "StoreUnavailable" and "cannot be reached" in answer["message"]
        assert took < HUNG_ANSWER_S, f"the pause answered after {took:.0f} s"
        assert a.execute(kernel, "print(note)").strip() == "kept safe"  # the kernel is live
        status, paused = a.api("POST", "pause", {"runtime_id": rid})
        assert status == 200, paused

    with LiveServer(tmp_path / "node-b", config=config) as b:  # an empty cache: fetches
        with ceph_gateway.frozen():
            started = time.monotonic()
            status, answer = b.api("POST", "resume", {"runtime_id": rid})
            took = time.monotonic() - started
        assert status == 503, answer
        assert "cannot be reached" in answer["message"]
        assert took < HUNG_ANSWER_S, f"the resume answered after {took:.0f} s"
        status, runtime = b.api("GET", rid)
        assert status == 200 and runtime["status"] == "paused", runtime
        assert resumed_note(b, rid) == "kept safe 1999999000000.0"


@pytest.mark.usefixtures("credentials")
def test_a_resume_reading_a_tampered_manifest_answers_502_naming_it(
    tmp_path: Path, s3_bucket: S3Bucket
) -> None:
    config = deployment_config(tmp_path / "deployment", s3_bucket)
    with LiveServer(tmp_path / "node-a", config=config) as a:
        rid = paused_notebook(a)
    client = s3_client(s3_bucket)
    manifests = [key for key in objects(s3_bucket) if key.startswith(f"{PREFIX}/manifests/")]
    good = {}
    for key in manifests:  # each changed by one byte, its signature left as it was
        good[key] = client.get_object(Bucket=s3_bucket.name, Key=key)["Body"].read()
        client.put_object(Bucket=s3_bucket.name, Key=key, Body=good[key].replace(b"{", b" {", 1))

    with LiveServer(tmp_path / "node-b", config=config) as b:
        status, answer = b.api("POST", "resume", {"runtime_id": rid})
        assert status == 502, answer
        assert answer["error"] == "BackendError"
        message = answer["message"]
        assert any(f"manifest {key.rsplit('/', 1)[1]}" in message for key in manifests)
        assert "nothing of it was loaded" in message and s3_bucket.name in message
        status, runtime = b.api("GET", rid)
        assert status == 200 and runtime["status"] == "paused", runtime
        for key, document in good.items():
            client.put_object(Bucket=s3_bucket.name, Key=key, Body=document)
        assert resumed_note(b, rid) == "kept safe 1999999000000.0"
    assert "InternalError" not in b.log_path.read_text()
