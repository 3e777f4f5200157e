"""Undo refuses when a cell's automatic checkpoint was not recorded (issue 40 section 1).

A real Jupyter server (its own process), its real SQLite store and real kernels. The
user's order: `%autocheckpoint on`, two cells, then a cell whose automatic checkpoint the
store refuses: another process holds the store's write lock past `store_lock_timeout`
(a `ditto gc`, a backup, another server), so the kernel's record answers 503 and the
kernel prints that the checkpoint was not recorded. Then undo, from the panel (REST) or
`%undo`:

- right away: the head is the cell before, so undoing it would go back two cells and lose
  the unrecorded one; undo refuses, naming the cell whose checkpoint is missing;
- after one more cell, recorded again: its checkpoint's parent is the state before the
  unrecorded cell, so undoing it would undo two cells; undo refuses the same way.

The refusal is one line, leads with what to do, names the notebook and the cell; nothing
moves and the kernel keeps every variable.
"""

from __future__ import annotations

import ast
import contextlib
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client import BlockingKernelClient

from tests.server.live_server import LiveServer
from tests.support.kernel_cells import CellOutput, clean, run_cell, wait_for_autocheckpoints

pytestmark = pytest.mark.slow

#: The store's lock bound in this server (`store_lock_timeout`): a refused record comes soon.
LOCK_TIMEOUT_S = 2.0


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    base = tmp_path_factory.mktemp("undo-unrecorded")
    config = {
        "DittoJupyterApp": {
            "document_wait_seconds": 0.0,
            "store_lock_timeout": LOCK_TIMEOUT_S,
        }
    }
    with LiveServer(base, config=config) as server:
        yield server


def connect(live: LiveServer, kernel_id: str) -> BlockingKernelClient:
    client: BlockingKernelClient = live.connect(kernel_id)
    return client


def ran(out: CellOutput) -> CellOutput:
    """A cell that ran without an error (its stderr may carry the kernel's line that an
    earlier cell's checkpoint was not recorded)."""
    assert out.error is None, out.error
    return out


def peek(client: BlockingKernelClient, expression: str) -> Any:
    """A JSON value computed in the kernel by a silent request: no cell runs, so nothing is
    checkpointed and the last cell stays the last."""
    code = f"__import__('json').dumps({expression})"
    reply = client.execute("", silent=True, user_expressions={"v": code}, reply=True, timeout=180)
    found = reply["content"]["user_expressions"]["v"]
    assert found["status"] == "ok", found
    return json.loads(ast.literal_eval(found["data"]["text/plain"]))


