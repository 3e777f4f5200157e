"""A server that lost its lease fences the old kernel (issue 40 section 5).

Two real Jupyter servers (two nodes) share one real PostgreSQL store. Server A runs a
runtime, checkpointed once; A is frozen (SIGSTOP) and its lease made to look like one of
another host that ran out, so server B takes the runtime over (recorded lost, paused).
Meanwhile the user goes on working in A's kernel, which still runs. Then A comes back:

- A stops that kernel at once (it is no longer in A's kernel list);
- what it held is kept in the runtime's head: a resume on A brings back the variables and
  the files of the work done after the takeover (its bytes are on A's node: there is no
  object store here);
- the runtime reads paused on A too.

Deadlines are hang guards, not timings.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from tests.server.live_server import LiveServer

pytest_plugins = ["tests.support.postgres_fixtures"]
pytestmark = [pytest.mark.postgres, pytest.mark.slow]

#: Seconds a server is given to take a runtime over, or to fence a kernel (hang guard).
GIVE_UP_S = 90.0


@pytest.fixture
def servers(tmp_path: Path, postgres_url: str) -> Iterator[tuple[LiveServer, LiveServer]]:
    config = {
        "DittoJupyterApp": {
            "store_url": postgres_url,
            "kernel_pool_size": 0,
            "document_wait_seconds": 0.0,
            "lease_ttl": 3.0,
        }
    }
    a = LiveServer(tmp_path / "node-a", config=config)
    b = LiveServer(tmp_path / "node-b", config=config)
    with a, b:
        try:
            yield a, b
        finally:
            if a.process is not None:  # never leave it stopped
                os.kill(a.process.pid, signal.SIGCONT)


def status_on(server: LiveServer, runtime_id: str) -> str:
    status, record = server.api("GET", runtime_id)
    assert status == 200, record
    return str(record["status"])


def kernels_of(server: LiveServer) -> set[str]:
    response = httpx.get(server.url + "api/kernels", headers=server.headers(), timeout=120)
    response.raise_for_status()
    return {kernel["id"] for kernel in response.json()}


def until(what: str, done: Callable[[], bool], *logs: LiveServer) -> None:
    deadline = time.monotonic() + GIVE_UP_S
    while not done():
        if time.monotonic() > deadline:
            tails = [server.log_path.read_text()[-4000:] for server in logs]
            raise AssertionError(f"never: {what}\n" + "\n----\n".join(tails))
        time.sleep(0.2)


def test_a_server_that_lost_its_lease_fences_its_kernel(
    servers: tuple[LiveServer, LiveServer], postgres_url: str
) -> None:
    a, b = servers
    notebook = a.open_notebook("fenced.ipynb")
    rid, kernel = notebook["id"], notebook["kernel"]["id"]
    a.execute(kernel, "x = 1")
    status, first = a.api("POST", "checkpoint", {"runtime_id": rid})
    assert status == 200, first
    assert a.process is not None
    until("A holds the runtime's lease", lambda: lease_holder(postgres_url, rid) is not None)

    # A freezes; its lease now reads as another host's that ran out: B takes over.
    os.kill(a.process.pid, signal.SIGSTOP)
    engine = sa.create_engine(postgres_url)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE leases SET host = 'a-frozen-host', boot_id = 'gone', expires_at_ms = 0 "
                "WHERE kind = 'runtime' AND key = :key"
            ),
            {"key": rid},
        )
    engine.dispose()
    until("B takes the runtime over", lambda: status_on(b, rid) == "paused", b)

    # The user goes on in A's kernel, which still runs: that work must not be lost.
    a.execute(
        kernel,
        "import ditto_jupyter\nwork = 'done on A after the takeover'\n"
        "(ditto_jupyter.workspace() / 'notes.txt').write_text('written after the takeover')",
    )
    os.kill(a.process.pid, signal.SIGCONT)

    until("A stops its kernel", lambda: kernel not in kernels_of(a), a)
    assert status_on(a, rid) == "paused"
    status, resumed = a.api("POST", "resume", {"runtime_id": rid})
    assert status == 200, resumed
    read_back = (
        "import ditto_jupyter\n"
        "print(x, work, (ditto_jupyter.workspace() / 'notes.txt').read_text())"
    )
    assert a.execute(resumed["kernel_id"], read_back).strip() == (
        "1 done on A after the takeover written after the takeover"
    )


def lease_holder(postgres_url: str, runtime_id: str) -> str | None:
    """Who holds the runtime's lease (its owner id), or None."""
    engine = sa.create_engine(postgres_url)
    try:
        with engine.connect() as conn:
            query = sa.text("SELECT owner_id FROM leases WHERE kind = 'runtime' AND key = :key")
            found = conn.execute(query, {"key": runtime_id}).scalar_one_or_none()
    finally:
        engine.dispose()
    return None if found is None else str(found)
