"""`%checkout NAME --count N` in a real kernel of a real Jupyter server, and `ditto checkout
--count N` against it (issue 44 §1): a line per child, each its own runtime and kernel
holding the checkpoint's variables; a count over 20 refused in one line naming the cap."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from jupyter_client import BlockingKernelClient

from tests.server.live_server import LiveServer
from tests.server.test_cli import as_json, ditto
from tests.support.kernel_cells import run_cell

pytestmark = pytest.mark.slow


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveServer]:
    with LiveServer(tmp_path / "fanout-server") as server:
        yield server


def connect(live: LiveServer, kernel_id: str) -> BlockingKernelClient:
    client: BlockingKernelClient = live.connect(kernel_id)
    return client


def child_kernel(live: LiveServer, runtime_id: str) -> str:
    return str(live.request("GET", f"api/sessions/{runtime_id}").json()["kernel"]["id"])


def test_checkout_magic_and_cli_take_a_count(live: LiveServer) -> None:
    session = live.open_notebook("branches.ipynb")
    rid, kernel_id = session["id"], session["kernel"]["id"]
    client = connect(live, kernel_id)
    try:
        assert run_cell(client, "x = 40\n%checkpoint start").error is None
        out = run_cell(client, "%checkout start --count 3")
        assert out.error is None and out.stderr == "", out
        lines = out.stdout.strip().splitlines()
        assert lines[0].startswith("checked out ") and " into 3 of 3 runtimes" in lines[0]
        children = re.findall(rf"\[\d\] runtime ({re.escape(rid)}-[0-9a-f]{{12}})", out.stdout)
        assert len(set(children)) == 3, out.stdout
        for child in children:
            assert live.execute(child_kernel(live, child), "print(x + 2)").strip() == "42"

        refused = run_cell(client, "%checkout start --count 21")
        assert refused.error is None
        assert "at most 20" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    finally:
        client.stop_channels()

    answer = as_json(
        ditto("checkout", "start", "--runtime", rid, "--count", "2", "--json", server=live)
    )
    made = [c["checkout"]["runtime"]["runtime_id"] for c in answer["children"]]
    assert len(set(made)) == 2
    printed = ditto("checkout", "start", "--runtime", rid, "--count", "2", server=live)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.count("checked out ") == 2
    too_many = ditto("checkout", "start", "--runtime", rid, "--count", "21", server=live)
    assert too_many.returncode == 3 and "at most 20" in too_many.stderr
