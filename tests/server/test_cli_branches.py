"""`ditto compare` and `ditto keep` (issue 44 §3) against a real Jupyter server process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.live_server import LiveServer
from tests.server.test_cli import as_json, ditto

pytestmark = pytest.mark.slow  # real kernels / a jupyter server process


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiveServer]:
    config = {"DittoJupyterApp": {"document_wait_seconds": 0.0}}
    with LiveServer(tmp_path / "server", config=config) as live:
        yield live


def test_ditto_compare_and_keep_a_fan_out(server: LiveServer) -> None:
    session = server.open_notebook("cli-fan.ipynb")
    rid, kernel = session["id"], session["kernel"]["id"]
    server.execute(kernel, "x = 1\nw = 7")
    assert ditto("checkpoint", rid, "--name", "start", server=server).returncode == 0
    fan = as_json(
        ditto("--json", "checkout", "start", "--runtime", rid, "--count", "2", server=server)
    )
    children = [c["checkout"]["runtime"]["runtime_id"] for c in fan["children"]]
    assert [c["checkout"]["runtime"]["fanout"]["index"] for c in fan["children"]] == [0, 1]
    server.execute(fan["children"][0]["checkout"]["kernel_id"], "x = 10")

    text = ditto("compare", children[0], children[1], f"{rid}@start", server=server)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == f"S1  {children[0]}: live kernel, saved notebook"
    assert lines[2].startswith(f"S3  {rid}: start (")
    assert any(line.split() == ["=", "w", "7", "7", "7"] for line in lines), lines
    assert any(line.split() == ["*", "x", "10", "1", "1"] for line in lines), lines

    answer = as_json(
        ditto("--json", "compare", f"{children[1]}@live", f"{rid}@start", server=server)
    )
    assert [s["runtime_id"] for s in answer["sides"]] == [children[1], rid]

    one = ditto("compare", children[0], server=server)
    assert one.returncode == 3 and "2 to 8 sides" in one.stderr
    lone = ditto("keep", rid, server=server)
    assert lone.returncode == 3 and "not a child of a fan-out" in lone.stderr

    kept = ditto("keep", children[0], server=server)
    assert kept.returncode == 0, kept.stderr
    assert kept.stdout.strip() == f"kept {children[0]}; closed {children[1]}"
    closed = as_json(ditto("--json", "runtime", children[1], server=server))
    assert closed["status"] == "closed"
    listing = as_json(ditto("--json", "checkpoints", children[1], server=server))
    assert [c["name"] for c in listing["checkpoints"]] == ["close"]
