"""The `ditto` CLI against a real Jupyter server process: output, --json, exit codes.

Exit codes: 0 done, 2 usage error, 3 the server refused (4xx), 4 server or connection error.
"""

from __future__ import annotations

import json
import os
import shlex
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


# ---- the CLI accepts what it prints ---------------------------------------------------


def listed_ids(server: LiveServer, runtime_id: str) -> list[str]:
    """The CHECKPOINT column of `ditto checkpoints RUNTIME`, as printed."""
    result = ditto("checkpoints", runtime_id, server=server)
    assert result.returncode == 0, result.stderr
    return [line.split()[0] for line in result.stdout.splitlines()[1:]]


def refused(result: subprocess.CompletedProcess[str], code: str) -> str:
    """The one line a refused command prints (exit 3); its message."""
    assert result.returncode == 3, (result.stdout, result.stderr)
    [line] = result.stderr.splitlines()
    assert line.startswith(f"ditto: {code}: "), line
    return line.removeprefix(f"ditto: {code}: ")


def test_cli_takes_back_the_ids_it_prints(server: LiveServer) -> None:
    session = server.open_notebook("ids.ipynb")
    runtime_id, kernel_id = session["id"], session["kernel"]["id"]
    server.execute(kernel_id, "x = 1")
    full_id = as_json(ditto("--json", "checkpoint", runtime_id, server=server))["checkpoint_id"]
    [short] = listed_ids(server, runtime_id)
    assert len(short) == 12 and full_id.startswith(short)

    # checkout by the printed id, --json after the command
    child = as_json(ditto("checkout", short, "--json", server=server))
    assert child["checkpoint_id"] == full_id
    assert child["runtime"]["runtime_id"].startswith(f"{runtime_id}-")

    # restore by the printed id, in RUNTIME
    server.execute(kernel_id, "x = 2")
    restored = ditto("restore", runtime_id, short, server=server)
    assert restored.returncode == 0, restored.stderr
    assert restored.stdout.startswith(f"restored {full_id} into {runtime_id} (idle")
    assert server.execute(kernel_id, "print(x)").strip() == "1"

    # delete-snapshot by the printed id; the record is the full id's
    deleted = ditto("delete-snapshot", short, server=server)
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout.strip() == f"snapshot of checkpoint {full_id}: deleted"


def test_cli_takes_names_as_runtime_colon_name_or_with_runtime(server: LiveServer) -> None:
    session = server.open_notebook("names.ipynb")
    runtime_id, kernel_id = session["id"], session["kernel"]["id"]
    server.execute(kernel_id, "x = 'named'")
    named = as_json(ditto("checkpoint", runtime_id, "--name", "v1:final", "--json", server=server))
    unnamed = as_json(ditto("--json", "checkpoint", runtime_id, server=server))
    assert named["checkpoint_id"] != unnamed["checkpoint_id"]

    # RUNTIME:NAME splits at the first colon, so a name may hold one; --json before
    child = as_json(ditto("--json", "checkout", f"{runtime_id}:v1:final", server=server))
    assert child["checkpoint_id"] == named["checkpoint_id"]
    # with --runtime the reference is taken whole; global flags after the command
    answer = ditto(
        "delete-snapshot",
        "v1:final",
        "--runtime",
        runtime_id,
        "--timeout",
        "60",
        "--json",
        server=server,
    )
    assert as_json(answer)["checkpoint_id"] == named["checkpoint_id"]
    # restore's RUNTIME scopes the name
    server.execute(kernel_id, "x = 'changed'")
    restored = as_json(ditto("restore", runtime_id, "v1:final", "--json", server=server))
    assert restored["checkpoint_id"] == named["checkpoint_id"]
    assert server.execute(kernel_id, "print(x)").strip() == "named"
    # --url and --token after the command too
    listing = ditto(
        "runtimes", "--url", server.url, "--token", server.token, env={"DITTO_TOKEN": "wrong"}
    )
    assert listing.returncode == 0, listing.stderr
    assert runtime_id in listing.stdout


