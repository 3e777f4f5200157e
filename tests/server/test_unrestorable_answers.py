"""Checkout and resume say which values the new kernel could not load (issue 14, section 2).

The source kernel imports a module from a folder only it has on `sys.path`, and holds an
instance of its class. A checkout child's kernel and a resumed kernel cannot import it, so
the module and the instance are lost there; every front end says so, with type and
reason: the REST answers and the runtime events (an in-process server), the `ditto`
command's output and the magics' lines (a real server process).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from ditto_jupyter.server.app import DittoJupyterApp
from ditto_jupyter.server.events import RUNTIME_EVENT_SCHEMA_ID
from tests.server.conftest import OpenRuntime
from tests.server.live_server import LiveServer
from tests.server.notebook_sessions import run, user_variables

pytestmark = pytest.mark.slow  # real kernels under a real Jupyter server

Api = Any  # the `api` fixture of conftest.py


@pytest.fixture
def ditto_load_magics() -> bool:
    return False


class LocalModule:
    """A module file in a folder that only the source kernel puts on its `sys.path`."""

    def __init__(self, scratch: Path) -> None:
        folder = scratch / f"only-the-source-{uuid.uuid4().hex[:8]}"
        folder.mkdir(parents=True)
        self.name = f"ditto_local_{uuid.uuid4().hex[:8]}"
        (folder / f"{self.name}.py").write_text(
            "class Point:\n    def __init__(self):\n        self.x = 1\n"
        )
        self.setup = (
            f"import sys\nsys.path.insert(0, {str(folder)!r})\n"
            f"import {self.name} as shapes\np = shapes.Point()\nkept = [1, 2]\n"
        )

    def check_lost(self, unrestorable: list[dict[str, Any]]) -> None:
        """The answer names the module and the instance, with type and reason; nothing else."""
        lost = {value["name"]: value for value in unrestorable}
        assert set(lost) == {"shapes", "p"}, unrestorable
        missing = f"ModuleNotFoundError: No module named '{self.name}'"
        assert lost["shapes"]["type"] == "module"
        assert lost["shapes"]["reason"] == f"import failed: {missing}"
        assert lost["p"]["type"] == f"{self.name}.Point"
        assert lost["p"]["reason"] == f"could not be loaded: {missing}"

    def check_line(self, text: str) -> None:
        """A magic's or the CLI's output names both lost values with type and reason."""
        missing = f"No module named '{self.name}'"
        assert "p (" in text and f"{self.name}.Point" in text and missing in text, text
        assert "shapes (module" in text, text


async def test_checkout_and_resume_answers_and_events_name_what_was_lost(
    api: Api,
    ditto_app: DittoJupyterApp,
    open_runtime: OpenRuntime,
    jp_serverapp: Any,
    tmp_path: Path,
) -> None:
    module = LocalModule(tmp_path)
    source = await open_runtime("source.ipynb")
    await run(ditto_app, source.kernel_id, module.setup)
    events: list[dict[str, Any]] = []

    async def listener(logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        events.append(data)

    jp_serverapp.event_logger.add_listener(schema_id=RUNTIME_EVENT_SCHEMA_ID, listener=listener)

    status, checkpoint = await api("POST", "checkpoint", {"runtime_id": source.runtime_id})
    assert status == 200, checkpoint
    status, child = await api("POST", "checkout", {"checkpoint_id": checkpoint["checkpoint_id"]})
    assert status == 200, child
    module.check_lost(child["unrestorable"])
    held = await user_variables(ditto_app, child["kernel_id"])
    assert held["kept"] == [1, 2] and "p" not in held

    status, paused = await api("POST", "pause", {"runtime_id": source.runtime_id})
    assert status == 200, paused
    status, resumed = await api("POST", "resume", {"runtime_id": source.runtime_id})
    assert status == 200, resumed
    module.check_lost(resumed["unrestorable"])

    await jp_serverapp.event_logger.gather_listeners()
    by_action = {event["action"]: event for event in events}
    assert by_action["checkout"]["unrestorable"] == child["unrestorable"]
    assert by_action["resume"]["unrestorable"] == resumed["unrestorable"]
    assert by_action["checkpoint"]["unrestorable"] is None  # not a load


def ditto(server: LiveServer, *args: str) -> str:
    """The `ditto` command's output against the live server (it must succeed)."""
    env = {**os.environ, "DITTO_SERVER_URL": server.url, "DITTO_TOKEN": server.token}
    done = subprocess.run(
        [sys.executable, "-m", "ditto_jupyter.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_cli_and_magics_print_what_checkout_and_resume_lost(tmp_path: Path) -> None:
    module = LocalModule(tmp_path)
    with LiveServer(tmp_path / "server") as server:
        source = server.open_notebook("source.ipynb")
        rid, kernel_id = source["id"], source["kernel"]["id"]
        server.execute(kernel_id, module.setup)
        ditto(server, "checkpoint", rid, "--name", "base")

        line = server.execute(kernel_id, "%checkout base").strip()
        assert line.startswith("checked out ") and "; not kept: " in line, line
        module.check_line(line)

        out = ditto(server, "checkout", "base", "--runtime", rid)
        lost_lines = [x for x in out.splitlines() if x.startswith("  not restored: ")]
        assert len(lost_lines) == 2, out
        module.check_line(out)

        ditto(server, "pause", rid)
        out = ditto(server, "resume", rid)
        assert out.startswith(f"resumed {rid}"), out
        assert len([x for x in out.splitlines() if x.startswith("  not restored: ")]) == 2
        module.check_line(out)

        resumed = server.request("GET", f"api/sessions/{rid}").json()["kernel"]["id"]
        server.execute(resumed, module.setup)  # the source has its module again
        ditto(server, "pause", rid)
        other = server.open_notebook("other.ipynb")
        line = server.execute(other["kernel"]["id"], f"%resume {rid}").strip()
        assert line.startswith(f"resumed runtime {rid}") and "; not kept: " in line, line
        module.check_line(line)
