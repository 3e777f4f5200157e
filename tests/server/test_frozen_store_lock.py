"""One frozen server does not freeze the others (issue 40 section 2).

Two real Jupyter servers share one real PostgreSQL store. The store's write lock (its
advisory lock) is held from outside in an open transaction, as a server frozen inside a
write (a paused VM, a long GC, a network partition) would hold it. Meanwhile:

- both servers still answer jupyter-server's own `GET /api/status`, and ditto's reads;
- a write (a checkpoint) answers 503 `StoreUnavailable` with one line, once the lock
  bound (`store_lock_timeout`) is reached, and leaves the store as it was;
- once the lock is let go, the same checkpoint is taken;
- neither server wrote to the store on its event loop (`LoopWatchedStore` records every
  store call made there): the lease heartbeat, claims and records run on store threads.

Deadlines are generous (hang guards, not timings): a server whose loop waits on the lock
answers nothing until the lock is let go, which here is never.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from tests.server.live_server import LiveServer
from tests.support.loop_watched_store import (
    CALLS_ENV,
    LOCK_TIMEOUT_ENV,
    STORE_CLASS,
    loop_calls,
)

pytest_plugins = ["tests.support.postgres_fixtures"]
pytestmark = [pytest.mark.postgres, pytest.mark.slow]

#: The store's write lock (`sql_database._PG_WRITE_LOCK`), as an outside session takes it.
STORE_LOCK_KEY = 0x6469_7474_6F00
#: The store's lock bound in these servers (`store_lock_timeout`).
LOCK_TIMEOUT_S = 5.0
#: The store's methods that write (and so wait for its write lock).
STORE_WRITES = frozenset(
    {
        "transaction",
        "insert_session",
        "put_session",
        "put_checkpoint",
        "set_head",
        "put_binding",
        "delete_binding",
        "record_leftover",
        "acquire_lease",
        "renew_leases",
        "release_lease",
        "expire_leases",
        "advance_bucket_generation",
    }
)
#: Seconds a request is given while the lock is held (a hang guard).
ANSWER_S = 120.0


@pytest.fixture
def servers(tmp_path: Path, postgres_url: str) -> Iterator[tuple[LiveServer, LiveServer]]:
    config = {
        "DittoJupyterApp": {
            "store_url": postgres_url,
            "store_lock_timeout": LOCK_TIMEOUT_S,
            "store_class": STORE_CLASS,
            "kernel_pool_size": 0,
            "document_wait_seconds": 0.0,
        }
    }
    servers = []
    for name in ("node-a", "node-b"):
        environment = {
            CALLS_ENV: str(tmp_path / f"{name}-loop-calls.txt"),
            LOCK_TIMEOUT_ENV: str(round(LOCK_TIMEOUT_S * 1000)),
        }
        servers.append(LiveServer(tmp_path / name, config=config, environment=environment))
    a, b = servers
    with a, b:
        yield a, b


def calls_on_loop(server: LiveServer) -> list[str]:
    """The store calls `server` made on its event loop (`LoopWatchedStore`)."""
    return loop_calls(Path(server.environment[CALLS_ENV]))


def waiting_on_lock(engine: sa.Engine) -> int:
    """How many sessions wait for an advisory lock now."""
    query = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
    with engine.connect() as conn:
        return int(conn.exec_driver_sql(query).scalar_one())


def get(server: LiveServer, path: str) -> httpx.Response:
    return httpx.get(server.url + path, headers=server.headers(), timeout=ANSWER_S)


def test_a_held_store_lock_freezes_no_server(
    servers: tuple[LiveServer, LiveServer], postgres_url: str
) -> None:
    a, b = servers
    notebook = b.open_notebook("frozen.ipynb")
    rid, kernel = notebook["id"], notebook["kernel"]["id"]
    b.execute(kernel, "x = 1")
    status, before = b.api("GET", f"{rid}/checkpoints")
    assert status == 200, before

    engine = sa.create_engine(postgres_url)
    holder = engine.connect()
    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        holder.begin()
        holder.execute(sa.select(sa.func.pg_advisory_xact_lock(STORE_LOCK_KEY)))
        pending = pool.submit(b.api, "POST", "checkpoint", {"runtime_id": rid})
        deadline = time.monotonic() + ANSWER_S
        while not pending.done() and not waiting_on_lock(engine):
            assert time.monotonic() < deadline, "nothing ever waited on the store's lock"
            time.sleep(0.1)
        for server in (a, b):
            assert get(server, "api/status").status_code == 200
            listed = get(server, "api/v1/runtimes")
            assert listed.status_code == 200, listed.text
        status, refused = pending.result(timeout=ANSWER_S)
        assert (status, refused["error"]) == (503, "StoreUnavailable"), refused
        message: str = refused["message"]
        assert "\n" not in message and "lock" in message, message
    finally:  # let go first: a request still waiting then ends
        holder.rollback()
        holder.close()
        pool.shutdown(wait=True)
    # The refused checkpoint left nothing behind; with the lock let go it is taken.
    status, after = b.api("GET", f"{rid}/checkpoints")
    assert status == 200 and after == before, after
    status, taken = b.api("POST", "checkpoint", {"runtime_id": rid})
    assert status == 200, taken
    listed: Any = b.api("GET", f"{rid}/checkpoints")[1]
    assert [c["checkpoint_id"] for c in listed["checkpoints"]] == [taken["checkpoint_id"]]
    engine.dispose()
    # No store write ran on either server's loop: the heartbeat, the claims, the records.
    for server in (a, b):
        on_loop = [call for call in calls_on_loop(server) if call.split()[0] in STORE_WRITES]
        assert on_loop == [], f"{server.base.name} wrote to the store on its loop: {on_loop}"
