"""Undo undoes exactly the last cell that ran, or refuses in one line (issue 40 section 1).

A real Jupyter server with the extension (pytest-jupyter), a real SQLite store and real
kernels. The user's order: `%autocheckpoint on`, cells, then something no automatic
checkpoint holds (`%autocheckpoint off`, a restart re-run by hand), then undo from the
panel (REST) or `%undo`. Undo must never roll back past a cell no checkpoint holds; right
after a cell whose checkpoint the kernel still writes behind, the server waits for it and
undoes that cell.
"""

from __future__ import annotations

from typing import Any

import pytest

from ditto_jupyter.server.app import DittoJupyterApp
from tests.server.conftest import OpenRuntime
from tests.server.notebook_sessions import run, user_variables, wait_until_idle

Api = Any  # the `api` fixture of conftest.py

pytestmark = pytest.mark.slow

FLUSH = "get_ipython().magics_manager.registry['DittoMagics'].autocheckpointer.flush()"


@pytest.fixture
def ditto_load_magics() -> bool:
    return True  # %autocheckpoint and %undo


async def two_cells_then_off(app: DittoJupyterApp, kernel: str) -> None:
    """`%autocheckpoint on`; x = 1; x = 2; `%autocheckpoint off`; x = 3; work = ..."""
    await run(app, kernel, "%autocheckpoint on")
    await run(app, kernel, "x = 1")
    await run(app, kernel, "x = 2")
    await run(app, kernel, "%autocheckpoint off")
    await run(app, kernel, "x = 3")
    await run(app, kernel, "work = 'three hours of results'")


async def test_undo_after_autocheckpoint_off_refuses_and_loses_nothing(
    api: Api, ditto_app: DittoJupyterApp, open_runtime: OpenRuntime
) -> None:
    runtime = await open_runtime("notebooks/long-analysis.ipynb")
    rid, kernel = runtime.runtime_id, runtime.kernel_id
    await two_cells_then_off(ditto_app, kernel)
    _, before = await api("GET", f"{rid}/lineage")

    status, refused = await api("POST", "undo", {"runtime_id": rid})
    assert (status, refused["error"]) == (409, "Conflict"), refused
    message = refused["message"]
    assert "\n" not in message
    assert message.startswith("turn %autocheckpoint on"), message  # the hint leads
    assert "long-analysis.ipynb" in message and rid not in message  # the notebook, by name
    variables = await user_variables(ditto_app, kernel)
    assert (variables["x"], variables["work"]) == (3, "three hours of results")
    _, after = await api("GET", f"{rid}/lineage")
    assert after["head"] == before["head"]  # nothing moved


async def test_undo_after_a_restart_rerun_by_hand_refuses(
    api: Api, ditto_app: DittoJupyterApp, open_runtime: OpenRuntime, jp_fetch: Any
) -> None:
    runtime = await open_runtime("notebooks/restarted.ipynb")
    rid, kernel = runtime.runtime_id, runtime.kernel_id
    await run(ditto_app, kernel, "%autocheckpoint on")
    await run(ditto_app, kernel, "x = 1")
    await run(ditto_app, kernel, "x = 2")
    await run(ditto_app, kernel, FLUSH)
    await jp_fetch("api", "kernels", kernel, "restart", method="POST", body="{}")
    await run(ditto_app, kernel, "x = 1")  # the user re-runs the notebook by hand
    await run(ditto_app, kernel, "x = 2")
    await run(ditto_app, kernel, "work = 'after the restart'")

    status, refused = await api("POST", "undo", {"runtime_id": rid})
    assert (status, refused["error"]) == (409, "Conflict"), refused
    assert refused["message"].startswith("turn %autocheckpoint on"), refused["message"]
    variables = await user_variables(ditto_app, kernel)
    assert (variables["x"], variables["work"]) == (2, "after the restart")


