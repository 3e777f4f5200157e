"""No store call runs on the event loop, reads included (issue 40 section 2).

A store read waits too: across a network partition, until TCP keepalive ends the
connection. On a server's event loop that wait would freeze the whole server, so every
store call (the writes `test_frozen_store_lock` checks, and every read) runs on a store
thread. Two real Jupyter servers share one real PostgreSQL store (`LoopWatchedStore`
records each store call made on an event loop); the routes a user, the panel and a
kernel's magics use are driven, and the periodic work (kernel watcher, idle pauser) runs
a few rounds. Then neither server has called its store on its loop, not once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.server.live_server import LiveServer
from tests.support.loop_watched_store import (
    CALLS_ENV,
    LOCK_TIMEOUT_ENV,
    STORE_CLASS,
    loop_calls,
)

pytest_plugins = ["tests.support.postgres_fixtures"]
pytestmark = [pytest.mark.postgres, pytest.mark.slow]

#: Rounds of the kernel watcher (every second here) and of the idle pauser waited for.
PERIODIC_ROUNDS = 3


@pytest.fixture
def servers(tmp_path: Path, postgres_url: str) -> Iterator[tuple[LiveServer, LiveServer]]:
    config = {
        "DittoJupyterApp": {
            "store_url": postgres_url,
            "store_class": STORE_CLASS,
            "kernel_pool_size": 0,
            "document_wait_seconds": 0.0,
            "lease_ttl": 3.0,  # the watcher's heartbeat every second
            "pause_idle_after": 3600.0,  # the idle pauser looks, pauses nothing
        }
    }
    servers = []
    for name in ("node-a", "node-b"):
        environment = {
            CALLS_ENV: str(tmp_path / f"{name}-loop-calls.txt"),
            LOCK_TIMEOUT_ENV: "30000",
        }
        servers.append(LiveServer(tmp_path / name, config=config, environment=environment))
    a, b = servers
    with a, b:
        yield a, b


def ok(answer: tuple[int, Any]) -> Any:
    status, body = answer
    assert status == 200, body
    return body


def answered(answer: tuple[int, Any]) -> Any:
    """An answer that may be a refusal (an undo with nothing to undo), never a 500."""
    status, body = answer
    assert status < 500, body
    return body


def test_no_store_call_runs_on_either_loop(servers: tuple[LiveServer, LiveServer]) -> None:
    a, b = servers
    notebook = b.open_notebook("reads.ipynb")
    rid, kernel = notebook["id"], notebook["kernel"]["id"]
    b.execute(kernel, "x = 1")
    first = ok(b.api("POST", "checkpoint", {"runtime_id": rid, "name": "first"}))["checkpoint_id"]
    for server in (a, b):  # the panel's reads, on the runtime's server and another
        ok(server.api("GET"))
        ok(server.api("GET", rid))
        ok(server.api("GET", f"{rid}/checkpoints?limit=10"))
        ok(server.api("GET", f"{rid}/checkpoints/first"))
        ok(server.api("GET", "checkpoints/first"))
        ok(server.api("GET", f"{rid}/lineage"))
        ok(server.api("GET", f"{rid}/budget"))
        ok(server.api("GET", f"{rid}/checkpoints/first/contents"))
        answered(server.api("GET", f"{rid}/checkpoints/first/document"))
        answered(server.api("GET", f"{rid}/langgraph/threads"))
    ok(b.api("GET", f"{rid}/workspace"))
    ok(b.api("POST", "diff", {"runtime_id": rid}))
    # A kernel's own routes (self/checkpoint, self/diff, self/undo) through its magics.
    assert "checkpoint" in b.execute(kernel, "x = 2\n%checkpoint second")
    b.execute(kernel, "%diff")
    b.execute(kernel, "%autocheckpoint on")
    b.execute(kernel, "y = 3")
    b.execute(kernel, "%undo")
    b.execute(kernel, "%autocheckpoint off")
    answered(b.api("POST", "undo", {"runtime_id": rid}))
    ok(b.api("POST", "restore", {"runtime_id": rid, "checkpoint_id": "first"}))
    child = ok(b.api("POST", "checkout", {"checkpoint_id": first}))["runtime"]["runtime_id"]
    ok(b.api("POST", "close", {"runtime_id": child, "discard": True}))
    ok(b.api("POST", "pause", {"runtime_id": rid}))
    ok(a.api("GET", rid))
    ok(b.api("POST", "resume", {"runtime_id": rid}))
    ok(b.api("POST", "close", {"runtime_id": rid}))
    # The periodic work: a few rounds of the watcher (every second) on both servers.
    time.sleep(PERIODIC_ROUNDS * 1.5)  # not a synchronisation: rounds to watch, none awaited
    on_loop = {s.base.name: loop_calls(Path(s.environment[CALLS_ENV])) for s in (a, b)}
    seen = sorted({call for calls in on_loop.values() for call in calls})
    assert not seen, "store calls on an event loop:\n" + "\n".join(seen)
