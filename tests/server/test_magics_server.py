"""Every magic in a real kernel of a real Jupyter server (the kernel calls the REST API).

Each magic's result shows exactly once: the actions print one line and return None, the
listings return a table and print nothing, %%sandbox streams the command's output and
returns its exit status.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client import BlockingKernelClient

from tests.server.live_server import LiveServer
from tests.support.kernel_cells import clean, run_cell, value
from tests.support.magic_display import printed_once, returned_once

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with LiveServer(tmp_path_factory.mktemp("magics-server")) as server:
        yield server


def connect(live: LiveServer, kernel_id: str) -> BlockingKernelClient:
    client: BlockingKernelClient = live.connect(kernel_id)
    return client


def wait_for_status(live: LiveServer, runtime_id: str, status: str) -> dict[str, Any]:
    for _ in range(300):
        code, record = live.api("GET", runtime_id)
        if code == 200 and record["status"] == status:
            return record  # type: ignore[no-any-return]
        time.sleep(0.1)
    raise AssertionError(f"runtime {runtime_id} never became {status}: {record}")


def test_magics_drive_the_server(live: LiveServer) -> None:
    session = live.open_notebook("analysis.ipynb")
    rid, kernel_id = session["id"], session["kernel"]["id"]
    client = connect(live, kernel_id)
    try:
        # loaded automatically in kernels the server starts
        clean(run_cell(client, "x = [1]\ny = x\nimport os.path as osp"))
        line = printed_once(run_cell(client, '%checkpoint "first one" -m owner=ana'))
        assert re.match(r"checkpoint [0-9a-f]{12} 'first one' of runtime", line)
        code, listed = live.api("GET", f"{rid}/checkpoints")
        assert code == 200
        [first] = listed["checkpoints"]
        assert (first["name"], first["metadata"]) == ("first one", {"owner": "ana"})

        clean(run_cell(client, "x.append(2)\nz = 1"))
        assert printed_once(run_cell(client, "%restore 'first one'")).startswith("restored ")
        assert value(client, "[x, y is x, 'z' in globals(), osp.sep]") == [[1], True, False, "/"]

        table = returned_once(run_cell(client, "%checkpoints"))["text/plain"]
        assert "first one" in table
        runtimes = returned_once(run_cell(client, "%runtimes"))["text/plain"]
        assert f"* {rid}" in runtimes and "analysis.ipynb" in runtimes

        out = clean(run_cell(client, "%%sandbox\necho from-the-sandbox > made.txt; cat made.txt"))
        assert out.stdout == "from-the-sandbox\n"  # the command's output, once
        assert [r["text/plain"] for r in out.results] == ["exit 0"]  # its status, once

        out_line = printed_once(run_cell(client, "%checkout 'first one' --sender 'Bob Smith'"))
        match = re.search(rf"into runtime ({re.escape(rid)}-[0-9a-f]{{12}})", out_line)
        assert match, out_line
        child_id = match.group(1)
        assert "notebook analysis-" in out_line
        code, child = live.api("GET", child_id)
        assert code == 200 and child["sender_id"] == "Bob Smith"
        child_kernel = live.request("GET", f"api/sessions/{child_id}").json()["kernel"]["id"]
        assert live.execute(child_kernel, "print(x, y is x)").strip() == "[1] True"

        # another runtime's checkpoint, by its full id, is checked out, not restored here
        code, theirs = live.api("POST", "checkpoint", {"runtime_id": child_id})
        assert code == 200, theirs
        err = run_cell(client, f"%restore {theirs['checkpoint_id']}")
        assert err.stderr.startswith("ditto: InvalidRequest: ") and "%checkout" in err.stderr
        assert value(client, "x") == [1]  # the namespace was not touched

        err = run_cell(client, "%restore no-such-checkpoint")
        assert err.error is None
        assert err.stderr.strip().splitlines() == [err.stderr.strip()] and err.stderr.startswith(
            "ditto: CheckpointNotFound: "
        )

        clean(run_cell(client, "x.append('before pause')"))
        paused = printed_once(run_cell(client, "%pause nightly"))
        assert paused.startswith(f"paused runtime {rid}") and f"%resume {rid}" in paused
    finally:
        client.stop_channels()
    wait_for_status(live, rid, "paused")

    other = live.open_notebook("other.ipynb")
    other_client = connect(live, other["kernel"]["id"])
    try:
        resumed = printed_once(run_cell(other_client, f"%resume {rid}"))
        assert resumed.startswith(f"resumed runtime {rid}")
    finally:
        other_client.stop_channels()
    wait_for_status(live, rid, "idle")
    resumed_kernel = live.request("GET", f"api/sessions/{rid}").json()["kernel"]["id"]
    assert resumed_kernel != kernel_id
    assert live.execute(resumed_kernel, "print(x)").strip() == "[1, 'before pause']"


def test_magic_errors_under_the_server_are_one_line(live: LiveServer, tmp_path: Path) -> None:
    session = live.open_notebook("errors.ipynb")
    client = connect(live, session["kernel"]["id"])
    try:
        for line, code in [
            ("%resume no-such-runtime", "RuntimeNotFound"),
            (f"%resume {session['id']}", "RuntimeNotPaused"),
            ("%checkpoints no-such-runtime", "RuntimeNotFound"),
            ("%checkpoint -m broken", "InvalidRequest"),
        ]:
            out = run_cell(client, line)
            assert out.error is None, out.error
            lines = out.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith(f"ditto: {code}: "), out.stderr
    finally:
        client.stop_channels()
