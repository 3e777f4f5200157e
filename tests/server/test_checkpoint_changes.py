"""What a checkpoint holds, what changed between two, undo, and a restore's changed cells.

A real Jupyter server with the extension (pytest-jupyter), a real SQLite store and real
kernels. Variables are described and compared from what the kernel recorded when it
captured them: a value whose unpickling would fail or run code is listed and compared all
the same, and nothing of it runs in the server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat
import pytest

from ditto_jupyter.control.diff.report import variables_lines
from ditto_jupyter.core.models import VariablesDiff
from ditto_jupyter.server.app import DittoJupyterApp
from tests.server.conftest import OpenRuntime
from tests.server.notebook_sessions import run, user_variables

Api = Any  # the `api` fixture of conftest.py


@pytest.fixture
def ditto_load_magics() -> bool:
    return True  # %autocheckpoint, for undo


def document(*sources: str) -> dict[str, Any]:
    made = nbformat.v4.new_notebook()
    for index, source in enumerate(sources):
        cell = nbformat.v4.new_code_cell(source, execution_count=index + 1)
        cell["id"] = f"c{index}"
        made.cells.append(cell)
    return json.loads(nbformat.writes(made))  # type: ignore[no-any-return]


async def workspace_of(api: Api, runtime_id: str) -> Path:
    status, found = await api("GET", f"{runtime_id}/workspace")
    assert status == 200, found
    return Path(found["path"])


async def checkpoint(api: Api, runtime_id: str, **body: Any) -> str:
    status, made = await api("POST", "checkpoint", {"runtime_id": runtime_id, **body})
    assert status == 200, made
    return str(made["checkpoint_id"])


async def test_contents_list_variables_files_and_document(
    api: Api, ditto_app: DittoJupyterApp, open_runtime: OpenRuntime
) -> None:
    runtime = await open_runtime("contents.ipynb")
    rid = runtime.runtime_id
    await run(
        ditto_app,
        runtime.kernel_id,
        """
        import numpy as np, pandas as pd
        grid = np.zeros((3, 4))
        frame = pd.DataFrame({"a": [1, 2], "b": [3, 4]})
        names = ["x", "y", "z"]
        title = "tides"
        gen = (i for i in range(3))
        """,
    )
    (await workspace_of(api, rid)).joinpath("notes.txt").write_text("hello\n")
    cid = await checkpoint(api, rid, document=document("grid = ...", "frame = ..."))
    status, contents = await api("GET", f"{rid}/checkpoints/{cid}/contents")
    assert status == 200, contents
    by_name = {v["name"]: v for v in contents["variables"]}
    assert by_name["grid"]["summary"] == "shape (3, 4) float64"
    assert by_name["grid"]["type"] == "numpy.ndarray" and by_name["grid"]["size"] > 0
    assert by_name["frame"]["summary"] == "shape (2, 2) columns a, b"
    assert by_name["names"]["summary"] == "length 3"
    assert by_name["title"]["summary"] == "'tides'"
    assert by_name["np"] == {
        "name": "np",
        "type": "module",
        "summary": "import numpy",
        "size": None,
        "kept": True,
        "reason": None,
        "digest": "module:numpy",
    }
    assert by_name["gen"]["kept"] is False and "generator" in by_name["gen"]["reason"]
    assert contents["files"] == {"count": 1, "bytes": 6}
    assert contents["document"] == {"cells": 2}


async def test_a_value_whose_unpickling_runs_code_is_described_and_compared_unrun(
    api: Api, ditto_app: DittoJupyterApp, open_runtime: OpenRuntime, tmp_path: Path
) -> None:
    marker = tmp_path / "unpickled"
    runtime = await open_runtime("hostile.ipynb")
    rid = runtime.runtime_id
    await run(
        ditto_app,
        runtime.kernel_id,
        f"""
        import pathlib
        def touch(path, state):
            pathlib.Path(path).touch()
        def refuse(state):
            raise RuntimeError("this value cannot be loaded")
        class Trap:
            def __init__(self, state): self.state = state
            def __reduce__(self): return (touch, ({str(marker)!r}, self.state))
        class Broken:
            def __init__(self, state): self.state = state
            def __reduce__(self): return (refuse, (self.state,))
        trap, broken = Trap(1), Broken(1)
        """,
    )
    first = await checkpoint(api, rid)
    await run(ditto_app, runtime.kernel_id, "trap.state = 2")
    second = await checkpoint(api, rid)

    status, contents = await api("GET", f"{rid}/checkpoints/{first}/contents")
    assert status == 200, contents
    by_name = {v["name"]: v for v in contents["variables"]}
    assert by_name["trap"]["type"].endswith("Trap") and by_name["trap"]["kept"]
    assert by_name["broken"]["type"].endswith("Broken") and by_name["broken"]["kept"]
    status, diff = await api("POST", "diff", {"runtime_id": rid, "from": first, "to": second})
    assert status == 200, diff
    assert [c["name"] for c in diff["variables"]["changed"]] == ["trap"]
    assert diff["variables"]["unchanged"] == 6  # pathlib, touch, refuse, Trap, Broken, broken
    assert not marker.exists()  # nothing was unpickled


async def test_diff_of_two_checkpoints_and_of_the_live_runtime(
    api: Api, ditto_app: DittoJupyterApp, open_runtime: OpenRuntime, jp_root_dir: Path
) -> None:
    runtime = await open_runtime("compare.ipynb")
    rid = runtime.runtime_id
    await run(ditto_app, runtime.kernel_id, "x = 41\nkept = 'same'")
    workspace = await workspace_of(api, rid)
    (workspace / "notes.txt").write_text("one\ntwo\n")
    (workspace / "old.txt").write_text("going away\n")
    before = await checkpoint(api, rid, name="before", document=document("x = 41", "kept"))

    await run(ditto_app, runtime.kernel_id, "x = 42\nfresh = [1, 2]")
    (workspace / "notes.txt").write_text("one\n2\n")
    (workspace / "old.txt").unlink()
    (workspace / "new.csv").write_text("a,b\n")
    after_doc = document("x = 42", "kept", "fresh = [1, 2]")
    after = await checkpoint(api, rid, name="after", document=after_doc)

    status, diff = await api("POST", "diff", {"runtime_id": rid, "from": "before", "to": after})
    assert status == 200, diff
    assert diff["from"] == {"checkpoint_id": before, "label": f"before ({before[:12]})"}
    variables = diff["variables"]
    assert [v["name"] for v in variables["added"]] == ["fresh"]
    [changed] = variables["changed"]
    assert (changed["name"], changed["old"]["summary"], changed["new"]["summary"]) == (
        "x",
        "41",
        "42",
    )
    assert variables["unchanged"] == 1 and variables["removed"] == []
    files = diff["files"]
    assert [f["path"] for f in files["added"]] == ["new.csv"]
    assert [f["path"] for f in files["removed"]] == ["old.txt"]
    [notes] = files["changed"]
    assert notes["path"] == "notes.txt" and "-two\n+2\n" in notes["text_diff"]
    cells = diff["cells"]
    assert cells["available"] and cells["unchanged"] == 1
    assert [c["source"] for c in cells["added"]] == ["fresh = [1, 2]"]
    [edited] = cells["changed"]
    assert (edited["index_old"], edited["index_new"]) == (0, 0)
    assert "-x = 41\n+x = 42" in edited["source_diff"] and not edited["outputs_changed"]

    # the head against the live runtime: the kernel, the files and the saved notebook now
    await run(ditto_app, runtime.kernel_id, "del fresh")
    today = nbformat.from_dict(document("x = 42", "kept"))
    nbformat.write(today, str(jp_root_dir / "compare.ipynb"))
    status, live = await api("POST", "diff", {"runtime_id": rid})
    assert status == 200, live
    assert live["from"]["checkpoint_id"] == after
    assert live["to"] == {"checkpoint_id": None, "label": "live kernel, saved notebook"}
    assert [v["name"] for v in live["variables"]["removed"]] == ["fresh"]
    assert live["files"]["unchanged"] == 2 and live["files"]["changed"] == []
    assert [c["source"] for c in live["cells"]["removed"]] == ["fresh = [1, 2]"]
    status, listed = await api("GET", f"{rid}/checkpoints")
    assert len(listed["checkpoints"]) == 2  # the live capture was not recorded

    # the request's own live document stands for the notebook as the user sees it
    status, sent = await api("POST", "diff", {"runtime_id": rid, "document": after_doc})
    assert status == 200, sent
    assert sent["cells"]["unchanged"] == 3 and sent["to"]["label"].endswith("notebook as sent")


async def test_a_restore_leaves_the_notebook_alone_and_counts_the_cells_changed(
    api: Api, ditto_app: DittoJupyterApp, open_runtime: OpenRuntime
) -> None:
    runtime = await open_runtime("restore.ipynb", x=1)
    rid = runtime.runtime_id
    cid = await checkpoint(api, rid, document=document("x = 1", "y = 2"))
    open_now = document("x = 1", "y = 3", "z = 4")
    body = {"runtime_id": rid, "checkpoint_id": cid, "document": open_now}
    status, restored = await api("POST", "restore", body)
    assert status == 200, restored
    assert restored["cells_changed"] == 2  # y edited, z added
    status, plain = await api("POST", "restore", {"runtime_id": rid, "checkpoint_id": cid})
    assert plain["cells_changed"] is None


async def test_undo_rolls_back_the_last_cell_with_its_files(
    api: Api, ditto_app: DittoJupyterApp, open_runtime: OpenRuntime
) -> None:
    runtime = await open_runtime("undo.ipynb")
    rid = runtime.runtime_id
    kernel = runtime.kernel_id
    status, nothing = await api("POST", "undo", {"runtime_id": rid})
    assert (status, nothing["error"]) == (409, "Conflict"), nothing
    assert "no checkpoint" in nothing["message"]

    workspace = await workspace_of(api, rid)
    await run(ditto_app, kernel, "%autocheckpoint on")
    kept, added = str(workspace / "kept.txt"), str(workspace / "added.txt")
    await run(ditto_app, kernel, f"rows = [1]\nopen({kept!r}, 'w').write('v1')")
    await run(
        ditto_app,
        kernel,
        f"rows.append(2)\nopen({kept!r}, 'w').write('v2')\nopen({added!r}, 'w').write('new')",
    )
    await run(
        ditto_app,
        kernel,
        "get_ipython().magics_manager.registry['DittoMagics'].autocheckpointer.flush()",
    )
    status, undone = await api("POST", "undo", {"runtime_id": rid})
    assert status == 200, undone
    assert undone["undone_cell"]["source"].startswith("rows.append(2)")
    assert (await user_variables(ditto_app, kernel))["rows"] == [1]
    assert sorted(p.name for p in workspace.iterdir()) == ["kept.txt"]
    assert (workspace / "kept.txt").read_text() == "v1"
    _, lineage = await api("GET", f"{rid}/lineage")
    assert lineage["head"]["checkpoint_id"] == undone["checkpoint_id"]

    # once more: back before `rows = [1]`, to the cell that turned %autocheckpoint on
    status, again = await api("POST", "undo", {"runtime_id": rid})
    assert status == 200, again
    assert "rows" not in await user_variables(ditto_app, kernel)
    assert list(workspace.iterdir()) == []


async def test_undo_of_a_head_not_taken_by_autocheckpoint_is_refused(
    api: Api, open_runtime: OpenRuntime
) -> None:
    runtime = await open_runtime("manual.ipynb", x=1)
    await checkpoint(api, runtime.runtime_id, name="by-hand")
    status, refused = await api("POST", "undo", {"runtime_id": runtime.runtime_id})
    assert (status, refused["error"]) == (409, "Conflict")
    assert "was not taken by %autocheckpoint" in refused["message"]


async def test_an_array_changed_in_place_says_what_changed(
    api: Api, ditto_app: DittoJupyterApp, open_runtime: OpenRuntime
) -> None:
    """Issue 40 §10: an edited array kept its shape and dtype, so the two summaries read
    the same; the comparison carries each side's digest and the report says it changed."""
    runtime = await open_runtime("arrays.ipynb")
    rid = runtime.runtime_id
    await run(ditto_app, runtime.kernel_id, "import numpy as np\narr = np.arange(10)")
    first = await checkpoint(api, rid, name="first")
    await run(ditto_app, runtime.kernel_id, "arr[3] = 99")
    second = await checkpoint(api, rid, name="second")
    status, diff = await api("POST", "diff", {"runtime_id": rid, "from": first, "to": second})
    assert status == 200, diff
    [changed] = diff["variables"]["changed"]
    old, new = changed["old"], changed["new"]
    assert changed["name"] == "arr" and old["summary"] == new["summary"] == "shape (10,) int64"
    assert old["digest"] and new["digest"] and old["digest"] != new["digest"]
    lines = variables_lines(VariablesDiff.model_validate(diff["variables"]))
    assert lines[1] == (
        f"  ~ arr  numpy.ndarray  shape (10,) int64, contents changed "
        f"(digest {old['digest'][:8]} -> {new['digest'][:8]})"
    )
