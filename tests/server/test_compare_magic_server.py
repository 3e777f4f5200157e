"""`%compare` (issue 44 §3) in a real kernel of a real Jupyter server: the fan-out's
children side by side, this kernel's own checkpoints by `@NAME`, and one-line refusals."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.live_server import LiveServer
from tests.server.test_history_magics_server import clean, connect
from tests.support.kernel_cells import run_cell
from tests.support.magic_display import returned_once

pytestmark = pytest.mark.slow


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveServer]:
    config = {"DittoJupyterApp": {"document_wait_seconds": 0.0}}
    with LiveServer(tmp_path / "server", config=config) as server:
        yield server


def test_compare_magic_shows_the_children_side_by_side(live: LiveServer) -> None:
    session = live.open_notebook("compare.ipynb")
    rid = session["id"]
    client = connect(live, session["kernel"]["id"])
    try:
        clean(run_cell(client, "x = 1\nw = 7"))
        clean(run_cell(client, "%checkpoint start"))
        out = clean(run_cell(client, "%checkout start --count 2"))
        children = re.findall(rf"\[\d\] runtime ({re.escape(rid)}-[0-9a-f]{{12}})", out.stdout)
        assert len(children) == 2, out.stdout
        clean(run_cell(client, "x = 2"))
        clean(run_cell(client, "%checkpoint two"))

        shown = returned_once(clean(run_cell(client, f"%compare {children[0]} {children[1]} @two")))
        lines = shown["text/plain"].splitlines()
        assert lines[0] == f"S1  {children[0]}: live kernel, saved notebook"
        assert lines[2].startswith(f"S3  {rid}: two (")
        assert any(line.split() == ["=", "w", "7", "7", "7"] for line in lines), lines
        assert any(line.split() == ["*", "x", "1", "1", "2"] for line in lines), lines

        # bare, this runtime is its head (this kernel is busy running the magic)
        shown = returned_once(clean(run_cell(client, f"%compare {rid} @start")))
        assert shown["text/plain"].splitlines()[0].startswith(f"S1  {rid}: two (")

        for line, said in (
            ("%compare @start", "2 to 8 sides"),
            ("%compare @live @start", "this kernel is running %compare"),
            ("%compare @start nobody-at-all", "no runtime or Jupyter session with id"),
        ):
            out = run_cell(client, line)
            assert out.error is None and said in out.stderr, (line, out)
            assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    finally:
        client.stop_channels()
