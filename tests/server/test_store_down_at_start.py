"""A database down when the server starts does not turn ditto off (issue 40 section 2).

The server starts while nothing listens where its store URL points. jupyter-server serves
as ever; every ditto route answers 503 `StoreUnavailable` with one line saying the store
is not reachable yet, naming its URL without the password; each failed attempt to connect
logs one line. Then a real PostgreSQL starts on that port, and the routes work, with no
restart. Deadlines are generous hang guards, not timings.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.server.live_server import LiveServer, free_port
from tests.support.postgres_server import pg_missing, running_postgres

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

#: Seconds the routes are given to work once the database is up (a hang guard).
UP_WITHIN_S = 240.0
PASSWORD = "not-to-be-shown"


def test_a_store_that_comes_up_late_is_used_without_a_restart(tmp_path: Path) -> None:
    missing = pg_missing()
    if missing:
        pytest.skip(missing)
    port = free_port()
    url = f"postgresql+psycopg://ditto:{PASSWORD}@127.0.0.1:{port}/postgres"
    config = {
        "DittoJupyterApp": {
            "store_url": url,
            "store_connect_timeout": 600.0,
            "kernel_pool_size": 0,
            "document_wait_seconds": 0.0,
        }
    }
    with LiveServer(tmp_path / "server", config=config) as server:
        assert server.request("GET", "api/status").status_code == 200  # jupyter-server serves
        refused = server.request("GET", "api/v1/runtimes")
        assert refused.status_code == 503, refused.text
        body: dict[str, Any] = refused.json()
        message = body["message"]
        assert body["error"] == "StoreUnavailable", body
        assert "\n" not in message and "not reachable yet" in message, message
        assert f"127.0.0.1:{port}" in message and PASSWORD not in message, message
        with running_postgres(port):
            deadline = time.monotonic() + UP_WITHIN_S
            while True:
                answer = server.request("GET", "api/v1/runtimes")
                if answer.status_code == 200:
                    break
                assert answer.status_code == 503, answer.text
                assert time.monotonic() < deadline, f"the store was never used: {answer.text}"
                time.sleep(0.5)
            notebook = server.open_notebook("late.ipynb")
            rid = notebook["id"]
            server.execute(notebook["kernel"]["id"], "x = 1")
            status, taken = server.api("POST", "checkpoint", {"runtime_id": rid})
            assert status == 200, taken
            status, listed = server.api("GET", f"{rid}/checkpoints")
            assert status == 200, listed
            assert [c["checkpoint_id"] for c in listed["checkpoints"]] == [taken["checkpoint_id"]]
            server.stop()
    log = server.log_path.read_text(encoding="utf-8", errors="replace")
    attempts = [line for line in log.splitlines() if "not reachable yet" in line]
    assert attempts, log[-3000:]
    assert all(PASSWORD not in line for line in attempts)
