"""`ditto diff` and `ditto undo` against a real Jupyter server process."""

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


def test_ditto_diff_text_json_and_undo(server: LiveServer) -> None:
    session = server.open_notebook("cli-diff.ipynb")
    rid, kernel = session["id"], session["kernel"]["id"]
    server.execute(kernel, "x = 41")
    assert ditto("checkpoint", rid, "--name", "one", server=server).returncode == 0
    server.execute(kernel, "x = 42\ny = 'new'")
    assert ditto("checkpoint", rid, "--name", "two", server=server).returncode == 0

    text = ditto("diff", "one", "two", "--runtime", rid, server=server)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].startswith("from one (") and " to two (" in lines[0]
    assert "  + y  str  'new'" in lines and "  ~ x  int  41 -> 42" in lines
    assert "cells: 0 added, 0 removed, 0 changed, 0 unchanged" in lines  # an empty notebook

    answer = as_json(ditto("--json", "diff", f"{rid}:two", server=server))  # against its parent
    assert answer["from"]["label"].startswith("one (")
    assert [v["name"] for v in answer["variables"]["added"]] == ["y"]

    live = as_json(ditto("--json", "diff", "--runtime", rid, server=server))
    assert live["to"]["checkpoint_id"] is None and live["variables"]["added"] == []

    usage = ditto("diff", server=server)
    assert usage.returncode == 2 and "needs a checkpoint A" in usage.stderr
    root = ditto("diff", f"{rid}:one", server=server)
    assert root.returncode == 2 and "has no parent" in root.stderr

    refused = ditto("undo", rid, server=server)
    assert refused.returncode == 3 and refused.stderr.startswith("ditto: Conflict: ")


def test_ditto_diff_takes_runtime_name_on_both_sides(server: LiveServer) -> None:
    first = server.open_notebook("diff-left.ipynb")
    second = server.open_notebook("diff-right.ipynb")
    left, right = first["id"], second["id"]
    server.execute(first["kernel"]["id"], "x = 1")
    assert ditto("checkpoint", left, "--name", "a", server=server).returncode == 0
    server.execute(second["kernel"]["id"], "x = 2\nz = 3")
    assert ditto("checkpoint", right, "--name", "b", server=server).returncode == 0

    answer = as_json(ditto("--json", "diff", f"{left}:a", f"{right}:b", server=server))
    assert answer["from"]["label"].startswith("a (") and answer["to"]["label"].startswith("b (")
    assert [v["name"] for v in answer["variables"]["added"]] == ["z"]
    missing = ditto("diff", f"{left}:a", f"{right}:nothing", server=server)
    assert missing.returncode == 3 and "nothing" in missing.stderr
