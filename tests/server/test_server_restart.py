"""A server restart keeps paused runtimes resumable (a real `jupyter server` process, twice).

The store is a SQLite file in the data dir; a runtime paused before the restart resumes
after it with its variables; a runtime that was live when the server stopped lost its
kernel, so the new server takes it over as it starts and marks it lost: paused at its head
checkpoint, resumable too, with the workspace files it wrote after that checkpoint. A lost
runtime whose workspace directory vanished meanwhile is paused at its head as well, never
stuck.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from tests.server.live_server import LiveServer

pytestmark = pytest.mark.slow  # real kernels / a jupyter server process

#: How long the new server is given to take the old one's runtimes over (a hang guard).
GIVE_UP_S = 120.0


def test_paused_and_live_runtimes_survive_a_server_restart(tmp_path: Path) -> None:
    server = LiveServer(tmp_path)
    with server:
        paused = server.open_notebook("paused.ipynb")
        live = server.open_notebook("live.ipynb")
        gone = server.open_notebook("gone.ipynb")
        server.execute(paused["kernel"]["id"], "import numpy as np\nx = 41\na = np.arange(10)")
        server.execute(live["kernel"]["id"], "y = 'kept at the checkpoint'")
        status, answer = server.api("POST", "checkpoint", {"runtime_id": live["id"]})
        assert status == 200, answer
        server.execute(
            live["kernel"]["id"],
            "y = 'lost with the kernel'\nimport ditto_jupyter\n"
            "(ditto_jupyter.workspace() / 'after.txt').write_text('written after the checkpoint')",
        )
        server.execute(gone["kernel"]["id"], "z = 'from the head'")
        status, answer = server.api("POST", "checkpoint", {"runtime_id": gone["id"]})
        assert status == 200, answer
        status, gone_workspace = server.api("GET", f"{gone['id']}/workspace")
        assert status == 200, gone_workspace
        status, answer = server.api("POST", "pause", {"runtime_id": paused["id"]})
        assert status == 200, answer
        first_pause = answer["checkpoint_id"]

    shutil.rmtree(gone_workspace["path"])  # removed while the server was down

    with server:  # same data dir, new process
        # it takes the runtimes of the server that is gone over as it starts (its watcher's
        # first round), not when it is asked: wait for that round
        deadline = time.monotonic() + GIVE_UP_S
        while True:
            status, listing = server.api("GET")
            assert status == 200, listing
            states = {r["runtime_id"]: r["status"] for r in listing["runtimes"]}
            taking_over = {"idle", "busy"} & set(states.values())  # busy: taken over now
            if not taking_over or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert states == {paused["id"]: "paused", live["id"]: "paused", gone["id"]: "paused"}

        status, resumed = server.api("POST", "resume", {"runtime_id": paused["id"]})
        assert status == 200, resumed
        assert resumed["runtime"]["runtime_id"] == paused["id"]
        assert resumed["checkpoint_id"] == first_pause
        out = server.execute(resumed["kernel_id"], "print(x, int(a.sum()))")
        assert out.split() == ["41", "45"]

        status, resumed = server.api("POST", "resume", {"runtime_id": live["id"]})
        assert status == 200, resumed
        assert server.execute(resumed["kernel_id"], "print(y)").strip() == "kept at the checkpoint"
        status, where = server.api("GET", f"{live['id']}/workspace")
        assert status == 200, where
        assert Path(where["path"], "after.txt").read_text() == "written after the checkpoint"

        status, resumed = server.api("POST", "resume", {"runtime_id": gone["id"]})
        assert status == 200, resumed
        assert server.execute(resumed["kernel_id"], "print(z)").strip() == "from the head"

        sessions = server.request("GET", "api/sessions").json()
        assert {s["id"] for s in sessions} == {paused["id"], live["id"], gone["id"]}
