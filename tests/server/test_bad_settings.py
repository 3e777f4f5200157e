"""A real Jupyter server started with a setting that is wrong (issue 40, item 6).

Before, any of these made jupyter-server leave the extension out: every ditto route
answered a 404 HTML page, nothing paused idle kernels, and jupyter-server's culler killed
kernels that should have been paused. Now the server starts without ditto-jupyter and
says why, once: one line naming the setting and what is wrong goes to the log, every ditto
route answers 503 `ConfigurationError` with that line (JSON, once the request is
authenticated), and the idle culler leaves every kernel alone. Each setting the issue
names is tried: a malformed `blob_store_url` (`s3:///p`, `gs://...`), a missing or short
`blob_secret_file`, a `store_url` with a bad port, and a real PostgreSQL refusing a wrong
password; and values that do not fit their setting (traitlets' `TraitError`, which made
jupyter-server leave the extension out). No password is ever in the line or the log.
"""

from __future__ import annotations

import re
import secrets
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server.live_server import LiveServer

pytest_plugins = ["tests.support.postgres_fixtures"]
pytestmark = pytest.mark.slow  # a real server per setting, and its culler's rounds

#: A secret file's content that is of the right length.
GOOD_SECRET = secrets.token_hex(32) + "\n"
#: Rounds of the culler (one a second) that must leave the kernel alone.
CULLER_ROUNDS = 4


def object_store(tmp_path: Path, **settings: Any) -> dict[str, Any]:
    """Object store settings that are right, but for `settings`."""
    secret = tmp_path / "signing-secret"
    secret.write_text(GOOD_SECRET)
    secret.chmod(0o600)
    found = {
        "blob_store_url": "s3://bucket/prefix",
        "blob_store_endpoint": "http://127.0.0.1:9",
        "blob_secret_file": str(secret),
    }
    found.update(settings)
    return found


def short_secret(tmp_path: Path) -> str:
    short = tmp_path / "short-secret"
    short.write_text("0123456789")
    short.chmod(0o600)
    return str(short)


BAD_SETTINGS: dict[str, tuple[Any, str]] = {
    # case: (settings from tmp_path, what the line must say)
    "url-without-bucket": (
        lambda tmp: object_store(tmp, blob_store_url="s3:///p"),
        "blob_store_url (DITTO_BLOB_STORE_URL) 's3:///p' names no bucket",
    ),
    "url-of-another-scheme": (
        lambda tmp: object_store(tmp, blob_store_url="gs://bucket/p"),
        "blob_store_url (DITTO_BLOB_STORE_URL) 'gs://bucket/p' is not an s3:// URL",
    ),
    "secret-file-not-set": (
        lambda tmp: object_store(tmp, blob_secret_file=""),
        "blob_secret_file (DITTO_BLOB_SECRET_FILE) is not set",
    ),
    "secret-file-missing": (
        lambda tmp: object_store(tmp, blob_secret_file=str(tmp / "nowhere")),
        "cannot be read: No such file or directory",
    ),
    "secret-file-short": (
        lambda tmp: object_store(tmp, blob_secret_file=short_secret(tmp)),
        "holds 10 bytes: it must hold 32 random bytes or 64 hex digits",
    ),
    "store-url-bad-port": (
        lambda tmp: {"store_url": "postgresql+psycopg://ditto:hunter2@127.0.0.1:54x2/ditto"},
        "store_url (DITTO_STORE_URL) 'postgresql+psycopg://ditto:***@127.0.0.1:54x2/ditto' "
        "is not a database URL: its port '54x2' is not a number",
    ),
    # values that do not fit their trait: traitlets' TraitError left the extension out
    "durability-not-a-choice": (
        lambda tmp: {"checkpoint_durability": "fast"},
        "DittoJupyterApp.checkpoint_durability: The 'checkpoint_durability' trait",
    ),
    "lease-below-its-minimum": (
        lambda tmp: {"lease_ttl": 0.1},
        "DittoJupyterApp.lease_ttl: The value of the 'lease_ttl' trait",
    ),
}