def test_cli_refuses_an_unknown_name_or_an_ambiguous_prefix_in_one_line(
    server: LiveServer,
) -> None:
    session = server.open_notebook("refused.ipynb")
    runtime_id = session["id"]
    server.execute(session["kernel"]["id"], "x = 1")

    message = refused(ditto("checkout", "no-such-name", server=server), "CheckpointNotFound")
    assert "'no-such-name'" in message
    message = refused(
        ditto("checkout", f"{runtime_id}:no-such-name", server=server), "CheckpointNotFound"
    )
    assert "'no-such-name'" in message and runtime_id in message
    refused(ditto("restore", runtime_id, "no-such-name", server=server), "CheckpointNotFound")
    refused(ditto("delete-snapshot", "no-such-name", server=server), "CheckpointNotFound")
    answer = ditto("checkout", "no-such-name", "--json", server=server)
    assert answer.returncode == 3 and json.loads(answer.stdout)["error"] == "CheckpointNotFound"

    # Checkpoint until two ids share their first character (at most 17 by pigeonhole).
    ids: list[str] = []
    while len({i[0] for i in ids}) == len(ids):
        status, answer_body = server.api("POST", "checkpoint", {"runtime_id": runtime_id})
        assert status == 200, answer_body
        ids.append(answer_body["checkpoint_id"])
    prefix = next(i[0] for i in ids if sum(j[0] == i[0] for j in ids) > 1)
    sharing = sum(i.startswith(prefix) for i in ids)
    for args in (
        ["checkout", prefix],
        ["checkout", prefix, "--runtime", runtime_id],
        ["restore", runtime_id, prefix],
        ["delete-snapshot", f"{runtime_id}:{prefix}"],
    ):
        message = refused(ditto(*args, server=server), "InvalidRequest")
        assert message == f"{prefix!r} matches {sharing} checkpoints; give more of the id", args
    # nothing ran: no checkout child appeared
    runtimes = as_json(ditto("runtimes", "--json", server=server))["runtimes"]
    assert [r["runtime_id"] for r in runtimes] == [runtime_id]


def test_cli_lists_checkpoints_a_page_at_a_time(
    server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = server.open_notebook("pages.ipynb")
    runtime_id = session["id"]
    ids = [
        as_json(ditto("--json", "checkpoint", runtime_id, server=server))["checkpoint_id"]
        for _ in range(5)
    ]
    first = ditto("checkpoints", runtime_id, "--limit", "2", server=server)
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert [line.split()[0] for line in lines[1:3]] == [i[:12] for i in ids[:2]]
    assert lines[3] == f"more follow: --cursor {ids[1]}"
    rest = as_json(
        ditto(
            "checkpoints", runtime_id, "--limit", "9", "--cursor", ids[1], "--json", server=server
        )
    )
    assert [c["checkpoint_id"] for c in rest["checkpoints"]] == ids[2:]
    assert rest["next_cursor"] is None
    newest = ditto("checkpoints", runtime_id, "--newest-first", server=server)
    assert [line.split()[0] for line in newest.stdout.splitlines()[1:]] == [
        i[:12] for i in reversed(ids)
    ]
    for args, message in [
        (["--cursor", ids[0]], "--cursor needs --limit"),
        (["--limit", "0"], "0 is not between 1 and 1000"),
        (["--limit", "ten"], "'ten' is not a whole number"),
    ]:
        refused_usage = ditto("checkpoints", runtime_id, *args, server=server)
        assert refused_usage.returncode == 2 and message in refused_usage.stderr, args
    # without --limit every checkpoint comes, fetched page by page
    from ditto_jupyter import client as client_module

    monkeypatch.setattr(client_module, "PAGE_SIZE", 2)
    client = client_module.RuntimeClient(server.url, server.token)
    try:
        listed = client.list_checkpoints(runtime_id)
    finally:
        client.close()
    assert [c["checkpoint_id"] for c in listed["checkpoints"]] == ids


def readme_cli_lines() -> list[list[str]]:
    """Every `ditto ...` line of the README's code blocks, as argument lists."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    blocks = readme.split("```")[1::2]
    lines = [line.split("#")[0].strip() for block in blocks for line in block.splitlines()]
    return [shlex.split(line)[1:] for line in lines if line.startswith("ditto ")]


def test_readme_cli_examples_work_as_written(server: LiveServer) -> None:
    examples = readme_cli_lines()
    assert len(examples) >= 3
    session = server.open_notebook("readme.ipynb")
    runtime_id = session["id"]
    server.execute(session["kernel"]["id"], "x = 1")
    for args in examples:
        shown = {"RUNTIME": runtime_id}
        if any("CHILD_" in arg for arg in args):  # the fan-out's children, made by a line before
            shown.update(fan_out_children(server))
        if any("CHECKPOINT" in arg for arg in args):
            shown["CHECKPOINT"] = listed_ids(server, runtime_id)[-1]  # as printed: 12 chars
        concrete = [fill_placeholders(arg, shown) for arg in args]
        result = ditto(*concrete, server=server)
        assert result.returncode == 0, (args, result.stderr)
        if "--json" in concrete:
            json.loads(result.stdout)


def fan_out_children(server: LiveServer) -> dict[str, str]:
    """`CHILD_1`, `CHILD_2`, ...: the children of the one fan-out the README made, in order."""
    status, listed = server.api("GET")
    assert status == 200, listed
    children = sorted(
        (r for r in listed["runtimes"] if r.get("fanout")), key=lambda r: r["fanout"]["index"]
    )
    assert children, "the README uses CHILD_n before any line made a fan-out"
    return {f"CHILD_{r['fanout']['index'] + 1}": r["runtime_id"] for r in children}


def fill_placeholders(arg: str, values: dict[str, str]) -> str:
    """`RUNTIME:before-cleaning` -> `<runtime id>:before-cleaning`."""
    for name, value in values.items():
        arg = arg.replace(name, value)
    return arg