@contextlib.contextmanager
def store_write_lock_held(data_dir: Path) -> Iterator[None]:
    """Another process holds the SQLite store's write lock for the block."""
    holder = sqlite3.connect(data_dir / "ditto.db", isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        yield
        holder.execute("ROLLBACK")
    finally:
        holder.close()


#: A cell whose checkpoint is written behind its reply, and one captured whole before it
#: (it could reach anything: `globals()`).
UNRECORDED = {"written-behind": "x = 3", "synchronous": "x = 3; len(globals())"}


def a_cell_not_recorded(
    live: LiveServer, client: BlockingKernelClient, source: str = UNRECORDED["written-behind"]
) -> None:
    """`%autocheckpoint on`; x = 1; x = 2 (both recorded); `source` (x = 3), whose automatic
    checkpoint the store refuses (its write lock held elsewhere past the bound)."""
    for cell in ("%autocheckpoint on", "x = 1", "x = 2"):
        clean(run_cell(client, cell))
    wait_for_autocheckpoints(client)
    with store_write_lock_held(live.data_dir):
        out = run_cell(client, source)
        wait_for_autocheckpoints(client)  # the record was refused meanwhile
    assert out.error is None, out.error


def automatic_sources(live: LiveServer, rid: str) -> list[str]:
    _, listed = live.api("GET", f"{rid}/checkpoints")
    return [c["automatic"]["source"] for c in listed["checkpoints"] if c["automatic"]]


def cell_of(live: LiveServer, rid: str, source: str) -> int:
    """The execution count of the recorded cell `source`."""
    _, listed = live.api("GET", f"{rid}/checkpoints")
    found = [c["automatic"] for c in listed["checkpoints"] if c["automatic"]]
    counts: list[int] = [a["execution_count"] for a in found if a["source"] == source]
    assert len(counts) == 1, found
    return counts[0]


def refused_in_one_line(message: str, notebook: str, rid: str, missing: int) -> None:
    assert "\n" not in message, message
    assert not message.startswith(("nothing", "runtime")), message  # what to do leads
    assert notebook in message and rid not in message, message
    assert f"cell {missing}" in message and "not recorded" in message, message


def percent_undo_refused(client: BlockingKernelClient) -> str:
    """Run `%undo` as a cell; its one line (what it printed to stderr)."""
    out = ran(run_cell(client, "%undo"))
    assert out.stdout == "", out.stdout
    lines = [line for line in out.stderr.splitlines() if line.startswith("ditto: Conflict: ")]
    assert len(lines) == 1, out.stderr
    return lines[0]


def test_undo_right_after_a_cell_whose_checkpoint_was_not_recorded_refuses(
    live: LiveServer,
) -> None:
    session = live.open_notebook("unrecorded-last.ipynb")
    rid = session["id"]
    client = connect(live, session["kernel"]["id"])
    try:
        a_cell_not_recorded(live, client)
        assert automatic_sources(live, rid)[-1] == "x = 2"  # cell x = 3 has no checkpoint
        missing = cell_of(live, rid, "x = 2") + 1
        _, before = live.api("GET", f"{rid}/lineage")

        status, refused = live.api("POST", "undo", {"runtime_id": rid})
        assert status == 409 and refused["error"] == "Conflict", refused
        refused_in_one_line(refused["message"], "unrecorded-last.ipynb", rid, missing)
        assert peek(client, "x") == 3
        _, after = live.api("GET", f"{rid}/lineage")
        assert after["head"] == before["head"]  # nothing moved

        line = percent_undo_refused(client)
        refused_in_one_line(line, "unrecorded-last.ipynb", rid, missing)
        assert peek(client, "x") == 3
    finally:
        client.stop_channels()


@pytest.mark.parametrize("path", sorted(UNRECORDED))
def test_undo_of_the_cell_after_an_unrecorded_one_refuses(live: LiveServer, path: str) -> None:
    notebook = f"unrecorded-before-{path}.ipynb"
    session = live.open_notebook(notebook)
    rid = session["id"]
    client = connect(live, session["kernel"]["id"])
    try:
        a_cell_not_recorded(live, client, UNRECORDED[path])
        missing = cell_of(live, rid, "x = 2") + 1
        work = "work = 'three hours of results'"
        ran(run_cell(client, work))  # recorded: the store takes writes again
        wait_for_autocheckpoints(client)
        assert automatic_sources(live, rid)[-2:] == ["x = 2", work]
        _, before = live.api("GET", f"{rid}/lineage")

        status, refused = live.api("POST", "undo", {"runtime_id": rid})
        assert status == 409 and refused["error"] == "Conflict", refused
        refused_in_one_line(refused["message"], notebook, rid, missing)
        assert peek(client, "[x, work]") == [3, "three hours of results"]

        line = percent_undo_refused(client)
        refused_in_one_line(line, notebook, rid, missing)
        assert peek(client, "[x, work]") == [3, "three hours of results"]
        _, after = live.api("GET", f"{rid}/lineage")
        assert after["head"] == before["head"]  # nothing moved

        ran(run_cell(client, "y = 5"))  # the cell after it is undone alone again
        wait_for_autocheckpoints(client)
        status, undone = live.api("POST", "undo", {"runtime_id": rid})
        assert status == 200, undone
        assert undone["undone_cell"]["source"] == "y = 5"
        assert peek(client, "[x, work, 'y' in globals()]") == [3, "three hours of results", False]
    finally:
        client.stop_channels()