async def test_undo_after_a_cell_that_changed_nothing_undoes_the_last_change(
    api: Api, ditto_app: DittoJupyterApp, open_runtime: OpenRuntime
) -> None:
    runtime = await open_runtime("notebooks/print.ipynb")
    rid, kernel = runtime.runtime_id, runtime.kernel_id
    await run(ditto_app, kernel, "%autocheckpoint on")
    await run(ditto_app, kernel, "x = 1")
    await run(ditto_app, kernel, "x = 2")
    await run(ditto_app, kernel, "print(x)")  # no checkpoint: it changed nothing
    status, undone = await api("POST", "undo", {"runtime_id": rid})
    assert status == 200, undone
    assert undone["undone_cell"]["source"] == "x = 2"
    assert (await user_variables(ditto_app, kernel))["x"] == 1


async def test_undo_right_after_a_heavy_cell_waits_for_its_checkpoint(
    api: Api, ditto_app: DittoJupyterApp, open_runtime: OpenRuntime
) -> None:
    runtime = await open_runtime("notebooks/heavy.ipynb")
    rid, kernel = runtime.runtime_id, runtime.kernel_id
    await run(ditto_app, kernel, "%autocheckpoint on")
    await run(ditto_app, kernel, "import os")
    for step in (1, 2, 3):
        await run(ditto_app, kernel, f"x = {step}")
    await run(ditto_app, kernel, FLUSH)
    heavy = "big = os.urandom(60_000_000); x = 4"  # a cell the write-behind records
    await run(ditto_app, kernel, heavy)  # its checkpoint is written behind the reply
    status, undone = await api("POST", "undo", {"runtime_id": rid})  # at once, as a user
    assert status == 200, undone
    assert undone["undone_cell"]["source"] == heavy
    variables = await user_variables(ditto_app, kernel)
    assert variables["x"] == 3 and "big" not in variables and "os" in variables
    _, listed = await api("GET", f"{rid}/checkpoints")
    sources = [c["automatic"]["source"] for c in listed["checkpoints"] if c["automatic"]]
    assert sources[-1] == heavy, sources  # the heavy cell's checkpoint was recorded


async def test_variables_changed_without_a_cell_are_kept_in_before_undo(
    api: Api, ditto_app: DittoJupyterApp, open_runtime: OpenRuntime
) -> None:
    runtime = await open_runtime("notebooks/callback.ipynb")
    rid, kernel = runtime.runtime_id, runtime.kernel_id
    await run(ditto_app, kernel, "%autocheckpoint on")
    await run(ditto_app, kernel, "x = 1")
    await run(ditto_app, kernel, "x = 2")
    # as a widget's callback would: a value set with no cell run (a silent request)
    assert ditto_app.serverapp is not None
    client = ditto_app.serverapp.kernel_manager.get_kernel(kernel).client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=60)
        reply = await client.execute("picked = 'by a slider'", silent=True, reply=True)
        assert reply["content"]["status"] == "ok", reply
    finally:
        client.stop_channels()
    await wait_until_idle(ditto_app, kernel)  # the user presses Undo once it shows idle

    status, undone = await api("POST", "undo", {"runtime_id": rid})
    assert status == 200, undone
    assert undone["undone_cell"]["source"] == "x = 2"
    variables = await user_variables(ditto_app, kernel)
    assert variables["x"] == 1 and "picked" not in variables
    _, listed = await api("GET", f"{rid}/checkpoints")
    kept = [c for c in listed["checkpoints"] if c["name"] == "before-undo"]
    assert len(kept) == 1 and kept[0]["metadata"] == {"variables_from": "live"}, kept
    body = {"runtime_id": rid, "checkpoint_id": kept[0]["checkpoint_id"]}
    status, restored = await api("POST", "restore", body)
    assert status == 200, restored
    variables = await user_variables(ditto_app, kernel)
    assert (variables["x"], variables["picked"]) == (2, "by a slider")


async def test_nothing_to_undo_leads_with_the_hint_and_names_the_notebook(
    api: Api, open_runtime: OpenRuntime
) -> None:
    runtime = await open_runtime("notebooks/fresh-analysis.ipynb")
    status, refused = await api("POST", "undo", {"runtime_id": runtime.runtime_id})
    assert (status, refused["error"]) == (409, "Conflict"), refused
    message = refused["message"]
    assert message.startswith("turn %autocheckpoint on to undo cells"), message
    assert "fresh-analysis.ipynb" in message and runtime.runtime_id not in message
