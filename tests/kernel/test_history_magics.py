"""%diff and %undo in a real ipykernel with no server (the in-process RuntimeService).

Without a server a checkpoint holds no notebook document: `%diff` says its cells are not
available, and compares variables and workspace files all the same. `%undo` brings the
variables and the workspace files back to just before the last cell `%autocheckpoint`
recorded.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kernel.test_autocheckpoint import Kernel, checkpoints, runtime_id
from tests.support.kernel_cells import value
from tests.support.magic_display import printed_once, returned_once


def peek(kernel: Kernel, expression: str) -> Any:
    """A JSON value computed in the kernel without running a cell (a user expression of a
    silent request): it defines no name and counts as no cell, so undo still sees the
    last cell as the last one."""
    wrapped = f"__import__('json').dumps({expression})"
    reply = kernel.client.execute(
        "", silent=True, user_expressions={"v": wrapped}, reply=True, timeout=60
    )
    found = reply["content"]["user_expressions"]["v"]
    assert found["status"] == "ok", found
    return json.loads(found["data"]["text/plain"].strip("'"))


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    k = Kernel(tmp_path / "data", cwd)
    k.ok("%load_ext ditto_jupyter\nimport ditto_jupyter\nws = ditto_jupyter.workspace()")
    yield k
    k.stop()


def test_diff_of_checkpoints_and_of_this_kernel_without_a_server(kernel: Kernel) -> None:
    kernel.ok("%checkpoint first")
    kernel.ok("x = 1\n(ws / 'a.txt').write_text('one\\n');")
    shown = returned_once(kernel.ok("%diff"))  # the head against this kernel now
    text, page = shown["text/plain"], shown["text/html"]
    assert text.splitlines()[0].startswith("from first (") and text.splitlines()[0].endswith(
        "to live kernel"
    )
    assert "  + x  int  1" in text and "  + a.txt (4 B)" in text
    assert "cells: not available (a side holds no notebook document)" in text
    assert "<b>variables</b>: 1 added" in page and "a.txt" in page

    kernel.ok("%checkpoint second")
    against_parent = returned_once(kernel.ok("%diff second"))["text/plain"]
    both = returned_once(kernel.ok("%diff first second"))["text/plain"]
    assert against_parent.splitlines()[1:] == both.splitlines()[1:]
    assert "variables: 1 added, 0 removed, 0 changed" in both

    wrong = kernel.run("%diff first second third")
    assert wrong.error is None and wrong.stderr.startswith("ditto: InvalidRequest: ")
    rid = runtime_id(kernel)
    assert [c.name for c in checkpoints(kernel, kernel_data(kernel), rid)] == ["first", "second"]


def kernel_data(kernel: Kernel) -> Path:
    return Path(value(kernel.client, "__import__('os').environ['DITTO_DATA_DIR']"))


def test_undo_brings_back_variables_and_files(kernel: Kernel) -> None:
    refused = kernel.run("%undo")
    assert refused.error is None and refused.stderr.startswith("ditto: Conflict: ")
    kernel.ok("%autocheckpoint on")
    kernel.ok("rows = [1]\n(ws / 'kept.txt').write_text('v1');")
    kernel.ok(
        "rows.append(2)\n(ws / 'kept.txt').write_text('v2');\n(ws / 'added.txt').write_text('x');"
    )
    line = printed_once(kernel.ok("%undo"))
    assert line.startswith("undid cell ") and "(rows.append(2))" in line
    assert "variables and workspace files restored" in line
    kernel.ok("%autocheckpoint off")  # changes no variable: the undone state is the last
    assert peek(kernel, "rows") == [1]  # looks without running a cell
    assert peek(kernel, "sorted(p.name for p in ws.iterdir())") == ["kept.txt"]
    assert peek(kernel, "(ws / 'kept.txt').read_text()") == "v1"
    # the cell that ran %undo recorded nothing: undoing again goes one cell further back
    assert "(rows = [1])" in printed_once(kernel.ok("%undo"))
    assert value(kernel.client, "'rows' in globals()") is False
    assert value(kernel.client, "list(ws.iterdir())") == []
