"""Checkout never leaves a checkpoint out of reach because of today's notebook file.

A real Jupyter server with the extension, a real SQLite store and real kernels. When the
checkpoint holds no document and today's notebook file is not readable JSON, the child is
checked out without a notebook file; when the notebook's folder was deleted, the child's
notebook is written at the root. The answer says which (`notebook_note`).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import nbformat
import pytest

from tests.server.conftest import OpenRuntime
from tests.server.test_notebook_documents import notebook

Api = Any  # the `api` fixture of conftest.py


@pytest.fixture
def ditto_load_magics() -> bool:
    return False


async def test_an_unreadable_notebook_file_checks_out_without_a_notebook_and_says_so(
    api: Api, open_runtime: OpenRuntime, jp_root_dir: Path
) -> None:
    runtime = await open_runtime("broken.ipynb", x=1)
    (jp_root_dir / "broken.ipynb").unlink()
    _, made = await api("POST", "checkpoint", {"runtime_id": runtime.runtime_id})
    (jp_root_dir / "broken.ipynb").write_text("{ this is not json")
    status, child = await api("POST", "checkout", {"checkpoint_id": made["checkpoint_id"]})
    assert status == 200, child
    assert child["notebook_path"] is None and child["notebook_source"] is None
    assert "without a notebook file" in child["notebook_note"]
    assert "broken.ipynb" in child["notebook_note"]
    status, record = await api("GET", child["runtime"]["runtime_id"])
    assert (status, record["status"]) == (200, "idle"), record
    assert (jp_root_dir / "broken.ipynb").read_text() == "{ this is not json"  # untouched


async def test_a_deleted_notebook_folder_checks_out_into_the_root_and_says_so(
    api: Api, open_runtime: OpenRuntime, jp_root_dir: Path
) -> None:
    runtime = await open_runtime("project/deep/work.ipynb", x=1)
    seen = notebook(("x = 1", 1, []))
    _, made = await api("POST", "checkpoint", {"runtime_id": runtime.runtime_id, "document": seen})
    shutil.rmtree(jp_root_dir / "project")
    status, child = await api("POST", "checkout", {"checkpoint_id": made["checkpoint_id"]})
    assert status == 200, child
    path = child["notebook_path"]
    assert path is not None and "/" not in path and path.endswith(".ipynb"), child
    assert child["notebook_source"] == "checkpoint"
    assert "project/deep" in child["notebook_note"] and "root" in child["notebook_note"]
    written = nbformat.read(str(jp_root_dir / path), as_version=4)
    assert [c.source for c in written.cells] == ["x = 1"]
