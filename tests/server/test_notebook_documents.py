"""A checkpoint holds the notebook: which document, a front end's answer, checkout from it.

A real Jupyter server with the extension (pytest-jupyter), a real SQLite store and real
kernels. The notebook "as the user sees it" is what the request carries (unsaved edits
included); without one, the saved file, while a front end may still answer with its own
(`POST .../checkpoint/document`, accepted once and in time). Checkout writes the child's
notebook from the checkpoint's document: exactly the cells as they were.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import nbformat
import pytest

from ditto_jupyter.server.app import DittoJupyterApp
from tests.server.conftest import OpenRuntime
from tests.server.notebook_sessions import run

Api = Any  # the `api` fixture of conftest.py


@pytest.fixture
def ditto_load_magics() -> bool:
    return False


def notebook(*cells: tuple[str, int | None, list[dict[str, Any]]]) -> dict[str, Any]:
    """An nbformat 4 document whose code cells have these (source, count, outputs)."""
    made = nbformat.v4.new_notebook()
    for index, (source, count, outputs) in enumerate(cells):
        nodes = [nbformat.from_dict(output) for output in outputs]
        cell = nbformat.v4.new_code_cell(source, execution_count=count, outputs=nodes)
        cell["id"] = f"cell-{index}"
        made.cells.append(cell)
    return json.loads(nbformat.writes(made))  # type: ignore[no-any-return]


def stream(text: str) -> dict[str, Any]:
    return {"output_type": "stream", "name": "stdout", "text": text}


def saved(root: Path, path: str, document: dict[str, Any]) -> None:
    nbformat.write(nbformat.from_dict(document), str(root / path))


async def summary_of(api: Api, runtime_id: str, checkpoint_id: str) -> dict[str, Any]:
    status, detail = await api("GET", f"{runtime_id}/checkpoints/{checkpoint_id}")
    assert status == 200, detail
    return detail["checkpoint"]  # type: ignore[no-any-return]


async def test_a_checkpoint_holds_the_unsaved_document_the_request_sends(
    api: Api, open_runtime: OpenRuntime, jp_root_dir: Path
) -> None:
    runtime = await open_runtime("edits.ipynb", x=1)
    rid = runtime.runtime_id
    on_disk = notebook(("x = 1", 1, []))
    saved(jp_root_dir, "edits.ipynb", on_disk)
    seen = notebook(("x = 1", 1, [stream("1\n")]), ("y = x + 1  # not saved yet", None, []))
    status, made = await api("POST", "checkpoint", {"runtime_id": rid, "document": seen})
    assert status == 200, made
    cid = made["checkpoint_id"]
    assert (await summary_of(api, rid, cid))["document"] == {"source": "request", "cells": 2}
    status, held = await api("GET", f"{rid}/checkpoints/{cid}/document")
    assert status == 200, held
    assert held == seen  # the edits, not the saved file
    status, again = await api(
        "POST", "checkpoint/document", {"runtime_id": rid, "checkpoint_id": cid, "document": seen}
    )
    assert (status, again["error"]) == (409, "Conflict")  # it never waited for one


async def test_without_a_document_the_saved_file_then_one_front_end_answer(
    api: Api, ditto_app: DittoJupyterApp, open_runtime: OpenRuntime, jp_root_dir: Path
) -> None:
    runtime = await open_runtime("pending.ipynb")
    rid = runtime.runtime_id
    on_disk = notebook(("a = 1", 1, [stream("saved\n")]))
    saved(jp_root_dir, "pending.ipynb", on_disk)
    status, made = await api("POST", "checkpoint", {"runtime_id": rid})
    assert status == 200, made
    cid = made["checkpoint_id"]
    assert (await summary_of(api, rid, cid))["document"] == {"source": "pending", "cells": 1}
    _, held = await api("GET", f"{rid}/checkpoints/{cid}/document")
    assert held["cells"][0]["outputs"] == [stream("saved\n")]  # the saved file meanwhile

    front = notebook(("a = 1", 1, [stream("seen\n")]), ("b = 2", None, []))
    body = {"runtime_id": rid, "checkpoint_id": cid, "document": front}
    status, answered = await api("POST", "checkpoint/document", body)
    assert status == 200, answered
    assert answered["document"] == {"source": "front_end", "cells": 2}
    _, held = await api("GET", f"{rid}/checkpoints/{cid}/document")
    assert held == front
    status, twice = await api("POST", "checkpoint/document", body)
    assert (status, twice["error"]) == (409, "Conflict")
    status, elsewhere = await api(
        "POST", "checkpoint/document", {**body, "runtime_id": "no-such-runtime"}
    )
    assert status == 404, elsewhere


async def test_an_answer_after_the_wait_is_refused_and_the_saved_file_stays(
    api: Api, ditto_app: DittoJupyterApp, open_runtime: OpenRuntime, jp_root_dir: Path
) -> None:
    assert ditto_app.runtime_sessions is not None
    ditto_app.runtime_sessions.documents.wait_seconds = 0.2
    runtime = await open_runtime("late.ipynb")
    rid = runtime.runtime_id
    saved(jp_root_dir, "late.ipynb", notebook(("c = 3", 1, [])))
    _, made = await api("POST", "checkpoint", {"runtime_id": rid})
    await asyncio.sleep(0.4)
    cid = made["checkpoint_id"]
    assert (await summary_of(api, rid, cid))["document"] == {"source": "saved_file", "cells": 1}
    body = {"runtime_id": rid, "checkpoint_id": cid, "document": notebook(("late", None, []))}
    status, late = await api("POST", "checkpoint/document", body)
    assert (status, late["error"]) == (409, "Conflict"), late
    assert "no longer waits" in late["message"]


async def test_a_runtime_with_no_notebook_file_holds_no_document(
    api: Api, open_runtime: OpenRuntime, jp_root_dir: Path
) -> None:
    runtime = await open_runtime("gone.ipynb", x=1)
    rid = runtime.runtime_id
    (jp_root_dir / "gone.ipynb").unlink()
    _, made = await api("POST", "checkpoint", {"runtime_id": rid})
    cid = made["checkpoint_id"]
    assert (await summary_of(api, rid, cid))["document"] == {"source": "pending", "cells": None}
    status, missing = await api("GET", f"{rid}/checkpoints/{cid}/document")
    assert (status, missing["error"]) == (404, "CheckpointNotFound")
    assert "holds no notebook document" in missing["message"]


async def test_checkout_writes_the_cells_as_they_were(
    api: Api, ditto_app: DittoJupyterApp, open_runtime: OpenRuntime, jp_root_dir: Path
) -> None:
    runtime = await open_runtime("story.ipynb")
    rid = runtime.runtime_id
    await run(ditto_app, runtime.kernel_id, "step = 2")
    at_two = notebook(("step = 1", 1, [stream("one\n")]), ("step = 2", 2, [stream("two\n")]))
    _, made = await api("POST", "checkpoint", {"runtime_id": rid, "document": at_two})
    # cells 3 to 5 run and are saved afterwards: today's file is not the checkpoint's
    later = at_two["cells"] + [
        notebook((f"step = {n}", n, [stream(f"{n}\n")]))["cells"][0] for n in (3, 4, 5)
    ]
    saved(jp_root_dir, "story.ipynb", {**at_two, "cells": later})
    status, child = await api("POST", "checkout", {"checkpoint_id": made["checkpoint_id"]})
    assert status == 200, child
    assert child["notebook_source"] == "checkpoint" and child["notebook_note"] is None
    written = nbformat.read(str(jp_root_dir / child["notebook_path"]), as_version=4)
    assert [
        (c.source, c.execution_count, [o.get("text") for o in c.outputs]) for c in written.cells
    ] == [("step = 1", 1, ["one\n"]), ("step = 2", 2, ["two\n"])]


async def test_checkout_of_a_checkpoint_with_no_document_copies_todays_file_and_says_so(
    api: Api, ditto_app: DittoJupyterApp, open_runtime: OpenRuntime, jp_root_dir: Path
) -> None:
    runtime = await open_runtime("plain.ipynb", x=1)
    rid = runtime.runtime_id
    (jp_root_dir / "plain.ipynb").unlink()
    _, made = await api("POST", "checkpoint", {"runtime_id": rid})
    saved(jp_root_dir, "plain.ipynb", notebook(("today", 7, [])))
    status, child = await api("POST", "checkout", {"checkpoint_id": made["checkpoint_id"]})
    assert status == 200, child
    assert child["notebook_source"] == "current_file"
    assert "holds no notebook document" in child["notebook_note"]
    written = nbformat.read(str(jp_root_dir / child["notebook_path"]), as_version=4)
    assert [c.source for c in written.cells] == ["today"]


async def test_a_document_that_is_not_a_notebook_is_refused_naming_the_cell(
    api: Api, open_runtime: OpenRuntime
) -> None:
    runtime = await open_runtime("bad.ipynb")
    bad = notebook(("ok", 1, []))
    bad["cells"].append({"cell_type": "code", "source": 42, "metadata": {}})
    status, refused = await api(
        "POST", "checkpoint", {"runtime_id": runtime.runtime_id, "document": bad}
    )
    assert (status, refused["error"]) == (400, "InvalidRequest"), refused
    assert refused["message"].startswith("document.cells[1] ")
    status, listed = await api("GET", f"{runtime.runtime_id}/checkpoints")
    assert listed["checkpoints"] == []  # nothing was recorded


def nested(depth: int) -> dict[str, Any]:
    """A JSON object `depth` levels deep."""
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


async def test_a_document_nested_deeper_than_the_json_limit_is_refused(
    api: Api, open_runtime: OpenRuntime
) -> None:
    runtime = await open_runtime("deep.ipynb")
    rid = runtime.runtime_id
    deep = notebook(("ok", 1, []))
    deep["cells"][0]["metadata"] = nested(40)  # the document is 43 deep
    status, refused = await api("POST", "checkpoint", {"runtime_id": rid, "document": deep})
    assert (status, refused["error"]) == (400, "InvalidRequest"), refused
    assert refused["message"] == "document is nested 43 deep; the limit is 32"
    status, listed = await api("GET", f"{rid}/checkpoints")
    assert listed["checkpoints"] == []  # nothing was recorded
    fits = notebook(("ok", 1, []))
    fits["cells"][0]["metadata"] = nested(29)  # 32 deep: accepted
    status, made = await api("POST", "checkpoint", {"runtime_id": rid, "document": fits})
    assert status == 200, made
