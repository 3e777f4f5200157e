"""The `ditto` CLI against a real Jupyter server process: output, --json, exit codes.

Exit codes: 0 done, 2 usage error, 3 the server refused (4xx), 4 server or connection error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.server.live_server import LiveServer, free_port

pytestmark = pytest.mark.slow  # real kernels / a jupyter server process


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiveServer]:
    with LiveServer(tmp_path / "server") as live:
        yield live


def ditto(
    *args: str, server: LiveServer | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `python -m ditto_jupyter.cli ARGS` with DITTO_SERVER_URL/TOKEN of `server`."""
    full_env = dict(os.environ)
    for name in ("DITTO_SERVER_URL", "DITTO_TOKEN"):
        full_env.pop(name, None)
    if server is not None:
        full_env.update({"DITTO_SERVER_URL": server.url, "DITTO_TOKEN": server.token})
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "ditto_jupyter.cli", *args],
        env=full_env,
        capture_output=True,
        text=True,
        check=False,
    )


def as_json(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_cli_drives_every_operation(server: LiveServer) -> None:
    session = server.open_notebook("cli.ipynb")
    runtime_id = session["id"]
    server.execute(session["kernel"]["id"], "x = 41")

    listing = ditto("runtimes", server=server)
    assert listing.returncode == 0, listing.stderr
    assert listing.stdout.splitlines()[0].split() == [
        "RUNTIME",
        "STATUS",
        "CONVERSATION",
        "SENDER",
        "UPDATED",
    ]
    assert (
        runtime_id in listing.stdout and "idle" in listing.stdout and "cli.ipynb" in listing.stdout
    )

    checkpoint = as_json(
        ditto(
            "--json", "checkpoint", runtime_id, "--name", "first", "-m", "owner=ana", server=server
        )
    )
    checkpoint_id = checkpoint["checkpoint_id"]
    assert checkpoint["runtime"]["runtime_id"] == runtime_id

    rows = ditto("checkpoints", runtime_id, server=server)
    assert rows.returncode == 0
    assert checkpoint_id[:12] in rows.stdout and "first" in rows.stdout

    shown = ditto("runtime", runtime_id, server=server)
    assert shown.stdout.strip() == f"{runtime_id} (idle, cli.ipynb)"

    human = ditto("checkpoint", runtime_id, server=server)
    assert human.returncode == 0
    assert human.stdout.startswith("checkpoint ") and f"(previous {checkpoint_id})" in human.stdout

    child = ditto("checkout", "first", "--runtime", runtime_id, "--sender", "bo", server=server)
    assert child.returncode == 0, child.stderr
    assert child.stdout.startswith(f"checked out {checkpoint_id} into {runtime_id}-")
    assert "  kernel " in child.stdout and "  notebook cli-" in child.stdout

    server.execute(session["kernel"]["id"], "x = 0")
    restored = ditto("restore", runtime_id, "first", server=server)
    assert restored.returncode == 0, restored.stderr
    assert server.execute(session["kernel"]["id"], "print(x)").strip() == "41"

    paused = as_json(ditto("--json", "pause", runtime_id, server=server))
    assert paused["runtime"]["status"] == "paused"
    resumed = ditto("resume", runtime_id, server=server)
    assert resumed.returncode == 0 and resumed.stdout.startswith(f"resumed {runtime_id} (idle")
    deleted = ditto("delete-snapshot", checkpoint_id, server=server)
    assert deleted.returncode == 0
    assert deleted.stdout.strip() == f"snapshot of checkpoint {checkpoint_id}: deleted"
    closed = ditto("close", runtime_id, server=server)
    assert closed.returncode == 0 and closed.stdout.startswith(f"closed {runtime_id} (closed")


def test_cli_exit_codes(server: LiveServer, tmp_path: Path) -> None:
    # 2: usage errors, before any request
    for args in (["frobnicate"], ["checkpoint"], ["checkpoint", "r", "-m", "novalue"], []):
        result = ditto(*args, server=server)
        assert result.returncode == 2, (args, result.stderr)
        assert "usage" in result.stderr

    # 3: the server refused the operation (4xx), one line on stderr, the body with --json
    missing = ditto("checkpoint", "no-such-runtime", server=server)
    assert missing.returncode == 3
    assert missing.stderr.strip() == (
        "ditto: RuntimeNotFound: no runtime or Jupyter session with id 'no-such-runtime'"
    )
    refused = ditto("--json", "resume", "no-such-runtime", server=server)
    assert refused.returncode == 3 and json.loads(refused.stdout)["error"] == "RuntimeNotFound"
    wrong_token = ditto("runtimes", env={"DITTO_SERVER_URL": server.url, "DITTO_TOKEN": "nope"})
    assert wrong_token.returncode == 3 and "Forbidden" in wrong_token.stderr

    # 4: nobody answers, or no server can be found
    unreachable = ditto("--url", f"http://127.0.0.1:{free_port()}/", "--token", "x", "runtimes")
    assert unreachable.returncode == 4 and "cannot reach the server" in unreachable.stderr
    empty_runtime = tmp_path / "no-servers"
    empty_runtime.mkdir()
    nothing = ditto("runtimes", env={"JUPYTER_RUNTIME_DIR": str(empty_runtime)})
    assert nothing.returncode == 4 and "no Jupyter server found" in nothing.stderr


def test_cli_finds_the_running_server_like_jupyter_does(server: LiveServer) -> None:
    session = server.open_notebook("found.ipynb")
    result = ditto("--json", "runtimes", env={"JUPYTER_RUNTIME_DIR": str(server.runtime_dir)})
    assert [r["runtime_id"] for r in as_json(result)["runtimes"]] == [session["id"]]
