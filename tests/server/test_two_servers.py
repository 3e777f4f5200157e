"""Two Jupyter servers on one data directory (issue 22 section 3): two real `jupyter server`
processes, as a user with two JupyterLabs on the default directory has.

Server A runs a notebook with a variable and a workspace file. Server B answers every GET
of the API, again and again, as its side panel does: A's runtime stays live, its
workspace stays, B refuses to operate on it (naming A), and A can still checkpoint, pause
and resume it. Then A is killed: B takes the runtime over (a `lost` checkpoint keeping the
files, paused there), and resume on B brings back A's last checkpoint.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.server.live_server import LiveServer

pytestmark = pytest.mark.slow  # two jupyter server processes and their kernels

#: How long B is given to take the runtime over once A is gone (a hang guard only).
GIVE_UP_S = 120.0

WRITE_FILE = """
import ditto_jupyter
(ditto_jupyter.workspace() / "notes.txt").write_text("written on A")
"""


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[LiveServer, LiveServer]]:
    first = LiveServer(tmp_path / "a")
    second = LiveServer(tmp_path / "b", data_dir=first.data_dir)
    with first, second:
        yield first, second


def every_read(server: LiveServer, runtime_id: str, checkpoint_id: str) -> None:
    """Every GET route of the API, once; each answers 200."""
    for route in (
        "",
        runtime_id,
        f"{runtime_id}/checkpoints",
        f"{runtime_id}/checkpoints/{checkpoint_id}",
        f"checkpoints/{checkpoint_id}",
        f"{runtime_id}/lineage",
        f"{runtime_id}/workspace",
        f"{runtime_id}/budget",
    ):
        status, body = server.api("GET", route)
        assert status == 200, (route, body)


def status_on(server: LiveServer, runtime_id: str) -> str:
    status, record = server.api("GET", runtime_id)
    assert status == 200, record
    return str(record["status"])


def test_a_second_server_leaves_the_first_ones_runtime_alone_until_it_is_gone(
    servers: tuple[LiveServer, LiveServer],
) -> None:
    a, b = servers
    session = a.open_notebook("work.ipynb")
    rid, kernel_id = session["id"], session["kernel"]["id"]
    a.execute(kernel_id, "x = 41\n" + WRITE_FILE)
    status, taken = a.api("POST", "checkpoint", {"runtime_id": rid})
    assert status == 200, taken
    status, where = a.api("GET", f"{rid}/workspace")
    assert status == 200, where
    workspace = Path(where["path"])

    for _ in range(25):  # B's panel loads, reloads; B's watcher runs its rounds meanwhile
        every_read(b, rid, taken["checkpoint_id"])
        time.sleep(0.2)

    assert status_on(a, rid) == "idle" and status_on(b, rid) == "idle"
    assert (workspace / "notes.txt").read_text() == "written on A"
    for route, body in (
        ("checkpoint", {"runtime_id": rid}),
        ("pause", {"runtime_id": rid}),
        ("close", {"runtime_id": rid}),
        ("exec", {"runtime_id": rid, "command": "true"}),
    ):
        status, answer = b.api("POST", route, body)
        assert (status, answer["error"]) == (409, "SessionBusy"), (route, answer)
        assert a.url in answer["message"], answer
    assert (workspace / "notes.txt").exists()

    status, again = a.api("POST", "checkpoint", {"runtime_id": rid})
    assert status == 200, again
    status, paused = a.api("POST", "pause", {"runtime_id": rid})
    assert status == 200, paused
    status, resumed = a.api("POST", "resume", {"runtime_id": rid})
    assert status == 200, resumed
    kernel_id = resumed["kernel_id"]
    assert a.execute(kernel_id, "print(x)").strip() == "41"
    a.execute(kernel_id, "x = 42")
    status, last = a.api("POST", "checkpoint", {"runtime_id": rid})
    assert status == 200, last
    a.execute(  # after the last checkpoint: the variable is lost with A, the file is not
        kernel_id,
        "x = 43\nimport ditto_jupyter\n"
        "(ditto_jupyter.workspace() / 'late.txt').write_text('after the last checkpoint')",
    )

    a.kill()
    deadline = time.monotonic() + GIVE_UP_S
    while status_on(b, rid) != "paused" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert status_on(b, rid) == "paused"
    status, listing = b.api("GET", f"{rid}/checkpoints", None)
    assert status == 200, listing
    names = [c["name"] for c in listing["checkpoints"]]
    assert names[-1] == "lost", names

    status, back = b.api("POST", "resume", {"runtime_id": rid})
    assert status == 200, back
    assert b.execute(back["kernel_id"], "print(x)").strip() == "42"
    status, where = b.api("GET", f"{rid}/workspace")
    assert status == 200, where
    assert Path(where["path"], "notes.txt").read_text() == "written on A"
    assert Path(where["path"], "late.txt").read_text() == "after the last checkpoint"


def test_two_servers_resuming_one_runtime_at_once_exactly_one_proceeds(
    servers: tuple[LiveServer, LiveServer],
) -> None:
    import concurrent.futures

    a, b = servers
    session = a.open_notebook("shared.ipynb")
    a.execute(session["kernel"]["id"], "y = 'kept'")
    rid = session["id"]
    status, paused = a.api("POST", "pause", {"runtime_id": rid})
    assert status == 200, paused

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        answers: list[Any] = list(
            pool.map(lambda server: server.api("POST", "resume", {"runtime_id": rid}), (a, b))
        )
    codes = sorted(code for code, _ in answers)
    assert codes == [200, 409], answers
    (winner,) = [server for server, (code, _) in zip((a, b), answers, strict=True) if code == 200]
    loser_answer = next(body for code, body in answers if code == 409)
    assert loser_answer["error"] == "SessionBusy"
    assert winner.url in loser_answer["message"]
    kernel = next(body for code, body in answers if code == 200)["kernel_id"]
    assert winner.execute(kernel, "print(y)").strip() == "kept"
