"""%diff, %undo and %checkout in a real kernel of a real Jupyter server.

The kernel calls the server's `self/diff`, `self/undo` and `self/checkout` routes. Its own
checkpoints hold the saved notebook (no front end answers here), so `%diff` compares cells
too; checkout writes the child's notebook from the checkpoint's document.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from jupyter_client import BlockingKernelClient

from tests.server.live_server import LiveServer
from tests.support.kernel_cells import clean, run_cell, value
from tests.support.magic_display import printed_once, returned_once

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    base = tmp_path_factory.mktemp("history-magics")
    config = {"DittoJupyterApp": {"document_wait_seconds": 0.0}}
    with LiveServer(base, config=config) as server:
        yield server


def connect(live: LiveServer, kernel_id: str) -> BlockingKernelClient:
    client: BlockingKernelClient = live.connect(kernel_id)
    return client


def save(live: LiveServer, path: str, *sources: str) -> None:
    made = nbformat.v4.new_notebook()
    for index, source in enumerate(sources):
        cell = nbformat.v4.new_code_cell(source, execution_count=index + 1)
        cell["id"] = f"c{index}"  # the same cell keeps its id, as in JupyterLab
        made.cells.append(cell)
    content = json.loads(nbformat.writes(made))
    live.request("PUT", f"api/contents/{path}", {"type": "notebook", "content": content})


def test_diff_undo_and_checkout_from_the_magics(live: LiveServer) -> None:
    session = live.open_notebook("history.ipynb")
    rid = session["id"]
    client = connect(live, session["kernel"]["id"])
    try:
        clean(run_cell(client, "import ditto_jupyter\nws = ditto_jupyter.workspace()"))
        save(live, "history.ipynb", "import ditto_jupyter")
        clean(run_cell(client, "%checkpoint first"))
        clean(run_cell(client, "x = 1\n(ws / 'a.txt').write_text('one\\n');"))
        save(live, "history.ipynb", "import ditto_jupyter", "x = 1")
        shown = returned_once(clean(run_cell(client, "%diff")))
        text = shown["text/plain"]
        assert "to live kernel, saved notebook" in text.splitlines()[0]
        assert "  + x  int  1" in text and "  + a.txt (4 B)" in text
        assert "cells: 1 added, 0 removed, 0 changed, 1 unchanged" in text
        assert "<b>cells</b>: 1 added" in shown["text/html"]

        clean(run_cell(client, "%checkpoint second"))
        both = returned_once(clean(run_cell(client, "%diff first second")))["text/plain"]
        assert "cells: 1 added" in both and "files: 1 added" in both
        _, listed = live.api("GET", f"{rid}/checkpoints")
        assert [c["name"] for c in listed["checkpoints"]] == ["first", "second"]
        assert [c["document"]["source"] for c in listed["checkpoints"]] == ["saved_file"] * 2

        clean(run_cell(client, "%autocheckpoint on"))
        clean(run_cell(client, "y = 10\n(ws / 'a.txt').write_text('two\\n');"))
        line = printed_once(clean(run_cell(client, "%undo")))
        assert line.startswith("undid cell ") and "(y = 10)" in line
        clean(run_cell(client, "%autocheckpoint off"))
        assert value(client, "['y' in globals(), (ws / 'a.txt').read_text()]") == [False, "one\n"]

        out = printed_once(clean(run_cell(client, "%checkout first")))
        child_path = out.split("; notebook ")[1].split(";")[0]
        child = nbformat.read(str(live.root_dir / child_path), as_version=4)
        assert [c.source for c in child.cells] == ["import ditto_jupyter"]  # as it was then

        refused = run_cell(client, "%diff no-such-checkpoint")
        assert refused.stderr.startswith("ditto: CheckpointNotFound: ")
    finally:
        client.stop_channels()


def test_undo_with_nothing_to_undo_is_one_line(live: LiveServer, tmp_path: Path) -> None:
    session = live.open_notebook("nothing.ipynb")
    client = connect(live, session["kernel"]["id"])
    try:
        out = run_cell(client, "%undo")
        assert out.error is None
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("ditto: Conflict: "), out.stderr
    finally:
        client.stop_channels()


def test_percent_undo_after_autocheckpoint_off_refuses_and_loses_nothing(
    live: LiveServer,
) -> None:
    """Issue 40 section 1: cells run after `%autocheckpoint off` are held by no checkpoint;
    `%undo` refuses in one line, leading with the hint and naming the notebook."""
    session = live.open_notebook("three-hours.ipynb")
    rid = session["id"]
    client = connect(live, session["kernel"]["id"])
    try:
        for cell in ("%autocheckpoint on", "x = 1", "x = 2", "%autocheckpoint off"):
            clean(run_cell(client, cell))
        clean(run_cell(client, "x = 3"))
        clean(run_cell(client, "work = 'three hours of results'"))
        _, before = live.api("GET", f"{rid}/lineage")
        out = run_cell(client, "%undo")
        assert out.error is None and out.stdout == ""
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1, out.stderr
        assert lines[0].startswith("ditto: Conflict: turn %autocheckpoint on"), lines[0]
        assert "three-hours.ipynb" in lines[0] and rid not in lines[0]
        assert value(client, "[x, work]") == [3, "three hours of results"]
        _, after = live.api("GET", f"{rid}/lineage")
        assert after["head"] == before["head"]
    finally:
        client.stop_channels()


def test_percent_undo_right_after_autocheckpoint_off_undoes_the_last_cell(
    live: LiveServer,
) -> None:
    """`%autocheckpoint off` changes no variable: the cell before it is still the last."""
    session = live.open_notebook("off-then-undo.ipynb")
    client = connect(live, session["kernel"]["id"])
    try:
        for cell in ("%autocheckpoint on", "x = 1", "x = 2", "%autocheckpoint off"):
            clean(run_cell(client, cell))
        line = printed_once(clean(run_cell(client, "%undo")))
        assert line.startswith("undid cell ") and "(x = 2)" in line, line
        assert value(client, "x") == 1
    finally:
        client.stop_channels()