def start_without_ditto(tmp_path: Path, settings: dict[str, Any]) -> LiveServer:
    config = {
        "DittoJupyterApp": {**settings, "kernel_pool_size": 0},
        "ServerApp": {"log_level": "DEBUG"},
        "MappingKernelManager": {"cull_idle_timeout": 1, "cull_interval": 1},
    }
    return LiveServer(tmp_path / "server", config=config).start()


def check_refusals(server: LiveServer, says: str) -> str:
    """Every kind of ditto route answers 503 with the one line; the line."""
    status, listing = server.api("GET")
    assert status == 503, listing
    assert listing["error"] == "ConfigurationError"
    line = str(listing["message"])
    assert says in line and "\n" not in line
    status, paused = server.api("POST", "pause", {"runtime_id": "x" * 32})
    assert (status, paused) == (503, listing)
    status, bad_body = server.api("POST", "checkpoint", {"not": "a field"})
    assert (status, bad_body) == (503, listing)
    document = server.request("GET", "api/v1/runtimes/openapi.json")
    assert (document.status_code, document.json()) == (503, listing)
    stranger = httpx.get(server.url + "api/v1/runtimes", timeout=60)  # no token
    assert stranger.status_code == 403 and line not in stranger.text
    return line


def wait_for_culler_to_spare(server: LiveServer, kernel_id: str) -> None:
    """Wait (generously) until the idle culler has passed the kernel by several times,
    the kernel idle for longer than the culler's timeout meanwhile."""
    spared = f"the idle culler leaves kernel {kernel_id} alone"
    deadline = time.monotonic() + 120
    while server.log_path.read_text().count(spared) < CULLER_ROUNDS:
        assert time.monotonic() < deadline, "the culler never passed the kernel by"
        kernels = server.request("GET", "api/kernels").json()
        assert kernel_id in {k["id"] for k in kernels}, "the culler stopped the kernel"
        time.sleep(0.2)


def check_culling_is_off(server: LiveServer) -> None:
    started = server.request("POST", "api/kernels", {"name": "python3"})
    assert started.status_code == 201, started.text
    kernel_id = started.json()["id"]
    wait_for_culler_to_spare(server, kernel_id)
    kernels = server.request("GET", "api/kernels").json()
    assert kernel_id in {k["id"] for k in kernels}


def check_log(server: LiveServer, line: str, *, never: str = "") -> None:
    log = server.log_path.read_text()
    assert log.count(f"ditto_jupyter is off: {line}") == 1
    assert "extension failed loading" not in log and "Traceback" not in log
    if never:
        assert never not in log


@pytest.mark.parametrize("case", sorted(BAD_SETTINGS))
def test_a_bad_setting_turns_ditto_off_with_one_line_and_no_culling(
    tmp_path: Path, case: str
) -> None:
    settings, says = BAD_SETTINGS[case]
    server = start_without_ditto(tmp_path, settings(tmp_path))
    try:
        line = check_refusals(server, says)
        check_culling_is_off(server)
    finally:
        server.stop()
    check_log(server, line, never="hunter2")


@pytest.mark.postgres
def test_a_database_refusing_the_password_turns_ditto_off_with_one_line(
    tmp_path: Path, postgres_server: str, postgres_url: str
) -> None:
    from tests.support.postgres_server import password_login

    database = postgres_url.rsplit("/", 1)[1]
    role, password = password_login(postgres_server, database)
    host = re.sub(r"^.*@", "", postgres_server)
    wrong = secrets.token_hex(8)
    store_url = f"postgresql+psycopg://{role}:{wrong}@{host}/{database}"
    server = start_without_ditto(tmp_path, {"store_url": store_url})
    try:
        line = check_refusals(server, "store_url (DITTO_STORE_URL): cannot open the checkpoint")
        assert f"{role}:***@" in line and "password authentication failed" in line
        check_culling_is_off(server)
    finally:
        server.stop()
    check_log(server, line, never=wrong)

    right = f"postgresql+psycopg://{role}:{password}@{host}/{database}"
    config = {"DittoJupyterApp": {"store_url": right, "kernel_pool_size": 0}}
    with LiveServer(tmp_path / "fixed", config=config) as fixed:  # the setting fixed
        status, listing = fixed.api("GET")
        assert status == 200, listing
